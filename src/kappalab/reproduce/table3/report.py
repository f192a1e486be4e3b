"""``kappalab reproduce table3``: the report of a call, from the run records alone (:func:`report`).

Every mode's records (one schema: :mod:`.run`, :mod:`.real`) give the decision table (:mod:`.decision`), the
estimators' table (:func:`estimator_table`; a selection grid's methods at the settings the decision table reads,
:func:`~.grid.selected`) and the estimators along training of every run (:func:`checkpoint_table`): the real
network's in ``table_<name>_<protocol>.md``; the proxy's and the paper's networks' in ``table<suffix>.md``, with
Figure 3 (:func:`figure3`). A store recorded before that schema (its records hold ``rir``) is read by
:func:`aggregate`, the table it was published with."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from ...atomic_io import save_figure, write_text
from ...deep.methods import CONTROLS, METHOD_LABELS, METHODS
from ...estimators import ESTIMATOR_NAMES
from ...results import format_mean_std, mean_std
from .constants import LAMBDA_OF
from .decision import decision_table
from .grid import selected
from .plan import Plan


def fmt_weight(x: float) -> str:
    """A weight (lambda) or learning rate as written in the tables: 3 significant digits."""
    return f"{x:.3g}"


def _ms_of(values: list[float | None], fmt: str = "{:.4g}") -> str:
    """Mean ± std of the values given (one value alone as it is; none: n.a.)."""
    values = [v for v in values if v is not None]
    if not values:
        return "n.a."
    return format_mean_std(*mean_std(values), fmt) if len(values) > 1 else fmt.format(values[0])


def aggregate(records: list[dict[str, Any]], out: Path, title: str, suffix: str = "") -> str:
    """Records made before the one record schema: ``table<suffix>.md`` and ``figure3<suffix>.png``/``.pdf`` from the
    records alone; returns the table's
    markdown (``suffix``: ``""`` for the paper protocol, ``"_official"`` for the other, so that both protocols'
    tables live side by side in one output folder)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by.setdefault(r["method"], []).append(r)
    seeds = sorted({r["seed"] for r in records})
    # records without the authors' kappa estimator hold ours ("rir") only
    both = all("rir_authors" in r for r in records if r["method"] != "init")
    lines = [f"### {title.replace(chr(10), '; ')}", "", f"Seeds: {seeds} (mean ± sample std over seeds). Eq. 17 "
             "estimated as in the paper (mean over random groups of training samples) and exact (all training "
             "samples at once), with our kappa (pseudo-inverse: largest over smallest nonzero eigenvalue of H~, a "
             "measure of conditioning)" + ("; and with the authors' (max over min of the eigenvalues of H~ + 1e-6 "
                                           "I above 1e-6: where D_hid exceeds the group size, a measure of the "
                                           "largest eigenvalue's scale, see kappalab.deep.metrics)." if both else
                                           "."), "",
             "| Method | (i) ↑ est. | (ii) ↓ est. | RIR_θ0 ↑ est. | (i) exact | (ii) exact | RIR_θ0 exact | "
             + ("authors' (i) est. | authors' (ii) est. | authors' RIR_θ0 est. | authors' RIR_θ0 exact | "
                if both else "") + "D_P test acc. (%) | wall (s) |",
             "|---|---|---|---|---|---|---|" + ("---|---|---|---|" if both else "") + "---|---|"]
    if "init" in by:
        lines.append("| Init. θ0 | 1.0 | 1.0 | 1.0 | 1.0 | 1.0 | 1.0 | " + ("1.0 | 1.0 | 1.0 | 1.0 | " if both else "")
                     + f"{_ms_of([100 * r['dp_test_acc'] for r in by['init']], '{:.2f}')} | "
                     f"{_ms_of([r['wall_s'] for r in by['init']], '{:.0f}')} |")
    for m in METHODS:
        if m not in by:
            continue
        rs = by[m]

        def g(k: str, key: str = "rir") -> str:
            return _ms_of([r[key][k] for r in rs], "{:.3f}")

        authors = (" | ".join(g(k, "rir_authors") for k in ("est_i", "est_ii", "est_rir", "exact_rir")) + " | "
                   if both else "")
        lines.append(f"| {METHOD_LABELS[m]} | {g('est_i')} | {g('est_ii')} | {g('est_rir')} | "
                     f"{g('exact_i')} | {g('exact_ii')} | {g('exact_rir')} | {authors}"
                     f"{_ms_of([100 * r['dp_test_acc'] for r in rs], '{:.2f}')} | "
                     f"{_ms_of([r['wall_s'] for r in rs], '{:.0f}')} |")
    conf = next((r["provenance"]["config"] for r in records if r["method"] != "init"), None)
    if conf is not None:
        ep = conf.get("method_epochs") or {}
        settings = "; ".join(f"{METHOD_LABELS[m]}: " + ", ".join(f"{w} = {fmt_weight(conf[w])}" for w in LAMBDA_OF[m])
                             + f", {ep.get(m, conf['epochs'])} epochs" for m in METHODS if m in by)
        lines += ["", f"Settings: protocol {conf.get('protocol', 'paper')}; lr {fmt_weight(conf['eta'])}; {settings}."]
    table = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / f"table{suffix}.md", table)
    figure3({m: [r["probe_curve"] for r in by[m]] for m in ["init", *METHODS] if m in by}, out, title, suffix)
    return table


def figure3(curves: dict[str, list[list[float]]], out: Path, title: str, suffix: str = "") -> None:
    """Figure 3 as ``figure3<suffix>.png``/``.pdf`` in ``out``: the D_H linear probe's test accuracy against its
    full-batch gradient-descent epochs, the mean over seeds with a +-1 std band, per method (``"init"``: theta_0).

    ``curves``: method -> one accuracy curve (fractions, entry ``t`` after ``t`` epochs) per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for m, per_seed in curves.items():
        acc = 100 * np.asarray(per_seed)
        x, mu, sd = np.arange(acc.shape[1]), acc.mean(0), acc.std(0)
        ax.plot(x, mu, label="Init. θ0" if m == "init" else f"{METHOD_LABELS[m]} (n={len(per_seed)})",
                ls="--" if m == "init" else "-")
        ax.fill_between(x, mu - sd, mu + sd, alpha=0.2)
    ax.set_xlabel("linear-probing epochs (full-batch GD) on D_H")
    ax.set_ylabel("D_H test accuracy (%)")
    ax.set_title("\n".join(textwrap.fill(line, 75) for line in title.split("\n")), fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        save_figure(fig, out / f"figure3{suffix}.{ext}", dpi=150)
    plt.close(fig)


def _estimator_labels(records: list[dict[str, Any]]) -> dict[str, str]:
    """The estimators' names in the tables, with the groups the records' config draws."""
    config = next(r["identity"]["config"] for r in records)
    groups = f"{config['rir_groups']} groups of {config['rir_group_size']}"
    return {"exact": "exact (all held-out)", "groups": f"ours, {groups}", "authors": f"authors', {groups}"}


def _interval(records: list[dict[str, Any]], estimator: str) -> str:
    """The hull ``[min lo, max hi]`` of the seeds' bootstrap 95% intervals of the RIR, or '-' without one."""
    cis = [r["estimates"][estimator].get("ci95") for r in records]
    if any(ci is None for ci in cis):
        return "-"
    return f"[{min(c[0] for c in cis):.3g}, {max(c[1] for c in cis):.3g}]"


def _percent(utilities: list[dict[str, Any]], name: str) -> list[float | None]:
    return [None if u.get(name) is None else 100 * u[name] for u in utilities]


def estimator_table(records: list[dict[str, Any]], title: str) -> str:
    """Markdown of one direction (or task) and protocol: RIR under each estimator (mean ± std over seeds, the hull of
    the seeds' 95% intervals), terms (i) and (ii), utility, CPU time."""
    diverged = [r for r in records if "diverged" in r]
    by: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if "diverged" not in r:
            by.setdefault(r["method"], []).append(r)
    init = by.get("init", [])
    seeds = sorted({r["seed"] for r in records})
    labels = _estimator_labels(records)
    lines = [f"### {title.replace(chr(10), '; ')}", "",
             f"Seeds {seeds}: mean ± sample std over seeds; [lo, hi]: the hull of the seeds' bootstrap 95% "
             "intervals. Terms (i) = kappa ratio theta_I / theta_0 on D_H, (ii) on D_P; RIR = (i) / (ii).", "",
             "| Method | estimator | (i) ↑ | (ii) ↓ | RIR_θ0 ↑ | 95% interval |", "|---|---|---|---|---|---|"]
    for m in CONTROLS + METHODS:
        for est in ESTIMATOR_NAMES if m in by else ():
            rs = by[m]
            terms = (_ms_of([r["estimates"][est][k] for r in rs]) for k in ("term_i", "term_ii", "rir"))
            lines.append(f"| {METHOD_LABELS[m]} | {labels[est]} | " + " | ".join(terms)
                         + f" | {_interval(rs, est)} |")
    lines += ["", "Utility, measured without kappa: D_P accuracy of the model's own D_P head and of a fresh linear "
              "probe (test images, %); D_H linear-probe iterations to the target training loss (Figure 3's "
              "measure; more = harder for the attacker); ImageNet head's top-1 agreement with theta_0 on the D_P "
              "test images (%); CPU seconds per run. n.a.: not reached within the cap, or not measured on this "
              "network (the probe's iterations and the ImageNet head are the real network's).", "",
              "| Method | D_P head acc. | D_P probe acc. | D_H probe iterations ↑ | ImageNet top-1 agreement | "
              "CPU-s |", "|---|---|---|---|---|---|"]
    for m in ["init", *CONTROLS, *METHODS]:
        rs = by.get(m)
        if not rs:
            continue
        u = [r["utility"] for r in rs]
        lines.append(f"| {'Init. θ0' if m == 'init' else METHOD_LABELS[m]} | "
                     f"{_ms_of(_percent(u, 'dp_test_acc'), '{:.2f}')} | "
                     f"{_ms_of(_percent(u, 'dp_probe_acc'), '{:.2f}')} | "
                     f"{_ms_of([x.get('dh_probe_iterations') for x in u], '{:.0f}')} | "
                     f"{_ms_of(_percent(u, 'imagenet_agreement'), '{:.1f}')} | "
                     f"{_ms_of([r['cpu_s'] for r in rs], '{:.0f}')} |")
    if init:
        lam = init[0]["calibration"]["balanced"]
        trunk = init[0].get("trunk", {})
        lines += ["", "Lambdas (balanced at theta_0, seed " + str(init[0]["seed"]) + "): "
                  + ", ".join(f"{k} = {v:.3g}" for k, v in sorted(lam.items())) + "."
                  + (" Trunk cache: " + "; ".join(f"{t}: {m['images']} images, {m['cpu_s']:.0f} CPU-s"
                                                  for t, m in sorted(trunk.items())) + "." if trunk else "")]
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


def report(plan: Plan, records: list[dict[str, Any]]) -> int:
    """Write and print the call's report from ``records`` (module docstring); 1 with a line on stderr when there are
    none."""
    cfg, out = plan.cfg, plan.out
    if not records:
        print(f"kappalab reproduce table3: no records of {cfg.name} ({cfg.protocol}) in {out / 'runs.jsonl'}",
              file=sys.stderr)
        return 1
    suffix = "" if cfg.protocol == "paper" else "_official"
    if any("rir" in r for r in records):  # a store recorded before the one record schema
        print(aggregate(records, out, plan.title, suffix))
        return 0
    read, _ = selected(records)  # a grid's: each method at the setting the decision table reads, not all mixed
    table = (decision_table({plan.title.replace("\n", "; "): records}) + "\n" + estimator_table(read, plan.title)
             + "\nAlong training:\n\n" + checkpoint_table(records))
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / (f"table_{cfg.name}_{cfg.protocol}.md" if plan.real else f"table{suffix}.md"), table)
    if not plan.real:
        figure3({m: [r["utility"]["probe_curve"] for r in records if r["method"] == m and "utility" in r]
                 for m in ["init", *CONTROLS, *METHODS] if any(r["method"] == m and "utility" in r for r in records)},
                out, plan.title, suffix)
    print(table)
    return 0
