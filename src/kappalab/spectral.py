"""Extreme singular triplets: the one place where kappalab does spectral work.

Notation (the paper's): a matrix ``S`` (``m x n``, ``p = min(m, n)``) has compact SVD ``S = U diag(s) V^T`` with
``s_1 >= ... >= s_k > 0``, ``k`` the rank. ``s_max = s_1`` and ``s_min = s_k`` is the smallest NONZERO singular
value. For a symmetric positive semidefinite ``A`` (a covariance ``K = X^T X`` or a linear-probing Hessian
``H = theta^T K theta``) the singular values are the eigenvalues and ``u_i = v_i``.

Rank tolerance
    The rank rule of :mod:`kappalab.kappa`: a singular value counts as nonzero when ``s_i > rtol * s_max``, default
    ``rtol = max(m, n) * eps(dtype)``.

Uniqueness (gap) tolerance
    Gradients of ``s_max`` (for R_well) and ``s_min`` (for R_ill) exist only where that singular value is simple.
    A singular vector computed by a backward-stable solver has an angular error of about
    ``eps * s_max / gap``; we call the value *unique* when ``gap > gap_rtol * s_max`` with the default
    ``gap_rtol = sqrt(eps(dtype))`` (1.5e-8 in float64), so that the vector, and hence the gradient, is accurate
    to about ``sqrt(eps)``. Below it the policy ``on_degenerate`` decides: ``"raise"`` (default)
    :class:`~kappalab.errors.DegenerateSpectrumError`, ``"warn"`` a
    :class:`~kappalab.errors.DegenerateSpectrumWarning` and the formula evaluated with whichever vector the
    solver returned (for ``s_max``, an element of the subdifferential), ``"ignore"`` no check at all.

Solvers (``solver=``) for symmetric PSD input ``A`` (``n x n``); all are exact to working precision (the
benchmarks in ``benchmarks/`` check ``s_max`` and ``s_min`` to 1e-8 relative against ``"eigh"``):

* ``"eigh"``: every eigenpair by the dense symmetric eigensolver of NumPy/torch (``SOLVERS``).
* ``"tridiag"`` (NumPy only): one Householder tridiagonalization ``A = Q T Q^T`` (LAPACK ``sytrd``), ALL
  eigenvalues of ``T`` (``sterf``, O(n^2)), and only the two eigenvectors needed (``s_max`` and ``s_k``) by
  inverse iteration on ``T`` (``stein``) mapped back by the reflectors (LAPACK ``ormqr``). It skips ``eigh``'s eigenvector
  accumulation (about 2/3 of its cost); the whole spectrum is known, so the rank ``k`` is counted exactly as by
  ``"eigh"``.
* ``"subset"`` (NumPy only): SciPy ``eigh(subset_by_index=...)`` for the two largest and the two smallest
  eigenpairs (two calls).
* ``"lobpcg"`` / ``"arpack"`` (NumPy only): iterative extreme solvers (:mod:`kappalab.iterative`): LOBPCG, resp.
  ARPACK ``eigsh``, for the top pair; for the bottom pair the same solver applied with a Cholesky factor of
  ``A`` (LOBPCG preconditioned by ``A^-1``, ARPACK in shift-invert mode around 0).

Rank with extreme-only solvers (``"subset"``, ``"lobpcg"``, ``"arpack"``): they see only the ends of the
spectrum, so they cannot count ``k``. When the smallest eigenvalue is above the rank threshold, ``A`` has full
rank, ``k = n`` and ``s_min = lambda_1``, exactly. Otherwise (``A`` numerically singular), and whenever an
iterative solver's own residual check fails, ``psd_extremes`` falls back to ``"eigh"`` (counted in
``FALLBACKS``). For rank-deficient ``H = F^T F`` given by features ``F`` (``N < D``), :mod:`kappalab.gram`
counts ``k`` from the ``N x N`` spectrum of ``F F^T`` instead.

``"auto"`` (:func:`choose_solver`): ``"eigh"`` for torch tensors (any device) and for NumPy matrices with
``n < AUTO_TRIDIAG_MIN_N = 128`` (small inputs keep exactly the results of the dense route), ``"tridiag"`` for
larger NumPy matrices (faster than a full ``eigh``: its time against ``eigh`` at each benchmarked shape is in
docs/benchmarks.md, "What ``solver="auto"`` picks"). Warm-started iterative solvers need state across optimizer
steps: :class:`kappalab.tracker.ExtremeTracker`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Literal

import numpy as np

from ._backend import Array, eps, is_torch, namespace, scalar_like, to_scalar, to_scalars
from .errors import DegenerateSpectrumError, DegenerateSpectrumWarning
from .extremes import batched_eigh
from .iterative import Ends, default_tol_vec, solve_ends
from .kappa import AUTO_TRIDIAG_MIN_N, check_nonzero, check_psd, rank_rule, resolve_rtol
from .kappa import default_rtol  # noqa: F401  (the rank rule's default, also importable from here)
from .validation import finite, require_values, symmetric

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


def check_gap_rtol(gap_rtol: float | None) -> None:
    """``gap_rtol`` must be ``None`` or ``>= 0``: a negative value would silently switch the uniqueness test off."""
    if gap_rtol is not None and not gap_rtol >= 0:
        raise ValueError(f"gap_rtol must be None or a non-negative relative gap, got {gap_rtol!r}")


def default_gap_rtol(a: Array) -> float:
    """``sqrt(eps(dtype))``: the relative gap below which an extreme singular value is called degenerate."""
    return math.sqrt(eps(a))


def _pick(values: Array, index: Array) -> Array:
    """values[index] for a 0-d integer index array/tensor (the index stays on the device: no Python int)."""
    return values[index]


def _assemble(xp, vec_at, s_all_desc: Array, fro2: Array, p: int, rtol: float) -> Extremes:
    """Build :class:`Extremes` from a descending spectrum accessor (shared by the SVD and eigh routes)."""
    s_max = s_all_desc[0]
    threshold, _, k = rank_rule(s_all_desc, s_max, rtol)
    last = xp.clip(k - 1, 0, None)  # k = 0 (zero or negative input) is reported by the callers' checks
    padded = xp.concatenate([scalar_like(s_max, math.inf).reshape(1), s_all_desc])
    s_2 = s_all_desc[1] if s_all_desc.shape[0] > 1 else scalar_like(s_max, 0.0)
    u_max, v_max = vec_at(0)
    u_min, v_min = vec_at(last)
    return Extremes(
        s_max=s_max, u_max=u_max, v_max=v_max, s_2=s_2,
        s_min=_pick(s_all_desc, last), u_min=u_min, v_min=v_min, s_km1=_pick(padded, last),
        rank=k, fro2=fro2, p=p, threshold=threshold,
    )


def svd_extremes(S: Array, *, rtol: float | None = None, check: bool = True, xp: ModuleType | None = None,
                 checked: bool = False) -> Extremes:
    """Extreme singular triplets of a general real matrix ``S`` by a dense SVD. ``xp``, ``checked``: the caller's
    namespace, and that it has validated ``S`` already (as in :func:`psd_extremes`)."""
    xp = namespace(S) if xp is None else xp
    rtol = resolve_rtol(rtol, S)
    if not checked:
        require_values(S, "S")
    U, s, Vh = xp.linalg.svd(S, full_matrices=False)
    e = _assemble(xp, lambda i: (U[:, i], Vh[i, :]), s, (S * S).sum(), min(S.shape), rtol)
    if check:
        check_nonzero(e.s_max, "S")
    return e


def _eigh_dense(A: Array, xp: ModuleType) -> tuple[Array, Array]:
    """All eigenpairs of the symmetric ``A``, ascending: :func:`kappalab.extremes.batched_eigh` (NumPy's or torch's
    dense ``eigh`` on the CPU, bit for bit; the tensor-op Jacobi on CUDA, LAPACK's where it did not converge)."""
    lam, V, _ = batched_eigh(A, xp=xp)
    return lam, V


#: Registered solvers for symmetric PSD input: name -> function of ``(A, xp)`` returning ascending (eigenvalues,
#: eigenvectors).
SOLVERS: dict[str, Callable[[Array, ModuleType], tuple[Array, Array]]] = {"eigh": _eigh_dense}

#: An extreme solver gets ``(A, rtol)`` and returns ``(Extremes, lambda_lowest)``, or ``None`` when it cannot
#: decide the rank or did not converge (then :func:`psd_extremes` falls back to ``"eigh"``).
ExtremeSolver = Callable[[Array, float], "tuple[Extremes, Array] | None"]

#: Smallest ``n`` an extreme-only solver accepts (below it they defer to ``"eigh"``).
_MIN_N_EXTREME = 8

#: Number of times an extreme solver deferred to the dense ``"eigh"`` (rank deficiency or no convergence).
FALLBACKS: dict[str, int] = {}


def _tridiag_extremes(A: Array, rtol: float) -> tuple[Extremes, Array]:
    """One ``sytrd``, all eigenvalues of T, two eigenvectors of T mapped back (see the module docstring)."""
    from scipy.linalg import eigh_tridiagonal, lapack

    n = A.shape[0]
    sytrd, sytrd_lwork = lapack.get_lapack_funcs(("sytrd", "sytrd_lwork"), (A,))
    lwork, info = sytrd_lwork(n, lower=1)
    c, d, e_off, tau, info = sytrd(A, lower=1, lwork=int(lwork))
    if info != 0:
        raise np.linalg.LinAlgError(f"sytrd failed (info = {info})")
    lam = eigh_tridiagonal(d, e_off, eigvals_only=True)  # ascending, sterf
    lam_desc = lam[::-1].copy()
    k = int(rank_rule(lam_desc, lam_desc[0], rtol).rank)
    # stebz/stein pick eigenvectors by ascending index: n-1 is s_max, n-k is s_k.
    idx = sorted({n - 1, n - max(k, 1)})  # k = 0 (zero input) is reported by psd_extremes' checks
    Z = np.column_stack([eigh_tridiagonal(d, e_off, select="i", select_range=(i, i))[1][:, 0] for i in idx])
    V = _apply_householder(c, tau, Z)
    V /= np.linalg.norm(V, axis=0)
    col = {i: V[:, j] for j, i in enumerate(idx)}
    ex = _assemble(np, lambda i: (col[n - 1 - i], col[n - 1 - i]), lam_desc, (A * A).sum(), n, rtol)
    return ex, lam[0]


def _apply_householder(c: Array, tau: Array, Z: Array) -> Array:
    """``Q Z`` for ``Q = H_0 H_1 ... H_{n-2}`` stored by ``sytrd(lower=1)``: ``H_i = I - tau_i v v^T`` with
    ``v[:i+1] = 0``, ``v[i+1] = 1``, ``v[i+2:] = c[i+2:, i]``.

    These are the reflectors of a QR factorization of ``c[1:, :n-1]`` (reflector ``i`` starts at its row ``i``),
    so LAPACK ``ormqr`` applies them (blocked, one pass) to ``Z[1:]``; row 0 is untouched. Falls back to the
    reflector-by-reflector loop where SciPy has no ``ormqr`` for the dtype."""
    from scipy.linalg import lapack

    n = Z.shape[0]
    if n >= 2 and c.dtype.char in "fd":
        ormqr = lapack.get_lapack_funcs("ormqr", (c,))
        sub = np.asfortranarray(Z[1:], dtype=c.dtype)
        lwork = max(1, Z.shape[1]) * 64
        out, work, info = ormqr("L", "N", c[1:, : n - 1], tau, sub, lwork, overwrite_c=1)
        if info == 0:
            res = np.empty_like(Z, dtype=c.dtype)
            res[0] = Z[0]
            res[1:] = out
            return res
    return _apply_householder_loop(c, tau, Z)


def _apply_householder_loop(c: Array, tau: Array, Z: Array) -> Array:
    """Reference implementation of :func:`_apply_householder`, one reflector at a time."""
    Z = Z.copy()
    for i in range(len(tau) - 1, -1, -1):
        t = tau[i]
        if t == 0.0:
            continue
        v_tail = c[i + 2:, i]
        w = t * (Z[i + 1] + v_tail @ Z[i + 2:])
        Z[i + 1] -= w
        Z[i + 2:] -= v_tail[:, None] * w
    return Z


def extremes_from_pairs(top: tuple[Array, Array], bottom: tuple[Array, Array], A: Array, rtol: float,
                        fro2: Array | None = None) -> tuple[Extremes, Array] | None:
    """:class:`Extremes` of a symmetric PSD ``A`` from its two largest and two smallest eigenpairs.

    ``top = (values, vectors)`` holds ``lambda_n >= lambda_{n-1}`` (descending, vectors as columns),
    ``bottom`` holds ``lambda_1 <= lambda_2`` (ascending). Returns ``None`` when ``lambda_1`` is not above the
    rank threshold ``rtol * lambda_n``: then ``A`` is numerically singular and the rank cannot be counted from
    the ends of the spectrum. Otherwise ``k = n`` and ``s_min = lambda_1`` exactly.
    """
    xp = namespace(A)
    (t_val, t_vec), (b_val, b_vec) = top, bottom
    n = A.shape[0]
    s_max = t_val[0]
    threshold, kept, _ = rank_rule(b_val[0], s_max, rtol)
    if not to_scalar(kept):
        return None
    rank = xp.asarray(n) if xp.__name__ == "numpy" else xp.tensor(n, device=A.device)
    ex = Extremes(
        s_max=s_max, u_max=t_vec[:, 0], v_max=t_vec[:, 0], s_2=t_val[1],
        s_min=b_val[0], u_min=b_vec[:, 0], v_min=b_vec[:, 0], s_km1=b_val[1],
        rank=rank, fro2=_fro2(A) if fro2 is None else fro2, p=n, threshold=threshold,
    )
    return ex, b_val[0]


def _fro2(A: Array) -> Array:
    """``||A||_F^2``: for a contiguous NumPy array one BLAS dot over the data (no ``n x n`` temporary)."""
    if not is_torch(A) and A.flags.c_contiguous:
        return np.vdot(A, A)
    return (A * A).sum()


def _subset_extremes(A: Array, rtol: float) -> tuple[Extremes, Array] | None:
    """SciPy ``eigh(subset_by_index=...)``: two largest and two smallest eigenpairs (two calls)."""
    from scipy.linalg import eigh

    n = A.shape[0]
    lt, Vt = eigh(A, subset_by_index=[n - 2, n - 1], check_finite=False)
    lb, Vb = eigh(A, subset_by_index=[0, 1], check_finite=False)
    return extremes_from_pairs((lt[::-1], Vt[:, ::-1]), (lb, Vb), A, rtol)


def iterative_extremes(A: Array, rtol: float, prev: Ends | None, method: str, maxiter: int, tol_vec: float,
                       rng: np.random.Generator) -> tuple[tuple[Extremes, Array] | None, Ends | None, str | None]:
    """One iterative solve (:func:`kappalab.iterative.solve_ends`, warm-started from ``prev``) turned into
    :class:`Extremes`: ``(result or None, ends, reason for None)``."""
    ends, reason = solve_ends(A, prev, method, maxiter, tol_vec, rng)
    if reason is not None:
        return None, ends, reason
    found = extremes_from_pairs((ends.top_vals[:2], ends.top_vecs[:, :2]), (ends.bot_vals[:2], ends.bot_vecs[:, :2]),
                                A, rtol)
    if found is None:
        return None, ends, "smallest eigenvalue below the rank threshold: rank needs the dense route"
    return found, ends, None


def _iterative(method: str) -> ExtremeSolver:
    """A cold (randomly started, seed 0, 200 iterations) iterative solve; ``None`` defers to the dense route."""
    def solve(A: Array, rtol: float) -> tuple[Extremes, Array] | None:
        return iterative_extremes(A, rtol, None, method, 200, default_tol_vec(A), np.random.default_rng(0))[0]

    solve.__name__ = f"_{method}_extremes"
    return solve


#: Registered extreme solvers (NumPy input only): name -> :data:`ExtremeSolver`.
EXTREME_SOLVERS: dict[str, ExtremeSolver] = {
    "tridiag": _tridiag_extremes,
    "subset": _subset_extremes,
    "lobpcg": _iterative("lobpcg"),
    "arpack": _iterative("arpack"),
}


def choose_solver(A: Array) -> str:
    """The solver ``solver="auto"`` uses for ``A``: ``"eigh"`` for torch tensors and for NumPy matrices with
    ``n < AUTO_TRIDIAG_MIN_N``, ``"tridiag"`` otherwise (see the module docstring and ``docs/benchmarks.md``)."""
    if is_torch(A) or A.shape[0] < AUTO_TRIDIAG_MIN_N:
        return "eigh"
    return "tridiag"


def psd_extremes(
    A: Array, *, rtol: float | None = None, solver: str = "auto", check: bool = True, name: str = "A", scale: object = 0,
    xp: ModuleType | None = None, checked: bool = False
) -> Extremes:
    """Extreme eigenpairs of a symmetric positive semidefinite ``A`` (its singular triplets, with u = v).

    With ``check=True`` the input must be finite, symmetric within
    :func:`~kappalab.validation.symmetric_tolerance`, non-zero, and PSD: an eigenvalue below
    ``-rtol * lambda_max`` is an error (rounding makes exact zeros slightly negative; anything below the rank
    threshold counts as zero, never as a negative singular value). ``solver`` is ``"auto"`` or a name in
    ``SOLVERS`` or ``EXTREME_SOLVERS`` (the latter for NumPy input; see the module docstring). ``scale``: ``A`` is
    ``2^-scale`` times the caller's matrix (error messages show the caller's eigenvalues; an int, or a 0-d tensor
    from :func:`~kappalab._backend.unit_scaled`). ``xp``: the caller's
    namespace (resolved here when ``None``); ``checked=True``: the caller has run the input checks (meta, and with
    ``check`` finiteness and symmetry) on the matrix ``A`` stands for, so they are not run again.
    """
    xp = namespace(A) if xp is None else xp
    if not checked:
        require_values(A, name)
        if check:
            finite(A, name, xp)
            symmetric(A, name, xp)
    rtol = resolve_rtol(rtol, A)
    name_solver = choose_solver(A) if solver == "auto" else solver
    if name_solver not in SOLVERS and name_solver not in EXTREME_SOLVERS:
        raise ValueError(
            f"solver must be 'auto' or one of {sorted(SOLVERS) + sorted(EXTREME_SOLVERS)}, got {solver!r}"
        )
    found = None
    if name_solver in EXTREME_SOLVERS:
        if is_torch(A):
            raise ValueError(f"solver {name_solver!r} takes NumPy arrays; use 'eigh' (or 'auto') for torch tensors")
        found = EXTREME_SOLVERS[name_solver](A, rtol) if A.shape[0] >= _MIN_N_EXTREME else None
        if found is None:
            FALLBACKS[name_solver] = FALLBACKS.get(name_solver, 0) + 1
    if found is None:
        lam, V = SOLVERS[name_solver if name_solver in SOLVERS else "eigh"](A, xp)
        lam_desc = xp.flip(lam, (0,))
        n = A.shape[0]
        e = _assemble(xp, lambda i: (V[:, n - 1 - i], V[:, n - 1 - i]), lam_desc, (A * A).sum(), n, rtol)
        lam_lowest = lam[0]
    else:
        e, lam_lowest = found
    if check:
        lowest, top, scale = to_scalars(lam_lowest, e.s_max, scale)  # both checks (and the scale) in one host read
        check_psd(lowest, top, rtol, name, int(scale))
        check_nonzero(top, name)
    return e


def require_unique(
    e: Extremes, which: Literal["max", "min"], policy: DegeneratePolicy, gap_rtol: float | None, name: str
) -> None:
    """Apply the degeneracy policy to ``s_max`` (``which="max"``) or ``s_min`` (``which="min"``)."""
    check_gap_rtol(gap_rtol)
    if policy == "ignore":
        return
    if policy not in ("raise", "warn"):
        raise ValueError(f"on_degenerate must be 'raise', 'warn' or 'ignore', got {policy!r}")
    gap_rtol = default_gap_rtol(e.s_max) if gap_rtol is None else gap_rtol
    gap, s_max = to_scalars(e.gap_top if which == "max" else e.gap_bottom, e.s_max)
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
