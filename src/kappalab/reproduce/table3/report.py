"""``kappalab reproduce table3``: Table 3's markdown and Figure 3 from the run records alone."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from ...atomic_io import save_figure, write_text
from ...deep import METHOD_LABELS, METHODS
from ...results import format_mean_std, mean_std
from .constants import LAMBDA_OF


def fmt_weight(x: float) -> str:
    """A weight (lambda) or learning rate as written in the tables: 3 significant digits."""
    return f"{x:.3g}"


def _ms(values: list[float], fmt: str = "{:.3f}") -> str:
    return format_mean_std(*mean_std(values), fmt)


def aggregate(records: list[dict[str, Any]], out: Path, title: str, suffix: str = "") -> str:
    """``table<suffix>.md`` and ``figure3<suffix>.png``/``.pdf`` from the records alone; returns the table's
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
                     + f"{_ms([100 * r['dp_test_acc'] for r in by['init']], '{:.2f}')} | "
                     f"{_ms([r['wall_s'] for r in by['init']], '{:.0f}')} |")
    for m in METHODS:
        if m not in by:
            continue
        rs = by[m]

        def g(k: str, key: str = "rir") -> str:
            return _ms([r[key][k] for r in rs])

        authors = (" | ".join(g(k, "rir_authors") for k in ("est_i", "est_ii", "est_rir", "exact_rir")) + " | "
                   if both else "")
        lines.append(f"| {METHOD_LABELS[m]} | {g('est_i')} | {g('est_ii')} | {g('est_rir')} | "
                     f"{g('exact_i')} | {g('exact_ii')} | {g('exact_rir')} | {authors}"
                     f"{_ms([100 * r['dp_test_acc'] for r in rs], '{:.2f}')} | "
                     f"{_ms([r['wall_s'] for r in rs], '{:.0f}')} |")
    conf = next((r["provenance"]["config"] for r in records if r["method"] != "init"), None)
    if conf is not None:
        ep = conf.get("method_epochs") or {}
        lines += ["", f"Settings: protocol {conf.get('protocol', 'paper')}; lr " + fmt_weight(conf["eta"]) + "; " + "; ".join(
            f"{METHOD_LABELS[m]}: " + ", ".join(f"{w} = {fmt_weight(conf[w])}" for w in LAMBDA_OF[m])
            + f", {ep.get(m, conf['epochs'])} epochs" for m in METHODS if m in by) + "."]
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
