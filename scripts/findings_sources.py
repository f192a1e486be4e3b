"""The committed result files the generated findings read: where they are (``REPRO``), a ``Source`` per store with
its reader (store path, method) -> RIR as mean ± std over n runs, the README's rows (``Row``), and Table 1's
settings block (docs/reproduction/table1.md). Used by scripts/readme_findings.py and scripts/readme_reasons.py."""


from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kappalab.findings import MeanStd
from kappalab.reproduce.table1.constants import LABELS, ORDER, PAPER_TABLE1
from kappalab.reproduce.table2.constants import PAPER_TABLE2
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
#: the selection grids' stores (paper protocol, float32 tail), per direction: what the decision table reads
T3_GRID_PATHS = {(d, p): f"table3/powered/grid/{d}/{p}_f32/runs.jsonl"
                 for d in ("fmnist_vs_mnist", "mnist_vs_fmnist") for p in ("paper", "official")}


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


T3_GRIDS = {d: Source(path, table3_powered) for d, path in T3_GRID_PATHS.items()}


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
