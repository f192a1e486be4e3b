"""Attackers that change a deep extractor: the real network's trained tail (Table 3), fine-tuned or adapted by LoRA.

The model on D_H is ``f(x) W``: ``f`` the immunized model's features (:meth:`kappalab.deep.ImmunizableModel.features`:
the tail from the trunk activations ``x`` to the pooled features, in float64, with the dummy layer where the protocol
has one), ``W`` the l2 probe (``D x C``, zero at the start). Each step is one minibatch (``batch_size`` rows, without
replacement within an epoch, the order drawn from the run's seed) of ``||f(X_b) W - Y_b||^2 / (2b)``, the loss of
the linear attackers (:mod:`.extractor_attackers`), by SGD or Adam (torch's).

* ``finetune``: every parameter of the tail (and of the dummy layer) with the probe.
* ``lora`` of rank ``r``: peft's LoRA (``lora_alpha = r``: scaling 1, no dropout) on every convolution of the tail
  with groups 1 (the 1 x 1 expansions and projections and ``conv_head``; the depthwise ones keep theta_I); the base
  weights frozen, the adapters and the probe trained. peft starts ``B`` at zero, so step 0 is theta_I itself.

BatchNorm stays in eval mode: the attacker normalises with theta_I's running statistics (a released model's) and
does not change them, so the loss is a function of the weights alone. The iterate after each step is a
:class:`Snapshot` of the weights, which predicts any rows (:func:`kappalab.attack.measures` evaluates it on the
training, validation and test rows); the rows are the trunk activations, flattened to ``N x (C H W)`` so that they
split like every design matrix (:class:`kappalab.attack.problem.Split`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .extractor_attackers import minibatches

#: rows per forward pass when a snapshot predicts (memory, not results)
CHUNK = 512


@dataclass(frozen=True)
class DeepExtractor:
    """theta_I's (or theta_0's) model and the shape of one trunk activation (``C, H, W``), to unflatten rows."""

    model: nn.Module  #: an ImmunizableModel; never changed here (each attack trains a copy)
    shape: tuple[int, ...]

    def rows(self, A: np.ndarray) -> torch.Tensor:
        """Flattened trunk rows as the tail's input: unflattened, in its dtype, on its device."""
        ref = next(self.model.trainable.parameters())
        return torch.from_numpy(np.ascontiguousarray(A)).reshape(-1, *self.shape).to(ref.device, ref.dtype)

    def features(self, A: np.ndarray) -> np.ndarray:
        """``f(A)`` of the model before any attack (eval mode for the call, its mode restored after), float64."""
        training = self.model.training
        try:
            return _tail_features(self.model.eval(), self.rows(A)).cpu().numpy()
        finally:
            self.model.train(training)


@torch.no_grad()
def _tail_features(model: nn.Module, X: torch.Tensor) -> torch.Tensor:
    """The model's pooled features of the tail inputs ``X``, :data:`CHUNK` rows a forward pass, float64."""
    return torch.cat([model.features(chunk) for chunk in X.split(CHUNK)]).double()


class Snapshot:
    """The attacked model after one step (a copy in eval mode, and the probe ``W``, on their device: nothing read
    back to the host); ``predict(A)`` is ``f(A) W`` (float64, ``N x C``), ``features(A)`` is ``f(A)``."""

    def __init__(self, extractor: DeepExtractor, model: nn.Module, W: torch.Tensor) -> None:
        self.extractor = extractor
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        self._W = W.detach().clone()

    @property
    def W(self) -> np.ndarray:
        return self._W.cpu().numpy()

    def _features(self, A: np.ndarray) -> torch.Tensor:
        return _tail_features(self.model, self.extractor.rows(A))

    def features(self, A: np.ndarray) -> np.ndarray:
        return self._features(A).cpu().numpy()

    def predict(self, A: np.ndarray) -> np.ndarray:
        return (self._features(A) @ self._W).cpu().numpy()

    def rounding(self) -> float:
        """The relative rounding of the features, from the tail's dtype: ``(k + 3) u`` with ``k`` the largest
        fan-in of its layers (the convolution bound of tests/test_deep_dummy.py), ``u`` the dtype's unit."""
        params = [p for p in self.model.trainable.parameters() if p.ndim > 1]
        fan_in = max(int(np.prod(p.shape[1:])) for p in params)
        return (fan_in + 3) * float(torch.finfo(params[0].dtype).eps) / 2


def _conv_targets(model: nn.Module) -> list[str]:
    """Names (in ``model.trainable``) of the convolutions with groups 1."""
    return [name for name, m in model.trainable.named_modules() if isinstance(m, nn.Conv2d) and m.groups == 1]


def _lora(model: nn.Module, rank: int) -> list[nn.Parameter]:
    """peft's LoRA of ``rank`` injected into ``model.trainable`` in place (module docstring); its parameters."""
    from peft import LoraConfig, inject_adapter_in_model

    targets = _conv_targets(model)
    if not targets:
        raise ValueError("LoRA: the tail has no convolution with groups 1 to adapt")
    dtype = next(model.trainable.parameters()).dtype
    model.requires_grad_(False)
    config = LoraConfig(r=rank, lora_alpha=rank, lora_dropout=0.0, target_modules=targets, bias="none")
    model.trainable = inject_adapter_in_model(config, model.trainable).to(dtype)
    adapters = [p for name, p in model.trainable.named_parameters() if "lora_" in name]
    for p in adapters:
        p.requires_grad_(True)
    return adapters


def deep_attack(extractor: DeepExtractor, X: np.ndarray, Y: np.ndarray, *, seed: int, optimizer: str, lr: float,
                batch_size: int, rank: int | None = None) -> Iterator[Snapshot]:
    """``finetune`` (``rank=None``) or ``lora`` of rank ``rank`` (module docstring); yields a snapshot per step."""
    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    torch.manual_seed(seed)  # the LoRA A matrices' draw
    model = copy.deepcopy(extractor.model)
    if rank is None:
        model.requires_grad_(False)
        params = [p for m in (model.trainable, model.dummy) if m is not None for p in m.parameters()]
        for p in params:
            p.requires_grad_(True)
    else:
        params = _lora(model, rank)
    model.eval()
    rows = extractor.rows(X)
    targets = torch.from_numpy(np.asarray(Y, dtype=np.float64)).to(rows.device)
    W = torch.zeros(model.feature_dim, targets.shape[1], dtype=torch.float64, device=rows.device,
                    requires_grad=True)
    opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)([*params, W], lr=lr)
    for picked in minibatches(rows.shape[0], batch_size, np.random.default_rng(seed)):
        batch = torch.from_numpy(picked).to(rows.device)
        opt.zero_grad()
        residual = model.features(rows[batch]) @ W - targets[batch]
        ((residual ** 2).sum() / (2 * len(picked))).backward()
        opt.step()
        yield Snapshot(extractor, model, W)
