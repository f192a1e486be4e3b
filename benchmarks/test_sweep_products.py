"""benchmarks/sweep_products.py on a tiny store: the step counts it reads, the ratios it reports, its bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1] / "tests")]

import sweep_products  # noqa: E402
from cli_run import in_process  # noqa: E402

SCRIPT = Path(__file__).parent / "sweep_products.py"


def _store(folder: Path, runs: list[tuple[str, int]], protocol: str = "official", pool: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "runs_official.jsonl", "w") as f:
        for i, (method, steps) in enumerate(runs):
            f.write(json.dumps({"key": f"{protocol}.{method}.{i}", "params": {"protocol": protocol, "method": method,
                                                                                "pool": pool},
                                "result": {"n_steps": steps}}) + "\n")
    return folder


def test_steps_by_tasks_counts_two_tasks_for_every_method_but_rill_only(tmp_path: Path) -> None:
    store = _store(tmp_path, [("ours", 7), ("rill_only", 5), ("imma", 3), ("opt_kappa", 2), ("rill_only", 1)])
    steps, runs, total = sweep_products.steps_by_tasks(store / "runs_official.jsonl")
    assert dict(steps) == {2: 12, 1: 6}
    assert (runs, total) == (5, 18)


def test_report_ratios_from_its_own_timings(tmp_path: Path) -> None:
    store = _store(tmp_path / "s", [("ours", 4), ("rill_only", 4)])
    out = tmp_path / "r.json"
    assert sweep_products.main([str(store), "--wall-s", "100", "--workers", "1", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["steps_by_tasks"] == {"2": 4, "1": 4}
    assert r["wall_over_products_strict"] == pytest.approx(100 / r["products_strict_s"])
    # the count (4 GEMMs a step for every method): the two-task step time times all steps; which of the two
    # counts is larger depends on the timings (a one-task step may time slower on a loaded machine): not asserted
    assert r["products_uniform_s"] > 0 and r["products_strict_s"] > 0
    assert r["wall_over_products_uniform"] == pytest.approx(100 / r["products_uniform_s"])
    assert r["products_and_adam_s"] > 0


BAD_INPUT = [
    (["--wall-s", "0"], "--wall-s must be > 0"),
    (["--wall-s", "10", "--sample", "1.5"], "--sample must be in (0, 1]"),
    (["--wall-s", "10", "--workers", "0"], "--workers must be >= 1"),
]


def _refusal(argv: list[str], fresh: bool, cwd: Path, capfd: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """(exit status, stderr) of ``sweep_products.py ARGS``: in a fresh process, or through ``main`` in this process as
    a fresh process would show it (tests/cli_run.py)."""
    if fresh:
        proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=120)
        return proc.returncode, proc.stderr
    done = in_process(argv, cwd, capfd, main=sweep_products.main)
    return done.code, done.stderr


@pytest.mark.parametrize("args, message", BAD_INPUT)
def test_bad_input_is_one_line_status_2(tmp_path: Path, args: list[str], message: str,
                                        capfd: pytest.CaptureFixture[str]) -> None:
    store = _store(tmp_path, [("ours", 1)])
    code, stderr = _refusal([str(store), *args], (args, message) == BAD_INPUT[0], tmp_path, capfd)
    assert code == 2
    assert stderr.startswith(message)
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr


@pytest.mark.parametrize("store_kind, message", [("missing", "store: no "), ("paper", "is not an official-protocol"),
                                                 ("empty", "holds no run")])
def test_bad_store_is_one_line_status_2(tmp_path: Path, store_kind: str, message: str,
                                        capfd: pytest.CaptureFixture[str]) -> None:
    """The missing store in a fresh process, the others in this process."""
    runs = {"missing": None, "paper": [("ours", 1)], "empty": []}[store_kind]
    folder = tmp_path / "s" if runs is None else _store(tmp_path / "s", runs,
                                                        protocol="paper" if store_kind == "paper" else "official")
    code, stderr = _refusal([str(folder), "--wall-s", "10"], store_kind == "missing", tmp_path, capfd)
    assert code == 2
    assert message in stderr and len(stderr.strip().splitlines()) == 1
    assert "Traceback" not in stderr
