"""``kappalab reproduce table1``: the report from the run records (summary over seeds, markdown, CSV rows and
Figure 1, and App. C.2's selection over the trajectories, :mod:`.selection`); it trains nothing and computes no
identity. The command is :mod:`.cli`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kappalab.atomic_io import save_figure
from kappalab.results import (
    MEAN_STD_CONVENTION,
    format_mean_std,
    mean_std,
    to_jsonable,
    write_report,
)

from .constants import ALL, HINTS, LABELS, PAPER_TABLE1

if TYPE_CHECKING:
    from .plan import Plan
    from .sweep import Swept

METRICS = ("term_i", "term_ii", "rir")


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per method, over seeds, every reported number (:data:`~kappalab.results.MEAN_STD_CONVENTION`)."""
    summary: dict[str, Any] = {}
    for method in ALL:
        rs = [r for r in records if r["method"] == method]
        if not rs:
            continue
        s: dict[str, Any] = {"n_seeds": len(rs), "seeds": sorted(r["seed"] for r in rs)}
        for d in ("pinv", "shifted"):
            s[d] = {m: mean_std([r["evaluation"][d][m] for r in rs]) for m in METRICS}
        s["sensitivity"] = {d: {k: mean_std([r["evaluation"]["sensitivity"][d][k]["rir"] for r in rs])
                                for k in rs[0]["evaluation"]["sensitivity"][d]} for d in ("pinv", "shifted")}
        s["probing"] = {w: {k: [r["probing"][w][k] for r in rs] for k in ("iters_to_norm_ratio",
                                                                          "iters_to_excess_loss")}
                        for w in ("P", "H")}
        s["wall_time_s"] = mean_std([r["wall_time_s"] for r in rs])
        s["degenerate_count"] = sum(r["degenerate_count"] for r in rs)
        summary[method] = s
    return summary


def _pm(ms: tuple[float, float]) -> str:
    return format_mean_std(*ms)


def _iters(values: list[int | None], cap: int) -> str:
    return ", ".join(str(v) if v is not None else f">{cap}" for v in values)


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    """table1_<protocol>.md: both kappa definitions next to the paper, sensitivity, probing, timing."""
    n = meta.get("processes", 1)
    lines = [f"# Table 1 reproduction, protocol `{meta['protocol']}`"
             + (f", {n} processes (the shipped data-parallel config, emulated: trained on the rows rounded to "
                f"float32, evaluated on the float64 rows)" if n > 1 else ""), "",
             f"Seeds {meta['seeds']}, epochs {meta['epochs']}, device {meta['device']}, "
             f"total wall time {meta['total_wall_time_s']:.1f} s (load average at start {meta['load_average']}).",
             f"Data: {meta['data_label']}. Run keys end in the run identity's hash (runs_{meta['protocol']}.jsonl).",
             f"Numbers: {MEAN_STD_CONVENTION}.",
             "Paper columns: Table 1 of the paper, copied as a reference only (CLAIMS.md).", ""]
    for d, what in (("pinv", "kappa = lambda_max / smallest eigenvalue above rtol * lambda_max (core)"),
                    ("shifted", "kappa from eigvalsh(H + shift I), eigenvalues > shift kept (official code)")):
        lines += [f"## kappa definition `{d}`: {what}", "",
                  "| Method | (i) ↑ | (ii) ↓ | RIR ↑ | paper (i) | paper (ii) | paper RIR |",
                  "|---|---|---|---|---|---|---|"]
        for m, s in summary.items():
            p = PAPER_TABLE1[HINTS.get(m, m)]
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


def csv_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (method, kappa definition, metric): mean, std, paper mean, paper std."""
    return [{"method": m, "kappa_definition": d, "metric": k, "mean": s[d][k][0], "std": s[d][k][1],
             "n_seeds": s["n_seeds"], "paper_mean": PAPER_TABLE1[HINTS.get(m, m)][k][0],
             "paper_std": PAPER_TABLE1[HINTS.get(m, m)][k][1]}
            for m, s in summary.items() for d in ("pinv", "shifted") for k in METRICS]


def figure(out: Path, records: list[dict[str, Any]], direct_curves: dict[str, np.ndarray], protocol: str) -> None:
    """Figure 1: mean (over seeds) Eq. 16 norm ratio vs. iterations on D_P and D_H, PNG and PDF."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, which in zip(axes, ("P", "H")):
        curves = {"identity": [direct_curves[which]]}
        for r in records:
            curves.setdefault(r["method"], []).append(np.load(out / r["files"]["probe"][which]))
        for name in ("identity",) + ALL:
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
        save_figure(fig, out / f"figure1_{protocol}.{ext}", dpi=150)
    plt.close(fig)



def header(plan: Plan, swept: Swept, command: list[str], wall_time_s: float,
           load_average: tuple[float, ...] | None) -> dict[str, Any]:
    """The reports' ``meta``: the call (its plan and ``command``), its timing and theta = I's probe."""
    ev0 = swept.records[0]["evaluation"]
    return {"protocol": plan.protocol, "processes": plan.processes, "seeds": list(plan.seeds),
            "methods": list(plan.methods), "epochs": {m: c.epochs for m, c in plan.configs.items()},
            "device": plan.device, "threads": plan.threads, "workers": plan.workers,
            "load_average": [round(x, 2) for x in load_average] if load_average else None,
            "total_wall_time_s": wall_time_s, "rtol": ev0["rtol"], "shift": ev0["shift"],
            "probe_iters": plan.probe_iters, "probe_target": plan.probe_target, "identity_probe": swept.identity_probe,
            "data_label": plan.task.data_label, "data": plan.data, "overrides": plan.overrides,
            "mean_std": MEAN_STD_CONVENTION, "runs_done_this_call": swept.completed, "command": command}


def write_reports(plan: Plan, swept: Swept, meta: dict[str, Any]) -> str:
    """``table1_<protocol>[_ddp<N>][_lr<eta>].json/.md/.csv`` and Figure 1 for the plan's runs (with ``--lrs``, one
    report per lr over every stored run with the plan's settings: :attr:`~.sweep.Swept.pool`), and the selection
    over the pool's trajectories where the plan records them. Returns the last report's name."""
    out, tag = plan.out, plan.tag
    groups = {None: swept.records} if plan.lrs is None else {lr: [r for r in swept.pool if r.get("eta") == lr]
                                                             for lr in plan.lrs}
    for lr, rs in groups.items():
        suffix = f"_lr{lr:g}" if lr is not None else ""
        summary = summarize(rs)
        stem = f"table1_{plan.protocol}{tag}{suffix}"
        write_report(out, stem, to_jsonable({"meta": {**meta, "lr": lr}, "summary": summary,
                                             "paper_reference": PAPER_TABLE1, "runs": rs}),
                     markdown(summary, meta), csv_rows(summary))
        figure(out, rs, swept.identity_curves, f"{plan.protocol}{tag}{suffix}")
    if plan.trajectory:
        # imported here: it imports torch (kappalab.immunization)
        from .selection import write_selection

        grid = [r for r in swept.pool if r["files"].get("trajectory")]
        write_selection(out, grid, plan.selection, plan.protocol, plan.data, tag)
    return stem
