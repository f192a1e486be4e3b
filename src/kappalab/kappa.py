"""kappa, the rank rule and the RIR: their one home, for NumPy arrays and torch tensors alike.

Notation (the paper's). A *spectrum* is the list of singular values ``s_1 >= s_2 >= ... >= 0`` of a matrix ``S``
(``m x n``), or the eigenvalues of a symmetric positive semidefinite (PSD) ``A``, whose singular values they are.

Rank rule
    A value counts as nonzero when ``s_i > rtol * s_1``; the numerical rank ``k`` counts them. The default
    ``rtol = max(m, n) * eps(dtype)`` (for a spectrum of ``n`` values of a square matrix: ``n * eps``) is NumPy's
    ``matrix_rank`` convention: a backward-stable SVD or symmetric eigensolver perturbs every value by about
    ``max(m, n) * eps * s_1``, so smaller values cannot be told from zero. ``rtol`` must lie in ``[0, 1)``. For a
    PSD matrix an eigenvalue below ``-rtol * max|lambda|`` is no rounding of a zero but a negative eigenvalue: an
    error. A spectrum with ``s_1 <= 0`` (the zero matrix) has rank zero and no kappa.

kappa
    * Pseudo-inverse kappa (Eq. 1 with the pseudo-inverse): ``s_1 / s_k``, the largest over the smallest NONZERO
      value: :func:`kappa_of_spectrum`, :func:`condition_number` (a matrix), :func:`kappa_of_features`.
    * Shifted kappa (the authors' official code): the eigenvalues of ``S + shift I`` (``eigvalsh``), those
      ``> shift`` kept, ``max / min`` of the kept ones: :func:`kappa_shifted`. It keeps rounding-level null
      eigenvalues: an exact zero eigenvalue of S is computed as ``shift +- O(n eps lambda_1)``, the sign of that
      rounding decides whether it is kept, and when it is, kappa jumps to about ``lambda_1 / shift``. This is the
      official rule reproduced as it is (Table 1's sensitivity block exposes it), not a rank decision.
    * The registry :data:`KAPPA_DEFINITIONS` (:func:`kappa_definition`) holds both, by the names records and configs
      store ("pinv", "shifted"), each as a :class:`KappaDefinition`: the matrix its eigenvalues come from, its rule
      for which are kept, and kappa from them. Every caller that is handed a definition's name uses it whole.

RIR (Eq. 15 and Eq. 17)
    ``(i) = kappa(H_H(theta_I)) / kappa(H_H(ref))``, ``(ii) = kappa(H_P(theta_I)) / kappa(H_P(ref))`` and
    ``RIR = (i) / (ii)``, with ``ref = I`` (Eq. 15, ``H(I) = K``) or a pre-trained ``theta_0`` (Eq. 17):
    :func:`rir_terms`. Immunization wants (i) large and (ii) near or below 1.

    *Direct* names the reference ``theta = I`` in code (``direct_hessian``, ``direct_losses``, ...): linear probing
    directly on the input data, which Definition 3.1 (a), (b) compares the immunized extractor with. Stored records
    and files keep the name they were written with, "identity" (``kappa_H_identity``, ``probe_identity_P_*.npy``);
    the config value ``theta_init = "identity"`` is the identity matrix, and a run's "identity" its hash.

Where a spectrum comes from
    * given: :func:`kappa_of_spectrum` takes the values in any order;
    * a matrix: :func:`spectrum`. A general matrix: its singular values (``svdvals``). A PSD matrix
      (``psd=True``): its eigenvalues by :func:`eigenvalues`;
    * a feature matrix ``F`` (``N x D``) of ``H = F^T F``: the squared singular values of ``F``
      (:func:`feature_spectrum`, :func:`kappa_of_features`). An eigensolver applied to ``F^T F`` or ``F F^T`` errs
      by about ``eps * lambda_1`` in absolute terms, so it cannot resolve ``kappa(H) > ~1e15``; the SVD of ``F``
      errs by about ``eps * s_1`` on ``s_i = sqrt(lambda_i)``, i.e. it resolves ``lambda_k / lambda_1`` down to
      about ``eps^2``.

    A matrix is first scaled by a power of 4 to a largest entry in ``[1/4, 1)`` (:func:`~kappalab._backend.unit_scale`;
    exact in floating point, and a no-op on every value for matrices away from float64's range ends): kappa is
    then invariant, bit for bit, under scaling by powers of 2, and no decomposition under- or overflows for
    entries anywhere in float64's range.

Torch tensors stay on their device; kappa is differentiable through ``eigvalsh`` / ``svdvals`` (the mask of the
rank rule carries no gradient).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from ._backend import Array, eps, eye_like, namespace, scalar_like, to_scalar, to_scalars, unit_scaled
from .errors import RankZeroError
from .validation import matrix, matrix_to_decompose, positive_scalar, require_values, symmetric

#: The official code's shift of the shifted kappa.
DEFAULT_SHIFT = 1e-6

#: NumPy matrices from this size on take their eigenvalues from ``eigvalsh`` (LAPACK ``sytrd`` + ``sterf``), the
#: values of :mod:`kappalab.spectral`'s ``"tridiag"`` route; smaller ones from ``eigh``, the values of its
#: ``"eigh"`` route. Both are the routes ``solver="auto"`` takes, so kappa and the regularizers' extremes see the
#: same eigenvalues (a test checks it bit for bit), and the recorded kappas of Tables 1 and 2 recompute identically.
AUTO_TRIDIAG_MIN_N = 128


# ---- the rank rule ------------------------------------------------------------------------------------------------

def default_rtol(a: Array, dim: int | None = None) -> float:
    """``max(m, n) * eps(dtype)`` for an ``m x n`` matrix ``a``, ``n * eps`` for a spectrum of ``n`` values; ``dim``
    replaces ``max(m, n)`` where ``a`` stands for another matrix (features ``F``, ``N x D``, for ``H = F^T F``:
    ``dim = D``)."""
    return (max(a.shape) if dim is None else dim) * eps(a)


def check_rtol(rtol: float | None, name: str = "rtol") -> None:
    """``rtol`` must be ``None`` or a number in ``[0, 1)``: a negative value would count zero singular values as
    nonzero, a value ``>= 1`` (or NaN) would leave no nonzero singular value at all."""
    if rtol is not None and not 0 <= rtol < 1:
        raise ValueError(f"{name} must be None or a relative tolerance in [0, 1), got {rtol!r}")


def resolve_rtol(rtol: float | None, a: Array, dim: int | None = None) -> float:
    """``rtol`` checked, or :func:`default_rtol` of ``a`` (and ``dim``) when it is ``None``."""
    check_rtol(rtol)
    return default_rtol(a, dim) if rtol is None else rtol


class RankRule(NamedTuple):
    """What the rank rule decides for some values of one spectrum (or of a stack of spectra)."""

    threshold: Array  #: the absolute threshold ``rtol * s_1``
    kept: Array  #: boolean, elementwise: ``value > threshold`` (strict)
    rank: Array  #: ``k``: how many values are kept, over the last axis (a 0-d integer array or tensor per spectrum)


def rank_rule(values: Array, s_max: Array, rtol: float) -> RankRule:
    """The rank rule, whole (module docstring): which of ``values`` count as nonzero against ``s_1 = s_max`` at
    relative tolerance ``rtol`` (resolved by the caller: :func:`resolve_rtol`), and how many. ``values`` may be a
    spectrum, some of its values or a stack, ``s_max`` broadcast against it (a stack: shape ``(..., 1)``). No host
    read: everything stays an array or tensor on its device."""
    threshold = rtol * s_max
    kept = values > threshold
    return RankRule(threshold, kept, kept.sum(-1) if kept.ndim else kept.sum())


def check_nonzero(s_max: Array, name: str) -> None:
    """Raise when the largest value is not positive: the matrix is zero, and kappa, R_well and R_ill are undefined."""
    if not to_scalar(s_max) > 0:
        raise RankZeroError(f"{name} has rank zero (it is the zero matrix): kappa, R_well and R_ill are undefined")


def check_psd(lam_lowest: Array, lam_max: Array, rtol: float, name: str, scale: int = 0) -> None:
    """Raise when the smallest eigenvalue lies below ``-rtol * max|lambda|`` (a negative eigenvalue, not rounding).
    ``scale``: the eigenvalues are those of ``2^-scale`` times the caller's matrix; the message shows the caller's."""
    lo, hi = to_scalar(lam_lowest), to_scalar(lam_max)
    floor = -rtol * max(abs(hi), abs(lo))
    if lo < floor:
        raise ValueError(
            f"{name} must be positive semidefinite: its smallest eigenvalue is {math.ldexp(lo, scale):.6e}, below "
            f"-rtol * max|lambda| = {math.ldexp(floor, scale):.6e}"
        )


# ---- spectra ------------------------------------------------------------------------------------------------------

def eigenvalues(A: Array) -> Array:
    """Eigenvalues of the symmetric ``A``, ascending: ``eigh`` for NumPy ``n < AUTO_TRIDIAG_MIN_N``, ``eigvalsh``
    otherwise (see :data:`AUTO_TRIDIAG_MIN_N`; torch: ``eigvalsh``, differentiable)."""
    require_values(A, "A")
    return _eigenvalues(A, namespace(A))


def _eigenvalues(A: Array, xp: ModuleType) -> Array:
    if xp is np and A.shape[0] < AUTO_TRIDIAG_MIN_N:
        return xp.linalg.eigh(A)[0]
    return xp.linalg.eigvalsh(A)


def singular_values(S: Array) -> Array:
    """Singular values of ``S``, descending (values only: LAPACK ``gesdd`` without vectors)."""
    require_values(S, "S")
    return namespace(S).linalg.svdvals(S)


def descending(values: Array, xp: ModuleType | None = None) -> Array:
    """``values`` sorted from the largest down (``xp``: the caller's namespace)."""
    xp = namespace(values) if xp is None else xp
    if xp is not np:
        return values.sort(descending=True).values
    return xp.sort(values)[::-1]


def feature_spectrum(F: object, *, check: bool = True, name: str = "F") -> Array:
    """The nonzero-capable spectrum of ``H = F^T F``: the ``min(N, D)`` squared singular values of ``F`` (``N x D``),
    descending (without the ``|D - N|`` structural zeros; see the module docstring for why not eigenvalues)."""
    xp = namespace(F)
    s = xp.linalg.svdvals(matrix_to_decompose(F, name, check=check, xp=xp))
    return s * s


def spectrum(S: object, *, psd: bool = False, check: bool = True, rtol: float | None = None,
             name: str = "S") -> tuple[Array, int]:
    """``(values, scale)``: the descending spectrum of ``2^-scale S``, ``scale`` even and such that the largest entry
    of ``2^-scale S`` lies in ``[1/4, 1)`` (see the module docstring). ``psd=True``: S must be square, symmetric and
    PSD (checked with ``check``; ``rtol`` is the PSD check's tolerance, default :func:`default_rtol`). A torch
    tensor's ``scale`` is read back to return it as an int (with ``check``, in the PSD check's read)."""
    xp = namespace(S)
    values, scale = _spectrum(matrix_to_decompose(S, name, square=psd, check=check, xp=xp), psd, check, rtol, name, xp)
    return values, int(to_scalar(scale))


def _spectrum(S: Array, psd: bool, check: bool, rtol: float | None, name: str, xp: ModuleType) -> tuple[Array, Any]:
    """:func:`spectrum` of a matrix that :func:`~kappalab.validation.matrix` has checked; the scale stays on the
    device unless the PSD check reads it back (its message shows the caller's eigenvalues)."""
    if psd and check:
        symmetric(S, name, xp)
    S0, scale = unit_scaled(S)
    if not psd:
        return xp.linalg.svdvals(S0), scale
    lam = _eigenvalues(S0, xp)
    if check:
        lowest, top, scale = to_scalars(lam[0], lam[-1], scale)
        scale = int(scale)
        check_psd(lowest, top, resolve_rtol(rtol, S), name, scale)
    return xp.flip(lam, (0,)), scale


# ---- the pseudo-inverse kappa ---------------------------------------------------------------------------------------

def kappa_of_spectrum(values: object, rtol: float | None = None, *, rank: int | None = None,
                      dim: int | None = None, check: bool = True, name: str = "spectrum") -> Array:
    """``s_1 / s_k``: Eq. 1's kappa with the pseudo-inverse, from a spectrum (any order; a 1-d array or tensor).

    ``k`` is the numerical rank at ``rtol`` (``None``: :func:`default_rtol` with ``dim`` the larger side of the
    matrix the values belong to, default the number of values), or ``rank`` when given (e.g. a rank decided on
    another matrix of the same rank: Table 2's ``rank(theta^T K theta) = rank(K)``). ``check`` raises on a zero
    spectrum (a host sync); without it the rank stays on the device. Returns a 0-d array or tensor."""
    return _kappa_of_spectrum(values, rtol, rank, dim, check, name, namespace(values))


def _kappa_of_spectrum(values: Array, rtol: float | None, rank: int | None, dim: int | None, check: bool, name: str,
                       xp: ModuleType) -> Array:
    lam = descending(values, xp)
    n = lam.shape[0]
    given = rank is not None
    if not given:
        rank = rank_rule(lam, lam[0], resolve_rtol(rtol, lam, dim)).rank
    elif not (isinstance(rank, int) and 1 <= rank <= n):
        raise ValueError(f"rank must be an int in 1..{n} with a positive rank-th value, got {rank!r}")
    if check and given:
        top, kth = to_scalars(lam[0], lam[rank - 1])  # one host read for both checks
        if not kth > 0:
            raise ValueError(f"rank must be an int in 1..{n} with a positive rank-th value, got {rank!r}")
        check_nonzero(top, name)
    elif check:
        check_nonzero(lam[0], name)
    return lam[0] / lam[rank - 1]


def condition_number(S: object, rtol: float | None = None, *, psd: bool = False, check: bool = True) -> Array:
    """``kappa(S) = s_max / s_min`` with s_min the smallest singular value above ``rtol * s_max`` (Eq. 1 with the
    pseudo-inverse); ``psd=True``: S symmetric PSD, its eigenvalues. ``rtol=None``: ``max(m, n) * eps(dtype)``.
    Invariant under ``S -> 2^j S`` bit for bit. ``check=False`` reads nothing back (a zero S then gives NaN).
    Returns a NumPy scalar or a 0-d tensor."""
    check_rtol(rtol)
    xp = namespace(S)
    S = matrix_to_decompose(S, "S", square=psd, check=check, xp=xp)
    values, _ = _spectrum(S, psd, check, rtol, "S", xp)
    return _kappa_of_spectrum(values, rtol, None, max(S.shape), check, "S", xp)


def kappa_of_features(F: object, rtol: float | None = None, *, rank: int | None = None, check: bool = True) -> Array:
    """kappa of ``H = F^T F`` from the features: ``(s_1 / s_k)^2`` with ``s_i`` the singular values of ``F``.

    The rank rule is applied where the values were computed, to the singular values of ``F`` (``N x D``): ``rtol`` is
    relative to ``s_1(F)``, default ``max(N, D) * eps``, i.e. ``(max(N, D) eps)^2`` relative to ``lambda_1(H)``, so
    kappa(H) up to about ``1 / (max(N, D) eps)^2`` is resolved. (The rule of the ``D x D`` matrix H applied to the
    feature spectrum, ``kappa_of_spectrum(feature_spectrum(F))``, cuts at ``n eps`` relative to ``lambda_1``
    instead: Table 2's choice.)"""
    xp = namespace(F)
    F = matrix_to_decompose(F, "F", check=check, xp=xp)
    s = xp.linalg.svdvals(unit_scaled(F)[0])  # kappa is scale-free
    ratio = _kappa_of_spectrum(s, rtol, rank, max(F.shape), check, "F", xp)
    return ratio * ratio


# ---- the official code's shifted kappa ----------------------------------------------------------------------------

def shifted_matrix(S: Array, shift: float = DEFAULT_SHIFT) -> Array:
    """``S + shift I`` (a stack: each matrix), the matrix whose eigenvalues the official rule reads."""
    return S + shift * eye_like(S, S.shape[-1])


def shifted_eigenvalues(S: Array, shift: float = DEFAULT_SHIFT) -> Array:
    """Eigenvalues of ``S + shift I``, ascending (``eigvalsh``; torch: differentiable)."""
    positive_scalar(shift, "shift")
    require_values(S, "S")
    return namespace(S).linalg.eigvalsh(shifted_matrix(S, shift))


def kept_shifted(lam_shifted: Array, shift: float) -> Array:
    """The official rule's mask: eigenvalues of ``S + shift I`` above ``shift``."""
    return lam_shifted > shift


def kappa_shifted(S: object, shift: float = DEFAULT_SHIFT, *, check: bool = True) -> Array:
    """The official code's kappa: ``max / min`` of the eigenvalues of ``S + shift I`` above ``shift`` (see the
    module docstring: rounding-level null eigenvalues may be kept). ``check`` raises when none is kept (a host
    sync). Returns a 0-d array or tensor."""
    S = matrix(S, "S", square=True, check=check)
    return kappa_of_shifted_values(shifted_eigenvalues(S, shift), shift, check=check)


def kappa_of_shifted_values(lam: Array, shift: float, *, check: bool = True) -> Array:
    """:func:`kappa_shifted` from the ascending eigenvalues ``lam`` of ``S + shift I`` (1-d)."""
    kept = kept_shifted(lam, shift)
    if check and not bool(kept[-1]):
        raise ValueError(f"S has no eigenvalue above the shift {shift:g} (it is zero to that tolerance)")
    first = namespace(lam).argmax(kept * 1)  # the smallest kept eigenvalue, found on the device
    return lam[-1] / lam[first]


# ---- the registry of kappa definitions --------------------------------------------------------------------------

@dataclass(frozen=True)
class KappaDefinition:
    """One rule that reads kappa off a symmetric PSD matrix ``S`` (NumPy or torch; the module docstring defines
    both). Every field takes the two tolerances by keyword, ``rtol`` (``None``: :func:`default_rtol`) and
    ``shift``; each definition reads only its :attr:`parameter`."""

    name: str  #: the name records and configs store: "pinv" or "shifted"
    parameter: str  #: the one tolerance it reads, "rtol" or "shift" (what Table 1's sensitivity block scales)
    #: ``(S, *, shift) -> M``: the matrix whose eigenvalues the rule reads, ``S`` or ``S + shift I``
    matrix: Callable[..., Array]
    #: ``(S, *, rtol, shift, check) -> lam``: the ascending eigenvalues of ``matrix(S)`` as :attr:`of_matrix`
    #: computes them (pinv: of ``2^-scale S``, kappa being scale-free), with its checks
    eigenvalues: Callable[..., Array]
    #: ``(lam, *, rtol, shift, dim) -> RankRule``: which of the ascending eigenvalues ``lam`` of ``matrix(S)`` (or a
    #: stack, last axis) are kept; ``dim``: the size of ``S`` for the default ``rtol``
    rule: Callable[..., RankRule]
    #: ``(lam, *, rtol, shift, dim, check) -> kappa``: the largest over the smallest kept value of one ``lam``
    of_values: Callable[..., Array]

    def of_matrix(self, S: object, *, rtol: float | None = None, shift: float = DEFAULT_SHIFT,
                  check: bool = True) -> Array:
        """kappa of the symmetric PSD ``S`` under this definition: a 0-d array or tensor."""
        S = matrix_to_decompose(S, "S", square=True, check=check)
        lam = self.eigenvalues(S, rtol=rtol, shift=shift, check=check)
        return self.of_values(lam, rtol=rtol, shift=shift, dim=S.shape[-1], check=check)


def _pinv_eigenvalues(S: Array, *, rtol: float | None, shift: float, check: bool) -> Array:
    xp = namespace(S)
    check_rtol(rtol)
    return xp.flip(_spectrum(S, True, check, rtol, "S", xp)[0], (0,))


def _pinv_rule(lam: Array, *, rtol: float | None, shift: float, dim: int | None = None) -> RankRule:
    rule = rank_rule(lam, lam[..., -1:], resolve_rtol(rtol, lam, dim))
    return rule._replace(threshold=rule.threshold[..., 0])


def _shifted_rule(lam: Array, *, rtol: float | None, shift: float, dim: int | None = None) -> RankRule:
    kept = kept_shifted(lam, shift)
    return RankRule(scalar_like(lam, shift), kept, kept.sum(-1))


KAPPA_DEFINITIONS: Mapping[str, KappaDefinition] = MappingProxyType({d.name: d for d in (
    KappaDefinition(
        "pinv", "rtol", matrix=lambda S, *, shift: S, eigenvalues=_pinv_eigenvalues, rule=_pinv_rule,
        of_values=lambda lam, *, rtol, shift, dim=None, check=True: _kappa_of_spectrum(
            lam, rtol, None, dim, check, "S", namespace(lam))),
    KappaDefinition(
        "shifted", "shift", matrix=lambda S, *, shift: shifted_matrix(S, shift),
        eigenvalues=lambda S, *, rtol, shift, check: shifted_eigenvalues(S, shift), rule=_shifted_rule,
        of_values=lambda lam, *, rtol, shift, dim=None, check=True: kappa_of_shifted_values(lam, shift, check=check)),
)})
#: the definitions' names, in the order reports list them
KAPPA_NAMES: tuple[str, ...] = tuple(KAPPA_DEFINITIONS)


def kappa_definition(name: str) -> KappaDefinition:
    """The registered definition called ``name``; any other name is a one-line ValueError."""
    if name not in KAPPA_DEFINITIONS:
        raise ValueError(f"kappa definition must be one of {KAPPA_NAMES}, got {name!r}")
    return KAPPA_DEFINITIONS[name]


# ---- Eq. 15 / Eq. 17 --------------------------------------------------------------------------------------------

class RIRTerms(NamedTuple):
    """Eq. 15/17's terms (same kind as the kappas: floats, arrays elementwise, or tensors)."""

    term_i: object  #: kappa(H_H(theta_I)) / kappa(H_H(ref))
    term_ii: object  #: kappa(H_P(theta_I)) / kappa(H_P(ref))
    rir: object  #: term_i / term_ii


def rir_terms(kappa_H_immunized: object, kappa_H_reference: object, kappa_P_immunized: object,
              kappa_P_reference: object) -> RIRTerms:
    """(i), (ii) and RIR of Eq. 15 (reference = identity) or Eq. 17 (reference = theta_0) from the four kappas."""
    term_i = kappa_H_immunized / kappa_H_reference
    term_ii = kappa_P_immunized / kappa_P_reference
    return RIRTerms(term_i, term_ii, term_i / term_ii)
