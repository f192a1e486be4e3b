"""The generated findings of README.md and docs/reproduction/table1.md, built from committed result files only.

    python scripts/readme_findings.py           # rewrite the generated blocks in place
    python scripts/readme_findings.py --check   # exit 1, naming the file, when a block differs from the files

A block sits between ``<!-- generated: NAME (scripts/readme_findings.py) -->`` and ``<!-- end: NAME -->``.
Sources: the claims table reads docs/verdicts.json (verdicts, check files) and the claims registry (each claim's
gist); every other number is read from the store named in its row below (paths under docs/reproduction). To move
a row to a new store (e.g. Table 2's 90-pair sweep), change its ``Source`` here and rerun; tests/test_readme.py
fails while a block is out of date. The sources and readers live in scripts/findings_sources.py; the "why they
differ" cells are worded from the committed numbers by scripts/readme_reasons.py (its rules: ``CLOSE``, ``FAR``,
``STILL_RISING``);
tests/test_readme_reasons.py recomputes each claim from the per-run files.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from kappalab.doc_blocks import block_pattern, replace_block
from kappalab.findings import claims_table, read_verdicts
from kappalab.methods import DEEP_METHODS
from kappalab.reproduce.table1.constants import LABELS
from kappalab.reproduce.table3.constants import PAPER_TABLE3

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules, also when loaded by file path
from findings_sources import (  # noqa: E402
    REPRO, ROOT, Row, T1_PAPER, T1_SHIPPED_10, T1_SHIPPED_1000, T2_OFFICIAL_90, T2_PAPER, T2_PAPER_90,
    T3_GRIDS, T3_PROXY, of_runs, paper1, paper2, table1_answer,
)
from readme_reasons import (  # noqa: E402
    t1_closest, t1_steps, t1_trajectory, t1_worse_conditioned, t2_below_one, t2_held_out,
    t2_official_ours, t2_pairs, t2_shifted, t2_terms, t2_versus, table3_powered_reason,
)

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
            Row("imma", "", T2_PAPER_90, "paper protocol, all 90 pairs, seed 0",
                f"{t2_versus('paper', 'imma')} on average; {t2_below_one('paper', 'imma')}"),
            Row("opt_kappa", paper2("opt_kappa"), T2_PAPER_90, "paper protocol, all 90 pairs, seed 0",
                f"{t2_pairs('paper', 'opt_kappa')}; {t2_shifted('paper', 'opt_kappa')}"),
            Row("opt_kappa", "", T2_PAPER, "paper protocol, 10 pairs", t2_held_out("opt_kappa")),
            Row("opt_kappa", "", T2_OFFICIAL_90, "the authors' code, all 90 pairs", t2_pairs("official", "opt_kappa")),
        ]),
    "Table 3, deep nets (RIR_theta0 of Eq. 17)": ("docs/reproduction/table3.md", [
        Row("ours", f"{PAPER_TABLE3['cars']['ours'][2]} (ResNet18, Cars)", T3_GRIDS["fmnist_vs_mnist", "paper"],
            "ImageNet EfficientNet-Lite0, tail trained for 312 steps, D_P Fashion-MNIST / D_H MNIST, paper "
            "protocol, groups of 100; read at the selection grid's choice, beside the oracle and task_only controls",
            table3_powered_reason("ours", "fmnist_vs_mnist")),
        Row("ours", "", T3_GRIDS["mnist_vs_fmnist", "paper"], "the same, D_P MNIST / D_H Fashion-MNIST",
            table3_powered_reason("ours", "mnist_vs_fmnist")),
        Row("ours", "", T3_GRIDS["fmnist_vs_mnist", "official"],
            "the same, D_P Fashion-MNIST / D_H MNIST, the authors' code (official protocol)",
            table3_powered_reason("ours", "fmnist_vs_mnist", "official")),
        Row("ours", "", T3_GRIDS["mnist_vs_fmnist", "official"],
            "the same, D_P MNIST / D_H Fashion-MNIST, the authors' code (official protocol)",
            table3_powered_reason("ours", "mnist_vs_fmnist", "official")),
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
        lines += [f"* {cid}, `{t.split('::')[1]}`: its falsifying example is in verdicts_deep.log."
                  for t, cid in failed]
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


def rendered(path: str) -> tuple[str, str]:
    """(the file as committed, the file with its blocks regenerated); a missing block is an error naming it."""
    text = (ROOT / path).read_text()
    new = text
    for name, make in BLOCKS[path].items():
        if not block_pattern(name).search(new) and name in APPENDED:
            new = (new.rstrip("\n") + f"\n\n<!-- generated: {name} (scripts/readme_findings.py) -->\n"
                   f"<!-- end: {name} -->\n")
        new = replace_block(new, name, make(), path)
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
