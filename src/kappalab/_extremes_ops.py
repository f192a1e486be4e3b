"""NumPy / torch shims of :mod:`kappalab.extremes`' tensor path: the same array operation on either namespace."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ._backend import Array, is_torch


def check_stack(S: object) -> Array:
    if not (is_torch(S) or isinstance(S, np.ndarray)):
        raise TypeError(f"S must be a NumPy array or a torch tensor, got {type(S).__name__}")
    if S.ndim < 2 or S.shape[-1] != S.shape[-2] or S.shape[-1] == 0:
        raise ValueError(f"S must be a stack of square matrices (..., n, n) with n >= 1, got shape {tuple(S.shape)}")
    if not (S.dtype in (np.float32, np.float64) if not is_torch(S) else S.is_floating_point()):
        raise TypeError(f"S must be float32 or float64, got {S.dtype}")
    return S


def index(rows: list[int], like: Array) -> Array:
    """``rows`` as an index array on ``like``'s device."""
    if is_torch(like):
        import torch

        return torch.as_tensor(rows, dtype=torch.int64, device=like.device)
    return np.asarray(rows, dtype=np.int64)


def detach(x: Array) -> Array:
    return x.detach() if is_torch(x) else x


def full_like_bool(S: Array, value: bool) -> Array:
    if is_torch(S):
        import torch

        return torch.full(S.shape[:-2], value, dtype=torch.bool, device=S.device)
    return np.full(S.shape[:-2], value)


def diagonal(xp, A: Array) -> Array:
    """The diagonal of each matrix (a writable copy for NumPy, whose ``diagonal`` is a read-only view)."""
    if is_torch(A):
        return xp.diagonal(A, 0, -2, -1)
    return np.diagonal(A, 0, -2, -1).copy()


def take(x: Array, idx: Array) -> Array:
    """``x`` at ``idx`` along the last axis, ``idx`` broadcast over the other axes."""
    if is_torch(x):
        return x.gather(-1, idx.expand(*x.shape[:-1], idx.shape[-1]))
    return np.take_along_axis(x, np.broadcast_to(idx, (*x.shape[:-1], idx.shape[-1])), -1)


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


def pairs(xp, A: Array, m: int) -> tuple[Array, Array]:
    """:func:`_round_robin`'s index arrays, as tensors on ``A``'s device (copied there once per device: a copy from
    the host synchronizes a CUDA stream)."""
    return _round_robin(m) if not is_torch(A) else _pairs_on(m, str(A.device))


@lru_cache(maxsize=None)
def _pairs_on(m: int, device: str) -> tuple[Array, Array]:
    import torch

    return tuple(torch.as_tensor(x, device=device) for x in _round_robin(m))


def eye_like(xp, A: Array, m: int) -> Array:
    if is_torch(A):
        return xp.eye(m, dtype=A.dtype, device=A.device).expand(A.shape).clone()
    return np.broadcast_to(np.eye(m, dtype=A.dtype), A.shape).copy()


def pad(xp, A: Array, m: int) -> Array:
    n = A.shape[-1]
    if is_torch(A):
        return xp.nn.functional.pad(A, (0, m - n, 0, m - n))
    return np.pad(A, [(0, 0)] * (A.ndim - 2) + [(0, m - n), (0, m - n)])


def frexp_exponent(xp, x: Array) -> Array:
    return xp.frexp(x)[1].to(xp.int64) if is_torch(x) else np.frexp(x)[1].astype(np.int64)


def ldexp(xp, x: Array, e: Array) -> Array:
    """``x * 2^e`` exactly (in two halves, so that ``|e|`` up to twice the exponent range works)."""
    half = e // 2
    if is_torch(x):
        two = xp.full((), 2.0, dtype=x.dtype, device=x.device)
        return x * two ** half.to(x.dtype) * two ** (e - half).to(x.dtype)
    return np.ldexp(np.ldexp(x, half), e - half)
