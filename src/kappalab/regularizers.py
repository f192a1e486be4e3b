"""The two condition-number regularizers of the paper, their closed-form gradients, and kappa.

Notation: ``S`` is any real ``m x n`` matrix, ``p = min(m, n)``, ``k`` its numerical rank (see
:mod:`kappalab.spectral` for the tolerance), ``s_1 >= ... >= s_k > 0`` its nonzero singular values.

* ``kappa(S) = s_1 / s_k`` (Eq. 1, with the pseudo-inverse: s_k is the smallest NONZERO singular value).
* ``R_well(S) = s_1^2 / 2 - ||S||_F^2 / (2p)`` (Eq. 3, Nenov et al. 2024): minimizing it lowers kappa.
* ``R_ill(S) = 1 / ( ||S||_F^2 / (2k) - s_k^2 / 2 )`` (Eq. 12): minimizing it raises kappa.
* ``grad R_well(S) = s_1 u_1 v_1^T - S / p`` (Thm A.1(3)), defined when s_1 is unique.
* ``grad R_ill(S) = (s_k u_k v_k^T - S / k) / (||S||_F^2 / (2k) - s_k^2 / 2)^2`` (Thm 4.1(3)), defined when s_k is
  unique. For a rank-deficient S (k < p) the rank itself jumps under generic perturbations, so this is the
  gradient along the manifold of rank-k matrices (where s_k stays the smallest nonzero value), not a gradient
  in the full space; :mod:`proofs_checks` records this.

The scalar formulas live in the ``*_from_extremes`` functions below and are shared by the NumPy path, the torch
path and the custom autograd functions, so there is one specification.

R_ill's denominator is ``(1/(2k)) * sum_i (s_i^2 - s_k^2) >= 0`` and vanishes exactly when all nonzero singular
values are equal (e.g. S = I, or any rank-1 S). Computed as ``||S||_F^2/(2k) - s_k^2/2`` it carries a rounding
error of about ``p * eps * (||S||_F^2/(2k) + s_1 s_k)``; at or below that bound R_ill is reported as undefined
(:class:`~kappalab.errors.UndefinedRegularizerError`) instead of returning a huge meaningless number.
"""

from __future__ import annotations

from ._backend import Array, as_dtype_of, eps, is_torch, namespace, to_scalar
from .errors import UndefinedRegularizerError
from .spectral import DegeneratePolicy, Extremes, psd_extremes, require_unique, svd_extremes
from .validation import matrix


def extremes(S: object, *, rtol: float | None = None, psd: bool = False, solver: str = "auto",
             check: bool = True, name: str = "S") -> Extremes:
    """Validate ``S`` and return its :class:`~kappalab.spectral.Extremes`.

    ``psd=True`` declares S symmetric positive semidefinite (a covariance or ``H(theta)``); then the symmetric
    eigensolver ``solver`` is used and symmetry/PSD are checked (with ``check=True``).
    """
    return spectrum_of(validated(S, psd=psd, check=check, name=name), rtol=rtol, psd=psd, solver=solver,
                       check=check, name=name)


def validated(S: object, *, psd: bool, check: bool, name: str = "S") -> Array:
    """``S`` as a floating matrix, shape-checked (finiteness is checked here, or by the PSD route)."""
    return matrix(S, name, square=psd, check=check and not psd)


def spectrum_of(S: Array, *, rtol: float | None, psd: bool, solver: str, check: bool, name: str = "S") -> Extremes:
    """:class:`Extremes` of an already validated matrix (PSD route or SVD route)."""
    if psd:
        return psd_extremes(S, rtol=rtol, solver=solver, check=check, name=name)
    return svd_extremes(S, rtol=rtol, check=check)


# ---- the specification: formulas in terms of Extremes ---------------------------------------------------------

def r_well_from_extremes(e: Extremes) -> Array:
    """Eq. 3: ``s_1^2 / 2 - ||S||_F^2 / (2p)``."""
    return 0.5 * e.s_max * e.s_max - e.fro2 / (2 * e.p)


def ill_denominator(e: Extremes, *, check: bool = True, name: str = "S") -> Array:
    """R_ill's denominator ``||S||_F^2 / (2k) - s_k^2 / 2``; with ``check``, an error where it is zero."""
    d = e.fro2 / (2 * as_dtype_of(e.rank, e.fro2)) - 0.5 * e.s_min * e.s_min
    if check:
        k = int(to_scalar(e.rank))
        bound = e.p * eps(e.s_max) * (to_scalar(e.fro2) / (2 * k) + to_scalar(e.s_max * e.s_min))
        if k < 2 or to_scalar(d) <= bound:
            raise UndefinedRegularizerError(
                f"R_ill({name}) is undefined: its denominator ||{name}||_F^2/(2k) - s_min^2/2 = {to_scalar(d):.3e} "
                f"is zero within rounding (bound {bound:.3e}); all k = {k} nonzero singular values are equal "
                f"(s_max = {to_scalar(e.s_max):.6e}, s_min = {to_scalar(e.s_min):.6e})"
            )
    return d


def r_ill_from_extremes(e: Extremes, *, check: bool = True, name: str = "S") -> Array:
    """Eq. 12: ``1 / (||S||_F^2 / (2k) - s_k^2 / 2)``."""
    return 1.0 / ill_denominator(e, check=check, name=name)


def grad_r_well_from_extremes(e: Extremes, S: Array) -> Array:
    """Thm A.1(3): ``s_1 u_1 v_1^T - S / p``."""
    xp = namespace(S)
    return e.s_max * xp.outer(e.u_max, e.v_max) - S / e.p


def grad_r_ill_from_extremes(e: Extremes, S: Array, *, check: bool = True, name: str = "S") -> Array:
    """Thm 4.1(3): ``(s_k u_k v_k^T - S / k) / d^2`` with d the R_ill denominator."""
    xp = namespace(S)
    d = ill_denominator(e, check=check, name=name)
    return (e.s_min * xp.outer(e.u_min, e.v_min) - S / as_dtype_of(e.rank, S)) / (d * d)


def check_policy(on_degenerate: str) -> None:
    """Reject an unknown ``on_degenerate`` value on every path (not only where a gradient is formed)."""
    if on_degenerate not in ("raise", "warn", "ignore"):
        raise ValueError(f"on_degenerate must be 'raise', 'warn' or 'ignore', got {on_degenerate!r}")


# ---- public API -------------------------------------------------------------------------------------------------

def condition_number(S: object, rtol: float | None = None, *, psd: bool = False, check: bool = True) -> Array:
    """``kappa(S) = s_max / s_min`` with s_min the smallest singular value above ``rtol * s_max``.

    ``rtol=None`` means ``max(m, n) * eps(dtype)`` (see :mod:`kappalab.spectral`). Returns a NumPy scalar or a 0-d tensor.
    """
    e = extremes(S, rtol=rtol, psd=psd, check=check)
    return e.s_max / e.s_min


def r_well(S: object, *, rtol: float | None = None, psd: bool = False, solver: str = "auto",
           on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None, check: bool = True) -> Array:
    """R_well(S) of Eq. 3 (``p = min(m, n)``). Torch input that requires grad backpropagates through the closed
    form of Thm A.1(3) (after the degeneracy policy is applied to s_max)."""
    check_policy(on_degenerate)
    if is_torch(S) and S.requires_grad:
        from ._torch_functions import RWell

        return RWell.apply(S, rtol, psd, solver, on_degenerate, gap_rtol, check)
    return r_well_from_extremes(extremes(S, rtol=rtol, psd=psd, solver=solver, check=check))


def r_ill(S: object, *, rtol: float | None = None, psd: bool = False, solver: str = "auto",
          on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None, check: bool = True) -> Array:
    """R_ill(S) of Eq. 12 (``k`` = numerical rank). Raises
    :class:`~kappalab.errors.UndefinedRegularizerError` when all nonzero singular values are equal. Torch input
    that requires grad backpropagates through the closed form of Thm 4.1(3)."""
    check_policy(on_degenerate)
    if is_torch(S) and S.requires_grad:
        from ._torch_functions import RIll

        return RIll.apply(S, rtol, psd, solver, on_degenerate, gap_rtol, check)
    return r_ill_from_extremes(extremes(S, rtol=rtol, psd=psd, solver=solver, check=check), check=check)


def grad_r_well(S: object, *, rtol: float | None = None, psd: bool = False, solver: str = "auto",
                on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None,
                check: bool = True) -> Array:
    """Closed-form gradient of R_well (Thm A.1(3)); requires a unique s_max (see ``on_degenerate``)."""
    S = validated(S, psd=psd, check=check)
    e = spectrum_of(S, rtol=rtol, psd=psd, solver=solver, check=check)
    require_unique(e, "max", on_degenerate, gap_rtol, "S")
    return grad_r_well_from_extremes(e, S)


def grad_r_ill(S: object, *, rtol: float | None = None, psd: bool = False, solver: str = "auto",
               on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None,
               check: bool = True) -> Array:
    """Closed-form gradient of R_ill (Thm 4.1(3)); requires a unique s_min (see ``on_degenerate``)."""
    S = validated(S, psd=psd, check=check)
    e = spectrum_of(S, rtol=rtol, psd=psd, solver=solver, check=check)
    ill_denominator(e, check=check)  # undefined R_ill is reported as such, before any uniqueness question
    require_unique(e, "min", on_degenerate, gap_rtol, "S")
    return grad_r_ill_from_extremes(e, S, check=check)
