"""D_P's utility under an attacker that changes a linear extractor: does the attack on D_H break the task the model
was kept good for?

The model's D_P probe is held fixed: ``W_P``, the least-squares l2 probe of D_P's training rows on the extractor
before the attack (:meth:`kappalab.attack.problem.Factor.solve`, the lab's rank rule), read on D_P's test rows with
the extractor after ``b`` steps, ``M_b``. (A probe refitted on ``X_P M_b`` would not see the attack: for an
invertible ``M_b`` the columns of ``X_P M_b`` span what those of ``X_P theta`` span, so the least-squares fit is the
same.) With ``L(b) = ||X_P M_b W_P - Y_P||^2 / (2N)`` on the test rows and ``L_zero`` the loss of predicting 0 there:

* ``utility(b) = 1 - L(b) / L_zero`` (1: perfect, 0: no better than predicting 0);
* ``kept(b) = utility(b) / utility(0)`` (None when ``utility(0) <= 0``: nothing to keep);
* ``broken``: ``kept < 1/2`` at the largest budget, i.e. the attack took more than half of D_P's utility (the rule
  fixed before Table 2's runs); None when ``kept`` is, or when the attack diverged before that budget (its steps
  after the divergence are not measured).

Beside it, ``kappa_P(b)``: the pinv kappa of D_P's Hessian ``(X_P M_b)^T (X_P M_b)`` on the training rows
(:func:`kappalab.kappa.kappa_of_features`), the paper's own notion of D_P's utility (its probe stays easy to train);
None where the features are zero (an attack that zeroed the extractor: kappa undefined).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kappalab.kappa import kappa_of_features

from .problem import Factor, Split, loss

#: ``broken`` when less than this fraction of D_P's utility is kept at the largest budget
KEPT_FRACTION = 0.5


@dataclass(frozen=True)
class DPUtility:
    """D_P's utility before an extractor attack (step 0) and after each budget's steps (module docstring)."""

    budget: int  #: the largest budget, where ``broken`` is read
    loss_zero: float  #: D_P test loss of predicting 0
    loss: Mapping[int, float]  #: step -> D_P test loss with the fixed probe (step 0: before the attack)
    kappa_P: Mapping[int, float | None]  #: step -> pinv kappa of D_P's training Hessian (None: zero features)

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
        return {"probe": "fixed: D_P's least-squares probe on the extractor before the attack",
                "loss_zero": self.loss_zero, "budget": self.budget, "broken": self.broken,
                "kept_fraction_rule": KEPT_FRACTION,
                "at_step": {str(t): {"loss": self.loss[t], "utility": self.utility(t), "kept": self.kept(t),
                                     "kappa_P": self.kappa_P[t]} for t in sorted(self.loss)}}


def dp_utility(dp: Split, extractors: Mapping[int, np.ndarray], budget: int) -> DPUtility:
    """D_P's utility on the extractors after each step in ``extractors`` (step 0: the extractor before the attack,
    required; the steps a diverged attack never reached finitely are left out); ``dp``: D_P's inputs and targets,
    split like D_H's; ``budget``: the largest budget."""
    if 0 not in extractors:
        raise ValueError("the extractor before the attack (step 0) is needed: D_P's probe is fitted on it")
    (Xtr, Ytr), (Xte, Yte) = dp.train, dp.test
    W_P = Factor.of(Xtr @ extractors[0]).solve(Ytr)
    zero = loss(Xte, Yte, np.zeros_like(W_P))
    steps = sorted(extractors)
    return DPUtility(budget, zero, {t: loss(Xte @ extractors[t], Yte, W_P) for t in steps},
                     {t: _kappa(Xtr @ extractors[t]) for t in steps})


def _kappa(F: np.ndarray) -> float | None:
    return float(kappa_of_features(F)) if F.any() else None
