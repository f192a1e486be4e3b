"""Prop. 3.2 / Eq. 10: the paper's formula for the singular values of ``H = theta^T K theta``.

Eq. 10 states ``sigma_i = sum_j ( s_theta,i (u_theta,i^T q_j) gamma_j )^2`` for ``i = 1..D_in``, with
``s_theta,i, u_theta,i`` the singular values / left singular vectors of theta (descending) and ``q_j`` the
eigenvectors of K. Two readings of ``gamma_j``:

* ``"proof"`` (Appendix B.1 writes ``K = Q Gamma^2 Q^T``): ``gamma_j = sqrt(lambda_j(K))``;
* ``"main_text"`` (Sec. 3 calls gamma_j "the j-th singular value of K"): ``gamma_j = lambda_j(K)``.

Under the proof reading the formula equals ``s_theta,i^2 u_theta,i^T K u_theta,i``: the i-th DIAGONAL entry of
``Sigma U^T K U Sigma``, which is similar to H. It is therefore the spectrum of H only when that matrix is
diagonal. This module evaluates the right-hand side; the verdict lives in ``proofs_checks``.
"""

from __future__ import annotations

from typing import Literal

from ._backend import Array, namespace, to_scalar
from .kappa import check_psd, default_rtol, rank_rule
from .validation import matrix, same_kind, symmetric

Reading = Literal["proof", "main_text"]


def eq10_singular_values(theta: object, K: object, reading: Reading = "proof") -> Array:
    """Right-hand side of Eq. 10, ordered like theta's singular values (descending).

    K must be symmetric PSD: eigenvalues below ``-rtol * lambda_max`` (``rtol = D * eps``) are an error; those
    within the rank threshold are treated as 0 before the square root of the ``"proof"`` reading.
    """
    if reading not in ("proof", "main_text"):
        raise ValueError(f"reading must be 'proof' or 'main_text', got {reading!r}")
    theta = matrix(theta, "theta", square=True)
    K = matrix(K, "K", square=True)
    same_kind(theta, K)
    if K.shape != theta.shape:
        raise ValueError(f"K must have theta's shape {tuple(theta.shape)}, got {tuple(K.shape)}")
    symmetric(K, "K")
    xp = namespace(theta)
    U, s, _ = xp.linalg.svd(theta)
    lam, Q = xp.linalg.eigh(K)
    rtol = default_rtol(K)
    check_psd(lam[0], lam[-1], rtol, "K")
    lam = xp.where(rank_rule(lam, to_scalar(xp.abs(lam).max()), rtol).kept, lam, 0 * lam)
    gamma = xp.sqrt(lam) if reading == "proof" else lam
    M = s[:, None] * (U.T @ Q) * gamma[None, :]
    return (M * M).sum(1)
