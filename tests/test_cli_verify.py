"""``kappalab verify`` never writes a verdict it did not measure: it refuses without pytest, writes nothing after an
incomplete pytest run, and calls a claim whose tests did not run "not measured" (not "check failed")."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kappalab import verify


def test_refuses_without_pytest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(verify.importlib.util, "find_spec", lambda name: None if name == "pytest" else real(name))
    assert verify.main(["--out-dir", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pytest not installed" in err[0]
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize("code", [2, 3, 4, 5])
def test_an_incomplete_pytest_run_writes_no_verdicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int,
                                                     capsys) -> None:
    monkeypatch.setattr(verify.subprocess, "call", lambda *a, **k: code)
    assert verify.main(["--out-dir", str(tmp_path)]) == 1
    assert "no verdicts written" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_claims_whose_tests_did_not_run_are_not_measured(tmp_path: Path) -> None:
    claim = {"id": "X", "where": "w", "statement": "s", "verdict": "holds", "tests": ["proofs_checks/t.py::a",
                                                                                    "proofs_checks/t.py::b"]}
    rows = {name: verify.merge([claim], tmp_path, outcomes)[0] for name, outcomes in (
        ("passed", {"proofs_checks/t.py::a": "passed", "proofs_checks/t.py::b": "passed"}),
        ("failed", {"proofs_checks/t.py::a": "passed", "proofs_checks/t.py::b": "failed"}),
        ("skipped", {"proofs_checks/t.py::a": "passed", "proofs_checks/t.py::b": "skipped"}),
        ("missing", {}))}
    assert rows["passed"]["verdict"] == "holds" and rows["failed"]["verdict"] == "check failed"
    assert rows["skipped"]["verdict"] == rows["missing"]["verdict"] == "not measured"


def test_finds_the_checkout_checks() -> None:
    found = verify.checks_dir()
    assert found is not None and (found / "conftest.py").is_file() and found.name == "proofs_checks"
