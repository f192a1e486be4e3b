"""A Table 2 plan's runs against its store: whether a store may take the plan's runs (:func:`check_store`), the part
of the plan one process runs (:func:`shard`), the sweep of the runs not yet stored through the plan's engine
(:func:`sweep`; :func:`sweep_trajectories` for ``--trajectory``), and the plan's records in the store
(:func:`select_records`).

The loop is :mod:`kappalab.sweep`'s: a key already stored is skipped (running the same command again resumes), one
progress display covers the whole sweep, the store's lock is held for the call, and each finished run is stored at
once with its identity and provenance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kappalab.cli_options import UsageError
from kappalab.results import RunStore
from kappalab.sweep import Job, SweepSummary, run_batched_sweep, run_sweep, shard_jobs

from .engine import DEFAULT_BATCH_SIZE
from .report import label_of, record_route
from .run import batched_runs, run_one
from .spectra import SPECTRA_METHOD

if TYPE_CHECKING:
    from .plan import Plan
    from .selection import TrajectoryPlan


@dataclass(frozen=True)
class SweepOptions:
    """How a sweep runs, none of it part of a run's identity: the single engine's processes, the batched engine's
    runs per batch, the progress display, and the shard ``(K, N)`` this process runs (None: the whole plan)."""

    workers: int = 1
    batch_size: int = DEFAULT_BATCH_SIZE
    progress: bool = True
    shard: tuple[int, int] | None = None


def check_store(plan: Plan, route: str) -> None:
    """Refuse to add runs to a store of another kind: one whose records carry no run identity, one holding another
    spectral route, or spectra computed another way (no silently mixed table)."""
    records = RunStore(plan.store_path).records()
    if any("identity" not in r for r in records):
        raise UsageError(f"--out: {plan.store_path} holds runs written before run identities (read it with "
                         "--report-only); use another --out")
    others = sorted({record_route(r) for r in records} - {route})
    if others:
        raise UsageError(f"--out: {plan.store_path} holds runs made with spectral_route {others}, the configs now "
                         f"say {route!r}: use another --out")
    stale = sorted({(r.get("result") or {}).get("spectra", "eigvalsh-gram") for r in records} - {SPECTRA_METHOD})
    if stale:
        raise UsageError(f"--out: {plan.store_path} holds runs whose spectra were computed by {stale}, this "
                         f"version stores {SPECTRA_METHOD!r} spectra: use another --out")


def shard(jobs: list[Job], options: SweepOptions) -> list[Job]:
    """The jobs this process runs: shard K of N of ``jobs`` (split by run label:
    :func:`kappalab.sweep.shard_jobs`), or all of them."""
    if options.shard is None:
        return jobs
    return shard_jobs(jobs, *options.shard, label=lambda job: label_of(job.key))


def sweep(plan: Plan, jobs: list[Job], options: SweepOptions, data_label: str) -> SweepSummary:
    """Run the ``jobs`` not yet in the plan's store with the plan's engine (single: :func:`.run.run_one` in
    ``options.workers`` processes; batched: :func:`.run.batched_runs` in this process) and say what ran."""
    desc, extra = f"table2/{plan.protocol}", _identity_and_provenance(plan.device, data_label)
    if plan.engine == "batched":
        summary = run_batched_sweep(jobs, batched_runs(plan.device, options.batch_size), plan.store_path,
                                    progress=options.progress, desc=desc, extra_record=extra)
    else:
        summary = run_sweep(jobs, run_one, plan.store_path, workers=options.workers, progress=options.progress,
                            desc=desc, extra_record=extra)
    _say(summary, f", engine {plan.engine}, {options.workers} worker(s)")
    return summary


def sweep_trajectories(plan: TrajectoryPlan, options: SweepOptions) -> SweepSummary:
    """``--trajectory``: run the plan's trajectory runs not yet in its store (:func:`.selection.trajectory_run`,
    single engine) and say what ran."""
    from .selection import trajectory_run

    summary = run_sweep(plan.jobs(), trajectory_run, plan.store_path, workers=options.workers,
                        progress=options.progress, desc=f"table2/{plan.protocol}+trajectory",
                        extra_record=_identity_and_provenance(plan.device, plan.dataset))
    _say(summary, "")
    return summary


def select_records(plan: Plan, keys: set[str]) -> tuple[list[dict[str, Any]], bool]:
    """The stored records the report covers, and whether the store's records carry no run identity.

    A store with run identities: the records of this plan's keys. A store whose records carry no ``identity``
    (e.g. the committed ``docs/reproduction/table2/...``): its records of the plan's pool and epochs."""
    records = RunStore(plan.store_path).records()
    if records and all("identity" not in r for r in records):
        return [r for r in records if r["params"].get("pool", 1) == plan.pool
                and r["params"]["epochs"] == plan.epochs], True
    return [r for r in records if r["key"] in keys], False


def _identity_and_provenance(device: str, data_label: str) -> Callable[[Job], dict[str, Any]]:
    """What every record adds to its ``params`` and ``result``: the run's identity and its provenance."""
    from kappalab.provenance import provenance

    return lambda job: {"identity": job.spec.identity, "provenance": provenance(
        job.spec.seed, job.record(), device=device, data_label=data_label)}


def _say(summary: SweepSummary, how: str) -> None:
    """One line on what the call ran (nothing when every run was already stored)."""
    if summary.run_times_s:
        print(f"table2: {summary.completed} runs in {summary.wall_time_s:.1f} s "
              f"({float(np.mean(summary.run_times_s)):.1f} s/run{how}); {summary.skipped} were already done")
