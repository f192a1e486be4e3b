"""``kappalab reproduce table1``: Table 1 and Figure 1 (House Prices, four methods, one protocol per call).

Writes into ``--out`` (default ``results/table1_<protocol>``):

* ``runs.jsonl`` - the resumable store (one line per finished run; a finished run is never redone),
* ``table1.json`` - every run's record (method, seed, protocol, Eq. 15 terms under both kappa definitions, the
  sensitivity block, spectra endpoints, linear-probing iterations, wall time, provenance) and the summary,
* ``table1.md``, ``table1.csv`` (or ``--csv``) - mean +- std next to the paper's numbers (labelled reference),
* ``theta_<method>_seed<s>.npy`` (+ ``bias_...npy``), ``features_P.npy``, ``features_H.npy``, ``y_P.npy``,
  ``y_H.npy`` - enough to recompute every number from the files alone,
* ``probe_<name>.npy`` (Eq. 16 curves) and ``figure1.png`` / ``figure1.pdf``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

#: Table 1 of the paper (via /work/shared/paper/CLAIMS.md): REFERENCE ONLY, never used in any computation.
PAPER_TABLE1: dict[str, dict[str, tuple[float, float]]] = {
    "rill_only": {"term_i": (90.02, 3.773), "term_ii": (72.415, 3.545), "rir": (1.244, 0.021)},
    "imma": {"term_i": (7.053, 1.662), "term_ii": (3.545, 0.880), "rir": (2.001, 0.187)},
    "opt_kappa": {"term_i": (1.518, 0.027), "term_ii": (0.016, 0.001), "rir": (92.58, 4.492)},
    "ours": {"term_i": (18.92, 2.056), "term_ii": (0.053, 0.002), "rir": (356.20, 5.491)},
}
LABELS = {"ours": "Ours", "rill_only": "R_ill Only", "imma": "IMMA", "opt_kappa": "Opt kappa",
          "identity": "Identity"}
ORDER = ("rill_only", "imma", "opt_kappa", "ours")
QUICK_EPOCHS = {"paper": 3, "official": 2}
METRICS = ("term_i", "term_ii", "rir")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="kappalab reproduce table1", description=__doc__.splitlines()[0])
    ap.add_argument("--protocol", choices=("paper", "official"), default="paper")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--epochs", type=int, default=None, help="override the config's epochs")
    ap.add_argument("--methods", nargs="+", choices=ORDER, default=list(ORDER))
    ap.add_argument("--out", type=Path, default=None, help="default results/table1_<protocol>")
    ap.add_argument("--csv", type=Path, default=None, help="default OUT/table1.csv")
    ap.add_argument("--quick", action="store_true", help="a smoke run: few epochs, seed 0, short probing")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch / BLAS threads (default 1)")
    ap.add_argument("--probe-iters", type=int, default=2000, help="linear-probing GD iterations (Figure 1)")
    ap.add_argument("--probe-target", type=float, default=1e-3, help="relative error for the iteration count")
    ap.add_argument("--data-csv", default=None, help="House Prices train.csv (default: cached download)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(list(argv))
    if args.quick:
        args.seeds = args.seeds if args.seeds != [0, 1, 2, 3, 4] else [0]
        args.epochs = args.epochs or QUICK_EPOCHS[args.protocol]
        args.probe_iters = min(args.probe_iters, 50)
    if args.epochs is not None and args.epochs < 1:
        ap.error("--epochs must be >= 1")
    args.out = args.out or Path("results") / f"table1_{args.protocol}"
    args.csv = args.csv or args.out / "table1.csv"
    return args


# ---- one run ----------------------------------------------------------------------------------------------------

def probe(theta: np.ndarray, bias: np.ndarray | None, task, iters: int, target: float) -> dict[str, Any]:
    """Eq. 16 curves on D_P and D_H and the iterations to ``target``."""
    from kappalab.immunization import exact_line_search_gd, features

    out: dict[str, Any] = {}
    for which, X, y in (("P", task.X_P, task.y_P), ("H", task.X_H, task.y_H)):
        c = exact_line_search_gd(features(theta, X, bias), y, iters, target)
        out[which] = {"curve": c.norm_ratio, "iters_to_norm_ratio": c.iters_to_norm_ratio,
                      "iters_to_excess_loss": c.iters_to_excess_loss, "final_norm_ratio": float(c.norm_ratio[-1])}
    return out


def run_one(task, cfg, seed: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Train, evaluate, save theta_I / bias / probe curves, return the record."""
    from kappalab.immunization import evaluate, immunize
    from kappalab.provenance import provenance

    run = immunize(task, cfg, seed, device=args.device, progress=not args.no_progress)
    stem = f"{cfg.method}_seed{seed}"
    np.save(out / f"theta_{stem}.npy", run.theta_I)
    if run.bias is not None:
        np.save(out / f"bias_{stem}.npy", run.bias)
    pr = probe(run.theta_I, run.bias, task, args.probe_iters, args.probe_target)
    for which in ("P", "H"):
        np.save(out / f"probe_{stem}_{which}.npy", pr[which].pop("curve"))
    return {
        "key": f"{cfg.protocol}/{cfg.method}/seed{seed}/epochs{cfg.epochs}",
        "protocol": cfg.protocol, "method": cfg.method, "seed": seed, "epochs": cfg.epochs,
        "evaluation": evaluate(run, task, shift=float(cfg.get("shift", 1e-6))),
        "probing": pr, "wall_time_s": run.wall_time_s, "n_steps": run.n_steps,
        "degenerate_count": run.degenerate_count,
        "history": {k: [v[0], v[-1]] for k, v in run.history.items()},
        "files": {"theta_I": f"theta_{stem}.npy", "bias": f"bias_{stem}.npy" if run.bias is not None else None},
        "config_files": list(cfg.source),
        "provenance": provenance(seed, cfg, device=args.device, data_label=task.data_label),
    }


# ---- aggregation -------------------------------------------------------------------------------------------------

def _stats(values: list[float]) -> tuple[float, float]:
    a = np.asarray(values, dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and sample std (ddof=1) over seeds of every reported number, per method."""
    summary: dict[str, Any] = {}
    for method in ORDER:
        rs = [r for r in records if r["method"] == method]
        if not rs:
            continue
        s: dict[str, Any] = {"n_seeds": len(rs), "seeds": sorted(r["seed"] for r in rs)}
        for d in ("pinv", "shifted"):
            s[d] = {m: _stats([r["evaluation"][d][m] for r in rs]) for m in METRICS}
        s["sensitivity"] = {d: {k: _stats([r["evaluation"]["sensitivity"][d][k]["rir"] for r in rs])
                                for k in rs[0]["evaluation"]["sensitivity"][d]} for d in ("pinv", "shifted")}
        s["probing"] = {w: {k: [r["probing"][w][k] for r in rs] for k in ("iters_to_norm_ratio",
                                                                          "iters_to_excess_loss")}
                        for w in ("P", "H")}
        s["wall_time_s"] = _stats([r["wall_time_s"] for r in rs])
        s["degenerate_count"] = sum(r["degenerate_count"] for r in rs)
        summary[method] = s
    return summary


def _pm(ms: tuple[float, float]) -> str:
    m, s = ms
    return f"{m:.4g} ± {s:.2g}"


def _iters(values: list[int | None], cap: int) -> str:
    shown = [str(v) if v is not None else f">{cap}" for v in values]
    return ", ".join(shown)


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    """table1.md: both kappa definitions next to the paper, sensitivity, probing, timing."""
    lines = [f"# Table 1 reproduction, protocol `{meta['protocol']}`", "",
             f"Seeds {meta['seeds']}, epochs {meta['epochs']}, device {meta['device']}, "
             f"total wall time {meta['total_wall_time_s']:.1f} s (load average at start {meta['load_average']}).",
             "Paper columns: Table 1 of the paper, copied as a reference only (CLAIMS.md).", ""]
    for d, what in (("pinv", "kappa = lambda_max / smallest eigenvalue above rtol * lambda_max (core)"),
                    ("shifted", "kappa from eigvalsh(H + shift I), eigenvalues > shift kept (official code)")):
        lines += [f"## kappa definition `{d}`: {what}", "",
                  "| Method | (i) ↑ | (ii) ↓ | RIR ↑ | paper (i) | paper (ii) | paper RIR |",
                  "|---|---|---|---|---|---|---|"]
        for m, s in summary.items():
            p = PAPER_TABLE1[m]
            lines.append(f"| {LABELS[m]} | " + " | ".join(_pm(s[d][k]) for k in METRICS) + " | "
                         + " | ".join(_pm(p[k]) for k in METRICS) + " |")
        lines.append("")
    lines += ["## Sensitivity of RIR (mean ± std over seeds) to the zero-eigenvalue tolerance", "",
              f"Base rtol = {meta['rtol']:.3g}, base shift = {meta['shift']:.3g}.", "",
              "| Method | pinv rtol×0.1 | pinv rtol×1 | pinv rtol×10 | shifted ×0.1 | shifted ×1 | shifted ×10 |",
              "|---|---|---|---|---|---|---|"]
    for m, s in summary.items():
        sp, ss = s["sensitivity"]["pinv"], s["sensitivity"]["shifted"]
        lines.append(f"| {LABELS[m]} | {_pm(sp['rtol_x0.1'])} | {_pm(s['pinv']['rir'])} | {_pm(sp['rtol_x10'])} | "
                     f"{_pm(ss['shift_x0.1'])} | {_pm(s['shifted']['rir'])} | {_pm(ss['shift_x10'])} |")
    cap = meta["probe_iters"]
    lines += ["", f"## Linear probing (exact line search GD from w = 0): iterations until the Eq. 16 norm ratio "
              f"<= {meta['probe_target']:g} (per seed; >{cap} = not reached)", "",
              "| Method | D_P | D_H |", "|---|---|---|",
              f"| Identity | {_iters([meta['identity_probe']['P']['iters_to_norm_ratio']], cap)} | "
              f"{_iters([meta['identity_probe']['H']['iters_to_norm_ratio']], cap)} |"]
    for m, s in summary.items():
        lines.append(f"| {LABELS[m]} | {_iters(s['probing']['P']['iters_to_norm_ratio'], cap)} | "
                     f"{_iters(s['probing']['H']['iters_to_norm_ratio'], cap)} |")
    lines += ["", "## Training time per run (s, mean ± std)", "", "| Method | wall time | degenerate steps |",
              "|---|---|---|"]
    for m, s in summary.items():
        lines.append(f"| {LABELS[m]} | {_pm(s['wall_time_s'])} | {s['degenerate_count']} |")
    return "\n".join(lines) + "\n"


def write_csv(path: Path, summary: dict[str, Any]) -> None:
    """One row per (method, kappa definition, metric): mean, std, paper mean, paper std."""
    rows = ["method,kappa_definition,metric,mean,std,n_seeds,paper_mean,paper_std"]
    for m, s in summary.items():
        for d in ("pinv", "shifted"):
            for k in METRICS:
                pm, ps = PAPER_TABLE1[m][k]
                rows.append(f"{m},{d},{k},{s[d][k][0]!r},{s[d][k][1]!r},{s['n_seeds']},{pm},{ps}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(rows) + "\n")


def figure(out: Path, records: list[dict[str, Any]], protocol: str) -> None:
    """Figure 1: mean (over seeds) Eq. 16 norm ratio vs. iterations on D_P and D_H, PNG and PDF."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, which in zip(axes, ("P", "H")):
        curves = {"identity": [np.load(out / f"probe_identity_{which}.npy")]}
        for r in records:
            curves.setdefault(r["method"], []).append(np.load(out / f"probe_{r['method']}_seed{r['seed']}_{which}.npy"))
        for name in ("identity",) + ORDER:
            if name not in curves:
                continue
            n = min(len(c) for c in curves[name])
            mean = np.mean([c[:n] for c in curves[name]], axis=0)
            ax.semilogy(np.arange(n), np.maximum(mean, 1e-300), label=LABELS[name],
                        linestyle="--" if name == "identity" else "-")
        ax.set_title(f"Norm ratio on D_{which} ({protocol} protocol)")
        ax.set_xlabel("iteration of exact-line-search GD")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(r"$\|w_t - w^*\|^2 / \|w_0 - w^*\|^2$")
    axes[1].legend()
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out / f"figure1.{ext}", dpi=150)
    plt.close(fig)


# ---- main --------------------------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args([] if argv is None else argv)
    import torch
    from threadpoolctl import threadpool_limits

    from kappalab.immunization import house_prices_task, table1_config
    from kappalab.results import RunStore

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with threadpool_limits(args.threads):
        configs = {m: table1_config(args.protocol, m) for m in args.methods}
        if args.epochs is not None:
            configs = {m: c.replace(epochs=args.epochs) for m, c in configs.items()}
        n_rows = int(next(iter(configs.values())).get("n_rows", 200))
        task = house_prices_task(args.protocol, args.data_csv, n_official=n_rows)
        for name, arr in (("features_P", task.X_P), ("features_H", task.X_H), ("y_P", task.y_P), ("y_H", task.y_H)):
            np.save(out / f"{name}.npy", arr)
        store = RunStore(out / "runs.jsonl")
        done = store.done_keys()
        for method in args.methods:
            cfg = configs[method]
            for seed in args.seeds:
                key = f"{cfg.protocol}/{cfg.method}/seed{seed}/epochs{cfg.epochs}"
                if key in done:
                    print(f"[table1] {key}: already done, skipped")
                    continue
                record = run_one(task, cfg, seed, args, out)
                store.append(record)
                ev = record["evaluation"]
                print(f"[table1] {key}: {record['wall_time_s']:.1f}s  RIR pinv {ev['pinv']['rir']:.4g}  "
                      f"RIR shifted {ev['shifted']['rir']:.4g}", flush=True)
        wanted = {f"{args.protocol}/{m}/seed{s}/epochs{configs[m].epochs}" for m in args.methods for s in args.seeds}
        records = [r for r in store.records() if r["key"] in wanted]
        ident = probe(np.eye(task.dim), None, task, args.probe_iters, args.probe_target)
        for which in ("P", "H"):
            np.save(out / f"probe_identity_{which}.npy", ident[which].pop("curve"))
        ev0 = records[0]["evaluation"]
        meta = {"protocol": args.protocol, "seeds": args.seeds, "methods": args.methods,
                "epochs": {m: c.epochs for m, c in configs.items()}, "device": args.device,
                "threads": args.threads, "load_average": [round(x, 2) for x in load] if load else None,
                "total_wall_time_s": time.perf_counter() - start, "rtol": ev0["rtol"], "shift": ev0["shift"],
                "probe_iters": args.probe_iters, "probe_target": args.probe_target, "identity_probe": ident,
                "data_label": task.data_label, "command": ["kappalab", "reproduce", "table1", *(argv or [])]}
        summary = summarize(records)
        from kappalab.results import to_jsonable

        (out / "table1.json").write_text(json.dumps(to_jsonable(
            {"meta": meta, "summary": summary, "paper_reference": PAPER_TABLE1, "runs": records}), indent=1))
        (out / "table1.md").write_text(markdown(summary, meta))
        write_csv(args.csv, summary)
        figure(out, records, args.protocol)
    print(f"[table1] wrote {out}/table1.json, table1.md, {args.csv}, figure1.png/pdf "
          f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
