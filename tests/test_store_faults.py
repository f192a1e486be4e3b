"""Faults of the results on disk as a user meets them (issue 27, item 5; issue 37), on a tiny Table 1 run (3 runs of
one epoch): a corrupted line in the middle of the store, a torn last line, a disk that fills, a folder made
read-only, a folder deleted during the run. Each is ONE line on stderr naming the file and what to do (no traceback,
no Python warning), exit status 2 where the user must act, nothing stored is lost, and a rerun resumes.

The cases run in this process (``diskfull.kappalab``; the write faults injected at the I/O layer: a short write then
ENOSPC, EACCES on opening the store, the folder removed before opening it), and two of them again as a user meets
them, in a fresh ``kappalab`` process (``tests/faults/sitecustomize.py``, ``KAPPALAB_FAULT``): a full disk at the
store's second append, and a full disk at a run's ``theta.npy`` inside a worker of a 2-process pool. A real
read-only folder (chmod) cannot be shown here: the tests may run as root, whom permission bits do not stop.
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

from diskfull import Done, kappalab

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
FAULTS = Path(__file__).parent / "faults"
TABLE1 = ["reproduce", "table1", "--quick", "--methods", "rill_only", "--seeds", "0", "1", "2", "--epochs", "1",
          "--probe-iters", "2", "--no-progress"]
STORE = "runs_paper.jsonl"


@pytest.fixture(autouse=True)
def no_drawing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Figure 1 is not drawn in the in-process cases (~1 s a run); its files are still written, through the I/O
    layer. The subprocess cases draw it."""
    from matplotlib.figure import Figure

    monkeypatch.setattr(Figure, "savefig", lambda self, file, **options: file.write(b"a figure"))
    monkeypatch.setattr(Figure, "tight_layout", lambda self, *args, **options: None)


def _start(args: list[str], fault: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "KAPPALAB_FAULT"}
    env.update(PYTHONPATH=os.pathsep.join([str(FAULTS), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", KAPPALAB_FAULT=fault)
    return subprocess.Popen([sys.executable, "-m", "kappalab.cli", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _lines(store: Path) -> list[bytes]:
    return store.read_bytes().splitlines(keepends=True)


def _keys(store: Path) -> list[str]:
    return [json.loads(line)["key"] for line in _lines(store)]


WRITE_FAULTS = {
    "enospc": "No space left on device; free some disk space",
    "eacces": "Permission denied; make the folder writable or choose another --out",
}
RESUME = "then run the same command again: it resumes after the runs already stored"
VANISHED = "the store or its folder vanished during the run (moved or deleted?); put it back and run the same " \
    "command again to resume, or rerun with another --out"


@dataclass(frozen=True)
class Faults:
    """Every case: a complete run's store (``lines``); the first run of each case; ``kappalab repair-store`` on the
    corrupt store; the rerun of each case that needs one; the two subprocess cases."""

    root: Path
    lines: list[bytes]
    first: dict[str, Done]
    after_first: dict[str, bytes]  #: each case's store after its first run
    repair: Done
    rerun: dict[str, Done]
    processes: dict[str, Done]

    def store(self, case: str) -> Path:
        return self.root / case / STORE


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Faults:
    root = tmp_path_factory.mktemp("faults")
    table1 = lambda case: [*TABLE1, "--out", str(root / case)]  # noqa: E731
    # the subprocess cases start first and run while the in-process ones do
    started = {"process enospc": _start(table1("process enospc"), "enospc:1"),
               "process worker": _start([*table1("process worker"), "--workers", "2"], "enospc:0:theta.npy")}
    complete = kappalab(table1("complete"))
    assert complete.code == 0 and complete.stderr == "", complete.stderr
    lines = _lines(root / "complete" / STORE)
    assert len(lines) == 3
    second_append = [i for i, path in enumerate(complete.writes, start=1) if path.endswith(STORE)][1]
    for case, data in (("corrupt", lines[0] + lines[1][: len(lines[1]) // 3] + b"\n" + lines[2]),  # cut short
                       ("torn", lines[0] + lines[1] + lines[2][:500])):  # an append killed mid-way
        shutil.copytree(root / "complete", root / case)
        (root / case / STORE).write_bytes(data)
    first = {case: kappalab(table1(case)) for case in ("corrupt", "torn")}
    first |= {fault: kappalab(table1(fault), second_append, fault) for fault in (*WRITE_FAULTS, "vanish")}
    after_first = {case: (root / case / STORE).read_bytes() for case in first if (root / case / STORE).exists()}
    repair = kappalab(["repair-store", str(root / "corrupt" / STORE)])
    rerun = {case: kappalab(table1(case)) for case in ("corrupt", *WRITE_FAULTS, "vanish")}
    processes = {}
    for case, process in started.items():
        stdout, stderr = process.communicate(timeout=600)
        processes[case] = Done(process.returncode, stdout, stderr)
    rerun |= {case: kappalab(table1(case)) for case in processes}
    return Faults(root, lines, first, after_first, repair, rerun, processes)


def test_a_corrupt_middle_line_is_one_line_then_repair_store_and_a_rerun_resume(faults: Faults) -> None:
    store, lines = faults.store("corrupt"), faults.lines
    bad = lines[1][: len(lines[1]) // 3] + b"\n"
    first = faults.first["corrupt"]
    line = first.one_line()
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
    assert first.code == 0 and first.one_line() == (
        f"kappalab reproduce table1: {store}: moved a torn last line (500 bytes, an interrupted write) to "
        f"{backup.name}; its run is redone")
    assert backup.read_bytes() == lines[2][:500]
    assert _lines(store)[:2] == lines[:2] and sorted(_keys(store)) == sorted(_keys(faults.store("complete")))


@pytest.mark.parametrize("fault", [*WRITE_FAULTS, "vanish", "process enospc"])
def test_a_write_fault_after_the_first_run_is_one_line_and_a_rerun_resumes(faults: Faults, fault: str) -> None:
    store = faults.store(fault)
    first = faults.processes[fault] if fault.startswith("process") else faults.first[fault]
    says = VANISHED if fault == "vanish" else f"{WRITE_FAULTS[fault.split()[-1]]}; {RESUME}"
    assert first.code == 2 and first.one_line() == f"kappalab reproduce table1: error: {store}: {says}"
    stored = store.read_bytes() if fault.startswith("process") else faults.after_first.get(fault, b"")
    if fault == "vanish":  # the folder is gone, and nothing recreated it (no new store with the earlier runs lost)
        assert fault not in faults.after_first
    elif not fault.startswith("process"):  # the first run is stored whole, and the failed append left nothing behind
        assert stored.endswith(b"\n") and len(stored.splitlines()) == 1 and json.loads(stored)["key"]
    rerun = faults.rerun[fault]
    assert rerun.code == 0 and rerun.stderr == "", rerun.stderr
    assert store.read_bytes().startswith(stored) and sorted(_keys(store)) == sorted(_keys(faults.store("complete")))


def test_a_full_disk_in_a_worker_process_is_one_line_naming_its_file(faults: Faults) -> None:
    """The worker's DiskWriteError reaches the parent as it is: one line, no SweepError with two tracebacks."""
    done, folder = faults.processes["process worker"], faults.root / "process worker" / "runs"
    line = done.one_line()
    assert done.code == 2 and line.startswith(f"kappalab reproduce table1: error: {folder}/")
    assert line.endswith(f"/theta.npy: No space left on device; free some disk space; {RESUME}")
    assert not list(folder.rglob(".*.tmp"))  # each worker's failed write left no temporary file
    rerun = faults.rerun["process worker"]
    assert rerun.code == 0 and rerun.stderr == "", rerun.stderr
    assert sorted(_keys(faults.store("process worker"))) == sorted(_keys(faults.store("complete")))


def test_repair_store_usage_errors_are_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "none.jsonl"
    done = {"no file": kappalab(["repair-store"]), "missing": kappalab(["repair-store", str(missing)])}
    assert done["no file"].code == 2 and "required: FILE" in done["no file"].one_line()
    assert done["missing"].code == 2 and done["missing"].one_line() == \
        f"kappalab repair-store: error: FILE: no file {missing}"
