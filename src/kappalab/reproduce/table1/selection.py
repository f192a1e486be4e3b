"""``kappalab reproduce table1 --trajectory/--selection``: App. C.2's selection over a store's trajectories.

Reads the runs of one ``--out`` folder (each with ``runs/<key>/trajectory.npz``) and writes

* ``selection.json``: one record per (selection variant, rule, method) with ``selection`` (the variant), ``data``
  (name, sha256, rows), the rule, the chosen learning rate, each seed's epoch and reported numbers, and the run keys
  they were read from; fixed-epoch rows (Sec. 5.1's 100, Table 4's 1000) per learning rate, ``selection: "none"``;
* ``selection.md``: the same as tables, next to the paper's Table 1 (a reference only);
* ``trajectories_lr<eta>.png`` / ``.pdf``: RIR and (ii) against epochs for every method and seed.

Runs of ``--processes N`` write ``selection_ddp<N>.*`` and ``trajectories_ddp<N>_lr<eta>.*`` instead.

Variants (:data:`VARIANTS`): ``paper`` selects and reports on all rows (what App. C.2 describes), ``validation``
selects on the validation half and reports on the held-out half, ``test_on_test`` selects and reports on the
held-out half: ``test_on_test - validation`` is the selection's own optimism on the same rows, ``paper -
validation`` the gap between App. C.2's selection and a held-out one (it also contains the change of rows).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from kappalab.atomic_io import save_figure
from kappalab.immunization.selection import REPORTED, Rule, at_epoch, select
from kappalab.immunization.task import LinearTask
from kappalab.immunization.trajectory import direct_losses
from kappalab.reproduce.identity import sha256_arrays
from kappalab.results import MEAN_STD_CONVENTION, format_mean_std, mean_std, to_jsonable, write_report

from .constants import HINTS, LABELS, PAPER_TABLE1

#: variant -> (view selected on, view reported on)
VARIANTS = {"paper": ("full", "full"), "validation": ("val", "test"), "test_on_test": ("test", "test")}
#: the rules every variant is computed under; the first is the headline rule
RULES = (Rule(1.0, 0.25, "max_rir"), Rule(1.0, 0.25, "first"), Rule(1.0, math.inf, "first"),
         Rule(math.inf, 0.25, "max_rir"))
FIXED_EPOCHS = (100, 1000)
PAPER_OURS_RIR = 356.2  #: Table 1's RIR of Ours (reference: the epoch at which each run first reaches it)


def load_runs(out: Path, records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each record with its trajectory arrays (``traj``); records without a trajectory are refused, and so are two
    runs of one (method, lr, seed) (e.g. other epochs or configs in the same store: one selection, one grid)."""
    seen: dict[tuple, str] = {}
    for r in records:
        cell = (r["method"], r["eta"], r["seed"])
        if cell in seen:
            raise ValueError(f"runs {seen[cell]} and {r['key']} are both {r['method']} lr {r['eta']:g} seed "
                             f"{r['seed']}: select over one grid per --out folder")
        seen[cell] = r["key"]
    runs = []
    for r in records:
        path = (r.get("files") or {}).get("trajectory")
        if path is None:
            raise ValueError(f"run {r['key']}: no trajectory (run it with --trajectory)")
        with np.load(out / path) as z:
            runs.append({**r, "traj": {k: z[k] for k in z.files}})
    return runs


def _summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[float, float]]:
    return {m: mean_std([row[m] for row in rows]) for m in REPORTED + ("epoch",)}


def complete_cells(runs: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The runs of the (method, lr) cells that hold every seed of the store (a grid still running leaves partial
    cells: a mean over fewer seeds must not compete with, or be shown as, a full one), and the partial cells'
    names."""
    seeds = {r["seed"] for r in runs}
    cells: dict[tuple[str, float], set[int]] = {}
    for r in runs:
        cells.setdefault((r["method"], r["eta"]), set()).add(r["seed"])
    partial = {cell for cell, s in cells.items() if s != seeds}
    return ([dict(r) for r in runs if (r["method"], r["eta"]) not in partial],
            [f"{m} lr {lr:g}: seeds {sorted(cells[(m, lr)])} of {sorted(seeds)}" for m, lr in sorted(partial)])


def stored_task(out: Path, data: Mapping[str, Any]) -> LinearTask:
    """The task as stored under ``OUT/data/<sha256[:12]>/`` (its sha256 checked against ``data``)."""
    folder = out / "data" / data["sha256"][:12]
    X_P, y_P, X_H, y_H = (np.load(folder / f"{n}.npy") for n in ("features_P", "y_P", "features_H", "y_H"))
    found = sha256_arrays({"X_P": X_P, "y_P": y_P, "X_H": X_H, "y_H": y_H})
    if found != data["sha256"]:
        raise ValueError(f"{folder}: the stored arrays hash to {found[:12]}, not the runs' {data['sha256'][:12]}")
    return LinearTask(X_P, y_P, X_H, y_H, "mse", data["name"], f"stored in {folder.name}")


def selection_records(runs: Sequence[Mapping[str, Any]], data: Mapping[str, Any],
                      reference: Mapping[str, float]) -> list[dict[str, Any]]:
    """Every selected row (over the complete cells only) and every fixed-epoch row (each cell, with its seeds); see
    the module docstring. ``reference``: theta = I's D_P loss per view
    (:func:`~kappalab.immunization.trajectory.direct_losses`)."""
    complete, _ = complete_cells(runs)
    methods = list(dict.fromkeys(r["method"] for r in runs))
    keys = lambda rs: {f"{r['eta']:g}/s{r['seed']}": r["key"] for r in rs}
    out = []
    for variant, (select_on, report_on) in VARIANTS.items():
        for rule in RULES:
            for method in methods:
                rs = [r for r in complete if r["method"] == method]
                s = select(rs, rule, select_on, report_on, reference[select_on])
                out.append({"selection": variant, "data": dict(data), "method": method, "rule_text": rule.describe(),
                            **s, "summary": _summary(s["per_seed"]) if s["per_seed"] else None,
                            "run_keys": keys([r for r in rs if r["eta"] == s["lr"]])})
    for method in methods:
        for lr in sorted({r["eta"] for r in runs if r["method"] == method}):
            rs = [r for r in runs if r["method"] == method and r["eta"] == lr]
            for epoch in FIXED_EPOCHS:
                if all(int(r["traj"]["epoch"][-1]) >= epoch for r in rs):
                    rows = at_epoch(rs, epoch, "full")
                    out.append({"selection": "none", "data": dict(data), "method": method, "lr": lr, "epoch": epoch,
                                "report_on": "full", "per_seed": rows, "summary": _summary(rows),
                                "run_keys": keys(rs)})
    for method in methods:
        for lr in sorted({r["eta"] for r in runs if r["method"] == method}):
            rs = sorted((r for r in runs if r["method"] == method and r["eta"] == lr), key=lambda r: r["seed"])
            rows = []
            for r in rs:
                hit = np.flatnonzero(r["traj"]["full.rir"] >= PAPER_OURS_RIR)
                if hit.size:
                    i = int(hit[0])
                    rows.append({"seed": r["seed"], "epoch": int(r["traj"]["epoch"][i]),
                                 **{m: float(r["traj"][f"full.{m}"][i]) for m in REPORTED}})
            out.append({"selection": "first_reach_paper_rir", "data": dict(data), "method": method, "lr": lr,
                        "report_on": "full", "per_seed": rows, "n_runs": len(rs),
                        "summary": _summary(rows) if rows else None, "run_keys": keys(rs)})
    return out


def _pm(ms: Sequence[float]) -> str:
    return format_mean_std(ms[0], ms[1])


def markdown(records: Sequence[Mapping[str, Any]], paper: Mapping[str, Mapping[str, Sequence[float]]],
             labels: Mapping[str, str], hints: Mapping[str, str]) -> str:
    """selection.md."""
    lines = ["# Table 1 under App. C.2's selection (learning rate x early-stopping epoch)", "",
             f"Numbers: {MEAN_STD_CONVENTION}. Paper: Table 1 (reference only). RIR, (i), (ii): pinv kappa from the "
             "SVD of the features (kappalab.immunization.trajectory).", ""]
    for variant, (sel, rep) in VARIANTS.items():
        lines += [f"## Selection `{variant}`: selected on `{sel}`, reported on `{rep}`", ""]
        for rule in RULES:
            lines += [f"Rule: {rule.describe()}.", "",
                      "| Method | lr | epochs (per seed) | (i) | (ii) | RIR | D_P loss | paper RIR |",
                      "|---|---|---|---|---|---|---|---|"]
            for r in records:
                if r["selection"] != variant or r["rule"] != asdict(rule):
                    continue
                p = paper[hints.get(r["method"], r["method"])]
                if r["summary"] is None:
                    lines.append(f"| {labels[r['method']]} | none admissible | | | | | | {_pm(p['rir'])} |")
                    continue
                s = r["summary"]
                lines.append(f"| {labels[r['method']]} | {r['lr']:g} | "
                             f"{', '.join(str(x['epoch']) for x in r['per_seed'])} | {_pm(s['term_i'])} | "
                             f"{_pm(s['term_ii'])} | {_pm(s['rir'])} | {_pm(s['loss_P'])} | {_pm(p['rir'])} |")
            lines.append("")
    lines += ["## No selection: fixed epochs (all rows)", "",
              "| Method | lr | epoch | seeds | (i) | (ii) | RIR | D_P loss | paper RIR |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        if r["selection"] == "none":
            s, p = r["summary"], paper[hints.get(r["method"], r["method"])]
            seeds = ", ".join(str(x["seed"]) for x in r["per_seed"])
            lines.append(f"| {labels[r['method']]} | {r['lr']:g} | {r['epoch']} | {seeds} | {_pm(s['term_i'])} | "
                         f"{_pm(s['term_ii'])} | {_pm(s['rir'])} | {_pm(s['loss_P'])} | {_pm(p['rir'])} |")
    lines += ["", f"## The first epoch at which RIR (all rows) reaches the paper's {PAPER_OURS_RIR} (an oracle, "
              "not a rule)", "", "| Method | lr | runs reaching it | epochs (per seed) | (i) | (ii) | RIR | D_P loss |",
              "|---|---|---|---|---|---|---|---|"]
    for r in records:
        if r["selection"] == "first_reach_paper_rir":
            head = f"| {labels[r['method']]} | {r['lr']:g} | {len(r['per_seed'])} of {r['n_runs']} | "
            if r["summary"] is None:
                lines.append(head + "| | | | |")
                continue
            s = r["summary"]
            lines.append(head + f"{', '.join(str(x['epoch']) for x in r['per_seed'])} | {_pm(s['term_i'])} | "
                         f"{_pm(s['term_ii'])} | {_pm(s['rir'])} | {_pm(s['loss_P'])} |")
    return "\n".join(lines) + "\n"



def figure(out: Path, runs: Sequence[Mapping[str, Any]], lr: float, labels: Mapping[str, str], protocol: str = "paper",
           tag: str = "") -> None:
    """RIR and (ii) (all rows) against epochs, one line per seed, one row of panels per method
    (``trajectories<tag>_lr<eta>.png`` / ``.pdf``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(r["method"] for r in runs if r["eta"] == lr))
    fig, axes = plt.subplots(len(methods), 2, figsize=(10, 2.6 * len(methods)), squeeze=False, sharex=True)
    for row, method in zip(axes, methods):
        for r in sorted((r for r in runs if r["eta"] == lr and r["method"] == method), key=lambda r: r["seed"]):
            t = r["traj"]
            row[0].semilogy(t["epoch"], t["full.rir"], label=f"seed {r['seed']}")
            row[1].semilogy(t["epoch"], t["full.term_ii"], label=f"seed {r['seed']}")
        row[0].axhline(356.2, color="k", linestyle=":", linewidth=1, label="paper 356.2")
        row[1].axhline(1.0, color="k", linestyle=":", linewidth=1, label="(ii) = 1")
        row[0].set_ylabel(f"{labels[method]}\nRIR")
        row[1].set_ylabel("(ii)")
        for ax in row:
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    axes[0][1].legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("epoch")
    processes = f", {tag.removeprefix('_ddp')} processes" if tag else ""
    fig.suptitle(f"Table 1 runs, {protocol} protocol{processes}, lr {lr:g}: RIR and (ii) on all rows per epoch")
    fig.tight_layout()
    for ext in ("png", "pdf"):
        save_figure(fig, out / f"trajectories{tag}_lr{lr:g}.{ext}", dpi=110)
    plt.close(fig)


def write_selection(out: Path, records: Sequence[Mapping[str, Any]], variant: str, protocol: str,
                    data: Mapping[str, Any], tag: str = "") -> None:
    """selection<tag>.json / .md and the trajectory figures of the runs in ``records`` (``variant`` only orders the
    tables: every variant is written; ``tag``: ``_ddp<N>`` for N-process runs, so they do not overwrite the
    one-process files of the same folder)."""
    runs = load_runs(out, records)
    rows = selection_records(runs, data, direct_losses(stored_task(out, data)))
    if variant in VARIANTS:
        rows.sort(key=lambda r: r["selection"] != variant)
    partial = complete_cells(runs)[1]
    md = markdown(rows, PAPER_TABLE1, LABELS, HINTS)
    if partial:
        md += "\nLeft out of the selection (cells without every seed of the store): " + "; ".join(partial) + ".\n"
    write_report(out, f"selection{tag}", to_jsonable({"protocol": protocol, "data": dict(data), "records": rows,
                                                "incomplete_cells": partial}), md)
    for lr in sorted({r["eta"] for r in runs}):
        figure(out, runs, lr, LABELS, protocol, tag)
