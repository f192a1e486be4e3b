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
from typing import Sequence

from kappalab.cli_options import (RESULTS, Parser, UsageError, add_config_options, check_device, check_out, command,
                                  data_errors, positive_float, positive_int, seed, unique)
from kappalab.configs import PROTOCOLS, read_overrides

from .constants import ALL, HINTS, ORDER
from .plan import Plan, method_overrides
from .report import header, write_reports
from .run import config_of, steps_per_epoch, task_of
from .sweep import run_plan

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


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
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


def plan_of(args: argparse.Namespace) -> Plan:
    """The call's :class:`~.plan.Plan`: each method's config loaded (one data set for all), the data read, the
    data-parallel run's batches and the output folder checked."""
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
    return Plan(protocol=args.protocol, methods=tuple(args.methods), seeds=args.seeds, lrs=args.lrs,
                overrides=overrides, epochs=args.epochs, configs=configs, task=task, out=check_out(args.out),
                processes=args.processes, trajectory=args.trajectory, selection=args.selection,
                probe_iters=args.probe_iters, probe_target=args.probe_target, device=args.device,
                data_csv=args.data_csv, threads=args.threads, workers=args.workers, progress=not args.no_progress)


@command("kappalab reproduce table1")
def main(argv: list[str]) -> int:
    args = parse_args(argv)
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    plan = plan_of(args)
    with threadpool_limits(plan.threads):
        swept = run_plan(plan)
        meta = header(plan, swept, ["kappalab", "reproduce", "table1", *argv], time.perf_counter() - start, load)
        stem = write_reports(plan, swept, meta)
    print(f"[table1] wrote {plan.out}/{stem}.json, .md, .csv, figure1_{plan.protocol}{plan.tag}.png/pdf "
          f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
