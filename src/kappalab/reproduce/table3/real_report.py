"""The real-network rows of Table 3 (:mod:`kappalab.reproduce.table3.real`): running them and their table.

:func:`run_and_report` runs what ``kappalab reproduce table3 --arch efficientnet_lite0`` asked for (unless
``--aggregate-only``) and writes ``table_<protocol>.md`` for the direction from the records alone
(:func:`real_table`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ...atomic_io import save_npz, write_text
from ...deep.methods import CONTROLS, METHOD_LABELS, METHODS
from ...estimators import ESTIMATOR_NAMES
from ...results import RunStore, format_mean_std, mean_std
from .decision import decision_table
from .grid import grid_points_of

ESTIMATOR_LABELS = {"exact": "exact (all held-out)", "groups": "ours, 20 groups of 100",
                    "authors": "authors', 20 groups of 100"}


def _ms(values: list[float], fmt: str = "{:.4g}") -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "n.a."
    return format_mean_std(*mean_std(values), fmt) if len(values) > 1 else fmt.format(values[0])


def _interval(records: list[dict[str, Any]], estimator: str) -> str:
    """The hull ``[min lo, max hi]`` of the seeds' bootstrap 95% intervals of the RIR, or '-' without one."""
    cis = [r["estimates"][estimator].get("ci95") for r in records]
    if any(ci is None for ci in cis):
        return "-"
    return f"[{min(c[0] for c in cis):.3g}, {max(c[1] for c in cis):.3g}]"


def real_table(records: list[dict[str, Any]], title: str) -> str:
    """Markdown of one direction and protocol: RIR under each estimator (mean ± std over seeds, the hull of the
    seeds' 95% intervals), terms (i) and (ii), utility, CPU time."""
    diverged = [r for r in records if "diverged" in r]
    by: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if "diverged" not in r:
            by.setdefault(r["method"], []).append(r)
    init = by.get("init", [])
    seeds = sorted({r["seed"] for r in records})
    lines = [f"### {title.replace(chr(10), '; ')}", "",
             f"Seeds {seeds}: mean ± sample std over seeds; [lo, hi]: the hull of the seeds' bootstrap 95% "
             "intervals. Terms (i) = kappa ratio theta_I / theta_0 on D_H, (ii) on D_P; RIR = (i) / (ii).", "",
             "| Method | estimator | (i) ↑ | (ii) ↓ | RIR_θ0 ↑ | 95% interval |", "|---|---|---|---|---|---|"]
    for m in CONTROLS + METHODS:
        for est in ESTIMATOR_NAMES if m in by else ():
            rs = by[m]
            lines.append(f"| {METHOD_LABELS[m]} | {ESTIMATOR_LABELS[est]} | "
                         + " | ".join(_ms([r["estimates"][est][k] for r in rs]) for k in ("term_i", "term_ii", "rir"))
                         + f" | {_interval(rs, est)} |")
    lines += ["", "Utility, measured without kappa: D_P accuracy of the model's own D_P head and of a fresh linear "
              "probe (test images, %); D_H linear-probe iterations to the target training loss (Figure 3's "
              "measure; more = harder for the attacker; n.a. = not reached within the cap); ImageNet head's top-1 "
              "agreement with theta_0 on the D_P test images (%); CPU seconds per run.", "",
              "| Method | D_P head acc. | D_P probe acc. | D_H probe iterations ↑ | ImageNet top-1 agreement | "
              "CPU-s |", "|---|---|---|---|---|---|"]
    for m in ["init", *CONTROLS, *METHODS]:
        rs = by.get(m)
        if not rs:
            continue
        u = [r["utility"] for r in rs]
        lines.append(f"| {'Init. θ0' if m == 'init' else METHOD_LABELS[m]} | "
                     f"{_ms([100 * x['dp_test_acc'] for x in u], '{:.2f}')} | "
                     f"{_ms([100 * x['dp_probe_acc'] for x in u], '{:.2f}')} | "
                     f"{_ms([x['dh_probe_iterations'] for x in u], '{:.0f}')} | "
                     f"{_ms([100 * x['imagenet_agreement'] for x in u], '{:.1f}')} | "
                     f"{_ms([r['cpu_s'] for r in rs], '{:.0f}')} |")
    if init:
        lam = init[0]["calibration"]["balanced"]
        trunk = init[0]["trunk"]
        lines += ["", "Lambdas (balanced at theta_0, seed " + str(init[0]["seed"]) + "): "
                  + ", ".join(f"{k} = {v:.3g}" for k, v in sorted(lam.items())) + ". Trunk cache: "
                  + "; ".join(f"{t}: {m['images']} images, {m['cpu_s']:.0f} CPU-s" for t, m in sorted(trunk.items()))
                  + "."]
    if diverged:
        lines += ["", "Diverged (recorded, nothing measured after): " + "; ".join(
            f"{METHOD_LABELS[r['method']]} seed {r['seed']} ({r['diverged']})" for r in diverged) + "."]
    return "\n".join(lines) + "\n"


def checkpoint_table(records: list[dict[str, Any]]) -> str:
    """Markdown: each method run's three estimators of RIR, and the group estimator's terms, at its checkpoints
    (``checkpoints``: epoch ends spread over training), with the D_P head's test accuracy there where recorded."""
    lines = ["| Method | seed | step | RIR ours (groups) | (i) | (ii) | RIR authors' | RIR exact | D_P acc. (%) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        for c in r.get("checkpoints", []):
            e = c["estimates"]
            acc = f"{100 * c['dp_test_acc']:.1f}" if "dp_test_acc" in c else "not recorded"
            lines.append(f"| {METHOD_LABELS[r['method']]} | {r['seed']} | {c['step']} | {e['groups']['rir']:.3g} | "
                         f"{e['groups']['term_i']:.3g} | {e['groups']['term_ii']:.3g} | {e['authors']['rir']:.3g} | "
                         f"{e['exact']['rir']:.3g} | {acc} |")
    return "\n".join(lines) + "\n"


def run_and_report(call) -> int:
    """Run the missing records of the call's direction and protocol (unless ``--aggregate-only``) and write the
    table. ``call``: a checked :class:`kappalab.reproduce.table3.cli.Call`."""
    from ...data.fetch import cache_dir

    args, cfg, out = call.args, call.cfg, call.out
    store = RunStore(out / "runs.jsonl")
    if args.aggregate_only:
        records = [r for r in store.records() if r["task"] == cfg.name and r["protocol"] == cfg.protocol
                   and r["seed"] in call.seeds]
    else:
        from .real import run_real

        work = Path(args.work) if args.work else cache_dir() / "table3-real" / "work"
        with store.lock():
            points = grid_points_of(call.methods) if args.grid else None
            keys = set(run_real(cfg, store, work, call.seeds, call.methods, points))
        records = [r for r in store.records() if r["key"] in keys]
    if not records:
        print(f"kappalab reproduce table3: no records of {cfg.name} ({cfg.protocol}) in {store.path}",
              file=sys.stderr)
        return 1
    table = (decision_table({call.title.replace("\n", "; "): records}) + "\n" + real_table(records, call.title)
             + "\nAlong training:\n\n" + checkpoint_table(records))
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / f"table_{cfg.name}_{cfg.protocol}.md", table)
    print(table)
    return 0


def triangular_factor(F: "np.ndarray") -> "np.ndarray":
    """The ``D x D`` factor R of ``F = Q R`` (float64 Householder QR): ``R^T R = F^T F``, so R has F's singular
    values and recomputes the exact estimator, in half the bytes of a 2560 x 1280 ``F``. Float64, not float32: theta_0's
    MNIST features have s_min / s_max ~ 1e-8 (nearly dead channels), below float32's resolution."""
    import numpy as np

    return np.linalg.qr(np.asarray(F, dtype=np.float64), mode="r")


def write_feature_store(records: list[dict[str, Any]], work: Path, out: Path, theta_i_runs: list[str]) -> Path:
    """``out/features.npz`` (compressed): the float64 triangular factor (:func:`triangular_factor`) of theta_0's held-out
    features of each dataset (``theta0/<name>``) and of theta_I's of the runs named in ``theta_i_runs``
    (``<key>/P_I``, ``<key>/H_I``), from the work folder's per-run ``features.npz``. Every record keeps the singular
    values of its four matrices in float64; these factors let a reader recompute them (within the QR's rounding)
    and the exact estimator."""
    import numpy as np

    arrays: dict[str, np.ndarray] = {}
    for r in records:
        if r["method"] == "init":
            continue
        saved = np.load(work / r["key"].replace("/", "_") / "features.npz")
        data = r["identity"]["data"]
        for tag in ("P", "H"):
            name = f"theta0/{data[tag]['name']}"
            if name not in arrays:
                arrays[name] = triangular_factor(saved[f"{tag}_0"])
            if r["key"] in theta_i_runs:
                arrays[f"{r['key']}/{tag}_I"] = triangular_factor(saved[f"{tag}_I"])
    path = out / "features.npz"
    return save_npz(path, compressed=True, **arrays)
