"""A custom autograd function: torch backpropagates a value through its closed-form gradient.

R_well and R_ill (:mod:`kappalab.regularizers`) hand their value and closed-form gradient (Thm A.1(3), Thm 4.1(3))
to :class:`ClosedFormGradient`, which scales the gradient by the incoming one in the backward pass. This avoids
``eigh``'s generic backward, whose ``1 / (lambda_i - lambda_j)`` terms blow up on the (irrelevant) degenerate
interior of the spectrum. First-order only (``once_differentiable``).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.autograd.function import once_differentiable


class ClosedFormGradient(torch.autograd.Function):
    """``value`` of ``value_and_gradient(S.detach()) -> (value, G)`` with backward ``grad_out * G``."""

    @staticmethod
    def forward(ctx, S: torch.Tensor, value_and_gradient: Callable) -> torch.Tensor:  # type: ignore[override]
        value, G = value_and_gradient(S.detach())
        ctx.save_for_backward(G)
        return value

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        (G,) = ctx.saved_tensors
        return grad_out * G, None
