"""The "dummy layer" of Sec. 4.4 / Appendix C.3: a linear layer whose backward preconditions the weight gradient.

Alg. 1 updates the feature extractor as ``theta <- theta - eta K^{-1} grad_theta R`` with ``K = X^T X`` the
(ridge-regularized) input covariance. A torch ``nn.Linear`` stores ``W = theta^T`` (``out x in``) and computes
``X W^T + b``, so ``grad_W = (grad_theta)^T`` and the preconditioned update in W's coordinates is
``grad_W (K + ridge I)^{-1}``: the inverse acts on the INPUT index (right side of W). ``side="input"`` does that.

``side="output"`` reproduces the authors' public code, which calls ``solve(X^T X + ridge I, grad_W)``, i.e.
multiplies by the inverse from the LEFT of W, on the output index. That is a different update (it only runs
because ``in == out`` there); it is kept so the ``official`` protocols can reproduce the published numbers.

The covariance is either the current batch's ``X^T X`` (``covariance=None``, as in the paper's pseudo-code) or a
fixed ``K`` passed in (Alg. 1's full-data covariance). Only gradients that flow through a call made with
``precondition=True`` are preconditioned; the bias gradient never is.

Routes. With the batch covariance of a batch of ``N < D`` rows, ``route="gram"`` applies the same inverse by the
Woodbury identity (:func:`kappalab.woodbury.woodbury_features`: the weight gradient ``M^T X`` lies in the row space
of the batch X, so ``M^T X (X^T X + r I)^{-1} = ((X X^T + r I)^{-1} M)^T X``): one ``N x N`` Cholesky instead of
the ``D x D`` one of ``route="dense"``; equal up to rounding (tests/test_deep_gram_route.py). A fixed ``K``, or
``N >= D``, always takes the dense route.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from .woodbury import woodbury_features

Side = Literal["input", "output"]
#: how the preconditioner is applied: "dense" (``D x D`` Cholesky) or "gram" (Woodbury, ``N x N``)
Route = Literal["dense", "gram"]
ROUTES: tuple[str, ...] = ("dense", "gram")


def precondition_weight_grad(grad_W: torch.Tensor, K: torch.Tensor, ridge: float, side: Side,
                             check: bool = True) -> torch.Tensor:
    """``grad_W (K + ridge I)^{-1}`` (side="input") or ``(K + ridge I)^{-1} grad_W`` (side="output").

    ``check=True`` raises when ``K + ridge I`` is not positive definite (one integer read back from the device);
    ``check=False`` skips that sync for CUDA hot loops whose covariance is known to be regularized.
    """
    A = K + ridge * torch.eye(K.shape[0], dtype=K.dtype, device=K.device)
    L, info = torch.linalg.cholesky_ex(A)
    if check and int(info) != 0:  # one integer to the host: a singular covariance must not become NaN gradients
        raise ValueError(f"K + ridge*I (ridge = {ridge}) is not positive definite (Cholesky failed at pivot "
                         f"{int(info)}): the covariance is singular; use ridge > 0")
    if side == "input":
        return torch.cholesky_solve(grad_W.T, L).T  # (A^{-1} grad_W^T)^T = grad_W A^{-1}, A symmetric
    if side == "output":
        return torch.cholesky_solve(grad_W, L)
    raise ValueError(f"side must be 'input' or 'output', got {side!r}")


class _PreconditionedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, W, b, K, ridge, side, check, route):  # type: ignore[override]
        ctx.save_for_backward(X, W, K)
        ctx.ridge, ctx.side, ctx.check, ctx.has_bias, ctx.route = ridge, side, check, b is not None, route
        out = X @ W.T
        return out + b if b is not None else out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        X, W, K = ctx.saved_tensors
        grad_X = grad_out @ W if ctx.needs_input_grad[0] else None
        grad_W = None
        if ctx.needs_input_grad[1] and ctx.route == "gram" and K.numel() == 0 and X.shape[0] < X.shape[1]:
            grad_W = woodbury_features(grad_out, X, ctx.ridge, ctx.side).T @ X
        elif ctx.needs_input_grad[1]:
            cov = X.T @ X if K.numel() == 0 else K
            grad_W = precondition_weight_grad(grad_out.T @ X, cov, ctx.ridge, ctx.side, ctx.check)
        grad_b = grad_out.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_X, grad_W, grad_b, None, None, None, None, None


class DummyLinear(nn.Linear):
    """``nn.Linear`` whose forward can precondition the weight gradient (see module docstring).

    ``forward(X, precondition=False, K=None, route="dense")``: with ``precondition=True`` the backward multiplies
    the weight gradient by ``(K + ridge I)^{-1}`` on the side given by ``side`` (``K=None``: the batch covariance
    X^T X), by the ``route`` of the module docstring. ``check`` is passed to :func:`precondition_weight_grad` (the
    gram route reads nothing back: a failed ``N x N`` factorization gives NaN gradients).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, ridge: float = 1e-6,
                 side: Side = "input", check: bool = True, device=None, dtype=torch.float64) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        if not ridge >= 0:
            raise ValueError(f"ridge must be >= 0, got {ridge!r}")
        if side not in ("input", "output"):
            raise ValueError(f"side must be 'input' or 'output', got {side!r}")
        if side == "output" and in_features != out_features:
            raise ValueError("side='output' (the official code's left multiplication) needs in_features == "
                             f"out_features, got {in_features} and {out_features}")
        self.ridge, self.side, self.check = ridge, side, check

    def forward(self, X: torch.Tensor, precondition: bool = False, K: torch.Tensor | None = None,
                route: Route = "dense") -> torch.Tensor:
        if route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
        if not precondition:
            return super().forward(X)
        if route == "gram" and not self.ridge > 0:
            raise ValueError(f"route 'gram' (Woodbury) needs ridge > 0, got {self.ridge!r}")
        K_arg = X.new_empty(0) if K is None else K
        return _PreconditionedLinear.apply(X, self.weight, self.bias, K_arg, self.ridge, self.side, self.check,
                                           route)
