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
    ``.item()``, ``.cpu()``, ``.tolist()``) and no Python branch on a value inside a sweep. After the sweeps, two
    Newton steps (:func:`_decouple`) remove what couples well-separated eigenvalues: next to a multiple eigenvalue
    (the null space of a rank-deficient Gram matrix) parallel-ordered Jacobi converges only linearly (measured: the
    kept rows' residual falls ~2x per sweep from ~1e-9 on 64 x 64 Grams of 16 rows), and one such step squares the
    coupling. Each matrix is first scaled by a power of two to a largest entry in ``[1/4, 1)`` (exact; computed on
    the device with ``frexp``), so stacks from ``2^-500`` to ``2^500`` neither under- nor overflow, and the values
    are scaled back exactly.

    Why Jacobi rather than Lanczos or LOBPCG: the matrices are small (Table 2: 64 x 64 Gram matrices of a minibatch),
    so the whole spectrum costs little more than its ends; a Jacobi sweep is the same fixed program for every
    matrix (Krylov methods need a data-dependent number of steps per matrix, restarts, and a final small dense
    eigensolver); it converges quadratically and for clustered or repeated extremes too (a
    Krylov method slows down with the gap); and on a positive semidefinite matrix it computes small eigenvalues
    to high relative accuracy (Demmel and Veselic, 1992), which the rank rule's smallest kept value needs.

    Sweeps and the convergence test: a convergence test every sweep after the first ``sweep_count`` sweeps, with a
    cap of ``SWEEP_CAP * sweep_count`` (:func:`sweep_plan`). No sweep count from a bound holds for every spectrum:
    after the linear first phase (about ``log2 n`` sweeps) the off-diagonal norm squares each sweep only once it is
    below the gaps, and the gaps of a graded spectrum are small in absolute terms, so the sweeps needed grow with
    kappa (benchmarks/test_bench_extremes.py -k graded, docs/benchmarks/extremes_graded_cpu.json: n = 64, first
    test after 12: kappa 1e2 and 1e6 12 sweeps, 1e9 15, 1e12 and 1e14 17; n = 100: kappa 1e9 16). The test (after
    :func:`_decouple`'s steps on a copy; the sweeps go on from the state before them) requires every eigenpair
    above ``n * eps * lambda_max`` to have the residual ``||A e_i - d_i e_i|| <= OFF_TOL * n * eps * ||A||_F`` (its
    eigenvalue is then within that of one of S's, its vector within that over the gap); the matrices that fail it
    get one more sweep (only they: the stack is indexed down to them) and the test again, until none fails or the
    cap is reached. A matrix still failing at the cap is recomputed by LAPACK from the original ``S`` (its values,
    vectors and gradient are then LAPACK's: never NaN), its ``converged`` flag is False, and it is counted by every
    active :func:`count_fallbacks` (a run's ``eigensolver_fallbacks``).

    Host reads: each test reads the stack's flags back once (:func:`read_unconverged`, the only read): one read
    per call when every matrix converges within ``sweep_count`` sweeps (well-conditioned Gram stacks), at most
    ``1 + (SWEEP_CAP - 1) * sweep_count`` (13 at n = 64) otherwise. On CUDA a read waits for the stream; a sweep
    is ``3 (n - 1)`` batched products of the stack, a test ~10 (the decoupling), so a test per sweep costs less
    than sweeps run past convergence would.

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
from dataclasses import dataclass, field
from types import ModuleType
from typing import Iterator, Literal, NamedTuple

import numpy as np

from ._backend import Array, eps, is_torch, namespace
from . import _extremes_ops as ops
from .kappa import rank_rule, resolve_rtol

Method = Literal["auto", "lapack", "tensor"]
METHODS: tuple[str, ...] = ("auto", "lapack", "tensor")

#: ``converged`` when every kept pair's residual ``||A e_i - d_i e_i|| <= OFF_TOL * n * eps * ||A||_F`` at the end
#: (measured on converged Gram stacks of n = 64, 100: below 0.01 of it).
OFF_TOL = 1.0

#: :func:`_decouple`'s steps after the sweeps, and the largest ``|a_ij| / |d_j - d_i|`` a step treats as a coupling
DECOUPLE_STEPS, DECOUPLE_RATIO = 2, 1e-3

#: the most sweeps a matrix gets, in units of :func:`sweep_count` (module docstring)
SWEEP_CAP = 2

_forced: list[tuple[str, int | None]] = []
_counters: list["FallbackCount"] = []


class BatchedExtremes(NamedTuple):
    """:func:`batched_extremes`' result; every field has the stack's leading shape (vectors: plus ``n``), on the
    input's device."""

    largest: Array  #: lambda_max
    smallest: Array  #: the smallest eigenvalue the rank rule keeps (NaN when none is: the zero matrix)
    largest_vector: Array  #: a unit eigenvector of ``largest`` (sign arbitrary; None without vectors)
    smallest_vector: Array  #: a unit eigenvector of ``smallest`` (None without vectors)
    converged: Array  #: boolean; False: the tensor path did not converge and the fields above are LAPACK's


def sweep_count(n: int, dtype_eps: float) -> int:
    """The tensor path's sweeps before its first convergence test for ``n x n`` matrices: ``ceil(log2 n)`` for the
    linear phase plus ``ceil(log2(log2(1/eps)))`` quadratic ones: 12 for n = 64, 13 for n = 100 in float64 (enough
    for well-conditioned Gram stacks; ill-conditioned ones take more: module docstring)."""
    return math.ceil(math.log2(max(n, 2))) + math.ceil(math.log2(-math.log2(dtype_eps)))


@dataclass
class FallbackCount:
    """The matrices the tensor path gave up on while :func:`count_fallbacks` is active (each recomputed by LAPACK):
    in all, and by run: ``owner`` when set (:meth:`owned_by`), else the matrix's index along its stack's leading
    axis (the stacked run, in the batched engine's stacks; a single matrix has none and counts in ``total`` only)."""

    total: int = 0
    by_leading: dict[int, int] = field(default_factory=dict)
    owner: int | None = None

    def add(self, flat: list[int], lead: tuple[int, ...]) -> None:
        self.total += len(flat)
        if self.owner is None and not lead:
            return
        per = math.prod(lead[1:])
        for i in flat:
            key = self.owner if self.owner is not None else i // per
            self.by_leading[key] = self.by_leading.get(key, 0) + 1

    @contextlib.contextmanager
    def owned_by(self, run: int | None) -> Iterator[None]:
        """Inside the block, count every fallback for ``run`` (None: by leading index again)."""
        previous, self.owner = self.owner, run
        try:
            yield
        finally:
            self.owner = previous

    def of(self, leading: int | None) -> int:
        """The count of leading index ``leading`` (None: all)."""
        return self.total if leading is None else self.by_leading.get(leading, 0)


@contextlib.contextmanager
def count_fallbacks() -> Iterator[FallbackCount]:
    """Count the matrices the tensor path recomputes by LAPACK inside the block (nested blocks all count)."""
    counter = FallbackCount()
    _counters.append(counter)
    try:
        yield counter
    finally:
        _counters.remove(counter)


@contextlib.contextmanager
def forced_method(method: str, sweeps: int | None = None) -> Iterator[None]:
    """Inside the block ``method="auto"`` means ``method`` (``"lapack"`` or ``"tensor"``) on every device;
    ``sweeps`` caps the tensor path's sweeps where a call gives none (0: no matrix converges unless diagonal, so
    every other one is LAPACK's: how the tests force the fallback inside a whole run)."""
    if method not in ("lapack", "tensor"):
        raise ValueError(f"method must be 'lapack' or 'tensor', got {method!r}")
    _forced.append((method, sweeps))
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
        return _forced[-1][0]
    return "tensor" if device.split(":")[0] == "cuda" else "lapack"


def batched_eigh(S: Array, *, method: Method = "auto", vectors: bool = True,
                 sweeps: int | None = None, xp: ModuleType | None = None) -> tuple[Array, Array | None, Array]:
    """``(values, V, converged)``: each matrix's eigenvalues ascending, its eigenvectors as the columns of ``V``
    (None when ``vectors`` is false; LAPACK then runs ``eigvalsh``) and the boolean flag (module docstring).
    ``sweeps`` caps the tensor path's sweeps (:func:`sweep_plan`); ``xp``: S's namespace when the caller has it."""
    S = ops.check_stack(S)
    if resolve_method(S, method) == "lapack":
        xp = namespace(S) if xp is None else xp
        if vectors:
            lam, V = xp.linalg.eigh(S)
        else:
            lam, V = xp.linalg.eigvalsh(S), None
        return lam, V, ops.full_like_bool(S, True)
    return _jacobi_eigh(S, sweeps if sweeps is not None or not _forced else _forced[-1][1], vectors)


def batched_extremes(S: object, *, rtol: float | None = None, method: Method = "auto", vectors: bool = True,
                     sweeps: int | None = None) -> BatchedExtremes:
    """Largest and smallest kept eigenvalue (rank rule of :mod:`kappalab.kappa`: ``> rtol * lambda_max``, ``rtol``
    default ``n * eps``) of each symmetric PSD matrix of the stack ``S`` (``... x n x n``), with eigenvectors and a
    ``converged`` flag (False: the tensor path gave up and the values are LAPACK's). ``method``: ``"auto"``,
    ``"lapack"`` or ``"tensor"`` (module docstring); ``sweeps`` caps the tensor path's sweeps (default
    :func:`sweep_plan`'s cap)."""
    S = ops.check_stack(S)
    rtol = resolve_rtol(rtol, S, dim=S.shape[-1])
    lam, V, converged = batched_eigh(S, method=method, vectors=vectors, sweeps=sweeps)
    largest = lam[..., -1]
    keep = rank_rule(ops.detach(lam), ops.detach(largest)[..., None], rtol).kept
    xp = namespace(lam)
    first = xp.argmax(keep.astype(np.int8) if not is_torch(keep) else keep.to(xp.int8), -1)[..., None]
    smallest = ops.take(lam, first)[..., 0]
    smallest = xp.where(keep.any(-1), smallest, xp.full_like(smallest, math.nan) if is_torch(lam)
                        else np.full_like(smallest, np.nan))
    if V is None:
        return BatchedExtremes(largest, smallest, None, None, converged)
    small_vec = ops.take(V, first[..., None, :])[..., 0]
    return BatchedExtremes(largest, smallest, V[..., -1], small_vec, converged)


# ---- the tensor path ----------------------------------------------------------------------------------------------

def _jacobi_eigh(S: Array, sweeps: int | None, vectors: bool) -> tuple[Array, Array | None, Array]:
    xp = namespace(S)
    n, lead = S.shape[-1], tuple(S.shape[:-2])
    first, cap = sweep_plan(n, eps(S), sweeps)
    flat = ops.detach(S).reshape(-1, n, n)
    exponent = ops.frexp_exponent(xp, xp.amax(abs(flat), (-2, -1)))  # max|S| * 2^-e in [1/4, 1)
    exponent = exponent + exponent % 2
    A = ops.ldexp(xp, flat, -exponent[..., None, None])
    m = n + n % 2
    if m != n:  # an odd n: a zero row and column that no rotation mixes in (its rotations have s = 0 exactly)
        A = ops.pad(xp, A, m)
    V = ops.eye_like(xp, A, m)
    P, Q = ops.pairs(xp, A, m)
    A, V = _sweeps(xp, A, V, P, Q, first)
    d, W, converged = _finish(xp, A, V, n)
    done, bad = first, read_unconverged(converged)
    while bad and done < cap:  # one more sweep of the unconverged matrices only, then their test again
        idx = ops.index(bad, A)
        A[idx], V[idx] = _sweeps(xp, A[idx], V[idx], P, Q, 1)
        d[idx], W[idx], converged[idx] = _finish(xp, A[idx], V[idx], n)
        done, bad = done + 1, read_unconverged(converged)
    order = xp.argsort(d, -1) if not is_torch(d) else d.argsort(dim=-1)
    values = ops.ldexp(xp, ops.take(d, order), exponent[..., None])
    W = ops.take(W, order[..., None, :])
    if is_torch(S) and S.requires_grad:  # d lambda = v^T dS v, attached without changing the value
        rq = (W * (S.reshape(-1, n, n) @ W)).sum(-2)
        values = values + (rq - rq.detach())
    if bad:  # given up after the cap: LAPACK's eigenpairs of the original matrices, counted
        values, W = _lapack_rows(xp, S.reshape(-1, n, n), values, W, bad, vectors)
        for counter in _counters:
            counter.add(bad, lead)
    return values.reshape(*lead, n), W.reshape(*lead, n, n) if vectors else None, converged.reshape(lead)


def sweep_plan(n: int, dtype_eps: float, sweeps: int | None) -> tuple[int, int]:
    """``(first, cap)``: the sweeps before the first convergence test and the most any matrix gets (module
    docstring): ``(sweep_count, 2 * sweep_count)`` by default; a given ``sweeps`` is the cap (the first test after
    ``min(sweep_count, sweeps)``)."""
    if sweeps is not None and not (isinstance(sweeps, int) and sweeps >= 0):
        raise ValueError(f"sweeps must be None or a non-negative int, got {sweeps!r}")
    base = sweep_count(n, dtype_eps)
    cap = SWEEP_CAP * base if sweeps is None else sweeps
    return min(base, cap), cap


def read_unconverged(converged: Array) -> list[int]:
    """The flat indices of the matrices not converged: the tensor path's one host read per convergence test (the
    only place it reads the device; module docstring)."""
    return [i for i, ok in enumerate(converged.tolist()) if not ok]


def _sweeps(xp, A: Array, V: Array, P: Array, Q: Array, count: int) -> tuple[Array, Array]:
    """``count`` parallel-ordered Jacobi sweeps of the stack ``A`` (``V`` accumulates the rotations)."""
    for _ in range(count):
        for p, q in zip(P, Q):
            J = _rotation(xp, A, p, q)
            A = J.swapaxes(-1, -2) @ A @ J
            V = V @ J
    return A, V


def _finish(xp, A: Array, V: Array, n: int) -> tuple[Array, Array, Array]:
    """After the sweeps (``A``, ``V`` untouched): :func:`_decouple`'s steps on the unpadded copy, then ``(d, W,
    converged)``: the diagonal, the eigenvectors and the residual test of the module docstring."""
    A, W = A[..., :n, :n], V[..., :n, :n]
    for _ in range(DECOUPLE_STEPS):
        A, W = _decouple(xp, A, W)
    d = ops.diagonal(xp, A)
    off_diagonal = A * (1 - ops.eye_like(xp, A, n))
    residual = xp.sqrt((off_diagonal * off_diagonal).sum(-1))  # ||A e_i - d_i e_i||, row by row
    fro = xp.sqrt((A * A).sum((-2, -1)))
    kept = d > n * eps(A) * xp.amax(d, -1)[..., None]
    converged = (xp.where(kept, residual, 0.0) <= OFF_TOL * n * eps(A) * fro[..., None]).all(-1)
    return d, W, converged


def _lapack_rows(xp, S: Array, values: Array, W: Array, bad: list[int], vectors: bool) -> tuple[Array, Array]:
    """``values``, ``W`` with the rows ``bad`` replaced by LAPACK's eigenpairs of ``S[bad]`` (differentiable)."""
    idx = ops.index(bad, S)
    lam, U = xp.linalg.eigh(S[idx]) if vectors else (xp.linalg.eigvalsh(S[idx]), ops.detach(W[idx]))
    if is_torch(values):
        return values.index_put((idx,), lam), W.index_put((idx,), U)
    values, W = values.copy(), W.copy()
    values[idx], W[idx] = lam, U
    return values, W


def _decouple(xp, A: Array, V: Array) -> tuple[Array, Array]:
    """One Newton step that decouples the separated eigenvalues: ``A <- Q^T A Q``, ``V <- V Q`` with ``Q`` the
    orthogonalized ``I + K``, ``K_ij = a_ij / (d_j - d_i)`` where ``|a_ij| <= DECOUPLE_RATIO |d_j - d_i|`` and
    ``|d_j - d_i| > sqrt(eps) ||A||_F`` (else 0: within a cluster, left to the sweeps). It takes every such coupling
    from ``delta`` to ``O(delta^2 / gap)`` at once, which parallel Jacobi does only linearly next to a multiple
    eigenvalue (a rank-deficient PSD matrix's null space; module docstring)."""
    n = A.shape[-1]
    eye = ops.eye_like(xp, A, n)
    d = ops.diagonal(xp, A)
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
