"""Table 3 on a real pretrained network: ImageNet EfficientNet-Lite0, Fashion-MNIST vs MNIST, on the CPU.

``kappalab reproduce table3 --arch efficientnet_lite0 --harmful mnist|fashion-mnist --protocol paper|official``
(configs ``table3_efficientnet_lite0_<harmful>.json``; D_P is the other dataset):

* theta_0 = the pretrained network (:mod:`kappalab.deep.efficientnet`) with a D_P head: a 10-class linear head
  fitted at theta_0 on the D_P training part (:func:`fit_head`, L-BFGS, the same for every seed). With
  ``theta0_statistics: "d_p"`` the tail's BatchNorm running statistics are first re-estimated on D_P's training
  activations (the paper's theta_0 was trained on its D_P; ImageNet's statistics are not D_P's), then the head
  fitted. The trunk up to ``trunk_cut`` is frozen and its activations are cached (:mod:`kappalab.deep.trunk`); the
  tail (the last stage, ``conv_head``, ``bn2`` -> 1280 pooled features, plus the dummy layer under the paper
  protocol) is trained by each method with :func:`kappalab.deep.immunize` and the objectives of
  :mod:`kappalab.deep.methods`.
* The lambdas follow Appendix C.2's gradient-norm rule at theta_0 (:func:`run_lambdas`): each seed's ``init``
  record holds the gradient norms and the balanced scales; a method run uses the scale times ``lambda_multiple``
  for every lambda its config leaves null, and a lambda the config gives (the file or ``--set``) as given.
* Every method record holds the three RIR estimators (:func:`kappalab.estimators.estimate_all` on the held-out
  features of theta_0 and theta_I; the rank rule at ``features_precision``), the singular values of the four held-out
  feature matrices and of every group the group estimators read (``group_spectra``), the estimators' terms at four
  checkpoints of training (``checkpoints``, with the D_P head's test accuracy there), the optimizer steps
  (``n_steps``), each module's relative displacement (``displacement``; :mod:`.measures`), and utility measured
  without kappa (:func:`utility`); the held-out features themselves are kept under the work folder
  (``features.npz``, from which ``experiments/table3_real_store.py`` builds the committed store), beside theta_I's
  trained weights (``theta_I.pt``, the model's state dict, for attackers that change the extractor; not
  committed). A run whose training diverges is recorded with ``diverged`` and its checkpoints so far
  (:func:`method_record`). ``tail_precision: "float32"`` runs the tail in the trunk cache's float32 (the features,
  heads and spectra stay float64: :class:`kappalab.deep.ImmunizableModel`).
* Where the config draws a validation part (``per_class.validation``), every record also holds ``validation``
  (:func:`validation_measures`: the D_P head's accuracy there and, for a method, the group RIR there), which the
  selection of a setting reads (:mod:`.grid`; ``--grid`` runs its points: :meth:`.plan.Plan.points`).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ...atomic_io import save_npz, torch_save
from ...deep import CombinedLoader, ImmunizableModel, accuracy, extract_features, linear_probe_curve
from ...deep.metrics import probe_iterations_to_loss
from ...deep.task import Task
from .config import Table3Config
from .constants import VALIDATION
from .measures import (Checkpoints, checkpoint_epochs, displacement, features_rtol, held_out_measures,
                       same_features, train_measured)
from .plan import Plan, RunSpec
from .real_data import Parts, draw_parts
from .run import calibrate, objective_config, train_config

ARCH = "efficientnet_lite0"
CLASSES = 10


@dataclass(frozen=True, eq=False)
class RealData:
    """Trunk activations (in the tail's dtype) and labels of each (task ``"P"``/``"H"``, part), with their
    provenance and the cost of loading them (``load``: CPU and wall seconds)."""

    parts: dict[str, Parts]
    X: dict[tuple[str, str], torch.Tensor]
    y: dict[tuple[str, str], torch.Tensor]
    trunk: dict[str, dict[str, Any]]
    weights_sha256: str
    load: dict[str, float]

    def identity(self, cfg: Table3Config) -> dict[str, Any]:
        """The data entry of a run identity: both datasets' parts, the weights' and trunk cache's keys."""
        return {"name": f"D_P {cfg.pretrain_data} / D_H {cfg.harmful}", "weights_sha256": self.weights_sha256,
                "P": self.parts["P"].identity(), "H": self.parts["H"].identity(),
                "trunk_keys": {t: m["key"] for t, m in self.trunk.items()}}


def load_real_data(cfg: Table3Config) -> tuple[nn.Module, RealData]:
    """The pretrained network (eval mode) and the cached trunk activations of both tasks' parts, both in the tail's
    dtype (``cfg.tail_precision``)."""
    from ...deep.efficientnet import WEIGHTS_SHA256, load_efficientnet_lite0
    from ...deep.trunk import cached_trunk

    cpu, wall = time.process_time(), time.perf_counter()
    dtype = getattr(torch, cfg.tail_precision)
    net = load_efficientnet_lite0(dtype=torch.float32)
    parts, X, y, trunk = {}, {}, {}, {}
    for tag, name in (("P", cfg.pretrain_data), ("H", cfg.harmful)):
        parts[tag] = draw_parts(name, cfg.per_class, cfg.split_seed_real)
        acts, trunk[tag] = cached_trunk(net, WEIGHTS_SHA256, parts[tag].all_images(), cfg.trunk_cut,
                                        cfg.image_size)
        for part, rows in parts[tag].offsets().items():
            X[tag, part] = torch.from_numpy(acts[rows]).to(dtype)
            y[tag, part] = torch.from_numpy(parts[tag].labels[part])
        if VALIDATION in parts[tag].labels:
            acts, trunk[f"{tag}_{VALIDATION}"] = cached_trunk(net, WEIGHTS_SHA256, parts[tag].images[VALIDATION],
                                                              cfg.trunk_cut, cfg.image_size)
            X[tag, VALIDATION] = torch.from_numpy(acts).to(dtype)
            y[tag, VALIDATION] = torch.from_numpy(parts[tag].labels[VALIDATION])
    load = {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall}
    return net.to(dtype).eval(), RealData(parts, X, y, trunk, WEIGHTS_SHA256, load)


def fit_head(F: torch.Tensor, y: torch.Tensor, l2: float, max_iter: int = 300) -> nn.Linear:
    """A 10-class linear head ``softmax(F W^T + b)`` fitted by L-BFGS (strong Wolfe) to label-free cross-entropy
    plus ``l2 ||W||_F^2``, from zero: the D_P head at theta_0 and the linear probes."""
    head = nn.Linear(F.shape[1], CLASSES, dtype=F.dtype)
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    opt = torch.optim.LBFGS(head.parameters(), lr=1.0, max_iter=max_iter, history_size=20,
                            line_search_fn="strong_wolfe", tolerance_grad=1e-9, tolerance_change=1e-12)
    F = F.detach()

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(head(F), y) + l2 * (head.weight ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return head.requires_grad_(False)


def build_task(net: nn.Module, data: RealData, cfg: Table3Config) -> Task:
    """The :class:`~kappalab.deep.task.Task` of one direction and protocol (theta_0 as in the module docstring)."""
    from ...deep.trunk import split_tail

    def fresh() -> ImmunizableModel:
        copy_ = copy.deepcopy(net)
        trainable, neck = split_tail(copy_, cfg.trunk_cut)
        return ImmunizableModel(nn.Identity(), trainable, neck, nn.Linear(1, 1, dtype=torch.float64),
                                copy_.num_features, dummy=cfg.protocol == "paper", ridge=cfg.dummy_ridge,
                                side=cfg.dummy_side, norm_statistics=cfg.norm_statistics)

    base = fresh()
    if cfg.theta0_statistics == "d_p":
        base.estimate_norm_statistics(data.X["P", "train"])
    head = fit_head(extract_features(base, data.X["P", "train"]), data.y["P", "train"], cfg.head_l2)

    def theta0(seed: int) -> ImmunizableModel:
        model = copy.deepcopy(base)
        model.classifier = copy.deepcopy(head).requires_grad_(True)
        return model

    def loaders(seed: int):
        from torch.utils.data import DataLoader, TensorDataset

        return tuple(DataLoader(TensorDataset(data.X[t, "train"], data.y[t, "train"]), batch_size=cfg.batch_size,
                                shuffle=True, generator=torch.Generator().manual_seed(offset + seed))
                     for t, offset in (("P", 1000), ("H", 2000)))

    return Task(name=cfg.name, theta0=theta0, loaders=loaders, rir_P=data.X["P", "heldout"],
                rir_H=data.X["H", "heldout"], test_P=(data.X["P", "test"], data.y["P", "test"]),
                probe=((data.X["H", "train"], data.y["H", "train"]), (data.X["H", "test"], data.y["H", "test"])),
                harmful_classes=CLASSES, device="cpu",
                data_label=f"{cfg.pretrain_data} (D_P) vs {cfg.harmful} (D_H), EfficientNet-Lite0 trunk "
                           f"activations at {cfg.image_size} px, cut {cfg.trunk_cut}")


def utility(model: ImmunizableModel, data: RealData, imagenet_head: nn.Module, cfg: Table3Config
            ) -> dict[str, Any]:
    """Utility measured without kappa: the model's own D_P head accuracy, a fresh D_P linear probe's accuracy, the
    D_H probe's iterations to ``probe_target_loss`` and its test-accuracy curve (Figure 3), and the ImageNet head's
    top-1 classes on the D_P test images (compared with theta_0's by the caller)."""
    F = {k: extract_features(model, data.X[k]) for k in (("P", "train"), ("P", "test"), ("H", "train"),
                                                           ("H", "test"))}
    probe = fit_head(F["P", "train"], data.y["P", "train"], cfg.head_l2)
    return {
        "dp_test_acc": accuracy(model, (data.X["P", "test"], data.y["P", "test"])),
        "dp_probe_acc": float((probe(F["P", "test"]).argmax(1) == data.y["P", "test"]).double().mean()),
        "dh_probe_iterations": probe_iterations_to_loss(F["H", "train"], data.y["H", "train"], num_classes=CLASSES,
                                                        target=cfg.probe_target_loss,
                                                        max_iter=cfg.probe_max_iter),
        "probe_curve": linear_probe_curve(F["H", "train"], data.y["H", "train"], F["H", "test"], data.y["H", "test"],
                                          epochs=cfg.probe_epochs, num_classes=CLASSES, step=cfg.probe_step),
        "imagenet_top1": imagenet_head(F["P", "test"]).argmax(1).tolist(),
    }


def run_lambdas(cfg: Table3Config, balanced: dict[str, float]) -> dict[str, float]:
    """The lambdas of a method run: ``cfg``'s value where it gives one, else the balanced scale at theta_0 times
    ``cfg.lambda_multiple``."""
    return {name: scale * cfg.lambda_multiple if getattr(cfg, name) is None else getattr(cfg, name)
            for name, scale in balanced.items()}


def part_features(model: ImmunizableModel, data: RealData, part: str = "heldout") -> dict[str, np.ndarray]:
    """Features of both tasks' ``part`` (float64): ``{"P": ..., "H": ...}``."""
    return {t: extract_features(model, data.X[t, part]).numpy() for t in ("P", "H")}


def rebuilt(record: dict[str, Any]) -> tuple[RealData, Task]:
    """The data and the task a recorded run used, rebuilt from its identity (the deep environment)."""
    from .config import config_of_record

    cfg = config_of_record(record)
    net, data = load_real_data(cfg)
    return data, build_task(net, data, cfg)


def kept_model(task: Task, data: RealData, record: dict[str, Any], work: Path) -> ImmunizableModel:
    """A recorded run's theta_I: theta_0 of its seed with the weights the run kept (``theta_I.pt``), refused unless
    it gives the held-out features the run kept (``features.npz``, both tasks; :func:`.measures.same_features`)."""
    folder = work / record["key"].replace("/", "_")
    for name in ("theta_I.pt", "features.npz"):
        if not (folder / name).is_file():
            raise SystemExit(f"--work: {folder / name} is missing; rerun the store's command to regenerate it")
    model = task.theta0(record["seed"])
    model.load_state_dict(torch.load(folder / "theta_I.pt", weights_only=True))
    FI = part_features(model, data)
    with np.load(folder / "features.npz") as kept:
        for t in ("P", "H"):
            if not same_features(FI[t], kept[f"{t}_I"]):
                raise SystemExit(f"{record['key']}: theta_I.pt's {t} features differ from the run's features.npz")
    return model


def validation_measures(model: ImmunizableModel, data: RealData, F0: dict[str, np.ndarray] | None,
                        cfg: Table3Config, seed: int, rtol: float | None) -> dict[str, float]:
    """What the selection of a setting reads (:mod:`.grid`), on the validation part alone: the model's D_P head
    accuracy and, for theta_I (``F0``: theta_0's validation features), the group estimator's RIR (ours, pinv
    kappa; the table's groups and size, drawn from the validation rows)."""
    from ...estimators import group_terms, kappa_ratio

    out = {"dp_acc": accuracy(model, (data.X["P", VALIDATION], data.y["P", VALIDATION]))}
    if F0 is not None:
        FI = part_features(model, data, VALIDATION)
        i_g, ii_g = group_terms(FI["H"], F0["H"], FI["P"], F0["P"], kappa_ratio("pinv", rtol),
                                groups=cfg.rir_groups, group_size=cfg.rir_group_size, seed=seed)
        out["rir_groups"] = float((i_g / ii_g).mean())
    return out


def checkpoint_measures(model: ImmunizableModel, data: RealData, F0_validation: dict[str, np.ndarray],
                        cfg: Table3Config, seed: int, rtol: float | None) -> dict[str, Any]:
    """Recorded at every checkpoint besides the estimators: the model's D_P head accuracy on the test part, and
    the validation measures where the config draws that part (``F0_validation``: theta_0's features there)."""
    out: dict[str, Any] = {"dp_test_acc": accuracy(model, (data.X["P", "test"], data.y["P", "test"]))}
    if F0_validation:
        out["validation"] = validation_measures(model, data, F0_validation, cfg, seed, rtol)
    return out


@dataclass
class Theta0:
    """What a call measures of theta_0 once (it is the same for every seed and setting): its utility, its held-out
    features and, where the config draws the validation part, its validation features."""

    utility: dict[str, Any] = field(default_factory=dict)
    features: dict[str, np.ndarray] = field(default_factory=dict)
    validation: dict[str, np.ndarray] = field(default_factory=dict)


def method_record(bench: RealBench, cfg: Table3Config, method: str, seed: int, key: str, balanced: dict[str, float],
                  base: ImmunizableModel) -> dict[str, Any]:
    """A method run's measured fields (the module docstring); a run whose training diverges (:data:`DIVERGED`)
    is recorded with ``diverged`` (what was raised, and when) and its checkpoints so far, nothing measured after."""
    data, rtol, theta0 = bench.data, bench.rtol, bench.theta0
    lambdas = run_lambdas(cfg, balanced)
    run_cfg = dataclasses.replace(cfg, **lambdas)
    model = copy.deepcopy(base)
    torch.manual_seed(seed)
    loader = CombinedLoader(*bench.task.loaders(seed), epoch_on=cfg.epoch_on)
    train = train_config(run_cfg, method)
    checkpoints = Checkpoints(checkpoint_epochs(train.epochs), len(loader), lambda: part_features(model, data),
                              theta0.features, seed, cfg.rir_groups, cfg.rir_group_size, rtol,
                              lambda: checkpoint_measures(model, data, theta0.validation, cfg, seed, rtol))
    obj = objective_config(run_cfg, CLASSES)
    out: dict[str, Any] = {"lambdas": lambdas,
                           **train_measured(model, method, loader, obj, train, checkpoints, progress=False)}
    if "diverged" in out:
        return out
    out["displacement"] = displacement(model, base)
    out["utility"] = utility(model, data, bench.imagenet_head, cfg)
    out["utility"]["imagenet_agreement"] = float(np.mean(
        np.asarray(out["utility"].pop("imagenet_top1")) == np.asarray(theta0.utility["imagenet_top1"])))
    if bench.validating:
        out["validation"] = validation_measures(model, data, theta0.validation, cfg, seed, rtol)
    F0, FI = theta0.features, part_features(model, data)
    out.update(held_out_measures(F0, FI, seed=seed, groups=cfg.rir_groups, group_size=cfg.rir_group_size, rtol=rtol))
    folder = bench.work / key.replace("/", "_")
    folder.mkdir(parents=True, exist_ok=True)
    save_npz(folder / "features.npz", P_0=F0["P"], H_0=F0["H"], P_I=FI["P"], H_I=FI["H"])
    torch_save(model.state_dict(), folder / "theta_I.pt")
    return out


@dataclass(frozen=True)
class RealBench:
    """One call's fixed inputs: the data, the task, the ImageNet head, the exact estimator's rank rule, the work
    folder, theta_0's measures, and each seed's calibration at theta_0 (no grid key changes it)."""

    data: RealData
    task: Task
    imagenet_head: nn.Module
    rtol: float | None
    work: Path
    theta0: Theta0
    calibration: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def validating(self) -> bool:
        return ("P", VALIDATION) in self.data.X

    def measure(self, spec: RunSpec, base: ImmunizableModel, init: dict[str, Any] | None) -> dict[str, Any]:
        """The trunk cache's provenance, then an ``init`` record's calibration, utility and validation measures,
        or a method record's fields (:func:`method_record`, with the balanced lambdas of ``init``)."""
        cfg, seed = spec.cfg, spec.seed
        out: dict[str, Any] = {"trunk": self.data.trunk, "trunk_load": self.data.load}
        measure_theta0(self, base, cfg)
        if spec.method != "init":
            return {**out, **method_record(self, cfg, spec.method, seed, spec.key, init["calibration"]["balanced"],
                                           base)}
        if seed not in self.calibration:
            self.calibration[seed] = calibrate(self.task, base, cfg, seed)
        out["calibration"] = self.calibration[seed]
        out["utility"] = {k: v for k, v in self.theta0.utility.items() if k != "imagenet_top1"}
        if self.validating:
            out["validation"] = validation_measures(base, self.data, None, cfg, seed, self.rtol)
        return out


def real_bench(plan: Plan) -> tuple[RealBench, dict[str, Any]]:
    """The real network's bench for ``plan`` (its data loaded, theta_0 built) and the data's identity."""
    net, data = load_real_data(plan.cfg)
    task = build_task(net, data, plan.cfg)
    n_heldout = {t: int(data.X[t, "heldout"].shape[0]) for t in ("P", "H")}
    # the exact estimator's rank rule at the trunk activations' precision (measures.features_rtol), where the config
    # asks for it; None: the float64 default rule of the runs recorded before
    rtol = (features_rtol(max(n_heldout.values()), net.num_features) if plan.cfg.features_precision == "float32"
            else None)
    imagenet_head = copy.deepcopy(net.classifier).to(torch.float64).requires_grad_(False)  # on float64 features
    bench = RealBench(data, task, imagenet_head, rtol,
                      plan.work_dir(data.identity(plan.cfg)), Theta0())
    return bench, data.identity(plan.cfg)


def measure_theta0(bench: RealBench, base: ImmunizableModel, cfg: Table3Config) -> None:
    """Fill ``bench.theta0`` on first use (theta_0 is the same for every seed and setting of the call)."""
    if not bench.theta0.utility:
        bench.theta0.utility.update(utility(base, bench.data, bench.imagenet_head, cfg), imagenet_agreement=1.0)
        bench.theta0.features.update(part_features(base, bench.data))
    if bench.validating and not bench.theta0.validation:
        bench.theta0.validation.update(part_features(base, bench.data, VALIDATION))
