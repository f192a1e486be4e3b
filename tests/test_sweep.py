"""The resumable sweep runner: every job runs once, a crash or a kill loses nothing, a restart redoes nothing.

The workers live in a small module written to ``tmp_path`` (spawned pool processes must import them by name).
Each call appends its key to the log file named in its params, so a test can see exactly which jobs ran in
which session.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from kappalab.atomic_io import DiskWriteError
from kappalab.results import RunStore
from kappalab.sweep import Job, SweepError, run_batched_sweep, run_sweep

WORKERS_SOURCE = textwrap.dedent('''
    import errno, os, time
    from pathlib import Path

    def square(params):
        with open(params["log"], "a") as handle:
            handle.write(params["name"] + "\\n")
        time.sleep(params.get("sleep", 0.0))
        if params.get("fail_flag") and Path(params["fail_flag"]).exists() and params["name"] == "j3":
            raise RuntimeError("injected failure of j3")
        if params.get("killed") == params["name"]:  # the kernel's out-of-memory killer, say
            os.kill(os.getpid(), 9)
        if params.get("full_disk") and params["name"] == "j2":  # writing its own output file fails
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), params["full_disk"])
        return {"square": params["x"] ** 2, "omp": os.environ.get("OMP_NUM_THREADS")}

    def writes_slowly(params):
        """Job "writer" stays inside an atomic write until the pool is torn down; job "failer" fails once the
        writer's temporary file exists."""
        from kappalab.atomic_io import atomic_open
        folder = Path(params["folder"])
        if params["name"] == "writer":
            with atomic_open(folder / "out.bin") as handle:
                handle.write(b"partial")
                time.sleep(60)
            return {}
        while not list(folder.glob(".out.bin.*.tmp")):
            time.sleep(0.01)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder / "other.npy"))
''')


@pytest.fixture
def workers_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "sweep_test_workers.py").write_text(WORKERS_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    import importlib

    return importlib.import_module("sweep_test_workers")


def make_jobs(n: int, log: Path, **extra) -> list[Job]:
    return [Job(f"j{i}", {"name": f"j{i}", "x": i, "log": str(log), **extra}) for i in range(n)]


def logged(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_runs_each_job_once_and_skips_done(tmp_path: Path, workers_module) -> None:
    store = RunStore(tmp_path / "runs.jsonl")
    jobs = make_jobs(4, tmp_path / "log1")
    summary = run_sweep(jobs, workers_module.square, store, progress=False)
    assert (summary.total, summary.skipped, summary.completed) == (4, 0, 4)
    assert {r["key"]: r["result"]["square"] for r in store.records()} == {f"j{i}": i * i for i in range(4)}
    again = run_sweep(make_jobs(4, tmp_path / "log2"), workers_module.square, store, progress=False)
    assert (again.skipped, again.completed) == (4, 0)
    assert logged(tmp_path / "log2") == []


@pytest.mark.parametrize("workers", [1, 2])
def test_injected_exception_then_resume(tmp_path: Path, workers_module, workers: int) -> None:
    store, flag = RunStore(tmp_path / "runs.jsonl"), tmp_path / "fail"
    flag.touch()
    with pytest.raises(SweepError, match="j3"):
        run_sweep(make_jobs(6, tmp_path / "log1", fail_flag=str(flag)), workers_module.square, store,
                  workers=workers, progress=False)
    first = store.done_keys()
    assert "j3" not in first
    if workers == 1:
        assert first == {"j0", "j1", "j2"}  # in-process order is the job order
    flag.unlink()
    summary = run_sweep(make_jobs(6, tmp_path / "log2", fail_flag=str(flag)), workers_module.square, store,
                        workers=workers, progress=False)
    assert not first & set(logged(tmp_path / "log2")), "a finished run was redone"
    keys = [r["key"] for r in store.records()]
    assert Counter(keys) == Counter(f"j{i}" for i in range(6))
    assert summary.skipped == len(first) and summary.completed == 6 - len(first)
    if workers > 1:
        assert all(r["result"]["omp"] == "1" for r in store.records()), "pool workers must run single-threaded"


def test_killed_subprocess_sweep_resumes_without_redoing(tmp_path: Path, workers_module) -> None:
    """SIGKILL a running two-worker sweep (the whole process group) after its first record, then resume."""
    store_path = tmp_path / "runs.jsonl"
    script = textwrap.dedent(f'''
        from kappalab.sweep import Job, run_sweep
        import sweep_test_workers as w
        jobs = [Job(f"j{{i}}", {{"name": f"j{{i}}", "x": i, "log": {str(tmp_path / "log1")!r}, "sleep": 0.4}})
                for i in range(8)]
        if __name__ == "__main__":
            run_sweep(jobs, w.square, {str(store_path)!r}, workers=2, progress=False)
    ''')
    (tmp_path / "sweep_script.py").write_text(script)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "sweep_script.py")], cwd=tmp_path,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline and proc.poll() is None:
            if store_path.exists() and store_path.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.05)
        assert proc.poll() is None, f"sweep ended before it could be killed: {proc.stdout.read()!r}"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    first = RunStore(store_path).done_keys()
    assert 1 <= len(first) < 8  # the kill landed mid-sweep (some runs stored, some not): else nothing to resume
    jobs = make_jobs(8, tmp_path / "log2", sleep=0.0)
    summary = run_sweep(jobs, workers_module.square, store_path, progress=False)
    assert not first & set(logged(tmp_path / "log2")), "a finished run was redone"
    records = RunStore(store_path).records()
    assert Counter(r["key"] for r in records) == Counter(f"j{i}" for i in range(8))
    assert summary.completed == 8 - len(first)
    assert all(json.dumps(r["result"]) for r in records)


def test_arguments_are_checked(tmp_path: Path, workers_module) -> None:
    with pytest.raises(ValueError, match="duplicate key"):
        run_sweep([Job("a"), Job("a")], workers_module.square, tmp_path / "r.jsonl", progress=False)
    with pytest.raises(ValueError, match="workers"):
        run_sweep([Job("a")], workers_module.square, tmp_path / "r.jsonl", workers=0, progress=False)


def test_progress_to_a_file_is_one_plain_line_per_run(tmp_path: Path, workers_module) -> None:
    """Output to a file (not a terminal): runs done / total and an ETA, one line each, no carriage returns."""
    import io

    from kappalab.sweep import Progress

    stream = io.StringIO()
    bar = Progress(total=3, done=1, desc="demo", stream=stream)
    bar.update()
    bar.update()
    bar.close()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and len(lines) == 2
    assert lines[0].startswith("demo: 2/3 runs done, ETA ") and lines[1].startswith("demo: 3/3 runs done, ETA 0m00s")
    silent = io.StringIO()
    Progress(total=3, done=0, desc="x", enabled=False, stream=silent).update()
    assert silent.getvalue() == ""


def test_a_second_sweep_on_one_store_is_refused(tmp_path: Path, workers_module) -> None:
    from kappalab.results import StoreBusyError

    store = RunStore(tmp_path / "runs.jsonl")
    with store.lock():
        with pytest.raises(StoreBusyError, match="in use by another run"):
            run_sweep(make_jobs(1, tmp_path / "log"), workers_module.square, store, progress=False)
    assert run_sweep(make_jobs(1, tmp_path / "log"), workers_module.square, store, progress=False).completed == 1


@pytest.mark.parametrize("workers", [1, 2])
def test_a_full_disk_in_a_worker_is_one_line_naming_its_file(tmp_path: Path, workers_module, workers: int) -> None:
    """A worker's OSError(ENOSPC) is the user's to fix: DiskWriteError, one line naming the file (no worker
    traceback, unlike SweepError); the runs stored before are kept and the next call resumes."""
    store, full = RunStore(tmp_path / "runs.jsonl"), str(tmp_path / "runs" / "j2.npy")
    with pytest.raises(DiskWriteError) as caught:
        run_sweep(make_jobs(4, tmp_path / "log1", full_disk=full), workers_module.square, store, workers=workers,
                  progress=False)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{full}: No space left on device; free some disk space")
    first = store.done_keys()
    assert "j2" not in first and (workers > 1 or first == {"j0", "j1"})
    assert run_sweep(make_jobs(4, tmp_path / "log2"), workers_module.square, store, progress=False).completed \
        == 4 - len(first)
    assert not first & set(logged(tmp_path / "log2"))


def test_a_pool_torn_down_by_a_fault_leaves_no_temporary_file(tmp_path: Path, workers_module) -> None:
    """One worker's full disk tears the pool down while the other is inside an atomic write: that worker is
    stopped by SIGTERM, which must still run its cleanup (measured before the fix: its ``.out.bin.*.tmp`` stayed,
    the race behind a flaky CLI test), and the sweep returns within the sleep it interrupted."""
    folder = tmp_path / "out"
    folder.mkdir()
    jobs = [Job(name, {"name": name, "folder": str(folder)}) for name in ("writer", "failer")]
    start = time.perf_counter()
    with pytest.raises(DiskWriteError, match="other.npy: No space left on device"):
        run_sweep(jobs, workers_module.writes_slowly, RunStore(tmp_path / "runs.jsonl"), workers=2, progress=False)
    assert time.perf_counter() - start < 50, "the writer was waited for, not stopped"
    assert sorted(p.name for p in folder.iterdir()) == []


@pytest.mark.parametrize("fails", [False, True])
def test_a_pool_worker_unwinds_sigterm_inside_an_item_only(fails: bool) -> None:
    """Inside an item the pool's SIGTERM unwinds it (its cleanup runs: the test above); after it the default
    disposition is back, so a worker between items dies at once when the pool is torn down."""
    from kappalab.worker_pool import _stop, run_item

    seen = []

    def call(item: int) -> int:
        seen.append(signal.getsignal(signal.SIGTERM))
        if fails:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "x.npy")
        return item + 1

    saved = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if fails:
            with pytest.raises(OSError):
                run_item(call, 1)
        else:
            assert run_item(call, 1) == 2
        assert seen == [_stop] and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, saved)


def test_a_worker_process_that_dies_stops_the_sweep_naming_its_job(tmp_path: Path, workers_module) -> None:
    """A worker killed from outside (here it kills itself: SIGKILL, as the kernel's out-of-memory killer does)
    stops the sweep with SweepError naming its job, promptly (multiprocessing.Pool waited for it for ever), and
    keeps the other jobs' records."""
    jobs = [Job(f"j{i}", {"name": f"j{i}", "x": i, "log": str(tmp_path / "log"), "killed": "j3"}) for i in range(6)]
    store = RunStore(tmp_path / "runs.jsonl")
    start = time.perf_counter()
    with pytest.raises(SweepError, match=r"'j3' failed: its worker process ended without a result \(exit code -9\)"):
        run_sweep(jobs, workers_module.square, store, workers=2, progress=False)
    assert time.perf_counter() - start < 60
    assert "j3" not in store.done_keys() and store.done_keys() <= {f"j{i}" for i in range(6)}


def test_a_full_disk_in_a_batched_runner_is_one_line(tmp_path: Path) -> None:
    def runner(params_list):
        yield 0, {"x": 0}
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "spectra/j1.npz")

    store = RunStore(tmp_path / "runs.jsonl")
    with pytest.raises(DiskWriteError, match=r"^spectra/j1\.npz: No space left on device"):
        run_batched_sweep([Job("j0"), Job("j1")], runner, store, progress=False)
    assert store.done_keys() == {"j0"}
