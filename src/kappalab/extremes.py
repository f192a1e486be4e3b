"""Extreme eigenpairs of a stack of small symmetric PSD matrices, from tensor operations only.

:func:`batched_extremes` takes a stack ``S`` (``... x n x n``, NumPy or torch on any device) and returns, per matrix,
the largest eigenvalue, the smallest eigenvalue that the rank rule of :mod:`kappalab.kappa` keeps (``> rtol *
lambda_max``, default ``rtol = n * eps``), a unit eigenvector of each, and a ``converged`` flag. :func:`batched_eigh`
gives the whole ascending spectrum (and the eigenvectors) with the same flag. Two methods:

``"lapack"``
    NumPy's or torch's ``eigh`` (``eigvalsh`` when no vectors are asked for): the values the rest of kappalab has
    always used, bit for bit. On CUDA torch's solvers run one small matrix at a time and read a status back to the
    host (docs/gpu.md: 98% of a batched Table 2 step); ``converged`` is all true (LAPACK raises instead).
``"tensor"``
    Cyclic Jacobi in parallel (round-robin, Brent-Luk) order: each of a sweep's ``n' - 1`` rounds (``n'``: ``n``
    rounded up to even; an odd ``n`` is padded with a zero row and column, which no rotation ever mixes in) pairs
    the ``n'`` indices into ``n' / 2`` disjoint pairs, and all of them, in every matrix of the stack, are rotated at
    once: the round's rotations form one orthogonal ``J`` (built by a scatter from the pivots' ``c, s``) and the
    round is ``A <- J^T A J``, ``V <- V J``: batched matrix products, with no solver call, no host read (no
    ``.item()``, ``.cpu()``, ``.tolist()``) and no Python branch on a value. After the sweeps, two Newton steps
    (:func:`_decouple`) remove what couples well-separated eigenvalues: next to a multiple eigenvalue (the null
    space of a rank-deficient Gram matrix) parallel-ordered Jacobi converges only linearly (measured: the kept
    rows' residual falls ~2x per sweep from ~1e-9 on 64 x 64 Grams of 16 rows), and one such step squares the
    coupling. Each matrix is first scaled by a power of two to a largest entry in ``[1/4, 1)`` (exact; computed on
    the device with ``frexp``), so stacks from ``2^-500`` to
    ``2^500`` neither under- nor overflow, and the values are scaled back exactly.

    Why Jacobi rather than Lanczos or LOBPCG: the matrices are small (Table 2: 64 x 64 Gram matrices of a minibatch),
    so the whole spectrum costs little more than its ends; Jacobi's work is the same fixed program for every matrix
    (Krylov methods need a data-dependent number of steps, a restart or a convergence test on the host, and a
    final small dense eigensolver); it converges quadratically and for clustered or repeated extremes too (a
    Krylov method slows down with the gap); and on a positive semidefinite matrix it computes small eigenvalues
    to high relative accuracy (Demmel and Veselic, 1992), which the rank rule's smallest kept value needs.

    Sweep count: after the linear first phase the off-diagonal norm squares each sweep (cyclic Jacobi converges
    quadratically), so ``ceil(log2(log2(1/eps)))`` sweeps (6 in float64) take it from half of ``||S||`` to rounding
    level; the first phase takes about ``log2(n)`` sweeps. :func:`sweep_count` is their sum: 12 for n = 64, 13 for
    n = 100 (measured: Gram stacks of n = 7..100 from N = n/6..3n rows converge, flag and all, within 9 sweeps).
    ``converged`` requires every eigenpair above ``n * eps * lambda_max`` to have the residual ``||A e_i - d_i e_i||
    <= OFF_TOL * n * eps * ||A||_F`` at the end (its eigenvalue is then within that of one of S's, its vector within
    that over the gap); a matrix that fails has its values and vectors set to NaN, so it is never silently used (a
    training loss built from it is not finite).

``"auto"`` (the default) is ``"lapack"`` on the CPU (faster there, and the recorded numbers stay bit for bit) and
``"tensor"`` on CUDA; :func:`forced_method` makes ``"auto"`` mean another method inside a ``with`` block (tests run
whole trainings with the tensor path on the CPU that way).

Torch values are differentiable: the tensor path's eigenvalues carry the gradient ``v v^T`` of each returned
eigenvector ``v`` (the derivative of a simple eigenvalue, and of ``eigvalsh``'s backward for any), attached to the
Jacobi values without changing them.
"""

from __future__ import annotations

import contextlib
import math
from functools import lru_cache
from types import ModuleType
from typing import Iterator, Literal, NamedTuple

import numpy as np

from ._backend import Array, eps, is_torch, namespace
from .kappa import rank_rule, resolve_rtol

Method = Literal["auto", "lapack", "tensor"]
METHODS: tuple[str, ...] = ("auto", "lapack", "tensor")

#: ``converged`` when every kept pair's residual ``||A e_i - d_i e_i|| <= OFF_TOL * n * eps * ||A||_F`` at the end
#: (measured on converged Gram stacks of n = 64, 100: below 0.01 of it).
OFF_TOL = 1.0

#: :func:`_decouple`'s steps after the sweeps, and the largest ``|a_ij| / |d_j - d_i|`` a step treats as a coupling
DECOUPLE_STEPS, DECOUPLE_RATIO = 2, 1e-3

_forced: list[str] = []


class BatchedExtremes(NamedTuple):
    """:func:`batched_extremes`' result; every field has the stack's leading shape (vectors: plus ``n``), on the
    input's device."""

    largest: Array  #: lambda_max
    smallest: Array  #: the smallest eigenvalue the rank rule keeps (NaN when none is: the zero matrix)
    largest_vector: Array  #: a unit eigenvector of ``largest`` (sign arbitrary; None without vectors)
    smallest_vector: Array  #: a unit eigenvector of ``smallest`` (None without vectors)
    converged: Array  #: boolean; False: the tensor path did not converge and the fields above are NaN


def sweep_count(n: int, dtype_eps: float) -> int:
    """The tensor path's sweeps for ``n x n`` matrices: ``ceil(log2 n)`` for the linear phase plus
    ``ceil(log2(log2(1/eps)))`` quadratic ones (module docstring): 12 for n = 64, 13 for n = 100 in float64."""
    return math.ceil(math.log2(max(n, 2))) + math.ceil(math.log2(-math.log2(dtype_eps)))


@contextlib.contextmanager
def forced_method(method: str) -> Iterator[None]:
    """Inside the block ``method="auto"`` means ``method`` (``"lapack"`` or ``"tensor"``) on every device."""
    if method not in ("lapack", "tensor"):
        raise ValueError(f"method must be 'lapack' or 'tensor', got {method!r}")
    _forced.append(method)
    try:
        yield
    finally:
        _forced.pop()


def resolve_method(S: Array, method: Method) -> str:
    """``"lapack"`` or ``"tensor"`` for ``S`` (see the module docstring)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method != "auto":
        return method
    return auto_method(str(S.device) if is_torch(S) else "cpu")


def auto_method(device: str) -> str:
    """What ``method="auto"`` runs on ``device`` (a torch device name; NumPy arrays are ``"cpu"``): the method
    :func:`forced_method` set, else ``"tensor"`` on CUDA and ``"lapack"`` elsewhere."""
    if _forced:
        return _forced[-1]
    return "tensor" if device.split(":")[0] == "cuda" else "lapack"


def eigensolver_option(device: str) -> dict[str, str]:
    """The eigensolver's part of a run's identity options: none where ``"auto"`` runs LAPACK (the reference: the
    keys written before the tensor path existed), ``{"eigensolver": "tensor"}`` where it runs the tensor path (CUDA,
    or anywhere under :func:`forced_method`): the two agree to ~1e-14 per eigenpair, not to the bit, so their runs
    are different runs."""
    method = auto_method(device)
    return {} if method == "lapack" else {"eigensolver": method}


def batched_eigh(S: Array, *, method: Method = "auto", vectors: bool = True,
                 sweeps: int | None = None, xp: ModuleType | None = None) -> tuple[Array, Array | None, Array]:
    """``(values, V, converged)``: each matrix's eigenvalues ascending, its eigenvectors as the columns of ``V``
    (None when ``vectors`` is false; LAPACK then runs ``eigvalsh``) and the boolean flag (module docstring).
    ``sweeps`` overrides :func:`sweep_count` (tensor path); ``xp``: S's namespace when the caller has it."""
    S = _check_stack(S)
    if resolve_method(S, method) == "lapack":
        xp = namespace(S) if xp is None else xp
        if vectors:
            lam, V = xp.linalg.eigh(S)
        else:
            lam, V = xp.linalg.eigvalsh(S), None
        return lam, V, _full_like_bool(S, True)
    return _jacobi_eigh(S, sweeps, vectors)


def batched_extremes(S: object, *, rtol: float | None = None, method: Method = "auto", vectors: bool = True,
                     sweeps: int | None = None) -> BatchedExtremes:
    """Largest and smallest kept eigenvalue (rank rule of :mod:`kappalab.kappa`: ``> rtol * lambda_max``, ``rtol``
    default ``n * eps``) of each symmetric PSD matrix of the stack ``S`` (``... x n x n``), with eigenvectors and a
    ``converged`` flag (callers must check it; unconverged matrices give NaN). ``method``: ``"auto"``, ``"lapack"``
    or ``"tensor"`` (module docstring); ``sweeps`` caps the tensor path's sweeps (default :func:`sweep_count`)."""
    S = _check_stack(S)
    rtol = resolve_rtol(rtol, S, dim=S.shape[-1])
    lam, V, converged = batched_eigh(S, method=method, vectors=vectors, sweeps=sweeps)
    largest = lam[..., -1]
    keep = rank_rule(_detach(lam), _detach(largest)[..., None], rtol).kept
    xp = namespace(lam)
    first = xp.argmax(keep.astype(np.int8) if not is_torch(keep) else keep.to(xp.int8), -1)[..., None]
    smallest = _take(lam, first)[..., 0]
    smallest = xp.where(keep.any(-1), smallest, xp.full_like(smallest, math.nan) if is_torch(lam)
                        else np.full_like(smallest, np.nan))
    if V is None:
        return BatchedExtremes(largest, smallest, None, None, converged)
    small_vec = _take(V, first[..., None, :])[..., 0]
    return BatchedExtremes(largest, smallest, V[..., -1], small_vec, converged)


# ---- the tensor path ----------------------------------------------------------------------------------------------

def _jacobi_eigh(S: Array, sweeps: int | None, vectors: bool) -> tuple[Array, Array | None, Array]:
    xp = namespace(S)
    n = S.shape[-1]
    sweeps = sweep_count(n, eps(S)) if sweeps is None else sweeps
    if not (isinstance(sweeps, int) and sweeps >= 0):
        raise ValueError(f"sweeps must be None or a non-negative int, got {sweeps!r}")
    exponent = _frexp_exponent(xp, xp.amax(abs(_detach(S)), (-2, -1)))  # max|S| * 2^-e in [1/4, 1)
    exponent = exponent + exponent % 2
    A = _ldexp(xp, _detach(S), -exponent[..., None, None])
    m = n + n % 2
    if m != n:  # an odd n: a zero row and column that no rotation mixes in (its rotations have s = 0 exactly)
        A = _pad(xp, A, m)
    V = _eye_like(xp, A, m)
    P, Q = _pairs(xp, A, m)
    for _ in range(sweeps):
        for p, q in zip(P, Q):
            J = _rotation(xp, A, p, q)
            A = J.swapaxes(-1, -2) @ A @ J
            V = V @ J
    A, V = A[..., :n, :n], V[..., :n, :n]
    for _ in range(DECOUPLE_STEPS):
        A, V = _decouple(xp, A, V)
    d = _diagonal(xp, A)
    off_diagonal = A * (1 - _eye_like(xp, A, n))
    residual = xp.sqrt((off_diagonal * off_diagonal).sum(-1))  # ||A e_i - d_i e_i||, row by row
    fro = xp.sqrt((A * A).sum((-2, -1)))
    kept = d > n * eps(S) * xp.amax(d, -1)[..., None]
    converged = (xp.where(kept, residual, 0.0) <= OFF_TOL * n * eps(S) * fro[..., None]).all(-1)
    order = xp.argsort(d, -1) if not is_torch(d) else d.argsort(dim=-1)
    values = _ldexp(xp, _take(d, order), exponent[..., None])
    V = _take(V, order[..., None, :])
    if is_torch(S) and S.requires_grad:  # d lambda = v^T dS v, attached without changing the value
        rq = (V * (S @ V)).sum(-2)
        values = values + (rq - rq.detach())
    nan = math.nan
    values = xp.where(converged[..., None], values, nan)
    V = xp.where(converged[..., None, None], V, nan)
    return values, V if vectors else None, converged


def _decouple(xp, A: Array, V: Array) -> tuple[Array, Array]:
    """One Newton step that decouples the separated eigenvalues: ``A <- Q^T A Q``, ``V <- V Q`` with ``Q`` the
    orthogonalized ``I + K``, ``K_ij = a_ij / (d_j - d_i)`` where ``|a_ij| <= DECOUPLE_RATIO |d_j - d_i|`` and
    ``|d_j - d_i| > sqrt(eps) ||A||_F`` (else 0: within a cluster, left to the sweeps). It takes every such coupling
    from ``delta`` to ``O(delta^2 / gap)`` at once, which parallel Jacobi does only linearly next to a multiple
    eigenvalue (a rank-deficient PSD matrix's null space; module docstring)."""
    n = A.shape[-1]
    eye = _eye_like(xp, A, n)
    d = _diagonal(xp, A)
    diff = d[..., None, :] - d[..., :, None]  # [i, j] = d_j - d_i
    gap_floor = math.sqrt(eps(A)) * xp.sqrt((A * A).sum((-2, -1)))[..., None, None]
    ok = (abs(A) <= DECOUPLE_RATIO * abs(diff)) & (abs(diff) > gap_floor)
    K = xp.where(ok, A / xp.where(ok, diff, 1.0), 0.0)
    Q = eye + K
    Q = Q @ (1.5 * eye - 0.5 * (Q.swapaxes(-1, -2) @ Q))  # one Newton-Schulz step: orthogonal to O(|K|^4)
    A = Q.swapaxes(-1, -2) @ A @ Q
    return 0.5 * (A + A.swapaxes(-1, -2)), V @ Q


def _rotation(xp, A: Array, p: Array, q: Array) -> Array:
    """The orthogonal ``J`` whose rotations ``[[c_k, s_k], [-s_k, c_k]]`` in the planes ``(p_k, q_k)`` (disjoint)
    zero every ``A[p_k, q_k]`` of ``J^T A J`` (Golub and Van Loan's sym.schur2: ``t = sign(tau) / (|tau| +
    hypot(1, tau))``, ``tau = (a_qq - a_pp) / (2 a_pq)``, ``c = 1 / sqrt(1 + t^2)``, ``s = t c``; ``t = 0`` where
    ``a_pq = 0``, so an untouched plane gets the identity exactly)."""
    app, aqq, apq = A[..., p, p], A[..., q, q], A[..., p, q]
    zero = apq == 0
    tau = (aqq - app) / (2 * xp.where(zero, 1.0, apq))
    one = xp.ones_like(tau)
    t = xp.where(zero, 0.0, xp.where(tau >= 0, one, -one) / (abs(tau) + xp.hypot(one, tau)))
    c = 1 / xp.sqrt(1 + t * t)
    s = t * c
    J = xp.zeros_like(A)
    cat = (lambda *x: xp.cat(x, -1)) if is_torch(A) else (lambda *x: np.concatenate(x, -1))
    J[..., cat(p, q, p, q), cat(p, q, q, p)] = cat(c, c, s, -s)
    return J


@lru_cache(maxsize=None)
def _round_robin(m: int) -> tuple[np.ndarray, np.ndarray]:
    """The round-robin tournament on ``m`` (even) indices: ``(P, Q)``, each ``(m - 1) x (m / 2)``, row r holding
    round r's disjoint pairs ``(P[r, k], Q[r, k])``; every pair of indices meets once (index 0 stays, the others
    move one place a round)."""
    players = list(range(m))
    rounds = []
    for _ in range(m - 1):
        rounds.append((np.array(players[:m // 2]), np.array(players[::-1][:m // 2])))
        players = [players[0], players[-1]] + players[1:-1]
    return np.stack([p for p, _ in rounds]), np.stack([q for _, q in rounds])


# ---- NumPy / torch shims --------------------------------------------------------------------------------------------

def _check_stack(S: object) -> Array:
    if not (is_torch(S) or isinstance(S, np.ndarray)):
        raise TypeError(f"S must be a NumPy array or a torch tensor, got {type(S).__name__}")
    if S.ndim < 2 or S.shape[-1] != S.shape[-2] or S.shape[-1] == 0:
        raise ValueError(f"S must be a stack of square matrices (..., n, n) with n >= 1, got shape {tuple(S.shape)}")
    if not (S.dtype in (np.float32, np.float64) if not is_torch(S) else S.is_floating_point()):
        raise TypeError(f"S must be float32 or float64, got {S.dtype}")
    return S


def _detach(x: Array) -> Array:
    return x.detach() if is_torch(x) else x


def _full_like_bool(S: Array, value: bool) -> Array:
    if is_torch(S):
        import torch

        return torch.full(S.shape[:-2], value, dtype=torch.bool, device=S.device)
    return np.full(S.shape[:-2], value)


def _diagonal(xp, A: Array, offset: int = 0) -> Array:
    if is_torch(A):
        return xp.diagonal(A, offset, -2, -1)
    return np.diagonal(A, offset, -2, -1)


def _take(x: Array, idx: Array) -> Array:
    """``x`` at ``idx`` along the last axis, ``idx`` broadcast over the other axes."""
    if is_torch(x):
        return x.gather(-1, idx.expand(*x.shape[:-1], idx.shape[-1]))
    return np.take_along_axis(x, np.broadcast_to(idx, (*x.shape[:-1], idx.shape[-1])), -1)


def _pairs(xp, A: Array, m: int) -> tuple[Array, Array]:
    """:func:`_round_robin`'s index arrays, as tensors on ``A``'s device (copied there once per device: a copy from
    the host synchronizes a CUDA stream)."""
    return _round_robin(m) if not is_torch(A) else _pairs_on(m, str(A.device))


@lru_cache(maxsize=None)
def _pairs_on(m: int, device: str) -> tuple[Array, Array]:
    import torch

    return tuple(torch.as_tensor(x, device=device) for x in _round_robin(m))


def _eye_like(xp, A: Array, m: int) -> Array:
    if is_torch(A):
        return xp.eye(m, dtype=A.dtype, device=A.device).expand(A.shape).clone()
    return np.broadcast_to(np.eye(m, dtype=A.dtype), A.shape).copy()


def _pad(xp, A: Array, m: int) -> Array:
    n = A.shape[-1]
    if is_torch(A):
        return xp.nn.functional.pad(A, (0, m - n, 0, m - n))
    return np.pad(A, [(0, 0)] * (A.ndim - 2) + [(0, m - n), (0, m - n)])


def _frexp_exponent(xp, x: Array) -> Array:
    return xp.frexp(x)[1].to(xp.int64) if is_torch(x) else np.frexp(x)[1].astype(np.int64)


def _ldexp(xp, x: Array, e: Array) -> Array:
    """``x * 2^e`` exactly (in two halves, so that ``|e|`` up to twice the exponent range works)."""
    half = e // 2
    if is_torch(x):
        two = xp.full((), 2.0, dtype=x.dtype, device=x.device)
        return x * two ** half.to(x.dtype) * two ** (e - half).to(x.dtype)
    return np.ldexp(np.ldexp(x, half), e - half)
