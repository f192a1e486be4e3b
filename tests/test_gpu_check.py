"""``scripts/gpu_check.sh``: bad usage is one line and status 2; ``--device cuda`` without a GPU runs nothing; the dry
run (every stage at toy size on the CPU, each under its time guard) writes its JSON report whatever happens, lists
the stages in the issue's priority order, and passes or says which stage its guard cut or skipped; docs/gpu.md's
table block is the rendering of the committed dry-run report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
STAGES = ["parity", "extremes", "official step", "table1 paper", "table1 official", "table3", "sync"]


def _run(args: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHON": sys.executable, **(env or {})})


@pytest.mark.parametrize("args, says", [
    (["--device", "tpu"], "--device must be cpu or cuda[:N], got 'tpu'"),
    (["--json"], "--json needs a value"),
    (["--device", "cpu", "--frobnicate"], "unknown argument --frobnicate"),
])
def test_bad_usage_is_one_line_and_status_2(args: list[str], says: str) -> None:
    done = _run(args)
    assert done.returncode == 2, done
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1 and says in done.stderr, done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: --device cuda would run the check")
def test_cuda_without_a_gpu_runs_nothing() -> None:
    done = _run(["--device", "cuda"])
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done
    assert "torch.cuda.is_available() is False" in done.stderr and "nothing was run" in done.stderr


def test_the_dry_run_runs_every_stage_under_its_guard_and_reports(tmp_path: Path) -> None:
    """The dry run ends with status 0 and both reports; every stage ran in order and passed, or its guard cut it or
    skipped it for time (named as such: on an idle machine all pass in ~12 CPU-s; a loaded one runs out of the 30 s,
    which count from the process's start, imports included, so on a very loaded one even the first stage is skipped,
    and then only because less than its budget was left); the tracked docs/gpu.md is not touched."""
    report, md = tmp_path / "dry.json", tmp_path / "dry.md"
    page = (ROOT / "docs" / "gpu.md").read_bytes()
    done = _run(["--dry-run", "--json", str(report), "--out", str(md)], timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["dry_run"] and data["device"] == "cpu" and data["total_budget_s"] <= 30
    assert [s["name"] for s in data["stages"]] == STAGES
    for stage in data["stages"]:
        outcome = stage["outcome"]
        assert outcome == "passed" or outcome.startswith(("cut at its time limit", "skipped: would overrun")), stage
        # a stage that ran past its budget was cut, not passed (how long a cut takes to unwind depends on the
        # machine's load: test_the_guard_interrupts_a_stage_that_runs_past_its_budget checks the interruption)
        assert outcome != "passed" or stage["seconds"] <= stage["budget_s"] + 1, stage
    first = data["stages"][0]
    if first["outcome"].startswith("skipped"):  # the imports ate the budget: seen with 4 busy processes on 2 cores
        left = float(re.search(r"([0-9.]+) s left", first["outcome"]).group(1))
        assert left < first["budget_s"], first
    passed = all(s["outcome"] == "passed" for s in data["stages"])
    assert data["status"] == ("passed" if passed else "incomplete")
    step = next(s for s in data["stages"] if s["name"] == "official step")
    if step["outcome"] == "passed":
        r = step["result"]
        assert r["runs"] == 2 and 0 < r["fraction_of_gemm"] and r["sweep_1080_s_from_step"] > 0
    text = md.read_text()
    assert text.startswith("# GPU check: dry run") and all(f"| {name} |" in text for name in STAGES)
    assert (ROOT / "docs" / "gpu.md").read_bytes() == page


def test_the_guard_interrupts_a_stage_that_runs_past_its_budget(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage that would take 60 s under a budget of 0.5 s is cut by the guard's alarm long before it would end
    (the sleep is interrupted, not waited out), and the next stage runs."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import gpu_check

    def sleeps(ctx):
        time.sleep(60)
        return {}

    monkeypatch.setattr(gpu_check, "STAGES", [gpu_check.Stage("slow", {"real": 5, "dry": 0.5}, sleeps),
                                              gpu_check.Stage("next", {"real": 5, "dry": 5}, lambda ctx: {"ran": 1})])
    assert gpu_check.run(gpu_check.Context("cpu", True, tmp_path), tmp_path / "r.json", time.time()) == 0
    slow, after = json.loads((tmp_path / "r.json").read_text())["stages"]
    assert slow["outcome"] == "cut at its time limit (0 s)" and slow["seconds"] < 30  # 60 s uncut
    assert after["outcome"] == "passed"


def test_a_failing_stage_is_reported_and_the_next_ones_still_run(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage that raises is FAILED in the report (exit status 1) and does not stop the next one; the JSON is
    written."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import gpu_check

    def boom(ctx):
        raise ValueError("made to fail")

    monkeypatch.setattr(gpu_check, "STAGES", [gpu_check.Stage("boom", {"real": 5, "dry": 5}, boom),
                                              gpu_check.Stage("next", {"real": 5, "dry": 5}, lambda ctx: {"ran": 1})])
    ctx = gpu_check.Context("cpu", True, tmp_path)
    assert gpu_check.run(ctx, tmp_path / "r.json", time.time()) == 1
    data = json.loads((tmp_path / "r.json").read_text())
    assert [(s["name"], s["outcome"]) for s in data["stages"]] == [("boom", "FAILED: ValueError: made to fail"),
                                                                   ("next", "passed")]
    assert data["status"] == "FAILED" and data["stages"][1]["result"] == {"ran": 1}


def test_a_cut_turned_into_an_error_inside_the_stage_is_reported_as_cut(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The alarm inside a stage that catches it and raises an error instead (pytest.main records it as a failed
    test, and the stage raises on the failure): the stage is cut, not FAILED; an error before the alarm is FAILED."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import gpu_check

    def swallows_the_alarm(ctx):
        try:
            time.sleep(5)
        except gpu_check.Cut:
            raise RuntimeError("1 failed") from None
        return {}

    def fails_at_once(ctx):
        raise RuntimeError("1 failed")

    monkeypatch.setattr(gpu_check, "STAGES", [gpu_check.Stage("slow", {"real": 5, "dry": 0.2}, swallows_the_alarm),
                                              gpu_check.Stage("broken", {"real": 5, "dry": 5}, fails_at_once)])
    assert gpu_check.run(gpu_check.Context("cpu", True, tmp_path), tmp_path / "r.json", time.time()) == 1
    stages = json.loads((tmp_path / "r.json").read_text())["stages"]
    assert [(s["name"], s["outcome"]) for s in stages] == [("slow", "cut at its time limit (0 s)"),
                                                           ("broken", "FAILED: RuntimeError: 1 failed")]


def test_docs_gpu_md_table_is_the_committed_reports_rendering(tmp_path: Path) -> None:
    """docs/gpu.md's generated block equals scripts/gpu_report.py's rendering of the committed JSON it names."""
    page = (ROOT / "docs" / "gpu.md").read_text()
    source = "docs/gpu/gpu_check_dry.json"
    copy = tmp_path / "gpu.md"
    copy.write_text(page)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_report.py"), source, "--gpu-md", str(copy)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert copy.read_text() == page
