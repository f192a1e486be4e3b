"""benchmarks/sweep_table2.py's bad input: one line, status 2, before anything is trained."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "sweep_table2.py"


@pytest.mark.parametrize("args, message", [
    (["--threads", "0"], "--threads must be >= 1, got 0"),
    (["--runs", "0"], "--runs must be >= 1, got 0"),
    (["--batch-size", "-2"], "--batch-size must be >= 1, got -2"),
    (["--data-dir", "somewhere"], "--data-dir needs --data mnist"),
])
def test_bad_input_is_one_line_status_2(args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == message
    assert "Traceback" not in proc.stderr
