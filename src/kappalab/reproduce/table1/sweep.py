"""``kappalab reproduce table1``: a :class:`~.plan.Plan` run against its store, ``OUT/runs_<protocol>.jsonl``.

:func:`run_plan` writes the data under ``OUT/data/<data hash>/`` (the four arrays), runs the plan's missing runs
(:func:`kappalab.sweep.run_sweep`: finished keys skipped, a killed call resumed, one progress display, the store's
lock), writes theta = I's probe curves (the Identity row of Figure 1) next to the data and returns the records
(:class:`Swept`) from which :mod:`.report` writes the tables and figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kappalab.atomic_io import save_npy

from .plan import Plan
from .run import probe, run_one


@dataclass(frozen=True)
class Swept:
    """What a plan's sweep leaves for the report."""

    records: list[dict[str, Any]]  #: the plan's runs in its order (key, result, identity, provenance)
    pool: list[dict[str, Any]]  #: every stored run with the plan's settings (:meth:`~.plan.Plan.same_settings`)
    completed: int  #: runs made by this call
    identity_probe: dict[str, Any]  #: theta = I's iterations on D_P and D_H (``P``, ``H``)
    identity_curves: dict[str, np.ndarray]  #: ... and its Eq. 16 curves


def write_data(plan: Plan) -> Path:
    """``OUT/data/<data hash>/``: the features and targets every run reads, enough to recompute every number."""
    task = plan.task
    folder = plan.out / "data" / plan.data["sha256"][:12]
    folder.mkdir(parents=True, exist_ok=True)
    for name, arr in (("features_P", task.X_P), ("features_H", task.X_H), ("y_P", task.y_P), ("y_H", task.y_H)):
        save_npy(folder / f"{name}.npy", arr)
    return folder


def as_row(stored: dict[str, Any]) -> dict[str, Any]:
    """A stored record as a report row: its key, its result's fields, identity and provenance."""
    return {"key": stored["key"], **stored["result"], "identity": stored["identity"],
            "provenance": stored.get("provenance")}


def run_plan(plan: Plan) -> Swept:
    """Run the plan's missing runs and collect its records (module docstring)."""
    import kappalab.sweep
    from kappalab.provenance import provenance
    from kappalab.results import RunStore

    folder = write_data(plan)
    runs = plan.runs()
    configs = {spec.key: cfg for spec, cfg in runs}
    jobs = [kappalab.sweep.Job(spec.key, spec) for spec, _ in runs]
    store = RunStore(plan.out / f"runs_{plan.protocol}.jsonl")
    done = kappalab.sweep.run_sweep(
        jobs, run_one, store, workers=plan.workers, threads_per_worker=plan.threads, progress=plan.progress,
        desc=f"table1/{plan.protocol}{plan.tag}",
        extra_record=lambda job: {"identity": job.spec.identity, "provenance": provenance(
            job.spec.seed, configs[job.key], device=plan.device, data_label=plan.task.data_label)})
    stored = {r["key"]: r for r in store.records() if r["key"] in configs}
    direct = probe(np.eye(plan.task.dim), None, plan.task, plan.probe_iters, plan.probe_target)  # theta = I
    curves = {w: direct[w].pop("curve") for w in ("P", "H")}
    for which in ("P", "H"):
        save_npy(folder / f"probe_identity_{which}_{plan.probe_iters}.npy", curves[which])
    return Swept(records=[as_row(stored[job.key]) for job in jobs],
                 pool=[as_row(r) for r in store.records() if plan.same_settings(r)],
                 completed=done.completed, identity_probe=direct, identity_curves=curves)
