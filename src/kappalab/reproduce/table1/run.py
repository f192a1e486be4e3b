"""``kappalab reproduce table1``: the data and one run (the sweep worker :func:`run_one`, its config, task, data
identity, probe curves and step count); the command is :mod:`.cli`."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kappalab.atomic_io import save_npy, save_npz

if TYPE_CHECKING:
    from kappalab.immunization import MethodConfig


@functools.lru_cache(maxsize=4)
def task_of(protocol: str, data_csv: str | None, n_rows: int):
    """Table 1's task (cached per process)."""
    from kappalab.immunization import house_prices_task

    return house_prices_task(protocol, data_csv, n_official=n_rows)


def data_identity_of(task) -> dict[str, str]:
    """The task's data identity: its name and the sha256 of the four arrays a run reads."""
    from kappalab.reproduce.identity import data_identity

    return data_identity(task.name, {"X_P": task.X_P, "y_P": task.y_P, "X_H": task.X_H, "y_H": task.y_H})


def probe(theta: np.ndarray, bias: np.ndarray | None, task, iters: int, target: float) -> dict[str, Any]:
    """Eq. 16 curves on D_P and D_H and the iterations to ``target``."""
    from kappalab.immunization import exact_line_search_gd, features

    out: dict[str, Any] = {}
    for which, X, y in (("P", task.X_P, task.y_P), ("H", task.X_H, task.y_H)):
        c = exact_line_search_gd(features(theta, X, bias), y, iters, target)
        out[which] = {"curve": c.norm_ratio, "iters_to_norm_ratio": c.iters_to_norm_ratio,
                      "iters_to_excess_loss": c.iters_to_excess_loss, "final_norm_ratio": float(c.norm_ratio[-1])}
    return out


def config_of(protocol: str, name: str, overrides: dict[str, Any]):
    """The config of a Table 1 row: ``table1_<protocol>_<name>.json`` (a method of :data:`ORDER` or a hint
    baseline of :data:`HINTS`) with ``overrides``."""
    from kappalab.immunization import load_config

    return load_config(f"table1_{protocol}_{name}", overrides)


def steps_per_epoch(task, cfg, processes: int) -> int:
    """Optimizer steps per epoch: the engine's batches (one full batch under the paper protocol), or the
    ``processes``-rank data-parallel run's (:func:`kappalab.immunization.data_parallel.steps_per_epoch`).
    ValueError when a rank's shard holds less than one batch."""
    import torch

    from kappalab.immunization import data_parallel
    from kappalab.immunization.protocols import make_protocol

    if processes > 1:
        return data_parallel.steps_per_epoch(task, cfg, processes)
    return 1 if cfg.batch_size is None else len(make_protocol(task, cfg, "cpu").epoch_order(torch.Generator()))


def emulation(processes: int, task, cfg) -> dict[str, Any] | None:
    """The record's description of an N-process run (None for one process)."""
    if processes == 1:
        return None
    return {"function": "kappalab.immunization.data_parallel.immunize_data_parallel", "world_size": processes,
            "sampler": "torch DistributedSampler, seed 0, paired (D_P, D_H) rows", "float32_inputs": True,
            "gradients": "mean over ranks", "steps_per_epoch": steps_per_epoch(task, cfg, processes)}


@dataclass(frozen=True)
class RunSpec:
    """One Table 1 run, as its worker reads it (typed fields); :meth:`record` is the record's ``params`` (the keys
    and values its stores have always held) and :attr:`config` its resolved config, built once per run."""

    key: str  #: the run's key (its label and the identity's hash)
    identity: Mapping[str, Any]  #: its identity (:func:`kappalab.reproduce.identity.identity`)
    protocol: str
    method: str  #: a method of Table 1 or a hint baseline (:func:`config_of`)
    seed: int
    overrides: Mapping[str, Any]  #: the method's overrides (``--set``, ``--epochs``, the learning rate of ``--lrs``)
    data_csv: str | None  #: House Prices' train.csv (None: the cached download)
    device: str
    probe_iters: int  #: Eq. 16's gradient-descent iterations
    probe_target: float  #: ... and the relative error counted to
    out: Path  #: the command's output folder (the run's arrays go under ``out/runs/<key>``)
    trajectory: bool  #: record the trajectory (:class:`kappalab.immunization.trajectory.TrajectoryRecorder`)
    data: Mapping[str, Any]  #: the data's identity and rows (the record's ``data``)
    processes: int  #: > 1: the data-parallel emulation of that many processes

    @functools.cached_property
    def config(self) -> MethodConfig:
        """The run's resolved config: ``table1_<protocol>_<method>`` with its overrides."""
        return config_of(self.protocol, self.method, dict(self.overrides))

    def record(self) -> dict[str, Any]:
        return {"key": self.key, "identity": self.identity, "protocol": self.protocol, "method": self.method,
                "seed": self.seed, "overrides": self.overrides, "data_csv": self.data_csv, "device": self.device,
                "probe_iters": self.probe_iters, "probe_target": self.probe_target, "out": str(self.out),
                "trajectory": self.trajectory, "data": self.data, "processes": self.processes}


def run_one(spec: RunSpec) -> dict[str, Any]:
    """Sweep worker: train (``processes`` > 1: the data-parallel emulation), evaluate, save theta_I / bias / probe
    curves (and the trajectory) under ``OUT/runs/<key>/``. The evaluation, probes and trajectory read the task's
    float64 rows for every run (the data-parallel run trains on the rows rounded to float32)."""
    from kappalab.immunization import evaluate, immunize
    from kappalab.immunization.data_parallel import immunize_data_parallel
    from kappalab.immunization.protocols import PROTOCOL_CLASSES
    from kappalab.immunization.trajectory import TrajectoryRecorder

    cfg, processes = spec.config, spec.processes
    task = task_of(spec.protocol, spec.data_csv, cfg.extra.n_rows)
    recorder = TrajectoryRecorder(task, steps_per_epoch(task, cfg, processes),
                                  bias=PROTOCOL_CLASSES[cfg.protocol].has_bias and cfg.extra.bias) if spec.trajectory else None
    if processes > 1:
        run = immunize_data_parallel(task, cfg, spec.seed, world_size=processes, device=spec.device,
                                     observer=recorder)
    else:
        run = immunize(task, cfg, spec.seed, device=spec.device, progress=False, observer=recorder)
    folder = spec.out / "runs" / spec.key
    folder.mkdir(parents=True, exist_ok=True)
    if recorder is not None:
        save_npz(folder / "trajectory.npz", compressed=True, **recorder.arrays())
    save_npy(folder / "theta.npy", run.theta_I)
    if run.bias is not None:
        save_npy(folder / "bias.npy", run.bias)
    pr = probe(run.theta_I, run.bias, task, spec.probe_iters, spec.probe_target)
    for which in ("P", "H"):
        save_npy(folder / f"probe_{which}.npy", pr[which].pop("curve"))
    runs = f"runs/{spec.key}"
    return {
        "protocol": cfg.protocol, "method": spec.method, "seed": spec.seed, "epochs": cfg.epochs,
        "eta": cfg.eta, "data": spec.data, "selection": "none", "processes": processes,
        "emulation": emulation(processes, task, cfg),
        "evaluation": evaluate(run, task, shift=cfg.extra.shift),
        "probing": pr, "wall_time_s": run.wall_time_s, "n_steps": run.n_steps,
        "degenerate_count": run.degenerate_count, "eigensolver_fallbacks": run.eigensolver_fallbacks,
        "history": {k: [v[0], v[-1]] for k, v in run.history.items()},
        "files": {"theta_I": f"{runs}/theta.npy",
                  "trajectory": f"{runs}/trajectory.npz" if recorder is not None else None,
                  "bias": f"{runs}/bias.npy" if run.bias is not None else None,
                  "probe": {w: f"{runs}/probe_{w}.npy" for w in ("P", "H")}},
        "config_files": list(cfg.source),
    }
