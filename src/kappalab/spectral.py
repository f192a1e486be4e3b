"""Extreme singular triplets: the one place where kappalab does spectral work.

Notation (the paper's): a matrix ``S`` (``m x n``, ``p = min(m, n)``) has compact SVD ``S = U diag(s) V^T`` with
``s_1 >= ... >= s_k > 0``, ``k`` the rank. ``s_max = s_1`` and ``s_min = s_k`` is the smallest NONZERO singular
value. For a symmetric positive semidefinite ``A`` (a covariance ``K = X^T X`` or a linear-probing Hessian
``H = theta^T K theta``) the singular values are the eigenvalues and ``u_i = v_i``.

Rank tolerance
    A singular value counts as nonzero when ``s_i > rtol * s_max``. The default ``rtol = max(m, n) * eps(dtype)``
    is NumPy's ``matrix_rank`` convention: backward-stable SVD/eigh perturb every singular value by about
    ``max(m, n) * eps * s_max``, so values below that are indistinguishable from zero. Pass ``rtol`` to change it.

Uniqueness (gap) tolerance
    Gradients of ``s_max`` (for R_well) and ``s_min`` (for R_ill) exist only where that singular value is simple.
    A singular vector computed by a backward-stable solver has an angular error of about
    ``eps * s_max / gap``; we call the value *unique* when ``gap > gap_rtol * s_max`` with the default
    ``gap_rtol = sqrt(eps(dtype))`` (1.5e-8 in float64), so that the vector, and hence the gradient, is accurate
    to about ``sqrt(eps)``. Below it the policy ``on_degenerate`` decides: ``"raise"`` (default)
    :class:`~kappalab.errors.DegenerateSpectrumError`, ``"warn"`` a
    :class:`~kappalab.errors.DegenerateSpectrumWarning` and the formula evaluated with whichever vector the
    solver returned (for ``s_max``, an element of the subdifferential), ``"ignore"`` no check at all.

Solvers (``solver=``) for symmetric PSD input: ``"eigh"`` (dense symmetric eigensolver of NumPy/torch) and
``"auto"`` (the fastest exact method available for the shape; currently ``"eigh"``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable, Literal

from ._backend import Array, eps, namespace, scalar_like, to_scalar
from .errors import DegenerateSpectrumError, DegenerateSpectrumWarning
from .validation import finite, symmetric

DegeneratePolicy = Literal["raise", "warn", "ignore"]


@dataclass(frozen=True)
class Extremes:
    """The extreme singular triplets of a matrix and the scalars the regularizers need.

    All array fields are 0-d (scalars) or 1-d (vectors) of the input's kind, dtype and device, so that the
    torch path stays on the GPU. ``rank`` is a 0-d integer array/tensor for the same reason.
    """

    s_max: Array  #: largest singular value s_1
    u_max: Array  #: left singular vector of s_1
    v_max: Array  #: right singular vector of s_1
    s_2: Array  #: second largest singular value (0 when p = 1)
    s_min: Array  #: smallest singular value above the rank threshold, s_k
    u_min: Array  #: left singular vector of s_k
    v_min: Array  #: right singular vector of s_k
    s_km1: Array  #: s_{k-1} (+inf when k = 1)
    rank: Array  #: numerical rank k
    fro2: Array  #: ||S||_F^2
    p: int  #: min(m, n)
    threshold: Array  #: absolute rank threshold rtol * s_max

    @property
    def gap_top(self) -> Array:
        """s_1 - s_2: the gap that makes s_max unique."""
        return self.s_max - self.s_2

    @property
    def gap_bottom(self) -> Array:
        """s_{k-1} - s_k: the gap that makes s_min unique (+inf when k = 1)."""
        return self.s_km1 - self.s_min


def default_rtol(a: Array) -> float:
    """``max(m, n) * eps(dtype)``: the rank tolerance used when ``rtol=None``."""
    return max(a.shape) * eps(a)


def default_gap_rtol(a: Array) -> float:
    """``sqrt(eps(dtype))``: the relative gap below which an extreme singular value is called degenerate."""
    return math.sqrt(eps(a))


def _pick(values: Array, index: Array) -> Array:
    """values[index] for a 0-d integer index, without a host sync on torch."""
    return values[index]


def _assemble(xp, vec_at, s_all_desc: Array, fro2: Array, p: int, rtol: float) -> Extremes:
    """Build :class:`Extremes` from a descending spectrum accessor (shared by the SVD and eigh routes)."""
    s_max = s_all_desc[0]
    threshold = rtol * s_max
    k = (s_all_desc > threshold).sum()
    last = k - 1
    padded = xp.concatenate([scalar_like(s_max, math.inf).reshape(1), s_all_desc])
    s_2 = s_all_desc[1] if s_all_desc.shape[0] > 1 else scalar_like(s_max, 0.0)
    u_max, v_max = vec_at(0)
    u_min, v_min = vec_at(last)
    return Extremes(
        s_max=s_max, u_max=u_max, v_max=v_max, s_2=s_2,
        s_min=_pick(s_all_desc, last), u_min=u_min, v_min=v_min, s_km1=_pick(padded, last),
        rank=k, fro2=fro2, p=p, threshold=threshold,
    )


def svd_extremes(S: Array, *, rtol: float | None = None, check: bool = True) -> Extremes:
    """Extreme singular triplets of a general real matrix ``S`` by a dense SVD."""
    xp = namespace(S)
    rtol = default_rtol(S) if rtol is None else rtol
    U, s, Vh = xp.linalg.svd(S, full_matrices=False)
    e = _assemble(xp, lambda i: (U[:, i], Vh[i, :]), s, (S * S).sum(), min(S.shape), rtol)
    if check:
        _check_nonzero(e, "S")
    return e


def _eigh_dense(A: Array) -> tuple[Array, Array]:
    """All eigenpairs of the symmetric ``A``, ascending (NumPy's or torch's dense ``eigh``)."""
    return namespace(A).linalg.eigh(A)


#: Registered solvers for symmetric PSD input: name -> function returning ascending (eigenvalues, eigenvectors).
SOLVERS: dict[str, Callable[[Array], tuple[Array, Array]]] = {"eigh": _eigh_dense}


def choose_solver(A: Array) -> str:
    """The solver ``solver="auto"`` uses for ``A``."""
    return "eigh"


def psd_extremes(
    A: Array, *, rtol: float | None = None, solver: str = "auto", check: bool = True, name: str = "A"
) -> Extremes:
    """Extreme eigenpairs of a symmetric positive semidefinite ``A`` (its singular triplets, with u = v).

    With ``check=True`` the input must be finite, symmetric within
    :func:`~kappalab.validation.symmetric_tolerance`, non-zero, and PSD: an eigenvalue below
    ``-rtol * lambda_max`` is an error (rounding makes exact zeros slightly negative; anything below the rank
    threshold counts as zero, never as a negative singular value).
    """
    if check:
        finite(A, name)
        symmetric(A, name)
    xp = namespace(A)
    rtol = default_rtol(A) if rtol is None else rtol
    name_solver = choose_solver(A) if solver == "auto" else solver
    if name_solver not in SOLVERS:
        raise ValueError(f"solver must be 'auto' or one of {sorted(SOLVERS)}, got {solver!r}")
    lam, V = SOLVERS[name_solver](A)
    lam_desc = xp.flip(lam, (0,))
    n = A.shape[0]
    e = _assemble(xp, lambda i: (V[:, n - 1 - i], V[:, n - 1 - i]), lam_desc, (A * A).sum(), n, rtol)
    if check:
        _check_nonzero(e, name)
        lam_lo = to_scalar(lam[0])
        if lam_lo < -to_scalar(e.threshold):
            raise ValueError(
                f"{name} must be positive semidefinite: its smallest eigenvalue is {lam_lo:.6e}, below "
                f"-rtol * lambda_max = {-to_scalar(e.threshold):.6e}"
            )
    return e


def _check_nonzero(e: Extremes, name: str) -> None:
    if not to_scalar(e.s_max) > 0:
        raise ValueError(f"{name} has rank zero (it is the zero matrix): kappa, R_well and R_ill are undefined")


def require_unique(
    e: Extremes, which: Literal["max", "min"], policy: DegeneratePolicy, gap_rtol: float | None, name: str
) -> None:
    """Apply the degeneracy policy to ``s_max`` (``which="max"``) or ``s_min`` (``which="min"``)."""
    if policy == "ignore":
        return
    if policy not in ("raise", "warn"):
        raise ValueError(f"on_degenerate must be 'raise', 'warn' or 'ignore', got {policy!r}")
    gap_rtol = default_gap_rtol(e.s_max) if gap_rtol is None else gap_rtol
    gap = to_scalar(e.gap_top if which == "max" else e.gap_bottom)
    s_max = to_scalar(e.s_max)
    if gap > gap_rtol * s_max:
        return
    label = "s_max = s_1" if which == "max" else "s_min = s_k (smallest nonzero)"
    other = "s_2" if which == "max" else "s_{k-1}"
    msg = (
        f"{label} of {name} is not unique: gap to {other} is {gap:.3e} <= gap_rtol * s_max = "
        f"{gap_rtol * s_max:.3e} (gap_rtol = {gap_rtol:.1e}); the gradient is undefined there "
        f"(only a subdifferential exists)"
    )
    if policy == "raise":
        raise DegenerateSpectrumError(msg)
    warnings.warn(msg, DegenerateSpectrumWarning, stacklevel=3)
