"""``kappalab reproduce table3``: run a checked command line (:class:`.cli.Call`): the proxy's or the paper's
task, ``--calibrate``, ``--search``, the runs, then the table and figure (``--aggregate-only``: those alone)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from ...cli_options import UsageError
from ...deep.methods import CONTROLS, METHODS
from ...extremes import eigensolver_option
from ...results import RunStore, to_jsonable
from ..identity import data_identity, identity
from .config import Table3Config, resolved
from .proxy import proxy_task
from .report import aggregate
from .run import calibrate, run_keys, run_on_every_rank
from .search import run_search


def _data_identity(cfg: Table3Config, args: argparse.Namespace) -> dict[str, str]:
    """The proxy: the embedded MNIST subset's arrays and the digits. The paper's nets: the folders and the weights
    file's sha256 (hashing ImageNet's files is out of reach; the folders are named instead)."""
    if args.proxy or args.smoke:
        from ...data.mnist import load_mnist

        data = load_mnist()
        name = (f"mnist-subset/{cfg.pretrain_digits}-vs-{cfg.harmful_digits}" if args.proxy
                else f"mnist-subset digits at 224x224 ({cfg.name}, {cfg.smoke_per_class} per class)")
        return data_identity(name, {"images": data.images, "labels": data.labels})
    import hashlib

    digest = hashlib.sha256(Path(args.weights).read_bytes()).hexdigest() if args.weights and Path(
        args.weights).is_file() else "no weights file"
    return {"name": f"imagenet-1k ({args.imagenet}) vs {cfg.harmful} ({args.harmful_dir})",
            "sha256": f"weights {digest}"}


def run(call) -> int:
    """Run what ``kappalab reproduce table3`` asked for (``call``: the checked command line, a
    :class:`kappalab.reproduce.table3.cli.Call`), with torch's default dtype float64 for the call only (restored
    after it: a caller in the same process, a test session among them, keeps its own)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _run(call)
    finally:
        torch.set_default_dtype(previous)


def _run(call) -> int:
    args, cfg, out, seeds, methods, title = call.args, call.cfg, call.out, call.seeds, call.methods, call.title
    unknown = [m for m in cfg.methods + methods if m not in METHODS + CONTROLS]
    if unknown:
        raise UsageError(f"config {cfg.config_file}: unknown methods {unknown}; choose from {METHODS + CONTROLS}")
    if cfg.arch == "efficientnet_lite0":
        from .real_report import run_and_report

        return run_and_report(call)
    data = _data_identity(cfg, args)
    # checkpoints (theta_0 and the immunization's epochs) live under the hash of the config and the data
    tag = identity(resolved(cfg), data, {"device": args.device, "dtype": "float64",
                                         **eigensolver_option(args.device)})["hash"]
    work = (Path(args.work) if args.work else out / "work") / tag
    if args.search:
        if not args.proxy or not cfg.search or cfg.protocol != "paper":
            raise UsageError("--search: needs --proxy and a config with a 'search' block")
        result = run_search(dataclasses.replace(cfg, methods=methods), out, work.with_name(work.name + "_search"))
        print(json.dumps({m: {k: v for k, v in x.items() if k != "val"} for m, x in result["selected"].items()},
                         indent=2))
        return 0
    store = RunStore(out / "runs.jsonl")
    stored = store.records()
    legacy = bool(stored) and all("identity" not in r for r in stored)
    if not args.aggregate_only:
        if any("identity" not in r for r in stored):
            raise UsageError(f"--out: {store.path} holds runs written before run identities (read it with "
                             "--aggregate-only); use another --out")
        task = proxy_task(cfg, work, device=args.device) if args.proxy else None
        if task is None:
            from ...deep.paper import paper_task

            if args.smoke:
                from ...deep.smoke import make_digit_folders

                args.imagenet, args.harmful_dir = map(str, make_digit_folders(work / "data", cfg.smoke_per_class))
            try:
                task = paper_task(cfg, args, work)
            except (ValueError, FileNotFoundError, ImportError) as error:  # missing inputs or kappalab[deep]
                raise UsageError(f"--arch {args.arch}: {str(error).splitlines()[0]}") from None
        if args.calibrate:
            print(json.dumps(calibrate(task, task.theta0(seeds[0]), cfg, seeds[0]), indent=2))
            return 0
        keys = run_keys(task, cfg, data, seeds, methods)
        t0 = time.perf_counter()
        rank = run_on_every_rank(task, cfg, store, work, seeds, methods, keys)
        print(f"table3 {cfg.name}: runs finished in {time.perf_counter() - t0:.0f} s this call")
        if rank != 0:
            return 0  # tables and figures are rank 0's
        wanted = {key for key, _ in keys.values()}
        records = [r for r in store.records() if r["key"] in wanted]
    elif legacy:  # a store whose records carry no run identity (e.g. the committed docs/reproduction/table3)
        records = [r for r in stored if r["seed"] in seeds]
    else:
        records = [r for r in stored if r.get("identity", {}).get("config") == to_jsonable(resolved(cfg))
                   and r["identity"]["data"] == data and r["identity"]["options"]["device"] == args.device
                   and r["seed"] in seeds]
    if not records:
        print(f"kappalab reproduce table3: no records of this config in {store.path}", file=sys.stderr)
        return 1
    print(aggregate(records, out, title, "" if cfg.protocol == "paper" else "_official"))
    return 0
