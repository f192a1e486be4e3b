"""A finished Table 2 sweep's wall time against its unavoidable float64 products, timed on the same cores in the
same sitting (issue 14's goal: wall time <= 1.35 x the products).

    kappalab reproduce table2 --protocol official --data mnist-subset --workers 2 --out DIR   # timed by the caller
    python benchmarks/sweep_products.py DIR --wall-s SECONDS [--workers 2] [--sample 0.25] [--json OUT]

The products of one run's step (:func:`step_time`): the features ``X theta`` of each task the method uses (one
``64 x 784 x 784`` GEMM each) and theta's gradient (one more each), as the single engine computes them (one product
over the stacked rows ``[X_P; X_H]`` each): 4 such GEMMs for Ours, Opt kappa and IMMA, 2 for R_ill Only
("strict"). The issue counts 4 for every method ("uniform": ~66 GFLOP per run); both ratios are reported. The
store's records give each run's method and steps.

The products are timed as the sweep ran: ``--workers`` processes at once, one thread each, each timing its share of
the steps. ``--sample F`` times that fraction of the steps and scales the seconds by ``1 / F`` (each step's products
have the same shapes, so their time per step is stationary up to the machine's load; the report says F).

A floor, timed the same way: the same products each followed by the fused Adam update of theta (what every step
must do besides its products; memory-bound), as a ratio to the products alone.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sweep_table2 import USES_P, gemm_rate  # benchmarks/ is on sys.path (script)

D, N = 784, 64  #: Table 2's features (pool 1) and official minibatch rows: the only runs this script times


def steps_by_tasks(store: Path) -> tuple[Counter, int, int]:
    """Steps of the store's runs by the number of tasks whose features their step uses (1: R_ill Only, 2: the
    others), the number of runs, and the steps of all runs."""
    steps: Counter = Counter()
    runs = total = 0
    with open(store) as f:
        for line in f:
            record = json.loads(line)
            if record["params"]["protocol"] != "official" or int(record["params"]["pool"]) != 1:
                raise ValueError(f"{store}: run {record['key']} is not an official-protocol run at pool 1 "
                                 f"(D = {D}, {N}-row minibatches)")
            method, n = record["params"]["method"], int(record["result"]["n_steps"])
            steps[2 if USES_P[method] else 1] += n
            runs, total = runs + 1, total + n
    return steps, runs, total


def step_time(steps: int, tasks: int, adam: bool) -> float:
    """Seconds for ``steps`` rounds of one run's unavoidable products in the single engine's form: the features
    ``[X_P; X_H] theta`` (``tasks N x D x D``) and theta's gradient ``[X_P; X_H]^T M`` (``D x tasks N x D``), each
    round followed, with ``adam``, by the fused Adam update of theta with that gradient (the least a step does)."""
    import torch

    X = torch.randn(tasks * N, D, dtype=torch.float64)
    theta = torch.randn(D, D, dtype=torch.float64, requires_grad=True)
    theta.grad = torch.empty(D, D, dtype=torch.float64)
    opt = torch.optim.Adam([theta], lr=1e-3, fused=True)
    Phi = torch.empty(tasks * N, D, dtype=torch.float64)
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(steps):
            torch.mm(X, theta, out=Phi)
            torch.mm(X.mT, Phi, out=theta.grad)
            if adam:
                opt.step()
    return time.perf_counter() - start


def _time_share(args: tuple[str, int, int]) -> float:
    """One worker (a spawned process, one thread): :func:`step_time` of ``(what, tasks, steps)``, ``what`` being
    "products" or "adam" (products and Adam)."""
    import torch

    torch.set_num_threads(1)
    what, tasks, steps = args
    step_time(2, tasks, what == "adam")  # warm the kernels and the allocator: not timed
    return step_time(steps, tasks, what == "adam")


def parallel_time(what: str, steps: int, tasks: int, workers: int) -> float:
    """Wall seconds of ``steps`` steps (:func:`_time_share`'s ``what``) of ``tasks`` tasks split over ``workers``
    processes at once."""
    shares = [steps // workers + (1 if w < steps % workers else 0) for w in range(workers)]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(_time_share, [(what, tasks, 2)] * workers)  # start-up not timed
        start = time.perf_counter()
        pool.map(_time_share, [(what, tasks, s) for s in shares])
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=Path, help="the sweep's --out folder (its runs_official.jsonl)")
    parser.add_argument("--wall-s", type=float, required=True, help="the sweep command's wall time, seconds")
    parser.add_argument("--workers", type=int, default=2, help="processes at once, as in the sweep (default 2)")
    parser.add_argument("--sample", type=float, default=1.0, help="fraction of the steps to time (default 1)")
    parser.add_argument("--json", type=Path, default=None, help="write the measurements here")
    args = parser.parse_args(argv)
    store = args.store / "runs_official.jsonl"
    problems = [f"--wall-s must be > 0, got {args.wall_s}" if not args.wall_s > 0 else None,
                f"--workers must be >= 1, got {args.workers}" if args.workers < 1 else None,
                f"--sample must be in (0, 1], got {args.sample}" if not 0 < args.sample <= 1 else None,
                f"store: no {store}" if not store.is_file() else None]
    for problem in problems:
        if problem is not None:
            print(problem, file=sys.stderr)
            return 2
    try:
        steps, runs, total_steps = steps_by_tasks(store)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    if runs == 0:
        print(f"store: {store} holds no run", file=sys.stderr)
        return 2
    seconds: dict[str, dict[int, float]] = {"products": {}, "adam": {}}
    for what in seconds:
        for tasks in sorted(steps):
            timed = max(args.workers, round(steps[tasks] * args.sample))
            seconds[what][tasks] = parallel_time(what, timed, tasks, args.workers) * steps[tasks] / timed
            print(f"{what} of {steps[tasks]} steps with {tasks} task(s): {seconds[what][tasks]:.1f} s on "
                  f"{args.workers} processes ({timed} steps timed)", flush=True)
    per_step_2 = seconds["products"][2] / steps[2] if 2 in steps else None
    strict = sum(seconds["products"].values())
    floor = sum(seconds["adam"].values())
    out: dict[str, Any] = {
        "store": str(store), "runs": runs, "steps": total_steps, "steps_by_tasks": dict(steps),
        "workers": args.workers, "sample": args.sample, "wall_s": args.wall_s, "products_strict_s": strict,
        "wall_over_products_strict": args.wall_s / strict,
        "products_and_adam_s": floor, "products_and_adam_over_products_strict": floor / strict,
    }
    import torch

    torch.set_num_threads(1)  # the rate of one of the sweep's single-threaded workers, alone
    out["gemm_gflops_one_thread"] = gemm_rate("cpu")
    if per_step_2 is not None:  # the count: 4 GEMMs per step for every method
        uniform = per_step_2 * total_steps
        out.update({"products_uniform_s": uniform, "wall_over_products_uniform": args.wall_s / uniform,
                    "products_gflops_per_process": 4 * 2.0 * N * D * D / (per_step_2 * args.workers) / 1e9})
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
