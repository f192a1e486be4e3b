"""The generated findings of README.md and docs/reproduction/table1.md, built from committed result files only.

    python scripts/readme_findings.py           # rewrite the generated blocks in place
    python scripts/readme_findings.py --check   # exit 1, naming the file, when a block differs from the files

A block sits between ``<!-- generated: NAME (scripts/readme_findings.py) -->`` and ``<!-- end: NAME -->``.
Sources: the claims table reads docs/verdicts.json (verdicts, check files) and the claims registry (each claim's
gist); every other number is read from the store named in its row below (paths under docs/reproduction). To move
a row to a new store (e.g. Table 2's 90-pair sweep), change its ``Source`` here and rerun; tests/test_readme.py
fails while a block is out of date. The "why they differ" cells of Tables 1 and 2 are worded from the committed
numbers by the functions of the section of that name (its rules: ``CLOSE``, ``FAR``, ``STILL_RISING``);
tests/test_readme_reasons.py recomputes each claim from the per-run files.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kappalab.findings import MeanStd, claims_table, read_verdicts
from kappalab.methods import DEEP_METHODS
from kappalab.reproduce.table1.constants import LABELS, ORDER, PAPER_TABLE1
from kappalab.reproduce.table2.constants import PAPER_FIG2_SUCCESS, PAPER_TABLE2, SUCCESS_THRESHOLD
from kappalab.reproduce.table3.constants import PAPER_TABLE3
from kappalab.results import mean_std

ROOT = Path(__file__).resolve().parents[1]
REPRO = ROOT / "docs" / "reproduction"
TABLE2_LR = "lr0.001"  #: Table 4's MNIST learning rate: the key of the stores' epoch-30 table


# ---- readers: (store path, method) -> RIR as mean ± std over n runs, or None (no admissible run) ---------------

def of_runs(values: list[float]) -> MeanStd:
    """Mean and sample std of some runs' values (std NaN for one run)."""
    return MeanStd(*mean_std(values), len(values))


def table1_report(path: Path, method: str) -> MeanStd | None:
    s = json.loads(path.read_text())["summary"].get(method)
    return None if s is None else MeanStd(*s["pinv"]["rir"][:2], s["n_seeds"])


def table1_selection(select_on: str, max_term_ii: float) -> Callable[[Path, str], MeanStd | None]:
    """App. C.2's selection (largest RIR among admissible epochs, lr with the largest mean) from a selection.json:
    ``select_on`` "full" (selected and reported on all rows) or "val" (reported on the held-out half)."""
    def read(path: Path, method: str) -> MeanStd | None:
        (rec,) = [r for r in json.loads(path.read_text())["records"]
                  if r["method"] == method and r.get("select_on") == select_on and r["rule"]["stopping"] == "max_rir"
                  and r["rule"]["max_term_ii"] == max_term_ii and r["rule"]["loss_slack"] == 0.25]
        s = rec["summary"]
        return None if s is None else MeanStd(*s["rir"][:2], len(rec["per_seed"]))
    return read


def table2_table(path: Path, method: str) -> MeanStd | None:
    s = json.loads(path.read_text())["table"].get(f"{TABLE2_LR}/{method}")
    return None if s is None else MeanStd(*s["rir"][:2], s["n_runs"])


def table2_headline(protocol: str) -> Callable[[Path, str], MeanStd | None]:
    """The paper's statistic from full90/headline.json: per seed the mean over all 90 pairs, then mean ± std over
    the complete seeds (n: seeds); None where no seed of ``protocol`` has all 90 pairs yet."""
    def read(path: Path, method: str) -> MeanStd | None:
        rows = [r for r in json.loads(path.read_text())["rows"]
                if (r["protocol"], r["method"]) == (protocol, method) and r["complete_seeds"]]
        return MeanStd(*rows[0]["statistic"], len(rows[0]["complete_seeds"])) if rows else None
    return read


def table3_runs(path: Path, method: str) -> MeanStd | None:
    rir = [json.loads(line)["rir"]["est_rir"] for line in path.read_text().splitlines()
           if json.loads(line)["method"] == method]
    return of_runs(rir) if rir else None


@dataclass(frozen=True)
class Source:
    path: str  #: under docs/reproduction
    read: Callable[[Path, str], MeanStd | None]

    def value(self, method: str) -> str:
        v = self.read(REPRO / self.path, method)
        return "no admissible epoch" if v is None else v.text()


# ---- README: one table per paper table --------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    method: str
    paper: str  #: the paper's value ("" on a second row of the same method)
    source: Source
    protocol: str
    reason: str


def paper1(m: str) -> str:
    return MeanStd(*PAPER_TABLE1[m]["rir"], 5).text()


def paper2(m: str) -> str:
    return MeanStd(*PAPER_TABLE2[m][2], None).text()


T1_PAPER = Source("table1/paper/table1.json", table1_report)
T1_SHIPPED_10 = Source("table1/official_ddp2/table1_official_ddp2.json", table1_report)
T1_SHIPPED_1000 = Source("table1/official_ddp2_e1000/table1_official_ddp2.json", table1_report)
T2_PAPER = Source("table2/paper_alg1/selection_paper.json", table2_table)
T2_PAPER_90 = Source("table2/full90/headline.json", table2_headline("paper"))
T2_OFFICIAL_90 = Source("table2/full90/headline.json", table2_headline("official"))
T3_PROXY = Source("table3/runs.jsonl", table3_runs)
T3_POWERED_PATH = "table3/powered/pilot/fmnist_vs_mnist/paper/runs.jsonl"


def powered_records(path: Path) -> list[dict]:
    """A powered store's records at the settings its decision table reads (kappalab.reproduce.table3.grid)."""
    from kappalab.reproduce.table3.grid import selected

    return selected(stored(path))[0]


def stored(path: Path) -> list[dict]:
    """Every record of a JSON-lines store."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def table3_powered(path: Path, method: str) -> MeanStd | None:
    """A powered store's group RIR of ``method`` at the setting the decision table reads: mean ± std over seeds."""
    rir = [r["estimates"]["groups"]["rir"] for r in powered_records(path) if r["method"] == method]
    return of_runs(rir) if rir else None


def table3_powered_reason(method: str) -> str:
    """The README's "why they differ" cell of the powered row, from the decision table: the verdict, the seeds and
    setting, the controls' group RIR, and the D_P accuracy lost."""
    from kappalab.reproduce.table3.decision import decide

    rows = {row.method: row for row in decide(stored(REPRO / T3_POWERED_PATH))}
    row, oracle, null = rows[method], rows["oracle"], rows["task_only"]
    return (f"{row.verdict} (decision rule in the report; {row.n} seed(s), lr and lambda multiple {row.setting}): "
            f"the oracle control reads {oracle.rir['groups']:.3g} with {oracle.accuracy_drop:.1f} points of D_P "
            f"accuracy lost, task_only {null.rir['groups']:.3g}; {LABELS[method]} loses {row.accuracy_drop:.1f} "
            "points")


T3_POWERED = Source(T3_POWERED_PATH, table3_powered)


# ---- docs/reproduction/table1.md: RIR per method under each protocol --------------------------------------------

TABLE1_SETTINGS: list[tuple[str, Source | None]] = [
    ("paper (Table 1)", None),
    ("paper protocol (Alg. 1), Table 4: lr 0.005, 1000 epochs", T1_PAPER),
    ("paper protocol, lr 0.001, 1000 epochs (the fixed cell closest to 356.2)",
     Source("table1/lr_grid/table1_paper_lr0.001.json", table1_report)),
    ("paper protocol, App. C.2's selection (4 lr x 1000 epochs), selected and reported on all rows",
     Source("table1/lr_grid/selection.json", table1_selection("full", 1.0))),
    ("the same, selected on a validation half, reported on the held-out half",
     Source("table1/lr_grid/selection.json", table1_selection("val", 1.0))),
    ("the same without the (ii) <= 1 condition",
     Source("table1/lr_grid/selection.json", table1_selection("val", float("inf")))),
    ("authors' code (official), 1 process, 10 epochs", Source("table1/official/table1.json", table1_report)),
    ("authors' code, 1 process, 1000 epochs",
     Source("table1/official_e1000_trajectory/table1_official.json", table1_report)),
    ("authors' code as shipped: 2 processes, 10 epochs", T1_SHIPPED_10),
    ("authors' code, 2 processes, 1000 epochs", T1_SHIPPED_1000),
]


def table1_answer() -> str:
    lines = ["| RIR (pinv kappa), mean ± std (n seeds) | " + " | ".join(LABELS[m] for m in ORDER) + " |",
             "|---|" + "---|" * len(ORDER)]
    for label, source in TABLE1_SETTINGS:
        cells = [paper1(m) if source is None else source.value(m) for m in ORDER]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


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


def span(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def t2_official_ours() -> str:
    return (f"{t2_pairs('official', 'ours')}; {span(*t2_steps('official', 'ours'))} minibatch steps per run, not "
            f"{span(*t2_steps('paper', 'ours'))} full-batch ones")


def t2_median(method: str) -> str:
    """The median run's RIR in the 10-pair paper-protocol store at epoch 30."""
    median = json.loads((REPRO / T2_PAPER.path).read_text())["table"][f"{TABLE2_LR}/{method}"]["median_rir"]
    return f"median run {median:.3g}" + (", below 1" if median < 1 else "")


def t2_held_out(method: str) -> str:
    """The 10-pair paper-protocol runs on MNIST's test digits, the epoch picked on the validation part."""
    (rec,) = [r for r in json.loads((REPRO / T2_PAPER.path).read_text())["records"]
              if r["method"] == method and r["grid"] == "epoch_only" and r["report_on"] == "test"
              and r["rule"]["max_term_ii"] == float("inf")]
    return (f"on its training rows only: {MeanStd(*rec['summary']['rir'], len(rec['per_run'])).text()} on MNIST's "
            "test digits, epoch picked on validation")


PAPER_TABLES: dict[str, tuple[str, list[Row]]] = {
    "Table 1, House Prices (RIR of Eq. 15, paper: 5 seeds)": ("docs/reproduction/table1.md", [
        Row("ours", paper1("ours"), T1_PAPER, "paper protocol (Alg. 1), Table 4: lr 0.005, 1000 epochs",
            t1_trajectory()),
        Row("ours", "", T1_SHIPPED_10, "the authors' code as shipped (2 processes, 10 epochs)",
            f"too few steps: {t1_steps(T1_SHIPPED_10)} per run (the next row: {t1_steps(T1_SHIPPED_1000)}); "
            "the authors' own logged run of this config: 1.2"),
        Row("ours", "", T1_SHIPPED_1000, "the same code at Table 4's 1000 epochs", t1_closest()),
        Row("rill_only", paper1("rill_only"), T1_PAPER, "paper protocol", t1_worse_conditioned("rill_only")),
        Row("imma", paper1("imma"), T1_PAPER, "paper protocol", t1_worse_conditioned("imma")),
        Row("opt_kappa", paper1("opt_kappa"), T1_PAPER, "paper protocol",
            "the paper does not say how it differentiates kappa"),
    ]),
    "Table 2, MNIST (RIR; paper: 90 pairs x 3 seeds; here full MNIST: 90 pairs (n = seeds with all 90 pairs) or "
    "10 pairs x 3 seeds (n = runs))": (
        "docs/reproduction/table2.md", [
            Row("ours", paper2("ours"), T2_OFFICIAL_90, "the authors' code (minibatches), all 90 pairs, epoch 30",
                t2_official_ours()),
            Row("ours", "", T2_PAPER_90, "paper protocol (Alg. 1), all 90 pairs, epoch 30", t2_terms("paper", "ours")),
            Row("rill_only", paper2("rill_only"), T2_PAPER_90, "paper protocol, all 90 pairs",
                t2_versus("paper", "rill_only")),
            Row("rill_only", "", T2_OFFICIAL_90, "the authors' code, all 90 pairs", t2_versus("official", "rill_only")),
            Row("imma", paper2("imma"), T2_OFFICIAL_90, "the authors' code, all 90 pairs",
                f"{t2_versus('official', 'imma')} on average; {t2_below_one('official', 'imma')}"),
            Row("imma", "", T2_PAPER, "paper protocol, 10 pairs", t2_median("imma")),
            Row("opt_kappa", paper2("opt_kappa"), T2_PAPER, "paper protocol, 10 pairs", t2_held_out("opt_kappa")),
            Row("opt_kappa", "", T2_OFFICIAL_90, "the authors' code, all 90 pairs", t2_pairs("official", "opt_kappa")),
        ]),
    "Table 3, deep nets (RIR_theta0 of Eq. 17)": ("docs/reproduction/table3.md", [
        Row("ours", f"{PAPER_TABLE3['cars']['ours'][2]} (ResNet18, Cars)", T3_POWERED,
            "ImageNet EfficientNet-Lite0, tail trained for 312 steps, D_P Fashion-MNIST / D_H MNIST, paper "
            "protocol, groups of 100; a pilot beside the oracle and task_only controls",
            table3_powered_reason("ours")),
        Row("ours", "", T3_PROXY, "CPU analogue: small CNN, MNIST 0-4 vs 5-9, 3 seeds",
            "not the paper's experiment: no ImageNet or GPU"),
    ]),
}


def paper_tables() -> str:
    out = []
    for title, (report, rows) in PAPER_TABLES.items():
        out += [f"**{title}** ([report]({report}))", "",
                "| method | paper | the lab's closest reproduction | protocol | why they differ |",
                "|---|---|---|---|---|"]
        for r in rows:
            out.append(f"| {LABELS[r.method] if r.paper else ''} | {r.paper} | {r.source.value(r.method)} | "
                       f"{r.protocol} | {r.reason} |")
        out.append("")
    return "\n".join(out)


def readme_findings() -> str:
    rows = read_verdicts(ROOT / "docs" / "verdicts.json")
    return "\n".join([
        "**The paper's claims**, checked by machine (both sides of every inequality, counterexamples re-checked in "
        "exact or 50-digit arithmetic: [docs/verdicts.md](docs/verdicts.md); the claims in full: "
        "[docs/claims.md](docs/claims.md)):", "", claims_table(rows), paper_tables().rstrip()])


# ---- docs/reproduction/table3.md: RIR_theta0 per method in each setting -----------------------------------------

T3_ORDER = DEEP_METHODS


def real_estimates(direction: str, protocol: str, estimator: str, method: str) -> list[dict]:
    """The real network's ``estimator`` (groups, authors, exact) of ``method``, one per seed stored in
    real/<direction>/<protocol>/runs.jsonl."""
    path = REPRO / "table3" / "real" / direction / protocol / "runs.jsonl"
    return [r["estimates"][estimator] for r in map(json.loads, path.read_text().splitlines()) if r["method"] == method]


def table3_real(direction: str, protocol: str, estimator: str) -> Callable[[str], str]:
    """The real network's RIR_theta0 by ``estimator``: one seed with its bootstrap 95% interval over the groups, or
    mean ± sample std over the seeds with the hull of their intervals (the exact estimator has none)."""
    def cell(method: str) -> str:
        est = real_estimates(direction, protocol, estimator, method)
        if not est:
            return "not run"
        rir = [e["rir"] for e in est]
        body = of_runs(rir)
        cis = [e["ci95"] for e in est if e["ci95"] is not None]
        hull = " [{:.3g}, {:.3g}]".format(min(c[0] for c in cis), max(c[1] for c in cis)) if cis else ""
        text = body.text("{:.3g}")
        return text.replace(" (n=", f"{hull} (n=") if hull else text
    return cell


def table3_proxy(path: str, protocol: str, key: str) -> Callable[[str], str]:
    """A CPU analogue's estimated RIR_theta0 (``key`` rir: our kappa, rir_authors: the authors'), mean ± sample std
    over the seeds of ``protocol`` in a store under docs/reproduction/table3."""
    def cell(method: str) -> str:
        recs = [json.loads(line) for line in (REPRO / "table3" / path).read_text().splitlines()]
        rir = [r[key]["est_rir"] for r in recs if r["method"] == method
               and r["provenance"]["config"].get("protocol", "paper") == protocol]
        return of_runs(rir).text("{:.3g}")
    return cell


def table3_paper(harmful: str) -> Callable[[str], str]:
    return lambda method: f"{PAPER_TABLE3[harmful][method][2]} (n=3)"


FMNIST_MNIST = "EfficientNet-Lite0 (ImageNet weights, tail trained), D_P Fashion-MNIST / D_H MNIST"
MNIST_FMNIST = "EfficientNet-Lite0, D_P MNIST / D_H Fashion-MNIST"
SMALL_CNN = "SmallCNN (32 features), MNIST 0-4 / 5-9, searched lambdas"
WIDE_CNN = "SmallCNN at 128 features, MNIST 0-4 / 5-9, groups of 64"
TABLE3_SETTINGS: list[tuple[str, str, Callable[[str], str]]] = [
    ("**paper**: ResNet18, ImageNet-1k / Stanford Cars", "the paper's", table3_paper("cars")),
    ("**paper**: ResNet18, ImageNet-1k / Country211", "the paper's", table3_paper("country211")),
    (FMNIST_MNIST, "paper; ours, 20 groups of 100", table3_real("fmnist_vs_mnist", "paper", "groups")),
    (FMNIST_MNIST, "paper; authors', 20 groups of 100", table3_real("fmnist_vs_mnist", "paper", "authors")),
    (FMNIST_MNIST, "paper; exact (2560 held-out images)", table3_real("fmnist_vs_mnist", "paper", "exact")),
    (FMNIST_MNIST, "official; ours, 20 groups of 100", table3_real("fmnist_vs_mnist", "official", "groups")),
    (FMNIST_MNIST, "official; authors', 20 groups of 100", table3_real("fmnist_vs_mnist", "official", "authors")),
    (MNIST_FMNIST, "paper; ours, 20 groups of 100", table3_real("mnist_vs_fmnist", "paper", "groups")),
    (MNIST_FMNIST, "paper; authors', 20 groups of 100", table3_real("mnist_vs_fmnist", "paper", "authors")),
    (MNIST_FMNIST, "paper; exact (2560 held-out images)", table3_real("mnist_vs_fmnist", "paper", "exact")),
    (MNIST_FMNIST, "official; ours, 20 groups of 100", table3_real("mnist_vs_fmnist", "official", "groups")),
    (MNIST_FMNIST, "official; authors', 20 groups of 100", table3_real("mnist_vs_fmnist", "official", "authors")),
    (FMNIST_MNIST + ", BatchNorm statistics frozen", "paper; ours, 20 groups of 100",
     table3_real("fmnist_vs_mnist", "paper_frozen_bn", "groups")),
    (MNIST_FMNIST + ", BatchNorm statistics frozen", "paper; ours, 20 groups of 100",
     table3_real("mnist_vs_fmnist", "paper_frozen_bn", "groups")),
    (SMALL_CNN, "paper; ours, 20 groups of 100", table3_proxy("runs.jsonl", "paper", "rir")),
    (WIDE_CNN, "paper; authors'", table3_proxy("proxy_wide/runs.jsonl", "paper", "rir_authors")),
    (WIDE_CNN, "official; authors'", table3_proxy("proxy_wide/runs.jsonl", "official", "rir_authors")),
]


def table3_answer() -> str:
    lines = ["| network and data | protocol; estimator | " + " | ".join(LABELS[m] for m in T3_ORDER) + " |",
             "|---|---|" + "---|" * len(T3_ORDER)]
    previous = None
    for data, protocol, cell in TABLE3_SETTINGS:
        shown, previous = ("" if data == previous else data), data
        lines.append(f"| {shown} | {protocol} | " + " | ".join(cell(m) for m in T3_ORDER) + " |")
    return "\n".join(lines) + "\n"


# ---- docs/verdicts.md: the deep profile's record ---------------------------------------------------------------

DEEP = ROOT / "docs" / "verdicts_deep.json"  #: the output of the deep run (DIR/verdicts.json, renamed)
DEEP_COMMAND = "PYTHONPATH=src nice -n 15 /usr/bin/time -v kappalab verify --profile deep --out-dir DIR"
#: family tags counted per claim (a family is the comma/bracket-joined tags of a drawn input); exact tie tokens only
DEEP_TAGS = {"near-tie": ("near-tie-top", "near-tie-bottom"), "exact tie": ("tie-top", "tie-bottom"),
             "kappa >= 1e4": ("kappa>=1e4",), "rank-deficient": ("rank-deficient",)}
def _tagged(families: dict[str, int], tags: tuple[str, ...]) -> int:
    return sum(n for name, n in families.items() if set(re.split(r"[,\[\]|]", name)) & set(tags))


def deep_profile() -> str:
    deep = {r["id"]: r for r in read_verdicts(DEEP)}
    ci = {r["id"]: r for r in read_verdicts(ROOT / "docs" / "verdicts.json")}
    lines = ["## The deep profile", "",
             f"Command: `{DEEP_COMMAND}` (DIR's verdicts.json committed as [`verdicts_deep.json`](verdicts_deep.json), "
             "with every family's count; pytest's output and the time: [`verdicts_deep.log`](verdicts_deep.log)). "
             "The deep profile runs 40x the CI profile's hypothesis examples per test, not derandomized "
             "(`proofs_checks/profiles.py`), from the same strategies with matrices 2-8 wide instead of 2-4 "
             "(`proofs_checks/strategies.py`, `DIMS`). Cases tried per claim, in total and in the families with each "
             "tag:", "",
             "| ID | verdict (deep) | verdict (ci) | cases (deep) | cases (ci) | families | "
             + " | ".join(DEEP_TAGS) + " |", "|---|---|---|---|---|---|" + "---|" * len(DEEP_TAGS)]
    for cid, r in deep.items():
        tags = " | ".join(str(_tagged(r["families"], t)) for t in DEEP_TAGS.values())
        lines.append(f"| {cid} | **{r['verdict']}** | {ci[cid]['verdict']} | {r['cases_tried']} | "
                     f"{ci[cid]['cases_tried']} | {len(r['families'])} | {tags} |")
    failed = [(t, cid) for cid, r in deep.items() for t, status in r["tests"].items() if status == "failed"]
    if failed:
        lines += ["", "A claim whose tests failed gets the verdict \"check failed\". The deep profile's failures, "
                  "none of them a counterexample to the claim:", ""]
        lines += [f"* {cid}, `{t.split('::')[1]}`: its falsifying example is in verdicts_deep.log." for t, cid in failed]
    return "\n".join(lines) + "\n"


# ---- the blocks ---------------------------------------------------------------------------------------------------

BLOCKS: dict[str, dict[str, Callable[[], str]]] = {
    "README.md": {"findings": readme_findings},
    "docs/reproduction/table1.md": {"table1-answer": table1_answer},
    "docs/reproduction/table3.md": {"table3-answer": table3_answer},
    "docs/verdicts.md": {"deep-profile": deep_profile},
}
#: blocks appended at the end of their file when its markers are missing (docs/verdicts.md is rewritten by
#: `kappalab verify --out-dir docs`, which does not know this block)
APPENDED = {"deep-profile"}


def block_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- generated: {re.escape(name)} \(scripts/readme_findings.py\) -->\n)(.*?)"
                      rf"(<!-- end: {re.escape(name)} -->)", re.S)


def rendered(path: str) -> tuple[str, str]:
    """(the file as committed, the file with its blocks regenerated); a missing block is an error naming it."""
    text = (ROOT / path).read_text()
    new = text
    for name, make in BLOCKS[path].items():
        pattern = block_pattern(name)
        if not pattern.search(new) and name in APPENDED:
            new = (new.rstrip("\n") + f"\n\n<!-- generated: {name} (scripts/readme_findings.py) -->\n"
                   f"<!-- end: {name} -->\n")
        if not pattern.search(new):
            raise ValueError(f"{path}: no generated block {name!r} (markers missing)")
        new = pattern.sub(lambda m, body=make().rstrip("\n"): m[1] + body + "\n" + m[3], new)
    return text, new


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="report out-of-date blocks instead of rewriting them")
    args = ap.parse_args(argv)
    stale = []
    for path in BLOCKS:
        old, new = rendered(path)
        if old != new:
            stale.append(path)
            if not args.check:
                (ROOT / path).write_text(new)
    if args.check and stale:
        print(f"readme_findings: out of date: {', '.join(stale)} (run python scripts/readme_findings.py)",
              file=sys.stderr)
        return 1
    print("readme_findings: " + (f"rewrote {', '.join(stale)}" if stale and not args.check else "up to date"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
