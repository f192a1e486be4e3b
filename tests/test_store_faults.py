"""Faults of the results on disk as a user meets them (issue 27, item 5), each in a fresh ``kappalab`` process on
a tiny Table 1 run (3 runs of one epoch): a corrupted line in the middle of the store, a torn last line, a disk that
fills, a folder made read-only, a folder deleted during the run. Each is ONE line on stderr naming the file and
what to do (no traceback, no Python warning), exit status 2 where the user must act, nothing stored is lost, and a
rerun resumes.

The write faults are injected by ``tests/faults/sitecustomize.py`` (``KAPPALAB_FAULT``): a short write then ENOSPC,
EACCES on opening the store, the folder removed before opening it. A real read-only folder (chmod) cannot be shown
here: the tests may run as root, whom permission bits do not stop; a small tmpfs would need a root mount.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
FAULTS = Path(__file__).parent / "faults"
TABLE1 = ["reproduce", "table1", "--quick", "--methods", "rill_only", "--seeds", "0", "1", "2", "--epochs", "1",
          "--probe-iters", "2", "--no-progress"]
STORE = "runs_paper.jsonl"


def _start(args: list[str], fault: str | None = None) -> subprocess.Popen:
    paths = [str(FAULTS)] * (fault is not None) + [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    env = {k: v for k, v in os.environ.items() if k != "KAPPALAB_FAULT"}
    env.update(PYTHONPATH=os.pathsep.join(paths), OMP_NUM_THREADS="1", **({"KAPPALAB_FAULT": fault} if fault else {}))
    return subprocess.Popen([sys.executable, "-m", "kappalab.cli", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@dataclass(frozen=True)
class Done:
    """A finished ``kappalab`` process."""

    code: int
    stdout: str
    stderr: str


def _run_all(cases: dict[str, tuple[list[str], str | None]], parallel: int = 4) -> dict[str, Done]:
    """Run ``name -> (argv, fault)`` in fresh processes, ``parallel`` at a time."""
    done, names = {}, list(cases)
    for i in range(0, len(names), parallel):
        procs = {name: _start(*cases[name]) for name in names[i:i + parallel]}
        for name, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=300)
            done[name] = Done(proc.returncode, stdout, stderr)
    return done


def _one_line(done: Done) -> str:
    """The one line on stderr (no traceback, no Python warning with its source path)."""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr and "Warning" not in done.stderr, done.stderr
    return lines[0]


def _lines(store: Path) -> list[bytes]:
    return store.read_bytes().splitlines(keepends=True)


def _keys(store: Path) -> list[str]:
    return [json.loads(line)["key"] for line in _lines(store)]


WRITE_FAULTS = {
    "enospc": "No space left on device; free some disk space",
    "readonly": "Permission denied; make the folder writable or choose another --out",
}
VANISHED = "the store or its folder vanished during the run (moved or deleted?); put it back and run the same " \
    "command again to resume, or rerun with another --out"


@dataclass(frozen=True)
class Faults:
    """Every case, run in parallel phases: a complete run's store (``lines``); the first run of each case;
    ``kappalab repair-store`` on the corrupt store; the rerun of each case that needs one."""

    root: Path
    lines: list[bytes]
    first: dict[str, Done]
    after_first: dict[str, bytes]  #: each case's store after its first run
    repair: Done
    rerun: dict[str, Done]

    def store(self, case: str) -> Path:
        return self.root / case / STORE


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Faults:
    root = tmp_path_factory.mktemp("faults")
    table1 = lambda case, fault=None: ([*TABLE1, "--out", str(root / case)], fault)
    complete = _run_all({"complete": table1("complete")})["complete"]
    assert complete.code == 0 and complete.stderr == "", complete.stderr
    lines = _lines(root / "complete" / STORE)
    assert len(lines) == 3
    for case, data in (("corrupt", lines[0] + lines[1][: len(lines[1]) // 3] + b"\n" + lines[2]),  # cut short
                       ("torn", lines[0] + lines[1] + lines[2][:500])):  # an append killed mid-way
        shutil.copytree(root / "complete", root / case)
        (root / case / STORE).write_bytes(data)
    first = _run_all({"corrupt": table1("corrupt"), "torn": table1("torn"),
                      **{fault: table1(fault, f"{fault}:1") for fault in (*WRITE_FAULTS, "vanish")}})
    after_first = {case: (root / case / STORE).read_bytes() for case in first if (root / case / STORE).exists()}
    repair = _run_all({"repair": (["repair-store", str(root / "corrupt" / STORE)], None)})["repair"]
    rerun = _run_all({case: table1(case) for case in ("corrupt", *WRITE_FAULTS, "vanish")})
    return Faults(root, lines, first, after_first, repair, rerun)


def test_a_corrupt_middle_line_is_one_line_then_repair_store_and_a_rerun_resume(faults: Faults) -> None:
    store, lines = faults.store("corrupt"), faults.lines
    bad = lines[1][: len(lines[1]) // 3] + b"\n"
    first = faults.first["corrupt"]
    line = _one_line(first)
    assert first.code == 2 and line.startswith(f"kappalab reproduce table1: error: {store}: line 2 is not a stored "
                                               "run: not valid JSON")
    assert line.endswith(f"kappalab repair-store {store} (or fix the line by hand)")
    assert faults.after_first["corrupt"] == lines[0] + bad + lines[2]  # the store is untouched

    [backup] = store.parent.glob(f"{STORE}.rejected-*")
    assert faults.repair.code == 0 and faults.repair.stderr == "", faults.repair.stderr
    assert faults.repair.stdout.strip() == f"{store}: 2 run(s) kept; line(s) 2 moved to {backup}"
    assert backup.read_bytes() == bad

    rerun = faults.rerun["corrupt"]
    assert rerun.code == 0 and rerun.stderr == "", rerun.stderr
    assert _lines(store)[:2] == [lines[0], lines[2]] and sorted(_keys(store)) == sorted(_keys(faults.store("complete")))


def test_a_torn_last_line_is_moved_to_a_backup_with_one_line_and_its_run_redone(faults: Faults) -> None:
    store, lines = faults.store("torn"), faults.lines
    [backup] = store.parent.glob(f"{STORE}.torn-*")
    first = faults.first["torn"]
    assert first.code == 0 and _one_line(first) == (
        f"kappalab reproduce table1: {store}: moved a torn last line (500 bytes, an interrupted write) to "
        f"{backup.name}; its run is redone")
    assert backup.read_bytes() == lines[2][:500]
    assert _lines(store)[:2] == lines[:2] and sorted(_keys(store)) == sorted(_keys(faults.store("complete")))


@pytest.mark.parametrize("fault", [*WRITE_FAULTS, "vanish"])
def test_a_write_fault_after_the_first_run_is_one_line_and_a_rerun_resumes(faults: Faults, fault: str) -> None:
    store, first = faults.store(fault), faults.first[fault]
    says = VANISHED if fault == "vanish" else f"{WRITE_FAULTS[fault]}; then run the same command again: it resumes " \
        "after the runs already stored"
    assert first.code == 2 and _one_line(first) == f"kappalab reproduce table1: error: {store}: {says}"
    stored = faults.after_first.get(fault, b"")
    if fault == "vanish":  # the folder is gone, and nothing recreated it (no new store with the earlier runs lost)
        assert fault not in faults.after_first
    else:  # the first run is stored whole, and the failed append left nothing behind
        assert stored.endswith(b"\n") and len(stored.splitlines()) == 1 and json.loads(stored)["key"]
    rerun = faults.rerun[fault]
    assert rerun.code == 0 and rerun.stderr == "", rerun.stderr
    assert store.read_bytes().startswith(stored) and len(set(_keys(store))) == 3


def test_repair_store_usage_errors_are_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "none.jsonl"
    done = _run_all({"no file": (["repair-store"], None), "missing": (["repair-store", str(missing)], None)})
    assert done["no file"].code == 2 and "required: FILE" in _one_line(done["no file"])
    assert done["missing"].code == 2 and _one_line(done["missing"]) == \
        f"kappalab repair-store: error: FILE: no file {missing}"
