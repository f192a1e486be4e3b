"""``scripts/gpu_check.sh``: bad usage is one line and status 2, and its CPU path (the same four steps as on CUDA,
at a few runs and one epoch) passes, writes its report where ``--out`` says and leaves the tracked GPU report
(docs/gpu.md) alone."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kappalab.reproduce.table2.merge import REL_TOL

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def _run(args: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHON": sys.executable, **(env or {})})


@pytest.mark.parametrize("args, says", [
    (["--device", "tpu"], "--device must be cpu or cuda[:N], got 'tpu'"),
    (["--data", "cifar"], "--data must be subset or mnist, got 'cifar'"),
    (["--device", "cpu", "--runs", "0"], "take a positive integer, got '0'"),
    (["--epochs"], "--epochs needs a value"),
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


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_cpu_path_passes_and_reports(tmp_path: Path) -> None:
    """All eight steps at 4 runs, one epoch, batches of 2, Table 1 quick for Ours (~2.5 min here): the steps that
    apply pass, the report names each step's result and the measurements; Table 3's real network is skipped (no
    weights), and the eigenpair suite when its file is absent."""
    report = tmp_path / "deep" / "report.md"
    tracked = _sha256(ROOT / "docs" / "gpu.md")
    done = _run(["--device", "cpu", "--runs", "4", "--epochs", "1", "--batch-size", "2", "--out", str(report)],
                env={"CLI_PAIRS": "0-1", "CLI_EPOCHS": "1", "CHECK_SINGLE": "4",
                     "TABLE1_ARGS": "--quick --methods ours", "TABLE3_WEIGHTS": "",
                     "SWEEP_SECONDS": "900", "TABLE1_SECONDS": "900"}, timeout=900)  # no cut on a slow machine
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _sha256(ROOT / "docs" / "gpu.md") == tracked
    text = report.read_text()
    assert "overall status passed" in text and "FAILED" not in text
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1] for line in text.split("## 1.")[0].splitlines()
            if line.startswith("| ") and not line.startswith("| step")}
    expected = ["parity", "extremes", "sync", "benchmarks", "table1 paper", "table1 official", "table2 sweep",
                "table2 command line", "table3 resnet18/cars"]
    assert list(rows) == expected, rows
    assert all(rows[name] == "passed" for name in expected if name not in ("extremes", "table3 resnet18/cars"))
    has_extremes = (ROOT / "tests" / "test_extremes.py").exists()
    assert rows["extremes"] == "passed" if has_extremes else rows["extremes"].startswith("skipped")
    assert rows["table3 resnet18/cars"] == "skipped: no pretrained weights (TABLE3_WEIGHTS names no file)"
    assert " passed" in text.split("## 1. Parity tests")[1].split("## 2.")[0]
    assert " passed" in text.split("## 3. Host synchronisation")[1].split("## 4.")[0]
    steps = text.split("## 4.")[1].split("## 5.")[0]
    for method in ("ours", "rill_only", "opt_kappa", "imma"):
        assert f"| {method} | closed_form | 16 |" in steps, method
    table1 = text.split("## 5.")[1].split("## 6.")[0]
    for protocol in ("paper", "official"):
        assert f"Protocol `{protocol}`: passed" in table1 and "| Ours |" in table1, protocol
    sweep = text.split("## 6.")[1].split("## 7.")[0]
    assert "4 of 4 runs timed" in sweep and "(no sweep results)" not in sweep
    assert "runs/s" in sweep and "of the float64 GEMM rate" in sweep and "1080-run sweep at this rate" in sweep
    assert "merged with `--merge`: 4 of 4 runs (2, 2 per shard)" in text
    # the two engines agree to the lab's criterion for one run computed two ways (merge.REL_TOL = 1e-10); to the bit
    # only on some machines (the finish's thread count and BLAS kernels: docs/engines.md), so not asserted
    engines = text.split("## 7.")[1]
    ours = re.search(r"^\| ours \| 1 \| (\S+) \| (\S+) \| (\S+) \|", engines, re.M)
    assert ours and max(float(x) for x in ours.groups()) <= REL_TOL, engines
    batch = re.search(r"4 runs: largest relative difference of \(i\), \(ii\), RIR (\S+)", engines)
    assert batch and float(batch.group(1).rstrip(".,;")) <= REL_TOL, engines
