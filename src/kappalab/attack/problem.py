"""The harmful task an attacker faces: the l2 probe of Eq. 4 / Eq. 8 on frozen features, split for tuning.

Loss (the mean form of Eq. 8): ``L(W) = ||A W - Y||_F^2 / (2N)`` for ``A`` an ``N x D`` matrix (features
``F = X theta``, or the inputs ``X`` when the attacker changes the extractor and ``W`` is the whole linear map) and
targets ``Y`` (``N x C``; a length-N target is one column). Its Hessian is ``A^T A / N`` for every column of W, so
the step ``1 / s_max`` of Eq. 2 uses ``s_max = sigma_1(A)^2 / N``. The 1/N scaling makes steps independent of N and
changes no iteration count.

The rows of D_H are split once per seed into train / validation / test (:func:`split_rows`): attackers train on
"train", pick their hyper-parameters by their loss on "validation" and are reported on "train" and "test".
:class:`Factor` is the one SVD of the training features that every probe attacker of a model shares (``s_max`` for
the step sizes, the pseudo-inverse for ``solve``); :class:`Rotated` is the training loss and its gradient in that
SVD's basis, what the attackers step on and the curves read (a step costs ``k D C`` with ``k <= min(N, D)``, not
``N D C``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from kappalab.kappa import rank_rule

#: the fractions of D_H's rows in train / validation; the rest is test
SPLIT = (0.6, 0.2)


def as_targets(y: np.ndarray) -> np.ndarray:
    """Targets as an ``N x C`` float64 matrix (a vector becomes one column)."""
    y = np.asarray(y, dtype=np.float64)
    return y[:, None] if y.ndim == 1 else y


def split_rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Train / validation / test row indices of ``n`` rows (:data:`SPLIT`), a permutation drawn from ``seed``."""
    if n < 3:
        raise ValueError(f"D_H needs at least 3 rows to split into train / validation / test, got {n}")
    order = np.random.default_rng(seed).permutation(n)
    a = max(1, int(round(SPLIT[0] * n)))
    b = max(a + 1, min(n - 1, a + int(round(SPLIT[1] * n))))
    return order[:a], order[a:b], order[b:]


@dataclass(frozen=True)
class Split:
    """One design matrix and its targets, cut into train / validation / test rows."""

    train: tuple[np.ndarray, np.ndarray]  #: (A, Y)
    val: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]

    @functools.cached_property
    def rotated(self) -> "Rotated":
        """The training rows' loss in their SVD basis (one SVD, shared by every attacker that reads this split)."""
        return Rotated.of(*self.train)

    @classmethod
    def of(cls, A: np.ndarray, Y: np.ndarray, seed: int) -> "Split":
        A, Y = np.asarray(A, dtype=np.float64), as_targets(Y)
        if A.ndim != 2 or Y.shape[0] != A.shape[0]:
            raise ValueError(f"features must be N x D and targets of N rows, got {A.shape} and {Y.shape}")
        tr, va, te = split_rows(A.shape[0], seed)
        return cls((A[tr], Y[tr]), (A[va], Y[va]), (A[te], Y[te]))


def loss(A: np.ndarray, Y: np.ndarray, W: np.ndarray) -> float:
    """``||A W - Y||_F^2 / (2N)``, from the residual (no expansion, so no cancellation near the optimum)."""
    return prediction_loss(A @ W, Y)


def prediction_loss(P: np.ndarray, Y: np.ndarray) -> float:
    """``||P - Y||_F^2 / (2N)`` for predictions ``P`` of the N rows (a linear map's ``A W``, or a deep model's)."""
    R = P - Y
    return float(np.sum(R * R)) / (2 * P.shape[0])


def prediction_accuracy(P: np.ndarray, Y: np.ndarray) -> float | None:
    """The fraction of rows whose class the l2 probe's predictions ``P`` get right, where the targets code classes:
    one column of +-1 (a one-vs-rest task: right when ``sign(P)`` is the target; a prediction of exactly 0 is
    wrong), or C >= 2 columns each row of which holds one largest entry (one-hot or +-1 codes: right when ``P``'s
    largest entry is in that column; ties go to the first column). None for any other targets (a regression)."""
    if Y.shape[1] == 1:
        if not np.all(np.abs(Y) == 1.0):
            return None
        return float(np.mean(np.sign(P[:, 0]) == Y[:, 0]))
    top = Y.max(axis=1, keepdims=True)
    if not np.all(np.sum(Y == top, axis=1) == 1):
        return None
    return float(np.mean(np.argmax(P, axis=1) == np.argmax(Y, axis=1)))


@dataclass(frozen=True)
class Factor:
    """The thin SVD ``A = U diag(s) Vt`` of the training features truncated to their rank, shared by a model's
    probe attackers.

    ``rank`` is the lab's rank rule (:func:`kappalab.kappa.rank_rule`): ``s_i > max(N, D) eps s_1`` (NumPy's
    ``matrix_rank`` convention): a backward-stable SVD moves every value by about that much, so smaller ones cannot
    be told from zero. ``U``, ``s``, ``Vt`` keep only the ``rank`` values above it: ``solve`` is the pseudo-inverse
    at that tolerance, and :class:`Rotated`'s loss and gradient have no part along the dropped directions, so no
    attacker is steered by them. (Kept, such a direction has curvature ``s_i^2 / N`` of rounding size: once the rest
    has converged, L-BFGS's exact line search took steps of ``1 / s_i^2`` along it and grew ``W`` to 1e13 on House
    Prices' rank-76 direct features, lowering the computed loss by what the rank rule calls noise.)"""

    U: np.ndarray  #: N x rank
    s: np.ndarray  #: the rank values above the tolerance, descending
    Vt: np.ndarray  #: rank x D
    n: int  #: training rows N
    rank: int

    @classmethod
    def of(cls, A: np.ndarray) -> "Factor":
        U, s, Vt = np.linalg.svd(A, full_matrices=False)
        rtol = max(A.shape) * np.finfo(np.float64).eps
        rank = int(rank_rule(s, s[0], rtol).rank) if s.size else 0
        if rank == 0:
            raise ValueError("the training features are zero: the probe has no curvature to attack")
        return cls(U[:, :rank], s[:rank], Vt[:rank], A.shape[0], rank)

    @property
    def s_max(self) -> float:
        """Largest eigenvalue of the Hessian ``A^T A / N``."""
        return float(self.s[0] ** 2) / self.n

    @property
    def kappa(self) -> float:
        """Pseudo-inverse kappa of ``A^T A`` at the rank above."""
        return float((self.s[0] / self.s[self.rank - 1]) ** 2)

    def solve(self, Y: np.ndarray) -> np.ndarray:
        """The minimum-norm least-squares solution ``V_k diag(1/s_k) U_k^T Y`` (rank-k pseudo-inverse)."""
        return self.solve_rotated(self.U.T @ Y)

    def solve_rotated(self, c: np.ndarray) -> np.ndarray:
        """:meth:`solve` from ``c = U^T Y``."""
        k = self.rank
        return self.Vt[:k].T @ (c[:k] / self.s[:k, None])


def rounding_slack(A: np.ndarray, Y: np.ndarray, W: np.ndarray, input_rounding: float = 0.0) -> float:
    """A bound on the rounding in :func:`loss` at ``W``: ``fl(A W - Y)`` differs from ``A W - Y`` entrywise by at
    most ``gamma (|A| |W| + |Y|)`` with ``gamma = (D + 2) eps`` (the standard dot-product bound), so the loss moves by
    at most ``||R|| ||gamma (|A||W| + |Y|)|| / N`` to first order. Two models whose optima coincide (same column
    space) compute losses at their optima that differ by up to the sum of their slacks; the reach rule
    (:func:`kappalab.attack.measures.first_reach`) allows that much. ``input_rounding``: the relative rounding
    ``A`` itself carries (a deep model's features computed in float32), added to ``gamma`` on the ``|A| |W|``
    term."""
    gamma = (A.shape[1] + 2) * np.finfo(np.float64).eps
    R = A @ W - Y
    E = (gamma + input_rounding) * (np.abs(A) @ np.abs(W)) + gamma * np.abs(Y)
    return float(np.linalg.norm(R) * np.linalg.norm(E)) / A.shape[0]


@dataclass(frozen=True)
class Rotated:
    """The training loss of a design ``A`` in its SVD basis (``A = U diag(s) Vt``, :class:`Factor`).

    With ``c = U^T Y`` and ``Y_perp = Y - U c`` (orthogonal to U's columns), ``A_k W - Y = U (s * Vt W - c) - Y_perp``
    for ``A_k``, A's SVD truncated to its rank (:class:`Factor`), so ``L(W) = (||s * Vt W - c||^2 + ||Y_perp||^2) /
    (2N)`` and ``grad L(W) = Vt^T (s * (s * Vt W - c)) / N``: the residual forms' loss and gradient of ``A_k``, at
    ``k D C`` a step (``k`` the rank, at most ``min(N, D)``) instead of ``N D C`` and on ``k x D`` rather than
    ``N x D`` data. ``A_k`` differs from ``A`` by the dropped values, each below the SVD's backward error
    ``tau s_1``, and the computed values from exact ones by that error too: :meth:`slack` bounds both (to first
    order) beside the residual form's own rounding (:func:`rounding_slack`)."""

    factor: Factor
    c: np.ndarray  #: U^T Y (k x C)
    rest: float  #: ||Y_perp||^2 / (2N), the loss no W can remove
    y_norm: float  #: ||Y||_F

    @classmethod
    def of(cls, A: np.ndarray, Y: np.ndarray, factor: Factor | None = None) -> "Rotated":
        factor = Factor.of(A) if factor is None else factor
        c = factor.U.T @ Y
        perp = Y - factor.U @ c
        return cls(factor, c, float(np.sum(perp * perp)) / (2 * factor.n), float(np.linalg.norm(Y)))

    def residual(self, W: np.ndarray) -> np.ndarray:
        """``s * Vt W - c``: the part of ``A W - Y`` in U's span, in U's basis (k x C)."""
        return self.factor.s[:, None] * (self.factor.Vt @ W) - self.c

    def loss(self, W: np.ndarray) -> float:
        r = self.residual(W)
        return float(np.sum(r * r)) / (2 * self.factor.n) + self.rest

    def grad(self, W: np.ndarray) -> np.ndarray:
        return self.factor.Vt.T @ (self.factor.s[:, None] * self.residual(W)) / self.factor.n

    def slack(self, A: np.ndarray, Y: np.ndarray, W: np.ndarray, input_rounding: float = 0.0) -> float:
        """A bound on ``|loss(W) - L(W)|`` (L the exact loss): the residual form's rounding (:func:`rounding_slack`)
        plus the SVD's backward error. A computed SVD is the exact one of ``A + E`` with ``||E||_2 <= tau s_1`` and
        its U orthonormal to ``tau``, ``tau = max(N, D) eps`` (the lab's rank tolerance,
        :func:`kappalab.kappa.rank_rule`); to first order that moves the loss by ``||R|| tau (s_1 ||W|| + ||Y||) / N``
        (``R = A W - Y``; the ``||Y||`` term is c's and Y_perp's share)."""
        tau = max(A.shape) * np.finfo(np.float64).eps
        R = A @ W - Y
        shift = float(np.linalg.norm(R)) * tau * (float(self.factor.s[0]) * float(np.linalg.norm(W)) + self.y_norm)
        return rounding_slack(A, Y, W, input_rounding) + shift / A.shape[0]
