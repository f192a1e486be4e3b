"""The "why they differ" words of the README's rows, derived from the committed numbers (the rules: ``CLOSE``,
``FAR``, ``STILL_RISING``); tests/test_readme_reasons.py recomputes each claim from the per-run files. Table 3's row
reads its decision table (:func:`table3_powered_reason`)."""

from __future__ import annotations

import csv
import json
import math

from kappalab.findings import MeanStd
from kappalab.reproduce.table1.constants import LABELS, PAPER_TABLE1
from kappalab.reproduce.table2.constants import PAPER_FIG2_SUCCESS, PAPER_TABLE2, SUCCESS_THRESHOLD

from findings_sources import (  # a sibling: scripts/ is on the path (readme_findings puts it there)
    REPRO, Source, T1_PAPER, T1_SHIPPED_1000, T2_PAPER, T2_PAPER_90, T3_GRID_PATHS, TABLE1_SETTINGS,
    stored, table1_report,
)


def table3_powered_reason(method: str, direction: str, protocol: str = "paper") -> str:
    """The README's "why they differ" cell of a selection grid's row, from the decision table: the verdict, the
    seeds and setting, the controls' group RIR, and the D_P accuracy lost."""
    from kappalab.reproduce.table3.decision import decide

    rows = {row.method: row for row in decide(stored(REPRO / T3_GRID_PATHS[direction, protocol]))}
    row, oracle, null = rows[method], rows["oracle"], rows["task_only"]
    return (f"{row.verdict}, by the report's decision rule; {row.n} seed(s) at lr, lambda multiple {row.setting}; "
            f"the oracle control reads {oracle.rir['groups']:.3g} with {oracle.accuracy_drop:.1f} points of D_P "
            f"accuracy lost, task_only {null.rir['groups']:.3g}; {LABELS[method]} loses {row.accuracy_drop:.1f} "
            "points")


# ---- "why they differ": the words of the Table 1 and Table 2 rows, derived from the committed numbers ----------

CLOSE = 0.10  #: a value within 10 % of the paper's is "close"
FAR = 10.0  #: a term at least 10x the paper's (one order of magnitude) is "far worse conditioned"
STILL_RISING = 0.99  #: RIR is "still rising" when every seed's largest RIR falls in the last 1 % of the epochs
T1_LR = "lr0.005"  #: Table 4's House Prices learning rate: the key of the paper protocol's trajectory facts


def times(r: float) -> str:
    """A ratio >= 1 as "Nx" (two significant digits below FAR, whole numbers above)."""
    return f"{r:,.0f}x" if r >= FAR else f"{r:.2g}x"


def versus(ours: float, paper: float) -> str:
    """``ours`` against the paper's value: "close (N% low)" within CLOSE, "N% low/high" up to a factor 2,
    "Nx low/high" beyond."""
    r = ours / paper
    side = "low" if r < 1 else "high"
    if abs(r - 1) <= CLOSE:
        return f"close ({abs(r - 1):.0%} {side})"
    return f"{abs(r - 1):.0%} {side}" if 0.5 <= r <= 2 else f"{times(max(r, 1 / r))} {side}"


def t1_terms(source: Source, method: str) -> tuple[float, float]:
    """The mean pinv (i), (ii) over the seeds of a Table 1 report."""
    s = json.loads((REPRO / source.path).read_text())["summary"][method]["pinv"]
    return s["term_i"][0], s["term_ii"][0]


def t1_worse_conditioned(method: str) -> str:
    """The paper protocol's (i), (ii) of ``method`` against the paper's; "far worse conditioned" when both >= FAR."""
    (i, ii), paper = t1_terms(T1_PAPER, method), PAPER_TABLE1[method]
    ri, rii = i / paper["term_i"][0], ii / paper["term_ii"][0]
    far = ": both tasks far worse conditioned" if min(ri, rii) >= FAR else ""
    return f"(i) {times(ri)}, (ii) {times(rii)} the paper's{far}"


def t1_trajectory() -> str:
    """Ours under the paper protocol at Table 4's lr: where each seed's RIR peaks and the smallest (ii) of any epoch
    >= 1, from the trajectory facts of the lr_grid store (the runs of table1/paper, rerun with trajectories)."""
    facts = json.loads((REPRO / "table1" / "trajectory_facts.json").read_text())["stores"]["lr_grid"][f"ours/{T1_LR}"]
    epochs = json.loads((REPRO / T1_PAPER.path).read_text())["meta"]["epochs"]["ours"]
    lo, hi = min(facts["argmax_epoch"]), max(facts["argmax_epoch"])
    rising = " (still rising)" if lo >= STILL_RISING * epochs else ""
    paper = PAPER_TABLE1["ours"]["term_ii"][0]
    return (f"RIR largest at epoch {lo}-{hi} of {epochs}{rising}; (ii) never below {facts['term_ii_min']:.3g}, "
            f"{times(facts['term_ii_min'] / paper)} the paper's {paper}")


def t1_steps(source: Source) -> int:
    """The optimizer steps of each of Ours' runs in a Table 1 report (one number: every seed takes as many)."""
    (steps,) = {r["n_steps"] for r in json.loads((REPRO / source.path).read_text())["runs"] if r["method"] == "ours"}
    return steps


def t1_closest() -> str:
    """Ours' (i), (ii) at the shipped code's 1000 epochs against the paper's, whether no other fixed setting of
    table1.md is closer (the larger of the two log ratios), and the seed spread (std / mean of RIR)."""
    paper = PAPER_TABLE1["ours"]

    def distance(source: Source) -> float:
        i, ii = t1_terms(source, "ours")
        return max(abs(math.log(i / paper["term_i"][0])), abs(math.log(ii / paper["term_ii"][0])))

    fixed = [s for _, s in TABLE1_SETTINGS if s is not None and s.read is table1_report]
    nearest = min(fixed, key=distance) == T1_SHIPPED_1000
    closest = f", the closest of table1.md's {len(fixed)} fixed settings" if nearest else ""
    i, ii = t1_terms(T1_SHIPPED_1000, "ours")
    rir = T1_SHIPPED_1000.read(REPRO / T1_SHIPPED_1000.path, "ours")
    return (f"(i) {versus(i, paper['term_i'][0])}, (ii) {versus(ii, paper['term_ii'][0])}{closest}; seed spread "
            f"{rir.std / rir.mean:.0%} (paper: {paper['rir'][1] / paper['rir'][0]:.1%})")


def headline(protocol: str, method: str) -> dict:
    """The full90/headline.json row of ``method`` under ``protocol``."""
    (row,) = [r for r in json.loads((REPRO / T2_PAPER_90.path).read_text())["rows"]
              if (r["protocol"], r["method"]) == (protocol, method)]
    return row


def t2_versus(protocol: str, method: str) -> str:
    """The 90-pair statistic of ``method`` against the paper's RIR."""
    return versus(headline(protocol, method)["statistic"][0], PAPER_TABLE2[method][2][0])


def t2_pairs(protocol: str, method: str) -> str:
    """How many of the 90 pairs have RIR above SUCCESS_THRESHOLD (seeds' mean of log10 RIR), against Figure 2."""
    h = headline(protocol, method)
    return (f"above {SUCCESS_THRESHOLD:g} on {h['pairs_above']} of {h['n_pairs']} pairs (the paper's Figure 2: "
            f"{PAPER_FIG2_SUCCESS[method]})")


def t2_below_one(protocol: str, method: str) -> str:
    """How many of the 90 pairs have RIR below 1 (seeds' mean of log10 RIR)."""
    h = headline(protocol, method)
    return f"{h['pairs_below_one']} of {h['n_pairs']} pairs below 1"


def t2_steps(protocol: str, method: str) -> tuple[int, int]:
    """The fewest and most optimizer steps of a 90-pair store's runs of ``method``."""
    with (REPRO / "table2" / "full90" / protocol / f"table2_{protocol}.csv").open() as f:
        steps = [int(r["n_steps"]) for r in csv.DictReader(line for line in f if not line.startswith("#"))
                 if r["method"] == method]
    return min(steps), max(steps)


def t2_terms(protocol: str, method: str) -> str:
    """The 90-pair mean pinv (i), (ii) of ``method`` (terms.json) against the paper's."""
    (row,) = [r for r in json.loads((REPRO / "table2" / "full90" / "terms.json").read_text())["rows"]
              if (r["protocol"], r["method"], r["kappa"]) == (protocol, method, "pinv")]
    paper = PAPER_TABLE2[method]
    return f"(i) {versus(row['term_i']['mean'], paper[0][0])}, (ii) {versus(row['term_ii']['mean'], paper[1][0])}"


def t2_shifted(protocol: str, method: str) -> str:
    """The same runs' 90-pair statistic by the official code's shifted kappa (terms.json)."""
    (row,) = [r for r in json.loads((REPRO / "table2" / "full90" / "terms.json").read_text())["rows"]
              if (r["protocol"], r["method"], r["kappa"]) == (protocol, method, "shifted")]
    return f"the same runs by the authors' code's shifted kappa: {row['rir']['mean']:.4g}"


def span(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def t2_official_ours() -> str:
    return (f"{t2_pairs('official', 'ours')}; {span(*t2_steps('official', 'ours'))} minibatch steps per run, not "
            f"{span(*t2_steps('paper', 'ours'))} full-batch ones")


def t2_held_out(method: str) -> str:
    """The 10-pair paper-protocol runs on MNIST's test digits, the epoch picked on the validation part."""
    (rec,) = [r for r in json.loads((REPRO / T2_PAPER.path).read_text())["records"]
              if r["method"] == method and r["grid"] == "epoch_only" and r["report_on"] == "test"
              and r["rule"]["max_term_ii"] == float("inf")]
    return (f"on its training rows only: {MeanStd(*rec['summary']['rir'], len(rec['per_run'])).text()} on MNIST's "
            "test digits, epoch picked on validation")
