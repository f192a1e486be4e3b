"""Per-epoch trajectories of a Table 1 run: (i), (ii), RIR, the task loss and the D_P fit on row views of the task.

A :class:`TrajectoryRecorder` is the ``observer(step, params)`` of :func:`~kappalab.immunization.methods.immunize`:
it reads the live parameters after every ``steps_per_epoch``-th optimizer step (and before the first) and records,
for each *view* of the task's rows,

* ``term_i``, ``term_ii``, ``rir``: Eq. 15 with the pseudo-inverse kappa of ``H = Phi^T Phi`` taken from the SVD
  of the view's features ``Phi = X theta (+ 1 b^T)`` (:func:`kappalab.kappa.kappa_of_features`, rank rule
  ``s_i > max(N, D) eps s_1``) against the direct probe's ``Phi = X`` (theta = I, :mod:`kappalab.kappa`); (i), (ii),
  RIR by :func:`kappalab.kappa.rir_terms`;
* ``loss_P``: the trained head's task loss on D_P, ``mean((Phi_P w_P - y_P)^2)`` (the training objective's L(D_P));
* ``fit_P``: the best linear fit of D_P on the features, ``min_w mean((Phi_P w - y_P)^2)`` (least squares), i.e.
  what a fresh linear probe could reach; ``fit_P_direct`` (stored as ``fit_P_identity``) is the same at theta = I.
  (For an invertible theta the two are equal: immunization changes how fast a probe gets there (kappa), not where;
  fit_P departs from fit_P_direct only when theta loses rank numerically.)

Views (:func:`row_views`): ``full`` (every row, what the paper reports on), and a fixed half/half split of each
task's rows into ``val`` (selection) and ``test`` (held-out report), drawn once from ``SPLIT_SEED``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kappalab.kappa import default_rtol, kappa_of_features, rir_terms

from .task import LinearTask, with_ones_column

SPLIT_SEED = 20250713  #: the seed of the val/test row permutation (fixed: one split for every run)
VIEWS = ("full", "val", "test")
METRICS = ("term_i", "term_ii", "rir", "loss_P", "fit_P")


def row_views(task: LinearTask) -> dict[str, dict[str, np.ndarray]]:
    """Row indices of D_P and D_H per view: ``full`` = all; ``val``/``test`` = the first/second half of one
    permutation of each task's rows (``numpy.random.default_rng(SPLIT_SEED)``, P drawn before H)."""
    rng = np.random.default_rng(SPLIT_SEED)
    out: dict[str, dict[str, np.ndarray]] = {"full": {}, "val": {}, "test": {}}
    for which, X in (("P", task.X_P), ("H", task.X_H)):
        n = X.shape[0]
        perm = rng.permutation(n)
        out["full"][which] = np.arange(n)
        out["val"][which] = np.sort(perm[: n // 2])
        out["test"][which] = np.sort(perm[n // 2:])
    return out


@dataclass
class ViewData:
    """One view's rows, reduced once: ``[X 1] = Q R`` (thin QR; the 1 column when the run has a bias), so that the
    features ``Phi = [X 1] [theta; b^T] = Q (R [theta; b^T])`` have the singular values of the small ``R [theta;
    b^T]`` and the D_P least-squares fit needs ``Q^T y_P`` only. The rank rule keeps the features' own ``rtol =
    max(N, D) eps`` (:func:`kappalab.kappa.default_rtol` of ``X``)."""

    R_P: np.ndarray
    R_H: np.ndarray
    Qty_P: np.ndarray
    resid_P: float  #: ``||y_P - Q Q^T y_P||^2``: the part of y_P outside range([X_P 1])
    n_P: int
    rtol_P: float
    rtol_H: float
    kappa_P_direct: float
    kappa_H_direct: float
    fit_P_direct: float


def view_data(task: LinearTask, bias: bool = False) -> dict[str, ViewData]:
    """Each view's reduced rows and direct references (kappa of ``X^T X`` per task and the D_P fit at theta = I,
    without a bias)."""
    out = {}
    for name, rows in row_views(task).items():
        X_P, y_P, X_H = task.X_P[rows["P"]], task.y_P[rows["P"]], task.X_H[rows["H"]]
        Q_P, R_P = np.linalg.qr(with_ones_column(X_P, bias))
        R_H = np.linalg.qr(with_ones_column(X_H, bias), mode="r")
        Qty = Q_P.T @ y_P
        out[name] = ViewData(R_P, R_H, Qty, float(y_P @ y_P - Qty @ Qty), X_P.shape[0], default_rtol(X_P),
                             default_rtol(X_H), float(kappa_of_features(X_P)), float(kappa_of_features(X_H)),
                             float(np.mean((X_P @ np.linalg.lstsq(X_P, y_P, rcond=None)[0] - y_P) ** 2)))
    return out


def epoch_metrics(theta_aug: np.ndarray, w_P: np.ndarray, v: ViewData) -> dict[str, float]:
    """The metrics of one view at one parameter state (``theta_aug = [theta; b^T]`` with a bias, else theta)."""
    A_P, A_H = v.R_P @ theta_aug, v.R_H @ theta_aug  # Phi = Q A: same singular values, same fits
    t = rir_terms(float(kappa_of_features(A_H, v.rtol_H)), v.kappa_H_direct,
                  float(kappa_of_features(A_P, v.rtol_P)), v.kappa_P_direct)
    # ||Phi_P w - y_P||^2 = ||A_P w - Q^T y_P||^2 + resid_P
    loss = float(np.sum((A_P @ w_P - v.Qty_P) ** 2) + v.resid_P) / v.n_P
    w_star = np.linalg.lstsq(A_P, v.Qty_P, rcond=None)[0]
    fit = float(np.sum((A_P @ w_star - v.Qty_P) ** 2) + v.resid_P) / v.n_P
    return {"term_i": t.term_i, "term_ii": t.term_ii, "rir": t.rir, "loss_P": loss, "fit_P": fit}


def direct_losses(task: LinearTask) -> dict[str, float]:
    """theta = I's D_P loss on each view: the least-squares head fit on ALL D_P rows (the training data), its mean
    squared error on the view's rows (on ``full``: the best fit; on ``val``/``test``: that head's error there)."""
    w = np.linalg.lstsq(task.X_P, task.y_P, rcond=None)[0]
    return {name: float(np.mean((task.X_P[rows["P"]] @ w - task.y_P[rows["P"]]) ** 2))
            for name, rows in row_views(task).items()}


@dataclass
class TrajectoryRecorder:
    """``observer(step, params)`` recording :data:`METRICS` per view at epochs 0, 1, ..., E."""

    task: LinearTask
    steps_per_epoch: int = 1
    bias: bool = False  #: whether the observed run has a feature bias (official protocol)
    views: dict[str, ViewData] = field(init=False)
    epochs: list[int] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.steps_per_epoch, int) and self.steps_per_epoch >= 1):
            raise ValueError(f"steps_per_epoch must be a positive int, got {self.steps_per_epoch!r}")
        self.views = view_data(self.task, self.bias)

    def __call__(self, step: int, params: Any) -> None:
        if step % self.steps_per_epoch:
            return
        if (params.bias is not None) != self.bias:
            raise ValueError(f"TrajectoryRecorder(bias={self.bias}) observed a run with bias={params.bias is not None}")
        as_np = lambda t: t.detach().cpu().numpy().astype(np.float64)
        theta_aug = as_np(params.theta) if params.bias is None else np.vstack([as_np(params.theta),
                                                                                as_np(params.bias)[None, :]])
        w_P = as_np(params.w_P)
        self.epochs.append(step // self.steps_per_epoch)
        for name, v in self.views.items():
            for metric, value in epoch_metrics(theta_aug, w_P, v).items():
                self.values.setdefault(f"{name}.{metric}", []).append(value)

    def arrays(self) -> dict[str, np.ndarray]:
        """``epoch`` and ``<view>.<metric>`` arrays, plus each view's direct references (0-d, under their stored
        names ``<view>.*_identity``)."""
        out = {"epoch": np.asarray(self.epochs, dtype=np.int64)}
        out.update({k: np.asarray(v, dtype=np.float64) for k, v in self.values.items()})
        for name, v in self.views.items():
            out[f"{name}.fit_P_identity"] = np.asarray(v.fit_P_direct)
            out[f"{name}.kappa_P_identity"] = np.asarray(v.kappa_P_direct)
            out[f"{name}.kappa_H_identity"] = np.asarray(v.kappa_H_direct)
        return out
