"""``kappalab reproduce table1``: one run (the sweep worker :func:`run_one`: a :class:`~.plan.RunSpec` -> its record)
and what it reads: its config, the task, the probe curves and the step count."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from kappalab.atomic_io import save_npy, save_npz

from .plan import RunSpec


@functools.lru_cache(maxsize=4)
def task_of(protocol: str, data_csv: str | None, n_rows: int):
    """Table 1's task (cached per process)."""
    from kappalab.immunization import house_prices_task

    return house_prices_task(protocol, data_csv, n_official=n_rows)


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


def run_one(spec: RunSpec) -> dict[str, Any]:
    """Sweep worker: train (``processes`` > 1: the data-parallel emulation), evaluate, save theta_I / bias / probe
    curves (and the trajectory) under ``OUT/runs/<key>/``. The evaluation, probes and trajectory read the task's
    float64 rows for every run (the data-parallel run trains on the rows rounded to float32)."""
    from kappalab.immunization import evaluate, immunize
    from kappalab.immunization.data_parallel import immunize_data_parallel
    from kappalab.immunization.protocols import PROTOCOL_CLASSES
    from kappalab.immunization.trajectory import TrajectoryRecorder

    cfg, processes = config_of(spec.protocol, spec.method, dict(spec.overrides)), spec.processes
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
