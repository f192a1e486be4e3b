"""The paper's definitions transcribed once, independently of ``kappalab``'s implementation.

Every verdict in ``proofs_checks`` is about the paper's mathematics, so the quantities the claims speak of
(Eq. 3 R_well, Eq. 12 R_ill, Eq. 13 and Thm A.1(3) gradients, Thm 4.2 theta-gradients, the stated step bounds
and the steps themselves) are written here from the paper's text, with only ``+ - * / @``, so that the same code
runs on float64 arrays, on 80-digit ``mpmath`` object arrays and on exact ``sympy`` object arrays.
``kappalab`` is used by ``proofs_checks`` only where its public API is itself the object of a check
(Eq. 10 and RIR); this keeps the verdicts independent of (and robust to) the core's internals.

Singular values: :func:`ext64` (NumPy SVD, rank threshold ``max(m, n) * eps * s_1``), :func:`highprec.mp_ext`
(80 digits, threshold ``1e-60 * s_1``) and :func:`exact.diag_ext` (exact, diagonal matrices).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


class Undefined(ArithmeticError):
    """A quantity of the paper is undefined at this input (e.g. R_ill's denominator is 0, or k < 2)."""


@dataclass(frozen=True)
class Ext:
    """Compact SVD ``S = U diag(s) V^T`` truncated at the numerical rank, with the scalars the paper uses."""

    s: list  #: all p singular values, descending (float, mpf or sympy)
    U: np.ndarray  #: m x p left singular vectors
    V: np.ndarray  #: n x p right singular vectors
    rank: int  #: k, number of singular values above the rank threshold

    @property
    def p(self) -> int:
        return len(self.s)

    @property
    def s_max(self):
        return self.s[0]

    @property
    def s_2(self):
        return self.s[1] if self.p > 1 else 0 * self.s[0]

    @property
    def s_min(self):
        return self.s[self.rank - 1]

    @property
    def s_km1(self):
        return self.s[self.rank - 2]

    @property
    def fro2(self):
        return sum(x * x for x in self.s[: self.rank])

    @property
    def u_max(self):
        return self.U[:, 0]

    @property
    def v_max(self):
        return self.V[:, 0]

    @property
    def u_min(self):
        return self.U[:, self.rank - 1]

    @property
    def v_min(self):
        return self.V[:, self.rank - 1]


def ext64(S: np.ndarray) -> Ext:
    """float64 compact SVD of S (rank threshold ``max(m, n) * eps * s_1``)."""
    S = np.asarray(S, dtype=float)
    U, s, Vt = np.linalg.svd(S, full_matrices=False)
    if not s[0] > 0:
        raise Undefined("S = 0")
    k = int(np.count_nonzero(s > max(S.shape) * np.finfo(float).eps * s[0]))
    return Ext(list(s), U, Vt.T, k)


def kappa(e: Ext):
    """``kappa = ||S|| ||S^+|| = s_1 / s_k`` (pseudo-inverse, s_k the smallest nonzero singular value)."""
    return e.s_max / e.s_min


def ill_den(e: Ext):
    """Eq. 12's denominator ``||S||_F^2/(2k) - s_min^2/2`` (= -R'_ill of Lemma B.1)."""
    return e.fro2 / (2 * e.rank) - e.s_min * e.s_min / 2


def r_ill(e: Ext):
    """Eq. 12: ``1 / (||S||_F^2/(2k) - s_min^2/2)``; :class:`Undefined` where the denominator is 0."""
    d = ill_den(e)
    if d == 0:
        raise Undefined("R_ill: all nonzero singular values are equal (denominator 0)")
    return 1 / d


def r_well(e: Ext):
    """Eq. 3: ``s_1^2/2 - ||S||_F^2/(2p)``, p = min(rows, cols)."""
    return e.s_max * e.s_max / 2 - e.fro2 / (2 * e.p)


def outer(a, b) -> np.ndarray:
    return np.multiply.outer(np.asarray(a), np.asarray(b))


def grad_r_well(e: Ext, S) -> np.ndarray:
    """Thm A.1(3): ``s_1 u_1 v_1^T - S/p``."""
    return e.s_max * outer(e.u_max, e.v_max) - S / e.p


def grad_r_ill(e: Ext, S) -> np.ndarray:
    """Thm 4.1(3), Eq. 13: ``(s_k u_k v_k^T - S/k) / d^2``, d = :func:`ill_den`."""
    d = ill_den(e)
    return (e.s_min * outer(e.u_min, e.v_min) - S / e.rank) / (d * d)


def hessian(theta, K) -> np.ndarray:
    """``H(theta) = theta^T K theta`` (symmetrized: it is symmetric in exact arithmetic)."""
    H = theta.T @ K @ theta
    return (H + H.T) / 2


def grad_theta(kind: str, theta, K, e: Ext, H) -> np.ndarray:
    """Thm 4.2: ``2 K theta G`` with ``G = grad_H R(H)`` (kind ``"well"`` with D = size of H, or ``"ill"``)."""
    G = grad_r_well(e, H) if kind == "well" else grad_r_ill(e, H)
    return 2 * (K @ (theta @ G))


def solve(K, B) -> np.ndarray:
    """``K^{-1} B`` (float64 LAPACK, or 80-digit LU for object arrays)."""
    if np.asarray(K).dtype != object:
        return np.linalg.solve(K, B)
    import mpmath as mp

    Km = mp.matrix(K.tolist())
    cols = [mp.lu_solve(Km, mp.matrix(B[:, j].tolist())) for j in range(B.shape[1])]
    return np.array([[c[i] for c in cols] for i in range(B.shape[0])], dtype=object)


def theta_step(kind: str, theta, K, eta, ext) -> tuple[Any, Any]:
    """Alg. 1's preconditioned step ``theta' = theta - eta K^{-1} grad_theta R(H(theta))``: returns
    ``(Ext of H(theta), Ext of H(theta'))`` with the SVD routine ``ext`` of the working precision."""
    H = hessian(theta, K)
    e = ext(H)
    theta1 = theta - eta * solve(K, grad_theta(kind, theta, K, e, H))
    return e, ext(hessian(theta1, K))


def eq10(theta: np.ndarray, K: np.ndarray, reading: str = "proof") -> np.ndarray:
    """Prop. 3.2 / Eq. 10 transcribed: ``sigma_i = sum_j (s_i (u_i^T q_j) gamma_j)^2`` with ``s_i, u_i`` from
    theta's SVD (descending) and ``q_j, lambda_j`` from K's eigendecomposition; ``gamma_j = sqrt(lambda_j)``
    (the proof's ``K = Q Gamma^2 Q^T``) or ``gamma_j = lambda_j`` (the main text's "singular value of K").
    K is PSD; eigenvalues that rounding pushed below 0 (|lambda| ~ eps lambda_max) count as 0."""
    U, s, _ = np.linalg.svd(theta)
    lam, Q = np.linalg.eigh(K)
    lam = np.maximum(lam, 0.0)
    gamma = np.sqrt(lam) if reading == "proof" else lam
    return ((s[:, None] * (U.T @ Q) * gamma[None, :]) ** 2).sum(axis=1)


def rir(theta: np.ndarray, K_P: np.ndarray, K_H: np.ndarray) -> float:
    """Eq. 15: ``[kappa(H_H(theta)) / kappa(K_H)] / [kappa(H_P(theta)) / kappa(K_P)]`` (H(I) = K)."""
    def kap(A):
        return kappa(ext64(A))
    return (kap(hessian(theta, K_H)) / kap(K_H)) / (kap(hessian(theta, K_P)) / kap(K_P))
