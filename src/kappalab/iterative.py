"""Iterative extreme eigensolvers: both ends of the spectrum of a symmetric PSD matrix, checked by residuals.

The solvers behind :mod:`kappalab.spectral`'s ``"lobpcg"`` / ``"arpack"`` routes and the warm starts of
:class:`kappalab.tracker.ExtremeTracker` (see its module for the training-loop picture):

* top pair: LOBPCG (block of 3, no preconditioner) or ARPACK ``eigsh(which="LA")``;
* bottom pair: a Cholesky factor ``L L^T = A`` (``n^3/3`` flops, BLAS-3) gives ``A^-1``; LOBPCG uses it as the
  preconditioner (exact-inverse preconditioning: inverse iteration accelerated), ARPACK as the shift-invert
  operator around 0. A Cholesky failure means ``A`` is not numerically positive definite (rank-deficient): the
  bottom of the spectrum then needs the rank, which extreme solvers cannot count, so the dense route is used;
* ``"shift"`` (warm starts only): shifted Cholesky block inverse iteration at both ends (:func:`_ends_shift`).

Convergence is checked here, on the returned pairs, never taken from the solver (torch's ``lobpcg`` gives no
signal and SciPy's only warns; their tolerances mean different things). A pair ``(theta_i, v_i)`` with residual
``r_i = A v_i - theta_i v_i`` is accepted when

* ``||r_i|| <= tol_vec * delta_i`` for the two extreme pairs, ``delta_i`` the distance to the neighbouring Ritz
  value: then the eigenvector's angular error is about ``tol_vec`` and the eigenvalue error at most
  ``||r_i||^2 / delta_i <= tol_vec^2 delta_i``;
* ``||r_i|| <= tol_vec * lambda_max`` for the second pairs (``s_2``, ``s_{k-1}``; they enter only the gap tests).

``tol_vec`` defaults to ``sqrt(eps)``, the accuracy :mod:`kappalab.spectral`'s uniqueness tolerance assumes of
an extreme eigenvector. This module knows nothing of ranks or :class:`~kappalab.spectral.Extremes`:
:func:`kappalab.spectral.iterative_extremes` turns accepted pairs into them.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np


@dataclass
class Ends:
    """Both ends of the spectrum found by an iterative solver, with their blocks for the next warm start."""

    top_vals: np.ndarray  #: descending Ritz values of the top block
    top_vecs: np.ndarray
    bot_vals: np.ndarray  #: ascending Ritz values of the bottom block
    bot_vecs: np.ndarray


def default_tol_vec(A: np.ndarray) -> float:
    """``sqrt(eps(dtype))``: the accepted angular error of an extreme eigenvector."""
    return math.sqrt(float(np.finfo(A.dtype).eps))


def _cholesky_inverse(A: np.ndarray):
    """``(L, apply A^-1)``; ``None`` when ``A`` is not numerically positive definite."""
    from scipy.linalg import cho_solve
    from scipy.sparse.linalg import LinearOperator

    cf = _potrf_shifted(A, 0.0, negate=False)
    if cf is None:
        return None
    n = A.shape[0]
    return LinearOperator((n, n), matvec=lambda x: cho_solve(cf, x, check_finite=False),
                          matmat=lambda X: cho_solve(cf, X, check_finite=False), dtype=A.dtype)


def _start(prev: np.ndarray | None, n: int, b: int, rng: np.random.Generator, dtype) -> np.ndarray:
    """The previous block (warm start), padded with random columns to ``b`` columns (cold start)."""
    X = rng.standard_normal((n, b)).astype(dtype)
    if prev is not None:
        m = min(b, prev.shape[1])
        X[:, :m] = prev[:, :m]
    return X


def _ends_lobpcg(A, prev: Ends | None, maxiter: int, tol_vec: float, rng) -> Ends | None:
    from scipy.sparse.linalg import lobpcg

    Ainv = _cholesky_inverse(A)
    if Ainv is None:
        return None
    n = A.shape[0]
    Xt = _start(None if prev is None else prev.top_vecs, n, 3, rng, A.dtype)
    Xb = _start(None if prev is None else prev.bot_vecs, n, 2, rng, A.dtype)
    # SciPy's tol bounds every column's residual norm; aim below our own acceptance test (checked afterwards).
    tol_t = tol_vec * 0.5 * (abs(prev.top_vals[0] - prev.top_vals[1]) if prev is not None else 1e-6)
    tol_b = tol_vec * 0.5 * (abs(prev.bot_vals[1] - prev.bot_vals[0]) if prev is not None else 1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SciPy warns on non-convergence; we check residuals ourselves
        wt, Vt = lobpcg(A, Xt, largest=True, tol=tol_t or None, maxiter=maxiter)
        wb, Vb = lobpcg(A, Xb, M=Ainv, largest=False, tol=tol_b or None, maxiter=maxiter)
    it, ib = np.argsort(wt)[::-1], np.argsort(wb)
    return Ends(wt[it], Vt[:, it], wb[ib], Vb[:, ib])


def _ends_arpack(A, prev: Ends | None, maxiter: int, tol_vec: float, rng) -> Ends | None:
    from scipy.sparse.linalg import eigsh

    Ainv = _cholesky_inverse(A)
    if Ainv is None:
        return None
    n = A.shape[0]
    v_top = None if prev is None else prev.top_vecs[:, 0]
    v_bot = None if prev is None else prev.bot_vecs[:, 0]
    kw = dict(k=2, maxiter=maxiter * n, tol=tol_vec * 1e-3)
    wt, Vt = eigsh(A, which="LA", v0=v_top, **kw)
    wb, Vb = eigsh(A, sigma=0.0, which="LM", OPinv=Ainv, v0=v_bot, **kw)
    it, ib = np.argsort(wt)[::-1], np.argsort(wb)
    return Ends(wt[it], Vt[:, it], wb[ib], Vb[:, ib])


#: Shift margin of the ``"shift"`` method, relative to the previous gap (see :func:`_ends_shift`).
MARGIN = 0.02

#: Block size of the ``"shift"`` method: the second pairs (s_2, s_{k-1}) converge like
#: ``(lambda_2 - sigma) / (lambda_{BLOCK+1} - sigma)``; a triangular solve with a few more columns costs about the
#: same (it is bound by reading the factor), so a larger block needs far fewer iterations.
BLOCK = 8


def _potrf_shifted(A: np.ndarray, sigma: float, negate: bool):
    """Lower Cholesky factor of ``sigma I - A`` (``negate``) or ``A - sigma I`` as ``(c, True)`` for
    ``cho_solve``, or ``None`` when it is not positive definite. One ``n x n`` copy, factored in place by LAPACK
    ``potrf`` on its Fortran-ordered view (SciPy's ``cho_factor`` would copy the matrix again)."""
    from scipy.linalg import lapack

    n = A.shape[0]
    M = np.negative(A, order="C") if negate else np.array(A, order="C", copy=True)
    M.flat[:: n + 1] += sigma if negate else -sigma
    potrf = lapack.get_lapack_funcs("potrf", (M,))
    c, info = potrf(M.T, lower=1, clean=0, overwrite_a=1)  # M symmetric: M.T = M; only the lower part is used
    return (c, True) if info == 0 else None


def _shifted_cholesky(A: np.ndarray, theta: float, margin: float, top: bool):
    """Cholesky factor of ``sigma I - A`` (top) or ``A - sigma I`` (bottom) with ``sigma = theta +- margin``
    beyond the extreme eigenvalue; the margin grows tenfold while the factorization fails (the shift landed
    inside the spectrum). Returns ``(factor, sigma)``, or ``None`` after 4 tries."""
    for _ in range(4):
        sigma = theta + margin if top else theta - margin
        cf = _potrf_shifted(A, sigma, negate=top)
        if cf is not None:
            return cf, sigma
        margin *= 10.0
    return None


def _ends_shift(A, prev: Ends | None, maxiter: int, tol_vec: float, rng) -> Ends | None:
    """Block inverse iteration with Rayleigh-Ritz at each end, shifted just beyond the extreme eigenvalue.

    The shift comes from the warm start: the extreme Ritz value ``theta`` of the previous block on the new ``A``
    moved outwards by ``margin = MARGIN * gap`` (``gap`` the previous step's gap), so each iteration shrinks the
    error of pair 1 by about ``margin / (margin + gap)`` ~ 0.02. The Ritz value of a warm vector is far more
    accurate than its residual suggests (``theta - lambda = sum_i c_i^2 (lambda_i - lambda)`` is dominated by
    the tiny components ``c_i`` along far eigenvectors), so the shift is nearly always beyond the extreme
    eigenvalue; when it is not, the Cholesky factorization fails and the margin grows tenfold (one more
    factorization). Needs a warm start (``prev``)."""
    from scipy.linalg import cho_solve, eigh, qr, solve_triangular

    if prev is None:
        return None
    n = A.shape[0]
    floor = 4 * n * np.finfo(A.dtype).eps * abs(float(prev.top_vals[0]))
    out = []
    for top, vecs, vals in ((True, prev.top_vecs, prev.top_vals), (False, prev.bot_vecs, prev.bot_vals)):
        X = _start(vecs, n, BLOCK, rng, A.dtype)
        X, _ = qr(X, mode="economic", check_finite=False)
        AX = A @ X
        w, W = eigh(X.T @ AX, check_finite=False)
        theta = float(w[-1] if top else w[0])
        gap = abs(float(vals[0] - vals[1]))
        margin = max(MARGIN * gap, floor)
        found = _shifted_cholesky(A, theta, margin, top)
        if found is None:
            return None
        cf, sigma = found
        for _ in range(maxiter):
            Y = cho_solve(cf, X, check_finite=False)  # (sigma I - A) Y = X (top), (A - sigma I) Y = X (bottom)
            # A Y = sigma Y -+ X, so A X = (sigma Y -+ X) Rq^-1 after Y = X Rq, without another pass over A
            # (accurate to about n eps ||A|| cond(Rq); the caller's residual test uses A itself)
            AY = sigma * Y - X if top else sigma * Y + X
            X, Rq = qr(Y, mode="economic", check_finite=False)
            AX = solve_triangular(Rq, AY.T, trans="T", lower=False, check_finite=False).T
            T = X.T @ AX
            w, W = eigh(0.5 * (T + T.T), check_finite=False)
            order = np.argsort(w)[::-1] if top else np.argsort(w)
            w, X, AX = w[order], X @ W[:, order], AX @ W[:, order]
            ends = (w, X)
            R = AX[:, :2] - X[:, :2] * w[:2]
            res = np.linalg.norm(R, axis=0)
            if res[0] <= tol_vec * abs(w[0] - w[1]) and res[1] <= tol_vec * abs(prev.top_vals[0]):
                break  # the acceptance test of residual_failure, which the caller applies again
        out.append(ends)
    (wt, Vt), (wb, Vb) = out
    return Ends(wt, Vt, wb, Vb)


_ENDS = {"shift": _ends_shift, "lobpcg": _ends_lobpcg, "arpack": _ends_arpack}


def residual_failure(A: np.ndarray, ends: Ends, tol_vec: float) -> str | None:
    """Why the pairs fail the acceptance test of the module docstring, or ``None`` when they pass."""
    lam_max = abs(ends.top_vals[0])
    checks = [
        ("top", ends.top_vals[0], ends.top_vecs[:, 0], tol_vec * abs(ends.top_vals[0] - ends.top_vals[1])),
        ("second", ends.top_vals[1], ends.top_vecs[:, 1], tol_vec * lam_max),
        ("bottom", ends.bot_vals[0], ends.bot_vecs[:, 0], tol_vec * abs(ends.bot_vals[1] - ends.bot_vals[0])),
        ("second-smallest", ends.bot_vals[1], ends.bot_vecs[:, 1], tol_vec * lam_max),
    ]
    V = np.column_stack([v for _, _, v, _ in checks])
    lams = np.array([lam for _, lam, _, _ in checks])
    R = np.linalg.norm(A @ V - V * lams, axis=0) / np.linalg.norm(V, axis=0)  # one pass over A for all four
    for (label, _, _, bound), r in zip(checks, R.tolist()):
        if not r <= bound:
            return f"{label} pair not converged: residual {r:.3e} > bound {bound:.3e}"
    return None


#: The iterative methods: ``"shift"`` (needs a warm start), ``"lobpcg"`` and ``"arpack"``.
METHODS: tuple[str, ...] = tuple(_ENDS)


def solve_ends(A: np.ndarray, prev: Ends | None, method: str, maxiter: int, tol_vec: float,
               rng: np.random.Generator) -> tuple[Ends | None, str | None]:
    """Both ends of A's spectrum by ``method`` (warm-started from ``prev``), vectors normalized: ``(ends, None)``
    when they pass the acceptance test, else ``(ends or None, reason)``."""
    if method not in _ENDS:
        raise ValueError(f"method must be one of {sorted(_ENDS)}, got {method!r}")
    ends = _ENDS[method](A, prev, maxiter, tol_vec, rng)
    if ends is None:
        return None, "Cholesky failed (A not positive definite: the rank needs the dense route) or no warm start"
    ends.top_vecs = ends.top_vecs / np.linalg.norm(ends.top_vecs, axis=0)
    ends.bot_vecs = ends.bot_vecs / np.linalg.norm(ends.bot_vecs, axis=0)
    return ends, residual_failure(A, ends, tol_vec)
