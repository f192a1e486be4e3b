"""The dummy layer's preconditioning ``(X^T X + ridge I)^{-1}`` by the Woodbury identity, for batches of ``N < D``
rows: one ``N x N`` Cholesky instead of a ``D x D`` one (the gram and features routes of
:mod:`kappalab.immunization.protocols`, and the deep nets' dummy layer on its gram route,
:mod:`kappalab.dummy_layer`), and the one-GEMM ``addmm`` they share with the step engines."""

from __future__ import annotations

import math

import torch


def _woodbury_factor(X: torch.Tensor, ridge: float, cache: dict | None, key: str) -> torch.Tensor:
    """Cholesky factor of ``X X^T + ridge I`` (``N x N``; a stack of them for a stacked ``X``), cached in ``cache``
    under ``key`` when given. A factorization that fails (``ridge`` below the rounding of ``||X||^2``) gives a NaN
    factor, so the step's gradient and the run's numbers are not finite: checked on the device, no host read inside
    a training step."""
    if not ridge > 0:
        raise ValueError(f"ridge must be > 0 for the Woodbury identity, got {ridge!r}")
    name = f"woodbury_{key}_{ridge!r}"
    L = None if cache is None else cache.get(name)
    if L is None:
        A = X @ X.mT
        A = 0.5 * (A + A.mT) + ridge * torch.eye(X.shape[-2], dtype=X.dtype, device=X.device)
        L, info = torch.linalg.cholesky_ex(A)
        L = torch.where((info == 0)[..., None, None], L, math.nan)
        if cache is not None:
            cache[name] = L
    return L


def woodbury_precondition(grad_theta: torch.Tensor, X: torch.Tensor, ridge: float, side: str,
                          cache: dict | None = None, key: str = "") -> torch.Tensor:
    """The dummy layer's preconditioning with ``K = X^T X`` (``X``: ``N x D``, ``N < D``) by Woodbury, in theta's
    orientation: ``side="output"`` gives ``grad_theta (K + ridge I)^{-1}`` (the official code's solve on
    nn.Linear's output index), ``side="input"`` gives ``(K + ridge I)^{-1} grad_theta``; equal to
    :func:`kappalab.dummy_layer.precondition_weight_grad` on ``grad_theta^T`` (transposed back).

    ``(X^T X + r I)^{-1} B = (B - X^T (r I + X X^T)^{-1} X B) / r``: one ``N x N`` Cholesky (cached in ``cache``
    under ``key`` when given) and products with X, instead of a ``D x D`` factorization. ``ridge`` must be > 0.
    """
    L = _woodbury_factor(X, ridge, cache, key)
    scale = 1.0 / ridge  # (B - P Q) / r as one fused addmm: B / r - (P Q) / r
    if side == "output":
        T = grad_theta @ X.T  # D x N
        return torch.addmm(grad_theta, torch.cholesky_solve(T.T, L).T, X, beta=scale, alpha=-scale)
    if side == "input":
        return torch.addmm(grad_theta, X.T, torch.cholesky_solve(X @ grad_theta, L), beta=scale, alpha=-scale)
    raise ValueError(f"side must be 'input' or 'output', got {side!r}")


def woodbury_features(M: torch.Tensor, X: torch.Tensor, ridge: float, side: str, cache: dict | None = None,
                      key: str = "") -> torch.Tensor:
    """:func:`woodbury_precondition` of a gradient ``X^T M`` that lies in the row space of ``X`` (``M``: ``N x D``,
    e.g. ``dL/dPhi`` for ``Phi = X theta``), returned as ``M'`` with ``X^T M' = woodbury_precondition(X^T M)``,
    so that the ``D x D`` gradient is never formed:

    * ``side="output"``: ``X^T M (X^T X + r I)^{-1} = X^T (M - (M X^T) A^{-1} X) / r`` with ``A = X X^T + r I``;
    * ``side="input"``: ``(X^T X + r I)^{-1} X^T M = X^T A^{-1} M`` (push-through identity).

    Costs ``O(N^2 D)`` (the ``N x N`` Cholesky shared with :func:`woodbury_precondition` through ``cache``).
    """
    L = _woodbury_factor(X, ridge, cache, key)
    if side == "output":
        # (M X^T) A^{-1} = (A^{-1} X M^T)^T since A is symmetric
        return addmm(M, torch.cholesky_solve(X @ M.mT, L).mT, X, beta=1.0 / ridge, alpha=-1.0 / ridge)
    if side == "input":
        return torch.cholesky_solve(M, L)
    raise ValueError(f"side must be 'input' or 'output', got {side!r}")


def addmm(C: torch.Tensor, A: torch.Tensor, B: torch.Tensor, *, beta: float = 1.0, alpha: float = 1.0) -> torch.Tensor:
    """``beta C + alpha A B`` in one GEMM: ``torch.addmm``, or ``torch.baddbmm`` for stacked runs (bitwise equal per
    run on the CPU, measured)."""
    return (torch.addmm if A.ndim == 2 else torch.baddbmm)(C, A, B, beta=beta, alpha=alpha)
