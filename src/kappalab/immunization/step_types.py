"""The typed pieces a training step passes around (:mod:`kappalab.immunization.protocols`): the trainable tensors
(:class:`Params`), one scalar of the objective (:class:`Term`) and the step's data with its caches (:class:`Batch`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Params:
    """Trainable tensors: extractor ``theta`` (D x D), optional ``bias`` (D), heads ``w_P`` (and IMMA's ``w_H``)."""

    theta: torch.Tensor
    bias: torch.Tensor | None
    w_P: torch.Tensor
    w_H: torch.Tensor | None = None

    def extractor(self) -> list[torch.Tensor]:
        """theta and (when present) the bias."""
        return [self.theta] + ([self.bias] if self.bias is not None else [])

    def all(self) -> list[torch.Tensor]:
        """Every trainable tensor."""
        return self.extractor() + [self.w_P] + ([self.w_H] if self.w_H is not None else [])


@dataclass(frozen=True)
class Term:
    """One scalar of a step's objective and the tensors it updates (``precondition``: None, "P" or "H")."""

    name: str
    value: torch.Tensor
    params: list[torch.Tensor]
    precondition: str | None = None


@dataclass
class Batch:
    """One step's data; ``K_P``/``K_H`` are the batch covariances ``X^T X`` (``D x D``), formed on first use
    only (the gram route never uses them). ``cache`` holds what depends on the data only (per-batch
    factorizations, kernels); ``step`` holds what depends on the parameters too (the features of one step):
    :meth:`for_step` gives a view with the same data and ``cache`` and an empty ``step``."""

    X_P: torch.Tensor
    y_P: torch.Tensor
    X_H: torch.Tensor
    y_H: torch.Tensor | None
    cache: dict = field(default_factory=dict, repr=False, compare=False)
    step: dict = field(default_factory=dict, repr=False, compare=False)

    def for_step(self) -> "Batch":
        """This batch with a fresh per-step cache (the full batch is one object reused by every step)."""
        return Batch(self.X_P, self.y_P, self.X_H, self.y_H, cache=self.cache)

    def X(self, which: str) -> torch.Tensor:
        """The inputs of task ``which`` ("P" or "H")."""
        if which not in ("P", "H"):
            raise ValueError(f"which must be 'P' or 'H', got {which!r}")
        return self.X_P if which == "P" else self.X_H

    def covariance(self, which: str) -> torch.Tensor:
        """The batch covariance ``X^T X`` of task ``which`` ("P" or "H"), symmetrized, cached."""
        key = "K_" + which
        if key not in self.cache:
            X = self.X(which)
            K = X.T @ X
            self.cache[key] = 0.5 * (K + K.T)
        return self.cache[key]

    @property
    def K_P(self) -> torch.Tensor:
        return self.covariance("P")

    @property
    def K_H(self) -> torch.Tensor:
        return self.covariance("H")
