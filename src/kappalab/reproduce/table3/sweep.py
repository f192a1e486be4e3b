"""``kappalab reproduce table3``: carry out a :class:`~.plan.Plan` (the one run loop of every mode).

:func:`execute` builds the mode's task and bench (the proxy's and the paper's networks: :class:`.run.NetBench`; the
real network: :class:`.real.RealBench`), then, by the plan's action, prints the calibration, runs the proxy's search,
or runs the missing records (:func:`sweep`) and writes the report (:mod:`.report`) from the records alone.

:func:`sweep` makes every record of the plan not yet in the store, in the plan's order, each with its times and
provenance; finished records are never redone. A record's ``provenance.git`` is the checkout :func:`execute` found
when it started, the code the process imported, not the one at the record's write (a commit made during a long
sweep would otherwise be named by records that never ran it). Under ``torchrun`` every rank trains and rank 0 alone holds the
store's lock and writes (a second rank taking the lock would fail at once and leave rank 0 waiting in all_reduce).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
from typing import Any, Protocol

import torch

from ...cli_options import UsageError
from ...deep.model import ImmunizableModel
from ...deep.task import Task
from ...distributed import finish_distributed, world
from ...provenance import git_state, provenance
from ...results import RunStore
from .plan import Plan, RunSpec


class Bench(Protocol):
    """What the loop needs of a mode: its task, and the measured fields of one record (``init``: the ``init``
    record of the spec's setting and seed, None for an ``init`` spec)."""

    task: Task

    def measure(self, spec: RunSpec, base: ImmunizableModel, init: dict[str, Any] | None) -> dict[str, Any]: ...


def sweep(specs: list[RunSpec], bench: Bench, store: RunStore, git: dict[str, Any] | None = None) -> int:
    """Make every record of ``specs`` missing from ``store`` (module docstring); returns this process's rank.
    ``git``: the checkout the process started from (:func:`execute` reads it first; None: read it now)."""
    git = git_state() if git is None else git
    from tqdm.auto import tqdm

    rank = world()[0]
    with store.lock() if rank == 0 else contextlib.nullcontext():
        made = {r["key"]: r for r in store.records()}
        todo = [s for s in specs if s.key not in made]
        bar = tqdm(todo, desc="table3", disable=not sys.stderr.isatty())
        for spec in bar:
            cpu, wall = time.process_time(), time.perf_counter()
            base = bench.task.theta0(spec.seed)
            record: dict[str, Any] = {"key": spec.key, "task": spec.cfg.name, "protocol": spec.cfg.protocol,
                                      "seed": spec.seed, "method": spec.method, "identity": spec.identity}
            record.update(bench.measure(spec, base, made.get(spec.init_key)))
            record["cpu_s"], record["wall_s"] = time.process_time() - cpu, time.perf_counter() - wall
            record["provenance"] = {**provenance(spec.seed, spec.cfg, device=str(bench.task.device),
                                                 dtype="float64", data_label=bench.task.data_label), "git": git}
            made[spec.key] = record
            if rank == 0:
                store.append(record)
                bar.write(f"{spec.key}: {record['cpu_s']:.0f} CPU-s"
                          + (f", {record['diverged']}" if "diverged" in record else ""))
    finish_distributed()
    return rank


def execute(plan: Plan) -> int:
    """Carry out ``plan`` (module docstring), with torch's default dtype float64 for the call only (restored after
    it: a caller in the same process, a test session among them, keeps its own)."""
    git = git_state()  # the code this process imported (module docstring)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _execute(plan, git)
    finally:
        torch.set_default_dtype(previous)


def _execute(plan: Plan, git: dict[str, Any]) -> int:
    from .report import report

    store = RunStore(plan.out / "runs.jsonl")
    if plan.action == "aggregate":
        return report(plan, _stored_records(plan, store))
    if plan.real:
        from .real import real_bench

        bench, data = real_bench(plan)
    else:
        from .run import net_bench

        bench, data = net_bench(plan)
    if plan.action == "search":
        from .search import run_search

        cfg = dataclasses.replace(plan.cfg, methods=list(plan.methods))
        result = run_search(cfg, plan.out, plan.work_dir(data).with_name(plan.work_dir(data).name + "_search"))
        print(json.dumps({m: {k: v for k, v in x.items() if k != "val"} for m, x in result["selected"].items()},
                         indent=2))
        return 0
    if plan.action == "calibrate":
        from .run import calibrate

        seed = plan.seeds[0]
        print(json.dumps(calibrate(bench.task, bench.task.theta0(seed), plan.cfg, seed), indent=2))
        return 0
    if any("identity" not in r for r in store.records()):
        raise UsageError(f"--out: {store.path} holds runs written before run identities (read it with "
                         "--aggregate-only); use another --out")
    specs = plan.specs(data)
    t0 = time.perf_counter()
    rank = sweep(specs, bench, store, git)
    print(f"table3 {plan.cfg.name}: runs finished in {time.perf_counter() - t0:.0f} s this call")
    if rank != 0:
        return 0  # tables and figures are rank 0's
    keys = {s.key for s in specs}
    return report(plan, [r for r in store.records() if r["key"] in keys])


def _stored_records(plan: Plan, store: RunStore) -> list[dict[str, Any]]:
    """The records ``--aggregate-only`` reports: the real network's of the plan's direction, protocol and seeds;
    the other modes' of the plan's config and device (all of a store written before run identities)."""
    stored = [r for r in store.records() if r["seed"] in plan.seeds]
    if plan.real:
        return [r for r in stored if r["task"] == plan.cfg.name and r["protocol"] == plan.cfg.protocol]
    if stored and all("identity" not in r for r in stored):
        return stored
    from ...results import to_jsonable
    from .config import resolved
    from .run import data_identity

    config, data = to_jsonable(resolved(plan.cfg)), data_identity(plan)
    return [r for r in stored if r.get("identity", {}).get("config") == config and r["identity"]["data"] == data
            and r["identity"]["options"]["device"] == plan.device]
