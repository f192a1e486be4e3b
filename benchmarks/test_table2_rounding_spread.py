"""benchmarks/table2_rounding_spread.py: its switch to the autograd step and its bad input (the training itself is
what docs/benchmarks.md reports; it takes ~30 s a run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1] / "tests")]

import table2_rounding_spread as spread  # noqa: E402
from cli_run import in_process  # noqa: E402
from kappalab.immunization import official_step  # noqa: E402

SCRIPT = Path(__file__).parent / "table2_rounding_spread.py"


def test_autograd_step_declines_the_closed_form_and_restores_it() -> None:
    applies = official_step.applies
    with pytest.raises(RuntimeError):
        with spread.autograd_step():
            assert official_step.applies(None, None, None) is False
            raise RuntimeError("inside")
    assert official_step.applies is applies


BAD_INPUT = [
    (["imma.6-1"], "runs: 'imma.6-1' is not method.a-b.sS"),
    (["sgd.6-1.s0"], "runs: 'sgd.6-1.s0' is not method.a-b.sS"),
    (["ours.3-3.s0"], "runs: 'ours.3-3.s0' is not method.a-b.sS"),
    (["ours.0-1.s0", "--store", "no_such_folder"], "--store: no no_such_folder"),
]


@pytest.mark.parametrize("args, message", BAD_INPUT)
def test_bad_input_is_one_line_status_2(tmp_path: Path, args: list[str], message: str,
                                        capfd: pytest.CaptureFixture[str]) -> None:
    """The first case in a fresh process, the others through ``main`` in this process (tests/cli_run.py)."""
    if (args, message) == BAD_INPUT[0]:
        proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path)
        code, stderr = proc.returncode, proc.stderr
    else:
        code, _, stderr = in_process(args, tmp_path, capfd, main=spread.main)
    assert code == 2
    assert stderr.startswith(message)
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr