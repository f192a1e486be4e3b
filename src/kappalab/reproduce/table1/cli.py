"""``kappalab reproduce table1``: Table 1 and Figure 1 (House Prices, four methods, one protocol per call).

Writes into ``--out`` (default ``results/table1``; several protocols and configs may share one folder):

* ``runs_<protocol>.jsonl`` - the resumable store: one record per finished run, keyed
  ``<protocol>.<method>.s<seed>.e<epochs>.<hash>`` where the hash is the run's identity (resolved config, data
  sha256, options; :mod:`kappalab.reproduce.identity`), so a changed config or other data never reuses a run,
* ``runs/<key>/`` - that run's artifacts: ``theta.npy`` (+ ``bias.npy``), ``probe_P.npy``, ``probe_H.npy``
  (Eq. 16 curves),
* ``data/<data hash>/`` - ``features_P.npy``, ``features_H.npy``, ``y_P.npy``, ``y_H.npy`` and the identity's
  probe curves: enough to recompute every number from the files alone,
* ``table1_<protocol>.json`` (every run's record and the summary), ``.md``, ``.csv`` (mean +- std next to the
  paper's numbers, labelled reference) and ``figure1_<protocol>.png`` / ``.pdf``.

``--processes N`` (official protocol) trains each run as the shipped config's N-process data-parallel run
(:func:`kappalab.immunization.data_parallel.immunize_data_parallel`, an exact one-process emulation); N is part of
the run's identity and label (``...e<epochs>.p<N>.<hash>``) and the reports carry ``_ddp<N>`` in their names, so
1- and N-process runs share an ``--out`` without reusing each other.

Config: the shipped ``table1_<protocol>_<method>.json`` (:mod:`kappalab.configs`); ``--config FILE`` (a JSON object
of overrides) and ``--set KEY=VALUE`` change values for every method, ``--set ours.lambda_H=1e8`` for one.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from kappalab.atomic_io import save_npy
from kappalab.cli_options import (RESULTS, Parser, UsageError, add_config_options, check_device, check_out, command,
                                  data_errors, positive_float, positive_int, seed, unique)
from kappalab.configs import PROTOCOLS, read_overrides
from kappalab.extremes import eigensolver_option
from kappalab.results import MEAN_STD_CONVENTION

from .constants import ALL, HINTS, ORDER, PAPER_TABLE1
from .report import csv_rows, figure, markdown, summarize
from .run import RunSpec, config_of, data_identity_of, probe, run_one, steps_per_epoch, task_of

SELECTIONS = ("none", "paper", "validation")
QUICK_EPOCHS = {"paper": 3, "official": 2}
QUICK_PROBE_ITERS = 50
DEFAULT_SEEDS = (0, 1, 2, 3, 4)


#: what --help prints above the options (the module docstring and docs/reproduction/table1.md hold the long account)
HELP = """Table 1 and Figure 1 (House Prices): a linear extractor immunized by the four methods of Table 1, under one
protocol per call: paper (Alg. 1 as stated) or official (the authors' public code as read).

Every (protocol, method, seed) is one record in OUT/runs_<protocol>.jsonl keyed by its run identity (resolved
config, data sha256, options), so finished runs are never redone and several protocols and configs can share one
--out. Each run's theta and probing curves and the data go under OUT; table1_<protocol>.json/.md/.csv and
figure1_<protocol>.png/.pdf are rebuilt from the records. --processes N (official protocol) emulates the shipped
N-process data-parallel run. Config: the shipped table1_<protocol>_<method>.json; --set KEY=VALUE changes a value
for every method, --set ours.lambda_H=1e8 for one. Details: docs/reproduction/table1.md."""

EXAMPLES = """examples:
  kappalab reproduce table1 --protocol paper --quick
  kappalab reproduce table1 --protocol official --processes 2 --trajectory
  kappalab reproduce table1 --protocol paper --methods ours --lrs 0.0005 0.001 0.005 0.01 --selection paper"""


def build_parser() -> Parser:
    ap = Parser(prog="kappalab reproduce table1", description=HELP, epilog=EXAMPLES,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", choices=PROTOCOLS, default="paper",
                    help="paper: Alg. 1 as stated (default); official: the authors' public code as read")
    ap.add_argument("--seeds", type=seed, nargs="+", default=None, help="default 0 1 2 3 4 (--quick: 0)")
    ap.add_argument("--epochs", type=positive_int, default=None, help="override the config's epochs")
    ap.add_argument("--methods", nargs="+", choices=ALL, default=list(ORDER),
                    help="default: the four of Table 1; " + ", ".join(HINTS) + ": the hint baselines")
    ap.add_argument("--lrs", type=positive_float, nargs="+", default=None,
                    help="Adam learning rates, one run per lr x method x seed (default: the config's eta; "
                         "App. C.2's grid: 0.0005 0.001 0.005 0.01)")
    ap.add_argument("--processes", type=positive_int, default=1,
                    help="--protocol official: emulate the shipped N-process data-parallel run (the shipped "
                         "config: 2; default 1 = the engine's one-process run)")
    ap.add_argument("--trajectory", action="store_true",
                    help="record (i), (ii), RIR, loss_P, fit_P per epoch (kappalab.immunization.trajectory)")
    ap.add_argument("--selection", choices=SELECTIONS, default="none",
                    help="App. C.2's lr x epoch selection over the trajectories (implies --trajectory): 'paper' "
                         "selects and reports on all rows, 'validation' selects on a validation half and reports "
                         "on the held-out half (kappalab.immunization.selection); both write every variant")
    ap.add_argument("--out", type=Path, default=RESULTS / "table1", help="output folder (default results/table1)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: few epochs, seed 0, short probing")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--threads", type=positive_int, default=1, help="torch / BLAS threads per worker (default 1)")
    ap.add_argument("--workers", type=positive_int, default=1, help="runs in parallel processes (default 1)")
    ap.add_argument("--probe-iters", type=positive_int, default=2000, help="linear-probing GD iterations (Figure 1)")
    ap.add_argument("--probe-target", type=float, default=1e-3, help="relative error for the iteration count")
    ap.add_argument("--data-csv", default=None, help="House Prices train.csv (default: cached download)")
    ap.add_argument("--no-progress", action="store_true")
    add_config_options(ap, "a JSON object of overrides, same keys as --set")
    return ap


def parse_args(argv: Sequence[str]):
    args = build_parser().parse_args(list(argv))
    args.seeds = unique(args.seeds if args.seeds is not None else ((0,) if args.quick else DEFAULT_SEEDS), "--seeds")
    if args.quick:
        args.epochs = args.epochs or QUICK_EPOCHS[args.protocol]
        args.probe_iters = min(args.probe_iters, QUICK_PROBE_ITERS)
    if not (math.isfinite(args.probe_target) and 0 < args.probe_target < 1):
        raise UsageError(f"--probe-target: must be in (0, 1), got {args.probe_target}")
    check_device(args.device)
    args.lrs = unique(args.lrs, "--lrs") if args.lrs is not None else None
    args.trajectory = args.trajectory or args.selection != "none"
    if args.processes > 1 and args.protocol != "official":
        raise UsageError(f"--processes {args.processes}: the data-parallel run is the official protocol's shipped "
                         f"config (minibatches, paired rows); --protocol {args.protocol} runs in one process")
    return args


def method_overrides(overrides: dict[str, Any], method: str) -> dict[str, Any]:
    """The overrides that apply to ``method``: unscoped keys, and ``<method>.<key>`` with the prefix removed."""
    from kappalab.immunization import METHODS

    scopes = set(METHODS) | set(ALL)
    out = {k: v for k, v in overrides.items() if k.split(".")[0] not in scopes}
    out.update({k.split(".", 1)[1]: v for k, v in overrides.items() if k.split(".")[0] == method})
    return out


@command("kappalab reproduce table1")
def main(argv: list[str]) -> int:
    args = parse_args(argv)
    import torch
    from threadpoolctl import threadpool_limits

    from kappalab.provenance import provenance
    from kappalab.reproduce.identity import identity, run_key
    from kappalab.results import RunStore, to_jsonable, write_report
    from kappalab.sweep import Job, run_sweep

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    overrides = read_overrides(args.config, args.overrides)
    configs = {m: config_of(args.protocol, m, method_overrides(overrides, m)) for m in args.methods}
    if args.epochs is not None:
        configs = {m: c.replace(epochs=args.epochs) for m, c in configs.items()}
    n_rows = {c.extra.n_rows for c in configs.values()}
    if len(n_rows) != 1:
        raise UsageError(f"--set: the methods' extra.n_rows differ ({sorted(n_rows)}): one table, one data set")
    with data_errors("--data-csv"):
        task = task_of(args.protocol, args.data_csv, n_rows.pop())
    for m, c in configs.items():
        try:
            steps_per_epoch(task, c, args.processes)
        except ValueError as e:
            raise UsageError(f"--processes {args.processes}: {m}: {e}") from None
    out: Path = check_out(args.out)
    with threadpool_limits(args.threads):
        data = data_identity_of(task)
        data_dir = out / "data" / data["sha256"][:12]
        data_dir.mkdir(parents=True, exist_ok=True)
        for name, arr in (("features_P", task.X_P), ("features_H", task.X_H), ("y_P", task.y_P), ("y_H", task.y_H)):
            save_npy(data_dir / f"{name}.npy", arr)
        data_record = {**data, "rows": {"P": int(task.X_P.shape[0]), "H": int(task.X_H.shape[0])}}
        run_configs = {}
        # a one-process run names no 'processes' option, so runs recorded without the option keep their key
        call_options = {"device": args.device, "dtype": "float64", **eigensolver_option(args.device),
                        "probe_iters": args.probe_iters,
                        "probe_target": args.probe_target, **({"trajectory": True} if args.trajectory else {}),
                        **({"processes": args.processes} if args.processes > 1 else {})}
        tag = f"_ddp{args.processes}" if args.processes > 1 else ""
        jobs = []
        for lr in args.lrs or (None,):
            for method in args.methods:
                cfg = configs[method] if lr is None else configs[method].replace(eta=lr)
                for s in args.seeds:
                    options = {"seed": s, **call_options}
                    ident = identity(cfg.resolved(), data, options)
                    key = run_key(f"{args.protocol}.{method}.s{s}.e{cfg.epochs}" + (f".lr{lr:g}" if lr else "")
                                  + (f".p{args.processes}" if args.processes > 1 else ""), ident)
                    run_configs[key] = cfg
                    overrides_m = {**method_overrides(overrides, method),
                                   **({"epochs": args.epochs} if args.epochs is not None else {}),
                                   **({"eta": lr} if lr is not None else {})}
                    jobs.append(Job(key, RunSpec(key, ident, args.protocol, method, s, overrides_m, args.data_csv,
                                                 args.device, args.probe_iters, args.probe_target, out,
                                                 args.trajectory, data_record, args.processes)))
        store = RunStore(out / f"runs_{args.protocol}.jsonl")
        done = run_sweep(jobs, run_one, store, workers=args.workers, threads_per_worker=args.threads,
                         progress=not args.no_progress, desc=f"table1/{args.protocol}{tag}",
                         extra_record=lambda job: {"identity": job.spec.identity, "provenance": provenance(
                             job.spec.seed, run_configs[job.key], device=args.device,
                             data_label=task.data_label)})
        wanted = {job.key for job in jobs}
        stored = {r["key"]: r for r in store.records() if r["key"] in wanted}
        records = [{"key": job.key, **stored[job.key]["result"], "identity": stored[job.key]["identity"],
                    "provenance": stored[job.key].get("provenance")} for job in jobs]
        direct = probe(np.eye(task.dim), None, task, args.probe_iters, args.probe_target)  # theta = I
        direct_curves = {w: direct[w].pop("curve") for w in ("P", "H")}
        for which in ("P", "H"):
            save_npy(data_dir / f"probe_identity_{which}_{args.probe_iters}.npy", direct_curves[which])
        ev0 = records[0]["evaluation"]
        meta = {"protocol": args.protocol, "processes": args.processes, "seeds": list(args.seeds),
                "methods": args.methods,
                "epochs": {m: c.epochs for m, c in configs.items()}, "device": args.device,
                "threads": args.threads, "workers": args.workers,
                "load_average": [round(x, 2) for x in load] if load else None,
                "total_wall_time_s": time.perf_counter() - start, "rtol": ev0["rtol"], "shift": ev0["shift"],
                "probe_iters": args.probe_iters, "probe_target": args.probe_target, "identity_probe": direct,
                "data_label": task.data_label, "data": data_record, "overrides": overrides,
                "mean_std": MEAN_STD_CONVENTION, "runs_done_this_call": done.completed,
                "command": ["kappalab", "reproduce", "table1", *argv]}
        # with --lrs, each lr's report and the selection cover every run of this store made with the same protocol,
        # data, options and epochs (earlier calls into the same --out included), not only this call's
        same = lambda rec: (rec["result"]["protocol"] == args.protocol and rec["identity"]["data"] == data
                            and {k: v for k, v in rec["identity"]["options"].items() if k != "seed"} == call_options
                            and rec["result"]["epochs"] in {c.epochs for c in configs.values()})
        pool = [{"key": rec["key"], **rec["result"], "identity": rec["identity"], "provenance": rec.get("provenance")}
                for rec in store.records() if same(rec)]
        groups = {None: records} if args.lrs is None else {lr: [r for r in pool if r.get("eta") == lr]
                                                            for lr in args.lrs}
        for lr, rs in groups.items():
            suffix = f"_lr{lr:g}" if lr is not None else ""
            summary = summarize(rs)
            stem = f"table1_{args.protocol}{tag}{suffix}"
            write_report(out, stem, to_jsonable({"meta": {**meta, "lr": lr}, "summary": summary,
                                                 "paper_reference": PAPER_TABLE1, "runs": rs}),
                         markdown(summary, meta), csv_rows(summary))
            figure(out, rs, direct_curves, f"{args.protocol}{tag}{suffix}")
        if args.trajectory:
            from .selection import write_selection

            grid = [r for r in pool if r["files"].get("trajectory")]
            write_selection(out, grid, args.selection, args.protocol, data_record, tag)
    print(f"[table1] wrote {out}/{stem}.json, .md, .csv, figure1_{args.protocol}{tag}.png/pdf "
          f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
