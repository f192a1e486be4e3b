"""``kappalab main`` ends with a one-screen summary of what it wrote: the verdict counts with the IDs of every claim
that does not hold, and Table 1's row for Ours beside the paper's, with the paths of the full reports.

The two sub-commands are replaced by stand-ins that write the committed reports (docs/verdicts.json, Table 1's
paper-protocol report) where the real ones write theirs, so the summary is checked on real result files in
seconds; the expected lines are derived from those files here, not typed in."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import kappalab.reproduce.table1.cli as table1_cli
import kappalab.verify as verify_cli
from kappalab import cli
from kappalab.findings import HOLDS

ROOT = Path(__file__).resolve().parents[1]
VERDICTS = ROOT / "docs" / "verdicts.json"
TABLE1 = ROOT / "docs" / "reproduction" / "table1" / "paper" / "table1.json"


def _stand_in(source: Path, target: str, code: int = 0):
    def main(argv: list[str] | None = None) -> int:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
        return code
    return main


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_main_ends_with_the_summary(in_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(verify_cli, "main", _stand_in(VERDICTS, "results/verify/verdicts.json"))
    monkeypatch.setattr(table1_cli, "main", _stand_in(TABLE1, "results/table1/table1_paper.json"))
    assert cli.main(["main"]) == 0
    out = capsys.readouterr().out
    text = out[out.index("kappalab main: summary"):]
    assert len(text.splitlines()) <= 24  # one screen
    rows = json.loads(VERDICTS.read_text())
    assert f"{len(rows)} checked" in text
    verdicts = {r["verdict"] for r in rows}
    assert verdicts - {HOLDS}  # the committed verdicts include failing claims: their IDs must be listed
    for verdict in verdicts:
        ids = [r["id"] for r in rows if r["verdict"] == verdict]
        (match,) = [m for m in (re.match(rf"\s*{re.escape(verdict)}\s+(\d+)(.*)$", ln) for ln in text.splitlines())
                    if m]
        assert int(match[1]) == len(ids)
        assert match[2].strip() == ("" if verdict == HOLDS else ", ".join(ids))
    report = json.loads(TABLE1.read_text())
    ours, paper = report["summary"]["ours"]["pinv"], report["paper_reference"]["ours"]
    (run_line,) = [ln for ln in text.splitlines() if ln.strip().startswith("this run")]
    (paper_line,) = [ln for ln in text.splitlines() if ln.strip().startswith("paper ")]
    for term in ("term_i", "term_ii", "rir"):
        assert f"{ours[term][0]:.4g} ± {ours[term][1]:.4g}" in run_line
        assert f"{paper[term][0]:.4g} ± {paper[term][1]:.4g}" in paper_line
    assert "results/verify/verdicts.md" in text and "results/table1/table1_paper.md" in text


def test_a_failed_check_is_summarized_and_table1_is_not_run(in_tmp: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys) -> None:
    rows = json.loads(VERDICTS.read_text())
    rows[0] = {**rows[0], "verdict": "check failed", "status": "failed"}
    failed = in_tmp / "failed.json"
    failed.write_text(json.dumps(rows))
    monkeypatch.setattr(verify_cli, "main", _stand_in(failed, "results/verify/verdicts.json", code=1))
    monkeypatch.setattr(table1_cli, "main", lambda argv: pytest.fail("Table 1 ran after a failed check"))
    assert cli.main(["main"]) == 1
    text = capsys.readouterr().out
    assert any(ln.strip().startswith("check failed") and rows[0]["id"] in ln for ln in text.splitlines())
    assert "Table 1: not run" in text


def test_verdicts_of_an_earlier_call_are_not_summarized(in_tmp: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys) -> None:
    old = in_tmp / "results" / "verify" / "verdicts.json"
    old.parent.mkdir(parents=True)
    shutil.copy(VERDICTS, old)
    monkeypatch.setattr(verify_cli, "main", lambda argv=None: 1)  # pytest did not complete: nothing written
    assert cli.main(["main"]) == 1
    assert "summary" not in capsys.readouterr().out
