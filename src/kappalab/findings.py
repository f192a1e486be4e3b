"""The lab's findings in one screen, built from result files only (never typed in).

* :func:`claims_table`: the README's claims table, one row per claim: ID, the claim in at most twelve words (the
  registry's ``gist``), the verdict of a ``kappalab verify`` run (its ``verdicts.json``) and the claim's check
  files.
* :func:`verdict_counts` / :func:`summary`: what ``kappalab main`` prints at the end: how many claims got each
  verdict, with the IDs of those that do not hold, and Table 1's row for Ours beside the paper's, with the paths of
  the full reports.

``scripts/readme_findings.py`` writes the README's findings from the committed ``docs/`` files with these functions,
and a test checks that the README equals its output.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kappalab.results import format_mean_std
from kappalab.verify import load_registry

#: the verdict of a claim that holds; every other verdict (the paper's claim fails, or the lab's check failed or
#: did not run) is listed with its claims' IDs
HOLDS = "holds"
#: the most words a claim's gist may have
GIST_WORDS = 12


@dataclass(frozen=True)
class MeanStd:
    """A mean and sample std over ``n`` runs (``std`` NaN for one run; ``n`` None: not known, e.g. a paper's)."""

    mean: float
    std: float
    n: int | None

    def text(self, fmt: str = "{:.4g}") -> str:
        """``"m ± s (n=N)"`` (:func:`~kappalab.results.format_mean_std`): the mean alone for one run, no ``n`` when
        it is not known."""
        body = format_mean_std(self.mean, math.nan if self.n == 1 else self.std, fmt)
        return body if self.n is None else f"{body} (n={self.n})"


def read_verdicts(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``verdicts.json`` written by ``kappalab verify``."""
    rows = json.loads(Path(path).read_text())
    if not isinstance(rows, list) or not all("id" in r and "verdict" in r for r in rows):
        raise ValueError(f"{path}: not a verdicts.json of kappalab verify (a list of rows with id and verdict)")
    return rows


def check_files(row: Mapping[str, Any]) -> list[str]:
    """The claim's check modules (``proofs_checks/test_X.py``), in the order of its tests."""
    return list(dict.fromkeys(test.split("::")[0] for test in row["tests"]))


def claims_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: ID | claim (the registry's gist) | verdict | check file, one row per verdict row."""
    gist = {c["id"]: c["gist"] for c in load_registry()}
    lines = ["| ID | claim | verdict | check |", "|---|---|---|---|"]
    for r in rows:
        main = check_files(r)[0]  # the claim's own module (a shared one, e.g. test_bound_mutants.py, comes after)
        lines.append(f"| {r['id']} | {gist[r['id']]} | **{r['verdict']}** | [{Path(main).name}]({main}) |")
    return "\n".join(lines) + "\n"


def verdict_counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """verdict -> the IDs that got it, "holds" first, then in order of first appearance."""
    out: dict[str, list[str]] = {HOLDS: []}
    for r in rows:
        out.setdefault(r["verdict"], []).append(r["id"])
    return {v: ids for v, ids in out.items() if ids}


def table1_ours(report: Mapping[str, Any]) -> dict[str, tuple[MeanStd, MeanStd]]:
    """Eq. 15's terms of Ours (pinv kappa) from a ``table1_<protocol>.json``: term -> (this run, the paper)."""
    ours, paper = report["summary"]["ours"], report["paper_reference"]["ours"]
    return {t: (MeanStd(*ours["pinv"][t][:2], ours["n_seeds"]), MeanStd(*paper[t][:2], 5))
            for t in ("term_i", "term_ii", "rir")}


def summary(verdicts: str | Path, table1: str | Path | None, why_no_table1: str = "not run") -> str:
    """The closing screen of ``kappalab main``: verdict counts (IDs of every claim that does not hold) and Table 1's
    Ours row beside the paper's, with the paths of the full reports. ``table1`` None: ``why_no_table1`` instead."""
    verdicts = Path(verdicts)
    rows = read_verdicts(verdicts)
    counts = verdict_counts(rows)
    width = max(len(v) for v in counts)
    lines = ["", "kappalab main: summary", f"  the paper's claims: {len(rows)} checked"]
    for verdict, ids in counts.items():
        lines.append(f"    {verdict:<{width}}  {len(ids):>2}" + ("" if verdict == HOLDS else f"  {', '.join(ids)}"))
    if table1 is None:
        lines.append(f"  Table 1: {why_no_table1}")
    else:
        table1 = Path(table1)
        report = json.loads(table1.read_text())
        meta = report["meta"]
        terms = table1_ours(report)
        lines += [f"  Table 1, Ours (House Prices, {meta['protocol']} protocol, pinv kappa; mean ± std over seeds):",
                  f"    {'':<10}{'(i)':<26}{'(ii)':<26}RIR"]
        for who, i in (("this run", 0), ("paper", 1)):
            lines.append(f"    {who:<10}" + "".join(f"{terms[t][i].text():<26}" for t in ("term_i", "term_ii"))
                         + terms["rir"][i].text())
    reports = [verdicts.with_suffix(".md")] + ([] if table1 is None else [table1.with_suffix(".md")])
    lines += [f"  full reports: {', '.join(str(p) for p in reports)}",
              "  why Table 1 differs from the paper: docs/reproduction/table1.md in the repository"]
    return "\n".join(lines) + "\n"
