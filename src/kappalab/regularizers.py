"""The two condition-number regularizers of the paper and their closed-form gradients.

Notation: ``S`` is any real ``m x n`` matrix, ``p = min(m, n)``, ``k`` its numerical rank (the rank rule of
:mod:`kappalab.kappa`), ``s_1 >= ... >= s_k > 0`` its nonzero singular values. kappa itself
(:func:`~kappalab.kappa.condition_number`) lives in :mod:`kappalab.kappa`.

* ``R_well(S) = s_1^2 / 2 - ||S||_F^2 / (2p)`` (Eq. 3, Nenov et al. 2024): minimizing it lowers kappa.
* ``R_ill(S) = 1 / ( ||S||_F^2 / (2k) - s_k^2 / 2 )`` (Eq. 12): minimizing it raises kappa.
* ``grad R_well(S) = s_1 u_1 v_1^T - S / p`` (Thm A.1(3)), defined when s_1 is unique.
* ``grad R_ill(S) = (s_k u_k v_k^T - S / k) / (||S||_F^2 / (2k) - s_k^2 / 2)^2`` (Thm 4.1(3)), defined when s_k is
  unique. For a rank-deficient S (k < p) the rank itself jumps under generic perturbations, so this is the
  gradient along the manifold of rank-k matrices (where s_k stays the smallest nonzero value), not a gradient
  in the full space; :mod:`proofs_checks` records this.

The scalar formulas live in the ``*_from_extremes`` functions below and are shared by the NumPy path, the torch
path and the autograd function, so there is one specification.

R_ill's denominator is ``(1/(2k)) * sum_i (s_i^2 - s_k^2) >= 0`` and vanishes exactly when all nonzero singular
values are equal (e.g. S = I, or any rank-1 S). Computed as ``||S||_F^2/(2k) - s_k^2/2`` it carries a rounding
error of about ``p * eps * (||S||_F^2/(2k) + s_1 s_k)``; at or below that bound R_ill is reported as undefined
(:class:`~kappalab.errors.UndefinedRegularizerError`) instead of returning a huge meaningless number.

Scale. The public functions compute on ``S0 = 2^-e S`` (``e`` even, the largest entry of ``S0`` in ``[1/4, 1)``:
an exact scaling, see :func:`~kappalab._backend.unit_scale`) and rescale analytically with ``c = 2^e``:
``R_well(c S0) = c^2 R_well(S0)``, ``R_ill(c S0) = R_ill(S0) / c^2``, ``grad R_well(c S0) = c grad R_well(S0)``,
``grad R_ill(c S0) = grad R_ill(S0) / c^3``. So at any scale of S a result that float64 can represent is returned
to full accuracy (and bit for bit equal to the unscaled computation for matrices away from the range ends), and
NaN never appears. A result whose largest magnitude lies outside float64's normal range is returned as IEEE
arithmetic rounds it (inf above, a subnormal number or 0 below) with a
:class:`~kappalab.errors.FloatRangeWarning`, issued under ``check=True`` (deciding it needs the result's magnitude
and ``e``: one device sync for CUDA tensors; ``e`` itself is found on the device,
:func:`~kappalab._backend.unit_scaled`). For torch tensors with ``check=False`` (the training hot loop, which reads
nothing back to the host) the scaling is skipped: S is used as given, so the hot loop computes the unscaled
formulas.

Input checks run once per public call, on S itself (their messages show the caller's values), with the namespace
resolved once and passed down (:mod:`kappalab.validation`); the routes below are told the matrix is checked.
"""

from __future__ import annotations

import math
import warnings
from types import ModuleType
from typing import Any

import numpy as np

from ._backend import Array, as_dtype_of, eps, is_torch, namespace, pow2_range, times_pow2, to_scalars, unit_scaled
from .errors import FloatRangeWarning, UndefinedRegularizerError
from .kappa import condition_number  # noqa: F401  (kappa's home is kappa.py; also importable from here)
from .spectral import DegeneratePolicy, Extremes, psd_extremes, require_unique, svd_extremes
from .validation import matrix_to_decompose, symmetric


def extremes(S: object, *, rtol: float | None = None, psd: bool = False, solver: str = "auto",
             check: bool = True, name: str = "S") -> Extremes:
    """Validate ``S`` and return its :class:`~kappalab.spectral.Extremes` (unscaled).

    ``psd=True`` declares S symmetric positive semidefinite (a covariance or ``H(theta)``); then the symmetric
    eigensolver ``solver`` is used and symmetry/PSD are checked (with ``check=True``).
    """
    xp = namespace(S)
    return spectrum_of(validated(S, psd=psd, check=check, name=name, xp=xp), rtol=rtol, psd=psd, solver=solver,
                       check=check, name=name, xp=xp)


def validated(S: object, *, psd: bool, check: bool, name: str = "S", xp: ModuleType | None = None) -> Array:
    """``S`` as a floating matrix with each input check run once: shape and values, and with ``check`` finiteness
    and (``psd``) symmetry. The routes below are then told it is checked."""
    S = matrix_to_decompose(S, name, square=psd, check=check, xp=xp)
    if psd and check:
        symmetric(S, name, xp)
    return S


def spectrum_of(S: Array, *, rtol: float | None, psd: bool, solver: str, check: bool, name: str = "S",
                scale: Any = 0, xp: ModuleType | None = None) -> Extremes:
    """:class:`Extremes` of a matrix :func:`validated` (PSD route or SVD route; the input checks are not run again);
    ``scale`` as in :func:`~kappalab.spectral.psd_extremes`."""
    if psd:
        return psd_extremes(S, rtol=rtol, solver=solver, check=check, name=name, scale=scale, xp=xp, checked=True)
    return svd_extremes(S, rtol=rtol, check=check, xp=xp, checked=True)


def scaled_extremes(S: object, *, rtol: float | None, psd: bool, solver: str, check: bool, xp: ModuleType
                    ) -> tuple[Array, Any, Extremes]:
    """``(S0, e, Extremes of S0)`` with ``S = 2^e S0`` (see "Scale" in the module docstring; ``e`` an int, or for a
    torch tensor a 0-d tensor on its device, read back with the first check that reports it). The input checks run
    on S itself, so that their messages show the caller's values."""
    S = validated(S, psd=psd, check=check, xp=xp)
    # a torch hot loop (check=False) computes on S unscaled (no host sync to find the scale)
    S0, e = unit_scaled(S) if check or xp is np else (S, 0)
    return S0, e, spectrum_of(S0, rtol=rtol, psd=psd, solver=solver, check=check, scale=e, xp=xp)


def rescaled(x0: Array, k: Any, check: bool, what: str) -> Array:
    """``x0 * 2^k``; with ``check``, a :class:`FloatRangeWarning` when its largest magnitude leaves the dtype's normal
    range (it is then inf, or subnormal or 0). ``k`` may be a 0-d tensor only with ``check``: the range check reads
    it back with ``max|x0|``, in one host read."""
    if not check:
        return times_pow2(x0, k)
    top, k = to_scalars(abs(x0).max(), k)
    k = int(k)
    where = pow2_range(x0, k, top)
    if where:
        magnitude = math.log10(top) + k * math.log10(2.0)
        warnings.warn(
            f"{what} has magnitude ~1e{magnitude:+.0f}, {'above' if where > 0 else 'below'} the normal range of "
            f"{x0.dtype}: returned as {'inf' if where > 0 else 'a subnormal number or 0'}", FloatRangeWarning,
            stacklevel=3)
    return times_pow2(x0, k)


# ---- the specification: formulas in terms of Extremes ---------------------------------------------------------

def r_well_from_extremes(e: Extremes) -> Array:
    """Eq. 3: ``s_1^2 / 2 - ||S||_F^2 / (2p)``."""
    return 0.5 * e.s_max * e.s_max - e.fro2 / (2 * e.p)


def ill_denominator(e: Extremes, *, check: bool = True, name: str = "S") -> Array:
    """R_ill's denominator ``||S||_F^2 / (2k) - s_k^2 / 2``; with ``check``, an error where it is zero (its inputs
    read back in one host read)."""
    d = e.fro2 / (2 * as_dtype_of(e.rank, e.fro2)) - 0.5 * e.s_min * e.s_min
    if check:
        k, fro2, s1_sk, d_host, s1, sk = to_scalars(e.rank, e.fro2, e.s_max * e.s_min, d, e.s_max, e.s_min)
        k = int(k)
        bound = e.p * eps(e.s_max) * (fro2 / (2 * k) + s1_sk)
        if k < 2 or d_host <= bound:
            # the message is scale-free: its numbers are relative to s_max
            raise UndefinedRegularizerError(
                f"R_ill({name}) is undefined: its denominator ||{name}||_F^2/(2k) - s_min^2/2 = "
                f"{d_host / s1 / s1:.3e} s_max^2 is zero within rounding (bound {bound / s1 / s1:.3e} s_max^2): "
                f"all k = {k} nonzero singular values are equal (s_min / s_max = {sk / s1:.17g})"
            )
    return d


def r_ill_from_extremes(e: Extremes, *, check: bool = True, name: str = "S") -> Array:
    """Eq. 12: ``1 / (||S||_F^2 / (2k) - s_k^2 / 2)``."""
    return 1.0 / ill_denominator(e, check=check, name=name)


def grad_r_well_from_extremes(e: Extremes, S: Array, xp: ModuleType | None = None) -> Array:
    """Thm A.1(3): ``s_1 u_1 v_1^T - S / p`` (``xp``: the caller's namespace)."""
    xp = namespace(S) if xp is None else xp
    return e.s_max * xp.outer(e.u_max, e.v_max) - S / e.p


def grad_r_ill_from_extremes(e: Extremes, S: Array, *, check: bool = True, name: str = "S",
                             xp: ModuleType | None = None) -> Array:
    """Thm 4.1(3): ``(s_k u_k v_k^T - S / k) / d^2`` with d the R_ill denominator (``xp``: the caller's namespace)."""
    xp = namespace(S) if xp is None else xp
    d = ill_denominator(e, check=check, name=name)
    return (e.s_min * xp.outer(e.u_min, e.v_min) - S / as_dtype_of(e.rank, S)) / (d * d)


# ---- public API -------------------------------------------------------------------------------------------------

def _well(S: object, rtol: float | None, psd: bool, solver: str, on_degenerate: DegeneratePolicy,
          gap_rtol: float | None, check: bool, *, value: bool, grad: bool) -> tuple[Array | None, Array | None]:
    """R_well(S) and/or its gradient, computed on the scaled matrix and rescaled (module docstring, "Scale")."""
    xp = namespace(S)
    S0, e, ex = scaled_extremes(S, rtol=rtol, psd=psd, solver=solver, check=check, xp=xp)
    if grad:
        require_unique(ex, "max", on_degenerate, gap_rtol, "S")
    v = rescaled(r_well_from_extremes(ex), 2 * e, check, "R_well(S)") if value else None
    G = rescaled(grad_r_well_from_extremes(ex, S0, xp), e, check, "grad R_well(S)") if grad else None
    return v, G


def _ill(S: object, rtol: float | None, psd: bool, solver: str, on_degenerate: DegeneratePolicy,
         gap_rtol: float | None, check: bool, *, value: bool, grad: bool) -> tuple[Array | None, Array | None]:
    """R_ill(S) and/or its gradient, computed on the scaled matrix and rescaled (module docstring, "Scale")."""
    xp = namespace(S)
    S0, e, ex = scaled_extremes(S, rtol=rtol, psd=psd, solver=solver, check=check, xp=xp)
    ill_denominator(ex, check=check)  # undefined R_ill is reported as such, before any uniqueness question
    if grad:
        require_unique(ex, "min", on_degenerate, gap_rtol, "S")
    # the denominator is checked (once, above): the formulas below recompute it on the device and read nothing
    v = rescaled(r_ill_from_extremes(ex, check=False), -2 * e, check, "R_ill(S)") if value else None
    G = rescaled(grad_r_ill_from_extremes(ex, S0, check=False, xp=xp), -3 * e, check, "grad R_ill(S)") if grad else None
    return v, G


def check_policy(on_degenerate: str) -> None:
    """Reject an unknown ``on_degenerate`` value on every path (not only where a gradient is formed)."""
    if on_degenerate not in ("raise", "warn", "ignore"):
        raise ValueError(f"on_degenerate must be 'raise', 'warn' or 'ignore', got {on_degenerate!r}")


def _value(terms, S: object, *options: object) -> Array:
    """The value of ``terms`` (:func:`_well` or :func:`_ill`); torch input that requires grad backpropagates through
    the closed-form gradient (after the degeneracy policy is applied to the extreme value the gradient needs)."""
    check_policy(options[3])
    if is_torch(S) and S.requires_grad:
        from ._torch_functions import ClosedFormGradient

        return ClosedFormGradient.apply(S, lambda Sd: terms(Sd, *options, value=True, grad=True))
    return terms(S, *options, value=True, grad=False)[0]


def r_well(S: object, *, rtol: float | None = None, psd: bool = False, solver: str = "auto",
           on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None, check: bool = True) -> Array:
    """R_well(S) of Eq. 3 (``p = min(m, n)``). Torch input that requires grad backpropagates through the closed
    form of Thm A.1(3) (after the degeneracy policy is applied to s_max)."""
    return _value(_well, S, rtol, psd, solver, on_degenerate, gap_rtol, check)


def r_ill(S: object, *, rtol: float | None = None, psd: bool = False, solver: str = "auto",
          on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None, check: bool = True) -> Array:
    """R_ill(S) of Eq. 12 (``k`` = numerical rank). Raises
    :class:`~kappalab.errors.UndefinedRegularizerError` when all nonzero singular values are equal. Torch input
    that requires grad backpropagates through the closed form of Thm 4.1(3)."""
    return _value(_ill, S, rtol, psd, solver, on_degenerate, gap_rtol, check)


def grad_r_well(S: object, *, rtol: float | None = None, psd: bool = False, solver: str = "auto",
                on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None,
                check: bool = True) -> Array:
    """Closed-form gradient of R_well (Thm A.1(3)); requires a unique s_max (see ``on_degenerate``)."""
    return _well(S, rtol, psd, solver, on_degenerate, gap_rtol, check, value=False, grad=True)[1]


def grad_r_ill(S: object, *, rtol: float | None = None, psd: bool = False, solver: str = "auto",
               on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None,
               check: bool = True) -> Array:
    """Closed-form gradient of R_ill (Thm 4.1(3)); requires a unique s_min (see ``on_degenerate``)."""
    return _ill(S, rtol, psd, solver, on_degenerate, gap_rtol, check, value=False, grad=True)[1]
