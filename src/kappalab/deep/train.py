"""Immunization training loop (Appendix C.2), with per-epoch checkpoints and optional data-parallel training.

Optimizer: SGD with Nesterov momentum (``lr``, momentum 0.9), weight decay 0 on the immunized extractor and
``classifier_weight_decay`` (2e-5) on the D_P head. Batches come from a :class:`~kappalab.deep.loader.CombinedLoader`.

Checkpoints: after every epoch the model, optimizer and torch RNG state are written atomically to
``checkpoint``; a call with an existing checkpoint resumes after its epoch (a finished run returns at once).
Checkpoints are read with ``weights_only=True``: tensors and plain containers only, a pickled object is refused.
The position inside the D_P loader is not saved: a resumed run restarts D_P at a fresh shuffle
(with a ``DistributedSampler``, the pass count of :class:`CombinedLoader` restarts at 0 too).

Data parallel: under ``torchrun`` (``WORLD_SIZE > 1`` in the environment)
:func:`kappalab.distributed.init_distributed` sets up the process group; every rank computes its terms (and ``H~``)
on its own batches, and :func:`allreduce_gradients` averages the gradients before each step (DDP's gradient
averaging, done explicitly because the objectives call the network several times per step). Only rank 0 writes
checkpoints.

Host copies: the step loop reads nothing back from the device (terms are summed on the device, finiteness is a
device flag read once per epoch); what the objectives' spectral core reads back is its own (see the tests).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from ..atomic_io import torch_save
from ..distributed import world
from ..errors import CollapsedFeaturesError, DegenerateSpectrumWarning, UndefinedRegularizerError
from .loader import CombinedLoader
from .methods import ObjectiveConfig, objective_terms, weighted_loss
from .model import ImmunizableModel

#: what :func:`immunize` raises when a run diverges (a non-finite loss, R_ill undefined, a failed factorisation, or
#: features that collapsed to zero, which an epoch-end measure raises): a result of the setting, recorded as such by
#: the sweeps, not a fault
DIVERGED: tuple[type[Exception], ...] = (FloatingPointError, UndefinedRegularizerError, torch.linalg.LinAlgError,
                                         CollapsedFeaturesError)


@dataclass(frozen=True)
class TrainConfig:
    """Optimizer settings (Table 4 / Appendix C.2)."""

    lr: float = 1e-5
    momentum: float = 0.9
    nesterov: bool = True
    extractor_weight_decay: float = 0.0
    classifier_weight_decay: float = 2e-5
    epochs: int = 3
    grad_clip: float | None = None
    optimizer: str = "sgd"  #: "sgd" (Appendix C.2) or "adam" (the oracle control; momentum and nesterov unused)


def make_optimizer(model: ImmunizableModel, cfg: TrainConfig) -> torch.optim.Optimizer:
    """SGD + Nesterov (or Adam) with the two parameter groups of Appendix C.2."""
    if not cfg.lr > 0:
        raise ValueError(f"lr must be > 0, got {cfg.lr!r}")
    groups = [{"params": list(model.extractor_parameters()), "weight_decay": cfg.extractor_weight_decay},
              {"params": list(model.classifier_parameters()), "weight_decay": cfg.classifier_weight_decay}]
    if cfg.optimizer == "adam":
        return torch.optim.Adam(groups, lr=cfg.lr)
    if cfg.optimizer != "sgd":
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {cfg.optimizer!r}")
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov)


def allreduce_gradients(params: list[nn.Parameter]) -> None:
    """Average gradients over the process group (no-op on one process)."""
    rank, size = world()
    if size == 1:
        return
    for p in params:
        if p.grad is not None:
            torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.SUM)
            p.grad /= size


def immunize(model: ImmunizableModel, method: str, loader: CombinedLoader, obj: ObjectiveConfig,
             train: TrainConfig, *, device: str | torch.device = "cpu", checkpoint: str | Path | None = None,
             on_epoch_end: Callable[[int, dict[str, float]], None] | None = None,
             progress: bool = True) -> list[dict[str, float]]:
    """Train ``model`` in place with ``method``'s objective for ``train.epochs`` epochs of ``loader``.

    Returns one dict of mean terms per epoch, those of the epochs a checkpoint holds included (it keeps them), so
    a run resumed from its checkpoint returns what an uninterrupted one does; ``degenerate_steps`` counts the steps
    at which the core reported a tied extreme eigenvalue of ``H~`` (:class:`~kappalab.errors.DegenerateSpectrumWarning`
    under ``on_degenerate="warn"``; collected here instead of printed once per step).
    """
    from tqdm.auto import tqdm

    opt = make_optimizer(model, train)
    params = [p for g in opt.param_groups for p in g["params"]]
    start = 0
    path = Path(checkpoint) if checkpoint is not None else None
    if path is not None and path.exists():
        state = torch.load(path, map_location=device, weights_only=True)  # data only, never code
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        start = int(state["epoch"])
        history = list(state.get("history", []))  # a checkpoint without it: its epochs are not returned
    else:
        history = []
    rank, _ = world()
    model.train()
    for epoch in range(start, train.epochs):
        sums: dict[str, torch.Tensor] = {}  # on the device: no host copy in the hot loop
        finite = torch.ones((), dtype=torch.bool, device=device)
        degenerate = 0
        bar = tqdm(loader, desc=f"{method} epoch {epoch + 1}/{train.epochs}", leave=False,
                   disable=not progress or rank != 0)
        for batch_P, batch_H in bar:
            terms, loss, ties = train_step(model, method, batch_P, batch_H, obj, opt, params, train, device)
            degenerate += ties
            finite &= torch.isfinite(loss)
            for k, v in {**terms, "loss": loss}.items():
                sums[k] = sums[k] + v.detach() if k in sums else v.detach().clone()
        if not bool(finite):  # one host read per epoch
            raise FloatingPointError(f"{method}: non-finite loss during epoch {epoch + 1}: epoch sums "
                                     f"{ {k: float(v) for k, v in sums.items()} }")
        means = {k: float(v) / len(loader) for k, v in sums.items()}
        means["degenerate_steps"] = float(degenerate)
        history.append(means)
        if on_epoch_end is not None:  # before the checkpoint: what it keeps of this epoch is kept when it resumes
            on_epoch_end(epoch + 1, means)
        if path is not None and rank == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
            torch_save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch + 1,
                        "rng": torch.get_rng_state(), "method": method, "history": history}, path)
    return history


def train_step(model: ImmunizableModel, method: str, batch_P: Any, batch_H: Any, obj: ObjectiveConfig,
               opt: torch.optim.Optimizer, params: list[nn.Parameter], train: TrainConfig,
               device: str | torch.device) -> tuple[dict[str, torch.Tensor], torch.Tensor, int]:
    """One optimizer step on a (D_P, D_H) batch pair: terms, weighted loss, backward, gradient averaging over the
    process group, optional clipping, step. Returns the terms, the loss (device tensors, not read back) and the
    number of tied-extreme-eigenvalue warnings the core raised (collected, not printed)."""
    opt.zero_grad(set_to_none=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DegenerateSpectrumWarning)
        terms = objective_terms(model, method, batch_P, batch_H, obj, device)
        loss = weighted_loss(terms, obj)
        loss.backward()
    for w in caught:
        if not issubclass(w.category, DegenerateSpectrumWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    allreduce_gradients(params)
    if train.grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(params, train.grad_clip)
    opt.step()
    return terms, loss, sum(issubclass(w.category, DegenerateSpectrumWarning) for w in caught)


def pretrain(net: nn.Module, loader: Any, *, epochs: int, lr: float = 1e-3, device: str | torch.device = "cpu",
             progress: bool = True) -> nn.Module:
    """Plain supervised training (Adam, cross-entropy) of a whole network: the proxy's theta_0."""
    from tqdm.auto import tqdm

    opt = torch.optim.Adam(net.parameters(), lr=lr)
    net.train()
    for epoch in range(epochs):
        for x, y in tqdm(loader, desc=f"pretrain epoch {epoch + 1}/{epochs}", leave=False, disable=not progress):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(net(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
    net.eval()
    return net
