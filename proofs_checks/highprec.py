"""Re-checks in 80-digit arithmetic (mpmath) and exact arithmetic (sympy) with the formulas of
:mod:`proofs_checks.paper`.

A float64 violation is a counterexample only if it survives here. Matrices are carried as NumPy *object*
arrays of ``mpmath.mpf`` so that the formulas of :mod:`proofs_checks.paper` (only ``+ - * / @``) evaluate in
80 digits unchanged: there is one specification.

``mp_spectral`` rebuilds a :class:`~proofs_checks.strategies.SpectralMatrix` with its orthogonal factors
re-orthonormalized in 80 digits, so the high-precision matrix has exactly the drawn spectrum (float64 would
turn exact zeros into ~1e-17 noise). Ranks use the relative threshold ``MP_RTOL = 1e-60`` (steps near a bound can create kappa ~ 1e48).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import mpmath as mp
import numpy as np

from .paper import Ext

DPS = 80
#: label used in the evidence
MP_LABEL = f"mpmath {DPS} digits"
MP_RTOL = mp.mpf("1e-60")
#: relative resolution of a high-precision comparison: the strategies keep relative spectral gaps >= 1e-13, so
#: a difference such as s_1^2 - s_k^2 loses at most 13 digits to cancellation; 30+ digits of headroom remain.
MP_TOL = mp.mpf(10) ** (30 - DPS)


@contextmanager
def workdps() -> Iterator[None]:
    """Run a block with ``DPS`` significant digits."""
    with mp.workdps(DPS):
        yield


def to_mp(A: np.ndarray) -> np.ndarray:
    """A float (or Fraction/int) array as an object array of mpf (float64 values are exact in mpf)."""
    return np.vectorize(mp.mpf, otypes=[object])(np.asarray(A, dtype=object))


def to_float(A: np.ndarray) -> np.ndarray:
    return np.asarray(A, dtype=float)


def _orthonormalize(Q: np.ndarray) -> np.ndarray:
    Qm, R = mp.qr(mp.matrix(to_mp(Q).tolist()))
    out = np.array(Qm.tolist(), dtype=object)
    signs = [mp.sign(R[i, i]) or 1 for i in range(Q.shape[1])]
    return out * np.array(signs, dtype=object)


def mp_spectral(sm) -> np.ndarray:
    """``U diag(s) V^T`` of a SpectralMatrix in 80 digits with orthonormal factors."""
    p = sm.s.shape[0]
    U = _orthonormalize(sm.U)[:, :p]
    V = _orthonormalize(sm.V)[:, :p]
    return (U * to_mp(sm.s)) @ V.T


def mp_svd(A: np.ndarray) -> tuple[np.ndarray, list, np.ndarray]:
    """Full-precision compact SVD: ``U`` (m x p), descending ``s`` (list of mpf), ``V`` (n x p)."""
    U, S, Vt = mp.svd_r(mp.matrix(A.tolist()))
    s = [S[i] for i in range(len(S))]
    order = sorted(range(len(s)), key=lambda i: -s[i])
    U = np.array(U.tolist(), dtype=object)[:, order]
    V = np.array(Vt.T.tolist(), dtype=object)[:, order]
    return U, [s[i] for i in order], V


def mp_extremes(A: np.ndarray) -> Ext:
    """:class:`~proofs_checks.paper.Ext` of an object matrix, computed in 80 digits (rank threshold
    ``MP_RTOL * s_1``)."""
    U, s, V = mp_svd(A)
    threshold = MP_RTOL * s[0]
    k = sum(1 for x in s if x > threshold)
    return Ext(s, U, V, k)


mp_ext = mp_extremes


def mp_kappa(A: np.ndarray) -> mp.mpf:
    """kappa in 80 digits (smallest singular value above ``MP_RTOL * s_max``)."""
    e = mp_extremes(A)
    return e.s_max / e.s_min


def mp_solve(K: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``K^{-1} B`` in 80 digits (LU)."""
    cols = [mp.lu_solve(mp.matrix(K.tolist()), mp.matrix(B[:, j].tolist())) for j in range(B.shape[1])]
    return np.array([[c[i] for c in cols] for i in range(B.shape[0])], dtype=object)


def fmt(x) -> str:
    """A number for a failure message (20 significant digits for mpf)."""
    return mp.nstr(x, 20) if isinstance(x, mp.mpf) else repr(x)
