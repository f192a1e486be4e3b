"""``kappalab reproduce table3``: one record of the proxy's or the paper's networks (:class:`NetBench`): the
config's objective and training settings, the calibration at theta_0, the training and what is measured."""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...deep.methods import CONTROLS, OPTIMIZER_OF, WEIGHTS
from ...deep import (METHODS, CombinedLoader, ImmunizableModel, ObjectiveConfig, TrainConfig, accuracy,
                     balanced_scale, extract_features, gradient_norms, linear_probe_curve)
from ...deep.task import Task
from ...errors import DegenerateSpectrumWarning
from ..identity import data_identity as arrays_identity
from .config import Table3Config, load_table3_config
from .measures import Checkpoints, checkpoint_epochs, displacement, held_out_measures, train_measured
from .plan import PaperInputs, Plan, RunSpec


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


def utility(task: Task, model: ImmunizableModel, cfg: Table3Config) -> dict[str, Any]:
    """Utility measured without kappa: the model's D_P test accuracy and Figure 3's D_H probe curve (test accuracy
    after each full-batch gradient-descent epoch of a linear probe on the model's features)."""
    (Xtr, ytr), (Xte, yte) = task.probe
    F_tr, F_te = extract_features(model, Xtr, task.device), extract_features(model, Xte, task.device)
    return {"dp_test_acc": accuracy(model, task.test_P, task.device),
            "probe_curve": linear_probe_curve(F_tr, ytr.to(task.device), F_te, yte.to(task.device),
                                              epochs=cfg.probe_epochs, num_classes=task.harmful_classes,
                                              step=cfg.probe_step)}


def held_out(task: Task, model: ImmunizableModel) -> dict[str, np.ndarray]:
    """The model's features of the held-out inputs the RIR is computed on (``{"P", "H"}``, float64 on the host)."""
    return {t: extract_features(model, X, task.device).cpu().numpy() for t, X in (("P", task.rir_P),
                                                                                  ("H", task.rir_H))}


@dataclass(frozen=True)
class NetBench:
    """The proxy's and the paper's networks: an ``init`` record holds the calibration at theta_0 and theta_0's
    utility (:func:`utility`); a method record its training (resumed from its epoch checkpoint under ``work``; the
    estimators at its checkpoints, with D_P accuracy there), its utility, each module's displacement and the
    estimators on the held-out features (:func:`.measures.held_out_measures`, the float64 rank rule): the real
    network's record schema (:mod:`.real`) less what only it measures (its probes' iterations, ImageNet agreement,
    the validation part)."""

    task: Task
    work: Path

    def measure(self, spec: RunSpec, base: ImmunizableModel, init: dict[str, Any] | None) -> dict[str, Any]:
        cfg, seed, method, task = spec.cfg, spec.seed, spec.method, self.task
        if method == "init":
            return {"calibration": calibrate(task, base, cfg, seed), "utility": utility(task, base, cfg)}
        model = copy.deepcopy(base)
        torch.manual_seed(seed)
        loader = CombinedLoader(*task.loaders(seed), epoch_on=cfg.epoch_on)
        train = train_config(cfg, method)
        F0 = held_out(task, base)
        resume = self.work / f"seed{seed}" / f"{method}.pt"  # the epoch checkpoint, and its checkpoints' measures
        checkpoints = Checkpoints(checkpoint_epochs(train.epochs), len(loader), lambda: held_out(task, model), F0,
                                  seed, cfg.rir_groups, cfg.rir_group_size, None,
                                  lambda: {"dp_test_acc": accuracy(model, task.test_P, task.device)},
                                  keep=resume.with_suffix(".checkpoints.json"))
        out = train_measured(model, method, loader, objective_config(cfg, task.harmful_classes), train, checkpoints,
                             device=task.device, checkpoint=resume)
        if "diverged" in out:
            return out
        out.update(displacement=displacement(model, base), utility=utility(task, model, cfg))
        out.update(held_out_measures(F0, held_out(task, model), seed=seed, groups=cfg.rir_groups,
                                     group_size=cfg.rir_group_size, rtol=None))
        return out


def data_identity(plan: Plan) -> dict[str, str]:
    """The proxy: the embedded MNIST subset's arrays and the digits. The paper's nets: the folders and the weights
    file's sha256 (hashing ImageNet's files is out of reach; the folders are named instead)."""
    cfg, inputs = plan.cfg, plan.inputs
    if plan.mode in ("proxy", "smoke"):
        from ...data.mnist import load_mnist

        data = load_mnist()
        name = (f"mnist-subset/{cfg.pretrain_digits}-vs-{cfg.harmful_digits}" if plan.mode == "proxy"
                else f"mnist-subset digits at 224x224 ({cfg.name}, {cfg.smoke_per_class} per class)")
        return arrays_identity(name, {"images": data.images, "labels": data.labels})
    import hashlib

    weights = Path(inputs.weights) if inputs.weights else None
    digest = hashlib.sha256(weights.read_bytes()).hexdigest() if weights and weights.is_file() else "no weights file"
    return {"name": f"imagenet-1k ({inputs.imagenet}) vs {cfg.harmful} ({inputs.harmful_dir})",
            "sha256": f"weights {digest}"}


def net_bench(plan: Plan) -> tuple[NetBench, dict[str, str]]:
    """The bench of the proxy's or the paper's networks, and the data's identity (a missing input of the paper's
    networks, or kappalab[deep] missing, is a UsageError naming the argument)."""
    from ...cli_options import UsageError
    from .proxy import proxy_task

    data = data_identity(plan)
    work = plan.work_dir(data)
    if plan.mode == "proxy":
        return NetBench(proxy_task(plan.cfg, work, device=plan.device), work), data
    from ...deep.paper import paper_task

    inputs = plan.inputs
    if plan.mode == "smoke":
        from ...deep.smoke import make_digit_folders

        imagenet, harmful = make_digit_folders(work / "data", plan.cfg.smoke_per_class)
        inputs = PaperInputs(str(imagenet), str(harmful), inputs.weights)
    try:
        task = paper_task(plan.cfg, inputs, work, plan.device, methods=plan.methods,
                          calibrating=plan.action == "calibrate")
    except (ValueError, FileNotFoundError, ImportError) as error:  # missing inputs or kappalab[deep]
        raise UsageError(f"--arch {plan.cfg.arch}: {str(error).splitlines()[0]}") from None
    return NetBench(task, work), data
