"""benchmarks/sweep_table2.py's bad input: one line, status 2, before anything is trained. The first case runs the
script in a fresh process, the others its ``main`` in this process as a fresh process would show it (tests/cli_run.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1] / "tests")]

import sweep_table2  # noqa: E402
from cli_run import in_process  # noqa: E402

SCRIPT = Path(__file__).parent / "sweep_table2.py"
CASES = [
    (["--threads", "0"], "--threads must be >= 1, got 0"),
    (["--runs", "0"], "--runs must be >= 1, got 0"),
    (["--batch-size", "-2"], "--batch-size must be >= 1, got -2"),
    (["--data-dir", "somewhere"], "--data-dir needs --data mnist"),
]


@pytest.mark.parametrize("args, message", CASES)
def test_bad_input_is_one_line_status_2(args: list[str], message: str, tmp_path: Path,
                                        capfd: pytest.CaptureFixture[str]) -> None:
    if (args, message) == CASES[0]:
        proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
        code, stderr = proc.returncode, proc.stderr
    else:
        code, _, stderr = in_process(args, tmp_path, capfd, main=sweep_table2.main)
    assert code == 2
    assert stderr.strip() == message
    assert "Traceback" not in stderr
