"""A warm-start tracker of the extreme eigenpairs for training loops.

At every optimizer step the regularizers need the largest and the smallest nonzero eigenpair of a symmetric PSD
``A`` (``H(theta)``) that changes only a little from the previous step. :class:`ExtremeTracker` keeps the
previous step's extreme eigenvectors and starts the next solve from them with an iterative solver of
:mod:`kappalab.iterative` (shifted Cholesky block inverse iteration by default, or LOBPCG / ARPACK), whose pairs
are accepted only on their residuals (the test is in that module). If the test fails (or ``maxiter`` is reached,
or ``A`` is singular), the tracker falls back to the dense ``eigh`` reference, counts it in
:attr:`ExtremeTracker.fallbacks` and records why in :attr:`ExtremeTracker.last_fallback`. Torch tensors are
solved on the host in NumPy and returned as tensors on their device (for CUDA, a dense ``eigh`` on the device is
usually the better choice).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np

from ._backend import Array, is_torch
from .iterative import METHODS, Ends, default_tol_vec
from .kappa import default_rtol
from .spectral import Extremes, iterative_extremes, psd_extremes
from .validation import finite, symmetric

Method = Literal["shift", "lobpcg", "arpack"]


class ExtremeTracker:
    """Extreme eigenpairs of a slowly changing symmetric PSD matrix, warm-started from the previous call.

    ``tracker(A)`` returns the same :class:`~kappalab.spectral.Extremes` as
    ``psd_extremes(A, solver="eigh")`` (to the accuracy in the module docstring), for NumPy arrays and torch
    tensors. ``method``: ``"shift"`` (default; shifted Cholesky block inverse iteration at both ends),
    ``"lobpcg"`` or ``"arpack"`` (top pair by LOBPCG/ARPACK, bottom pair with the Cholesky factor of ``A``).
    The first call, and any call after :meth:`reset`, is a dense solve (``solver="auto"``) that seeds the warm
    start; a rank-deficient ``A`` is always solved densely (no warm start is kept: the rank needs the whole
    spectrum). Counters: :attr:`calls`, :attr:`dense_solves`, :attr:`fallbacks` (dense solves after a failed or impossible warm-started
    solve), :attr:`last_fallback` (the reason of the latest one).
    """

    def __init__(self, *, method: Method = "shift", rtol: float | None = None, maxiter: int = 50,
                 tol_vec: float | None = None, seed: int = 0) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
        self.method, self.rtol, self.maxiter, self.tol_vec = method, rtol, maxiter, tol_vec
        self.calls = 0
        self.fallbacks = 0
        self.dense_solves = 0
        self.last_fallback: str | None = None
        self._prev: Ends | None = None
        self._rng = np.random.default_rng(seed)

    def reset(self) -> None:
        """Forget the previous eigenvectors (the next call is a dense seed solve)."""
        self._prev = None

    def __call__(self, A: Array, *, check: bool = True, name: str = "A") -> Extremes:
        if is_torch(A):
            return _as_torch(self(A.detach().cpu().numpy(), check=check, name=name), A)
        self.calls += 1
        if check:
            finite(A, name)
            symmetric(A, name)
        rtol = default_rtol(A) if self.rtol is None else self.rtol
        tol_vec = default_tol_vec(A) if self.tol_vec is None else self.tol_vec
        solver = "auto"
        if self._prev is not None and A.shape[0] >= 8:
            found, ends, reason = iterative_extremes(A, rtol, self._prev, self.method, self.maxiter, tol_vec, self._rng)
            if found is not None:
                self._prev = ends
                return found[0]
            self.fallbacks += 1
            self.last_fallback = reason
            solver = "eigh"
        self.dense_solves += 1
        e = psd_extremes(A, rtol=rtol, solver=solver, check=check, name=name)
        self._prev = _ends_from_dense(e, A) if A.shape[0] >= 8 else None
        return e


def _ends_from_dense(e: Extremes, A: np.ndarray) -> Ends | None:
    """Seed the next warm start from a dense solve (only the extreme vectors are kept)."""
    if int(e.rank) < A.shape[0]:
        return None
    return Ends(np.array([e.s_max, e.s_2]), e.v_max[:, None], np.array([e.s_min, e.s_km1]), e.v_min[:, None])


def _as_torch(e: Extremes, like: Array) -> Extremes:
    import torch

    conv = {f.name: torch.as_tensor(np.asarray(getattr(e, f.name)), device=like.device)
            for f in dataclasses.fields(e) if f.name != "p"}
    return Extremes(**conv, p=e.p)
