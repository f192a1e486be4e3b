"""The products of route "features" that the autograd step (:func:`kappalab.immunization.methods.step_gradients`)
and the closed-form one (:mod:`kappalab.immunization.official_step`) share: the stacked inputs ``[X_P; X_H]`` of the
tasks a step uses and theta's gradient ``[X_P; X_H]^T [M_P; M_H]`` from the gradients ``M_w`` with respect to each
task's features (per run, or for a stack of runs with a leading run dimension)."""

from __future__ import annotations

import torch

from .step_types import Batch


def stacked_inputs(batch: Batch, tasks: list[str]) -> torch.Tensor:
    """``X_P``, ``X_H`` or ``[X_P; X_H]`` (cached per batch) for the tasks whose features a step uses."""
    if len(tasks) == 1:
        return batch.X(tasks[0])
    if "X_PH" not in batch.cache:
        batch.cache["X_PH"] = torch.cat([batch.X_P, batch.X_H], dim=-2)
    return batch.cache["X_PH"]


def theta_gradient(batch: Batch, tasks: list[str], Ms: list[torch.Tensor], out: torch.Tensor | None = None
                   ) -> torch.Tensor:
    """theta's gradient ``sum_w X_w^T M_w`` from the gradients ``M_w`` with respect to the features of ``tasks``,
    as one product ``[X_P; X_H]^T [M_P; M_H]`` (inner dimension 2N: one output pass instead of two N-deep
    products), written into ``out`` when given."""
    X = stacked_inputs(batch, tasks)
    M = Ms[0] if len(Ms) == 1 else torch.cat(Ms, dim=-2)
    return X.mT @ M if out is None else torch.matmul(X.mT, M, out=out)
