"""Custom autograd functions: torch backpropagates R_well/R_ill through the paper's closed-form gradients.

The forward pass computes the value and the closed-form gradient from one :class:`~kappalab.spectral.Extremes`
(the same specification as the NumPy path); the backward pass scales that gradient by the incoming one. This
avoids ``eigh``'s generic backward, whose ``1 / (lambda_i - lambda_j)`` terms blow up on the (irrelevant)
degenerate interior of the spectrum. First-order only (``once_differentiable``).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from .regularizers import (extremes, grad_r_ill_from_extremes, ill_denominator, grad_r_well_from_extremes, r_ill_from_extremes,
                           r_well_from_extremes)
from .spectral import require_unique


class RWell(torch.autograd.Function):
    """R_well(S) with backward ``grad_out * (s_1 u_1 v_1^T - S/p)``."""

    @staticmethod
    def forward(ctx, S, rtol, psd, solver, on_degenerate, gap_rtol, check):  # type: ignore[override]
        Sd = S.detach()
        e = extremes(Sd, rtol=rtol, psd=psd, solver=solver, check=check)
        require_unique(e, "max", on_degenerate, gap_rtol, "S")
        ctx.save_for_backward(grad_r_well_from_extremes(e, Sd))
        return r_well_from_extremes(e)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        (G,) = ctx.saved_tensors
        return grad_out * G, None, None, None, None, None, None


class RIll(torch.autograd.Function):
    """R_ill(S) with backward ``grad_out * (s_k u_k v_k^T - S/k) / d^2``."""

    @staticmethod
    def forward(ctx, S, rtol, psd, solver, on_degenerate, gap_rtol, check):  # type: ignore[override]
        Sd = S.detach()
        e = extremes(Sd, rtol=rtol, psd=psd, solver=solver, check=check)
        ill_denominator(e, check=check)  # undefined R_ill is reported before any uniqueness question
        require_unique(e, "min", on_degenerate, gap_rtol, "S")
        ctx.save_for_backward(grad_r_ill_from_extremes(e, Sd, check=check))
        return r_ill_from_extremes(e, check=check)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        (G,) = ctx.saved_tensors
        return grad_out * G, None, None, None, None, None, None
