"""docs/attacks.md's numbers from the stored records alone: the method x attacker matrix of slowdowns at budget 100,
the rank correlation of RIR with each attacker's slowdown, and the figure.

Matrix cell: the slowdowns of the cell's runs (one per seed and pair) against the ``direct`` reference (theta = I,
Table 1's RIR reference) at budget 100 (or another budget the records hold); a run that does not reach the target
within 10 x the budget steps counts as 10, a lower bound (the cell then shows how many were not reached). The
cell is the median over runs with a 95% percentile bootstrap interval of the median (:data:`N_BOOT` resamples of the
runs, seed 0) and n. Spearman's rho over the immunized runs pairs each run's recorded RIR with its (capped) slowdown
at budget 100. The D_P utility table (:func:`dp_markdown`):
per method and extractor attacker, the fraction of D_P's utility kept at the largest budget
(:mod:`kappalab.attack.utility`), median [min, max] over runs, n, and how many runs it calls broken.

Usage: ``python -m kappalab.attack.report docs/attacks/table1 [--figures a-b,...]`` (prints the markdown, writes
the figure of each pair beside, or of the pairs named);
``python -m kappalab.attack.report --refresh docs/attacks.md`` rewrites the page's matrix blocks from
``docs/attacks/<table>.jsonl`` (``<!-- matrix TABLE REFERENCE [BUDGET] -->``, budget 100 unless named).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kappalab.atomic_io import save_figure, write_text

BUDGET = "100"
REFERENCE = "direct"
N_BOOT = 2000


def records_of(stem: Path) -> list[dict[str, Any]]:
    """The records of ``<stem>.jsonl`` (what every table here reads; the curves only the figure)."""
    return [json.loads(line) for line in Path(f"{stem}.jsonl").read_text().splitlines() if line.strip()]


def load(stem: Path) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    records = records_of(stem)
    with np.load(f"{stem}_curves.npz") as z:
        curves = {k: z[k] for k in z.files}
    return records, curves


def capped(record: dict[str, Any], reference: str = REFERENCE, budget: str = BUDGET) -> tuple[float, bool]:
    """The run's slowdown against ``reference`` at ``budget`` (not reached: the cap, the reach factor)."""
    s = record["slowdown"][reference][budget]
    return (s["slowdown"], True) if s["reached"] else (s["limit"] / s["budget"], False)


@dataclass(frozen=True)
class Cell:
    median: float
    low: float
    high: float
    n: int
    unreached: int

    def text(self) -> str:
        mark = "≥" if self.unreached * 2 >= self.n else ""
        miss = f", {self.unreached} not reached" if self.unreached else ""
        return f"{mark}{self.median:.3g} [{self.low:.3g}, {self.high:.3g}] (n={self.n}{miss})"


def cell(values: list[float], reached: list[bool]) -> Cell:
    x = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(0)
    boots = np.median(x[rng.integers(0, x.size, size=(N_BOOT, x.size))], axis=1)
    low, high = np.percentile(boots, [2.5, 97.5])
    return Cell(float(np.median(x)), float(low), float(high), x.size, reached.count(False))


def matrix(records: list[dict[str, Any]], reference: str = REFERENCE, budget: str = BUDGET,
           ) -> dict[tuple[str, str], Cell]:
    groups: dict[tuple[str, str], tuple[list[float], list[bool]]] = {}
    for r in records:
        if reference not in r["slowdown"]:
            continue
        v, ok = capped(r, reference, budget)
        vals, oks = groups.setdefault((r["method"], r["attacker"]), ([], []))
        vals.append(v)
        oks.append(ok)
    return {k: cell(*v) for k, v in groups.items()}


def spearman(records: list[dict[str, Any]], reference: str = REFERENCE) -> dict[str, tuple[float, float, int]]:
    """attacker -> (rho, two-sided p, n) of RIR against the capped slowdown (against ``reference``) over the
    immunized runs; rho is NaN with fewer than 3 runs or when every slowdown is the same (e.g. all capped)."""
    from scipy.stats import spearmanr

    out = {}
    for attacker in dict.fromkeys(r["attacker"] for r in records):
        rs = [r for r in records if r["attacker"] == attacker and r["role"] == "immunized" and r["rir"] is not None]
        rir = [r["rir"] for r in rs]
        sd = [capped(r, reference)[0] for r in rs]
        if len(rs) < 3 or len(set(sd)) < 2:  # too few runs, or nothing to rank
            out[attacker] = (float("nan"), float("nan"), len(rs))
            continue
        res = spearmanr(rir, sd)
        out[attacker] = (float(res.statistic), float(res.pvalue), len(rs))
    return out


def matrix_markdown(records: list[dict[str, Any]], reference: str, budget: str = BUDGET) -> str:
    """The method x attacker matrix against ``reference`` at ``budget`` (a markdown table; module docstring)."""
    m = matrix(records, reference, budget)
    attackers = list(dict.fromkeys(r["attacker"] for r in records))
    methods = list(dict.fromkeys(r["method"] for r in records if r["method"] != reference))
    lines = ["| method | " + " | ".join(attackers) + " |", "|---" * (len(attackers) + 1) + "|"]
    for method in methods:
        lines.append(f"| {method} | " + " | ".join(m[(method, a)].text() if (method, a) in m else "-"
                                                  for a in attackers) + " |")
    return "\n".join(lines)


def dp_markdown(records: list[dict[str, Any]]) -> str:
    """Method x extractor attacker: D_P's kept fraction at the largest budget (module docstring); "-" where the
    records carry none (probe attackers leave D_P unchanged; records made before the measure existed)."""
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        if r.get("dp_utility") is not None:
            cells.setdefault((r["method"], r["attacker"]), []).append(r["dp_utility"])
    attackers = list(dict.fromkeys(a for _, a in cells))
    methods = list(dict.fromkeys(m for m, _ in cells))
    lines = ["| method | " + " | ".join(attackers) + " |", "|---" * (len(attackers) + 1) + "|"]
    for method in methods:
        lines.append(f"| {method} | " + " | ".join(_dp_text(cells.get((method, a), [])) for a in attackers) + " |")
    return "\n".join(lines)


def _dp_text(utilities: list[dict[str, Any]]) -> str:
    if not utilities:
        return "-"
    kept = [u["at_step"].get(str(u["budget"]), {}).get("kept") for u in utilities]
    values = [k for k in kept if k is not None]
    broken = sum(u["broken"] is True for u in utilities)
    undefined = len(kept) - len(values)
    text = f"{np.median(values):.3g} [{min(values):.3g}, {max(values):.3g}]" if values else "undefined"
    notes = [f"n={len(utilities)}"] + [f"{broken} broken"] * bool(broken) + [f"{undefined} undefined"] * bool(undefined)
    return f"{text} ({', '.join(notes)})"


def accuracy_markdown(records: list[dict[str, Any]], budget: str) -> str:
    """Method x attacker: the harmful task's test accuracy after ``budget`` steps, median [min, max] over runs and n;
    "-" where the records carry none (a regression, or records made before accuracy was recorded)."""
    cells: dict[tuple[str, str], list[float]] = {}
    for r in records:
        value = r["at_budget"].get(budget, {}).get("test_accuracy")
        if value is not None:
            cells.setdefault((r["method"], r["attacker"]), []).append(value)
    attackers = list(dict.fromkeys(a for _, a in cells))
    methods = list(dict.fromkeys(m for m, _ in cells))
    lines = ["| method | " + " | ".join(attackers) + " |", "|---" * (len(attackers) + 1) + "|"]
    for method in methods:
        lines.append(f"| {method} | " + " | ".join(
            f"{np.median(v):.3g} [{min(v):.3g}, {max(v):.3g}] (n={len(v)})" if (v := cells.get((method, a))) else "-"
            for a in attackers) + " |")
    return "\n".join(lines)


def markdown(records: list[dict[str, Any]]) -> str:
    lines = [f"Against theta = I ({REFERENCE}):", "", matrix_markdown(records, REFERENCE), "",
             "Against the run's initial extractor (init):", "", matrix_markdown(records, "init")]
    rho = {ref: spearman(records, ref) for ref in (REFERENCE, "init")}
    lines += ["", "| attacker | Spearman rho, RIR vs slowdown against direct (p) | ... against init (p) | n |",
              "|---|---|---|---|"]
    lines += [f"| {a} | {r:.3f} ({p:.3g}) | {rho['init'][a][0]:.3f} ({rho['init'][a][1]:.3g}) | {n} |"
              for a, (r, p, n) in rho[REFERENCE].items()]
    if any(r.get("dp_utility") is not None for r in records):
        lines += ["", "D_P's utility kept at the largest budget (extractor attackers):", "", dp_markdown(records)]
    budgets = sorted({b for r in records for b, v in r["at_budget"].items() if v.get("test_accuracy") is not None},
                     key=int)
    for budget in budgets:
        lines += ["", f"The harmful task's test accuracy after {budget} steps:", "", accuracy_markdown(records, budget)]
    return "\n".join(lines)


def figure(records: list[dict[str, Any]], curves: dict[str, np.ndarray], path: Path, seed: int = 0,
           pair: str | None = None) -> None:
    """Harmful training loss minus the least-squares optimum vs steps, one panel per attacker, seed ``seed`` (and
    ``pair``): the direct reference (theta = I) and each method's theta_I."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    attackers = list(dict.fromkeys(r["attacker"] for r in records))
    rs = [r for r in records if r["seed"] == seed and r["pair"] == pair]
    f_star = min(float(np.nanmin(curves[r["curve"]])) for r in rs if r["attacker"] == "solve")
    cols = 5
    fig, axes = plt.subplots((len(attackers) + cols - 1) // cols, cols, figsize=(3.2 * cols, 5.6), squeeze=False)
    for ax, attacker in zip(axes.flat, attackers):
        for r in rs:
            if r["attacker"] != attacker or r["method"] in ("init",):
                continue
            c = curves[r["curve"]]
            computed = ~np.isnan(c)  # a deep attacker's curve is computed every few steps (measures.attack)
            style = {"color": "k", "lw": 2, "zorder": 3} if r["method"] == REFERENCE else {"lw": 1}
            ax.plot(np.flatnonzero(computed), np.maximum(c[computed] - f_star, 1e-16), label=r["method"], **style)
        ax.set(xscale="symlog", yscale="log", title=attacker, xlabel="steps")
    for ax in axes.flat[len(attackers):]:
        ax.axis("off")
    axes.flat[0].set_ylabel("training loss - least-squares optimum")
    axes.flat[0].legend(fontsize=7)
    where = f"seed {seed}" + (f", pair {pair}" if pair else "")
    fig.suptitle(f"{rs[0]['table']}: harmful-task loss per attacker ({where}; black: theta = I)")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


MATRIX = re.compile(r"(<!-- matrix (\w+) (\w+)(?: (\d+))? -->\n)((?:\|.*\|\n)+)")
DP = re.compile(r"(<!-- dp (\w+) -->\n)((?:\|.*\|\n)+)")
ACCURACY = re.compile(r"(<!-- accuracy (\w+) (\d+) -->\n)((?:\|.*\|\n)+)")


def refresh(page: Path, stores: Path) -> str:
    """``page`` with every ``<!-- matrix TABLE REFERENCE [BUDGET] -->`` block's table recomputed from
    ``stores/TABLE.jsonl`` (:func:`matrix_markdown`; what tests/test_attack_docs.py checks against the curves) and
    every ``<!-- dp TABLE -->`` block's (:func:`dp_markdown`) and ``<!-- accuracy TABLE BUDGET -->``'s
    (:func:`accuracy_markdown`)."""
    cache: dict[str, list[dict[str, Any]]] = {}

    def records(table: str) -> list[dict[str, Any]]:
        if table not in cache:
            cache[table] = records_of(stores / table)
        return cache[table]

    text = MATRIX.sub(lambda m: m[1] + matrix_markdown(records(m[2]), m[3], m[4] or BUDGET) + "\n", page.read_text())
    text = DP.sub(lambda m: m[1] + dp_markdown(records(m[2])) + "\n", text)
    return ACCURACY.sub(lambda m: m[1] + accuracy_markdown(records(m[2]), m[3]) + "\n", text)


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if args[:1] == ["--refresh"]:  # --refresh PAGE: rewrite the page's matrix blocks from the stores beside it
        page = Path(args[1])
        write_text(page, refresh(page, page.parent / "attacks"))
        return 0
    stem = Path(args[0])
    records, curves = load(stem)
    pairs = list(dict.fromkeys(r["pair"] for r in records))
    if args[1:2] == ["--figures"]:  # --figures a-b,...: only these pairs' figures (a store of many pairs)
        named = args[2].split(",") if len(args) > 2 else []
        unknown = [pair for pair in named if pair not in pairs]
        if unknown or not named:
            what = f"{unknown[0]} is not a pair of {stem}.jsonl" if unknown else "give the pairs, e.g. 7-9,1-0"
            print(f"--figures: {what}; {stem}.jsonl holds {', '.join(map(str, pairs))}", file=sys.stderr)
            return 2
        pairs = named
    print(markdown(records))
    for pair in pairs:
        seed = min(r["seed"] for r in records if r["pair"] == pair)  # the first seed the store holds
        figure(records, curves, Path(f"{stem}_figure{'' if pair is None else '_' + pair}.png"), seed, pair)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
