"""D_P's utility under an attacker that changes a linear extractor: does the attack on D_H break the task the model
was kept good for?

The model's D_P probe is held fixed (:class:`DPProbe`): ``W_P``, the least-squares l2 probe of D_P's rows on the
extractor before the attack, theta (:meth:`kappalab.attack.problem.Factor.solve`, the lab's rank rule), read on the
same rows with the extractor after ``b`` steps, ``M_b``. The question is how much of the function the model computes
on D_P survives the attack, not how well it generalizes, so fit and reading share the rows. (A probe refitted on
``X_P M_b`` would not see the attack: for an invertible ``M_b`` the columns of ``X_P M_b`` span what those of
``X_P theta`` span, and the least-squares fit is the same.) With ``L(b) = ||X_P M_b W_P - Y_P||^2 / (2N)`` and
``L_zero`` the loss of predicting 0:

* ``utility(b) = 1 - L(b) / L_zero``: 1 a perfect fit, 0 no better than predicting 0. Before the attack it is at
  least 0 (predicting 0 is one of the probes the fit chose among);
* ``kept(b) = utility(b) / utility(0)`` (None when ``utility(0) = 0``: nothing to keep). For an invertible theta it
  is at most 1: ``X_P M_b W_P`` lies in the span the fit already searched;
* ``broken``: ``kept < 1/2`` at the largest budget, i.e. the attack took more than half of D_P's utility (the rule
  fixed before Table 2's runs); None when ``kept`` is, or when the attack diverged before that budget (its steps
  after the divergence are not measured).

A deep extractor (the real network's tail, :mod:`.deep_attackers`) is read the same way (:class:`DeepDPProbe`):
``W_P`` is fitted on the tail's features ``f_0(A_P)`` of D_P's trunk rows before the attack, and
``L(b) = ||f_b(A_P) W_P - Y_P||^2 / (2N)`` with ``f_b`` the tail after ``b`` steps. A tail is not invertible, so
there ``kept`` may exceed 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .problem import Factor, as_targets, loss, prediction_loss

#: ``broken`` when less than this fraction of D_P's utility is kept at the largest budget
KEPT_FRACTION = 0.5


@dataclass(frozen=True)
class DPUtility:
    """D_P's utility before an extractor attack (step 0) and after each budget's steps (module docstring)."""

    budget: int  #: the largest budget, where ``broken`` is read
    loss_zero: float  #: D_P's loss when predicting 0
    loss: Mapping[int, float]  #: step -> D_P's loss with the fixed probe (step 0: before the attack)

    def utility(self, step: int) -> float:
        return 1.0 - self.loss[step] / self.loss_zero

    def kept(self, step: int) -> float | None:
        before = self.utility(0)
        return self.utility(step) / before if before > 0 else None

    @property
    def broken(self) -> bool | None:
        kept = self.kept(self.budget) if self.budget in self.loss else None
        return None if kept is None else bool(kept < KEPT_FRACTION)

    def as_dict(self) -> dict[str, Any]:
        return {"probe": "fixed: D_P's least-squares probe on the extractor before the attack, read on its rows",
                "loss_zero": self.loss_zero, "budget": self.budget, "broken": self.broken,
                "kept_fraction_rule": KEPT_FRACTION,
                "at_step": {str(t): {"loss": self.loss[t], "utility": self.utility(t), "kept": self.kept(t)}
                            for t in sorted(self.loss)}}


@dataclass(frozen=True)
class DPProbe:
    """D_P's rows and the probe fitted on them with the extractor before the attack (one per model)."""

    X: np.ndarray  #: D_P's inputs (N_P x D_in)
    Y: np.ndarray  #: D_P's targets (N_P x C)
    W: np.ndarray  #: the fixed probe (D x C)

    @classmethod
    def of(cls, X: np.ndarray, Y: np.ndarray, theta: np.ndarray) -> DPProbe:
        X, Y = np.asarray(X, dtype=np.float64), as_targets(Y)
        if X.ndim != 2 or X.shape[0] != Y.shape[0] or X.shape[1] != theta.shape[0]:
            raise ValueError(f"D_P's inputs must be N x {theta.shape[0]} (theta's rows) with N targets, got "
                             f"{X.shape} and {Y.shape}")
        return cls(X, Y, Factor.of(X @ theta).solve(Y))

    def utility(self, extractors: Mapping[int, np.ndarray], budget: int) -> DPUtility:
        """D_P's utility with the extractors after each step in ``extractors`` (step 0, the extractor the probe was
        fitted on, required; the steps a diverged attack never reached finitely are left out); ``budget``: the
        largest budget. Each reading is ``X_P (M W_P)``: no ``N_P x D`` product."""
        if 0 not in extractors:
            raise ValueError("the extractor before the attack (step 0) is needed: D_P's probe was fitted on it")
        zero = loss(self.X, self.Y, np.zeros((self.X.shape[1], self.Y.shape[1])))
        return DPUtility(budget, zero, {t: loss(self.X, self.Y, M @ self.W) for t, M in sorted(extractors.items())})


class Features(Protocol):
    """A deep extractor before the attack or a step's snapshot (:mod:`.deep_attackers`): ``f(A)``, float64."""

    def features(self, A: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class DeepDPProbe:
    """D_P's trunk rows and the probe fitted on a deep extractor's features of them before the attack (module
    docstring); one per model."""

    A: np.ndarray  #: D_P's trunk rows, flattened (N_P x C H W)
    Y: np.ndarray  #: D_P's targets (N_P x C)
    W: np.ndarray  #: the fixed probe (D x C)
    loss_before: float  #: D_P's loss with the probe on the extractor it was fitted on (step 0)

    @classmethod
    def of(cls, A: np.ndarray, Y: np.ndarray, before: Features) -> DeepDPProbe:
        Y = as_targets(Y)
        F = before.features(A)
        if F.shape[0] != Y.shape[0]:
            raise ValueError(f"D_P's trunk rows and targets must be as many, got {F.shape[0]} and {Y.shape[0]}")
        W = Factor.of(F).solve(Y)
        return cls(A, Y, W, loss(F, Y, W))

    def utility(self, snapshots: Mapping[int, Features], budget: int) -> DPUtility:
        """D_P's utility with the snapshots after each step in ``snapshots`` (steps >= 1; step 0 is the probe's own
        fit); ``budget``: the largest budget."""
        zero = prediction_loss(np.zeros_like(self.Y), self.Y)
        readings = {t: loss(s.features(self.A), self.Y, self.W) for t, s in sorted(snapshots.items()) if t > 0}
        return DPUtility(budget, zero, {0: self.loss_before, **readings})
