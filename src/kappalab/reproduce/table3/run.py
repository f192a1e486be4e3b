"""``kappalab reproduce table3``: the runs of a task (the config's objective and training settings, the
calibration at theta_0, the evaluation, the run keys and the loop over missing (seed, method) records)."""

from __future__ import annotations

import contextlib
import copy
import sys
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...deep.methods import CONTROLS, OPTIMIZER_OF, WEIGHTS
from ...deep import (METHODS, CombinedLoader, ImmunizableModel, ObjectiveConfig, TrainConfig, accuracy,
                     balanced_scale, extract_features, gradient_norms, immunize, linear_probe_curve, rir_theta0)
from ...deep.task import Task
from ...distributed import finish_distributed, world
from ...errors import DegenerateSpectrumWarning
from ...extremes import eigensolver_option
from ...provenance import provenance
from ...results import RunStore
from ..identity import identity
from .config import Table3Config, load_table3_config, resolved


def load_config(name: str, quick: bool = False, overrides: dict[str, Any] | None = None) -> Table3Config:
    """A Table 3 config (shipped ``table3_<name>.json`` or a path), the frozen :class:`Table3Config` of
    :func:`kappalab.reproduce.table3.config.load_table3_config`; its methods must be known."""
    cfg = load_table3_config(name, quick, overrides)
    unknown = [m for m in cfg.methods if m not in METHODS + CONTROLS]
    if unknown:
        raise ValueError(f"config {cfg.config_file}: unknown methods {unknown}; choose from {METHODS + CONTROLS}")
    return cfg


def objective_config(cfg: Table3Config, harmful_classes: int) -> ObjectiveConfig:
    """The :class:`ObjectiveConfig` of a loaded config."""
    return ObjectiveConfig(lambda_P=cfg.lambda_P, lambda_H=cfg.lambda_H,
                           lambda_kappa=cfg.lambda_kappa or 0.0, lambda_imma=cfg.lambda_imma or 0.0,
                           lambda_oracle=cfg.lambda_oracle or 0.0, spectral_route=cfg.spectral_route,
                           imma_inner_steps=cfg.imma_inner_steps, imma_inner_lr=cfg.imma_inner_lr,
                           harmful_classes=harmful_classes, label_smoothing=cfg.label_smoothing,
                           reg_rtol=cfg.reg_rtol, on_degenerate=cfg.on_degenerate,
                           protocol=cfg.protocol, official_k=cfg.image_size)


def train_config(cfg: Table3Config, method: str | None = None) -> TrainConfig:
    """The :class:`TrainConfig` of a loaded config (``method_epochs[method]`` overrides ``epochs`` when given; the
    method's optimizer: :data:`kappalab.deep.methods.OPTIMIZER_OF`)."""
    epochs = (cfg.method_epochs or {}).get(method, cfg.epochs)
    return TrainConfig(lr=cfg.eta, momentum=cfg.momentum, extractor_weight_decay=cfg.extractor_weight_decay,
                       classifier_weight_decay=cfg.classifier_weight_decay, epochs=epochs,
                       optimizer=OPTIMIZER_OF.get(method, "sgd"))


def calibrate(task: Task, model: ImmunizableModel, cfg: Table3Config, seed: int) -> dict[str, Any]:
    """Mean gradient norms of every term at theta_0 over ``calibration_batches`` batch pairs, and the balanced
    lambdas (tied extreme eigenvalues of a batch's H~ are counted, not printed). Computed on a copy of ``model``
    in training mode, as a training step sees it: BatchNorm layers of the immunized blocks use batch statistics
    and update the copy's running statistics, never theta_0's (frozen layers stay in eval mode)."""
    model = copy.deepcopy(model).train()
    batches = cfg.calibration_batches
    obj = objective_config(cfg, task.harmful_classes)
    pairs = list(zip(range(batches), CombinedLoader(*task.loaders(seed), epoch_on="longer")))
    norms: dict[str, list[float]] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DegenerateSpectrumWarning)
        for method in METHODS + CONTROLS:
            for _, (bP, bH) in pairs:
                for k, v in gradient_norms(model, method, bP, bH, obj, task.device).items():
                    norms.setdefault(k, []).append(v)
    for w in caught:
        if not issubclass(w.category, DegenerateSpectrumWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    mean = {k: float(np.mean(v)) for k, v in norms.items()}
    weight_of = {term: weight for term, (weight, _) in WEIGHTS.items()}
    ties = sum(issubclass(w.category, DegenerateSpectrumWarning) for w in caught)
    return {"grad_norms": mean, "batches": batches, "degenerate_batches": ties,
            "balanced": {weight_of[k]: balanced_scale(mean["task"], v) for k, v in mean.items() if k != "task"}}


def evaluate(task: Task, model: ImmunizableModel, reference: ImmunizableModel | None, cfg: Table3Config,
             seed: int) -> dict[str, Any]:
    """D_P test accuracy, Figure 3's probe curve, and (with a reference theta_0) Eq. 17 exact and estimated."""
    (Xtr, ytr), (Xte, yte) = task.probe
    F_tr, F_te = extract_features(model, Xtr, task.device), extract_features(model, Xte, task.device)
    out: dict[str, Any] = {
        "dp_test_acc": accuracy(model, task.test_P, task.device),
        "probe_curve": linear_probe_curve(F_tr, ytr.to(task.device), F_te, yte.to(task.device),
                                          epochs=cfg.probe_epochs, num_classes=task.harmful_classes,
                                          step=cfg.probe_step),
    }
    if reference is not None:
        feats = [extract_features(m, X, task.device) for X in (task.rir_H, task.rir_P) for m in (model, reference)]
        for key, estimator in (("rir", "pinv"), ("rir_authors", "authors")):
            out[key] = asdict(rir_theta0(*feats, groups=cfg.rir_groups, group_size=cfg.rir_group_size,
                                         seed=seed, estimator=estimator))
    return out


def run_keys(task: Task, cfg: Table3Config, data: dict[str, str], seeds: list[int], methods: list[str]
             ) -> dict[tuple[int, str], tuple[str, dict[str, Any]]]:
    """``(seed, method) -> (key, identity)`` of every record of the call (``init`` records included)."""
    out = {}
    for s in seeds:
        for m in ["init", *methods]:
            ident = identity(resolved(cfg), data, {"seed": s, "method": m, "device": task.device, "dtype": "float64",
                                                   **eigensolver_option(str(task.device))})
            out[s, m] = (f"{task.name}/seed{s}/{m}.{ident['hash']}", ident)
    return out


def run_task(task: Task, cfg: Table3Config, store: RunStore, work: Path, seeds: list[int], methods: list[str],
             keys: dict[tuple[int, str], tuple[str, dict[str, Any]]]) -> None:
    """Run every missing (seed, method) record of ``task`` (plus one ``init`` record per seed), under ``keys``."""
    from tqdm.auto import tqdm

    done = store.done_keys()
    todo = [(s, m) for s in seeds for m in ["init", *methods] if keys[s, m][0] not in done]
    for seed, method in tqdm(todo, desc=f"table3 {task.name}", disable=not sys.stderr.isatty()):
        (key, ident), t0 = keys[seed, method], time.perf_counter()
        base = task.theta0(seed)
        record: dict[str, Any] = {"key": key, "task": task.name, "seed": seed, "method": method, "identity": ident}
        if method == "init":
            record["calibration"] = calibrate(task, base, cfg, seed)
            record.update(evaluate(task, base, None, cfg, seed))
        else:
            model = copy.deepcopy(base)
            torch.manual_seed(seed)
            loader = CombinedLoader(*task.loaders(seed), epoch_on=cfg.epoch_on)
            record["history"] = immunize(model, method, loader, objective_config(cfg, task.harmful_classes),
                                         train_config(cfg, method), device=task.device,
                                         checkpoint=work / f"seed{seed}" / f"{method}.pt")
            record.update(evaluate(task, model, base, cfg, seed))
        record["wall_s"] = time.perf_counter() - t0
        record["provenance"] = provenance(seed, cfg, device=task.device, dtype="float64", data_label=task.data_label)
        if world()[0] == 0:  # under torchrun every rank trains; rank 0 alone records
            store.append(record)


def run_on_every_rank(task: Task, cfg: Table3Config, store: RunStore, work: Path, seeds: list[int],
                      methods: list[str], keys: dict[tuple[int, str], tuple[str, dict[str, Any]]]) -> int:
    """:func:`run_task` in every process of the job (one under plain ``python``; each rank under ``torchrun``),
    then the process group torn down; returns this process's rank. Rank 0 alone holds the store's lock (it alone
    writes): a second rank taking it would fail at once (:class:`~kappalab.results.StoreBusyError`) and leave
    rank 0 waiting in all_reduce."""
    rank = world()[0]
    with store.lock() if rank == 0 else contextlib.nullcontext():
        run_task(task, cfg, store, work, seeds, methods, keys)
    finish_distributed()
    return rank
