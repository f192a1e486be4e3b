"""``kappalab reproduce table1``: the data and one run (the sweep worker :func:`run_one`, its config, task, data
identity, probe curves and step count); the command is :mod:`.cli`."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np


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


def run_one(params: dict[str, Any]) -> dict[str, Any]:
    """Sweep worker: train (``processes`` > 1: the data-parallel emulation), evaluate, save theta_I / bias / probe
    curves (and the trajectory) under ``OUT/runs/<key>/``. The evaluation, probes and trajectory read the task's
    float64 rows for every run (the data-parallel run trains on the rows rounded to float32)."""
    from kappalab.immunization import evaluate, immunize
    from kappalab.immunization.data_parallel import immunize_data_parallel
    from kappalab.immunization.protocols import PROTOCOL_CLASSES
    from kappalab.immunization.trajectory import TrajectoryRecorder

    cfg = config_of(params["protocol"], params["method"], params["overrides"])
    task = task_of(params["protocol"], params["data_csv"], cfg.extra.n_rows)
    processes = int(params.get("processes", 1))
    recorder = TrajectoryRecorder(task, steps_per_epoch(task, cfg, processes),
                                  bias=PROTOCOL_CLASSES[cfg.protocol].has_bias) if params.get("trajectory") else None
    if processes > 1:
        run = immunize_data_parallel(task, cfg, params["seed"], world_size=processes, device=params["device"],
                                     observer=recorder)
    else:
        run = immunize(task, cfg, params["seed"], device=params["device"], progress=False, observer=recorder)
    folder = Path(params["out"]) / "runs" / params["key"]
    folder.mkdir(parents=True, exist_ok=True)
    if recorder is not None:
        np.savez_compressed(folder / "trajectory.npz", **recorder.arrays())
    np.save(folder / "theta.npy", run.theta_I)
    if run.bias is not None:
        np.save(folder / "bias.npy", run.bias)
    pr = probe(run.theta_I, run.bias, task, params["probe_iters"], params["probe_target"])
    for which in ("P", "H"):
        np.save(folder / f"probe_{which}.npy", pr[which].pop("curve"))
    return {
        "protocol": cfg.protocol, "method": params["method"], "seed": params["seed"], "epochs": cfg.epochs,
        "eta": cfg.eta, "data": params["data"], "selection": "none", "processes": processes,
        "emulation": emulation(processes, task, cfg),
        "evaluation": evaluate(run, task, shift=cfg.extra.shift),
        "probing": pr, "wall_time_s": run.wall_time_s, "n_steps": run.n_steps,
        "degenerate_count": run.degenerate_count,
        "history": {k: [v[0], v[-1]] for k, v in run.history.items()},
        "files": {"theta_I": f"runs/{params['key']}/theta.npy",
                  "trajectory": f"runs/{params['key']}/trajectory.npz" if recorder is not None else None,
                  "bias": f"runs/{params['key']}/bias.npy" if run.bias is not None else None,
                  "probe": {w: f"runs/{params['key']}/probe_{w}.npy" for w in ("P", "H")}},
        "config_files": list(cfg.source),
    }

