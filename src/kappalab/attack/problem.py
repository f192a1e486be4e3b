"""The harmful task an attacker faces: the l2 probe of Eq. 4 / Eq. 8 on frozen features, split for tuning.

Loss (the mean form of Eq. 8): ``L(W) = ||A W - Y||_F^2 / (2N)`` for ``A`` an ``N x D`` matrix (features
``F = X theta``, or the inputs ``X`` when the attacker changes the extractor and ``W`` is the whole linear map) and
targets ``Y`` (``N x C``; a length-N target is one column). Its Hessian is ``A^T A / N`` for every column of W, so
the step ``1 / s_max`` of Eq. 2 uses ``s_max = sigma_1(A)^2 / N``. The 1/N scaling makes steps independent of N and
changes no iteration count.

The rows of D_H are split once per seed into train / validation / test (:func:`split_rows`): attackers train on
"train", pick their hyper-parameters by their loss on "validation" and are reported on "train" and "test".
:class:`Factor` is the one SVD of the training features that every probe attacker of a model shares (``s_max`` for
the step sizes, the pseudo-inverse for ``solve``).
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class Factor:
    """The thin SVD ``A = U diag(s) Vt`` of the training features, shared by a model's probe attackers.

    ``rank`` is the lab's rank rule (:func:`kappalab.kappa.rank_rule`): ``s_i > max(N, D) eps s_1`` (NumPy's
    ``matrix_rank`` convention): a backward-stable SVD moves every value by about that much, so smaller ones cannot
    be told from zero and ``solve`` drops them (the pseudo-inverse at that tolerance)."""

    U: np.ndarray
    s: np.ndarray
    Vt: np.ndarray
    n: int  #: training rows N
    rank: int

    @classmethod
    def of(cls, A: np.ndarray) -> "Factor":
        U, s, Vt = np.linalg.svd(A, full_matrices=False)
        rtol = max(A.shape) * np.finfo(np.float64).eps
        rank = int(rank_rule(s, s[0], rtol).rank) if s.size else 0
        if rank == 0:
            raise ValueError("the training features are zero: the probe has no curvature to attack")
        return cls(U, s, Vt, A.shape[0], rank)

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
        k = self.rank
        return self.Vt[:k].T @ ((self.U[:, :k].T @ Y) / self.s[:k, None])


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
