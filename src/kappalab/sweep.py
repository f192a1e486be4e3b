"""A generic resumable sweep: run many independent jobs, store each result the moment it finishes.

A sweep is a list of :class:`Job` (a unique string ``key`` plus the run's ``spec``) and a *worker*: a picklable
module-level function ``worker(spec) -> dict``. A spec is a frozen dataclass with typed fields (the reproductions'
``RunSpec`` classes) whose ``record()`` gives the JSON-able dict stored as the record's ``params``, or a plain
JSON-able mapping (stored as it is; its worker gets a copy). :func:`run_sweep`

* skips every job whose key is already in the :class:`~kappalab.results.RunStore` (so a killed or crashed sweep
  restarts where it stopped, and never redoes or loses a finished run),
* runs the rest in this process (``workers=1``) or in a pool of ``workers`` processes (:mod:`kappalab.worker_pool`,
  ``spawn`` start method, each limited to ONE thread for torch/BLAS/OpenMP so that N workers use N cores),
* appends one record per finished job from the parent process only (a single writer: no interleaved lines),
  with the fields ``key``, ``params``, ``result`` (what the worker returned), ``wall_time_s`` and ``pid``,
* shows ONE progress display for the whole sweep (:class:`Progress`): on a terminal a tqdm bar with runs done /
  total and an ETA that counts only the jobs run in this session; when the output is a file or a pipe, one plain
  line per finished run (no carriage returns),
* holds an exclusive lock on the store (:meth:`~kappalab.results.RunStore.lock`) for the whole call, so a second
  sweep on the same store is refused (:class:`~kappalab.results.StoreBusyError`) instead of interleaving,
* on Ctrl-C stops every worker (pool processes ignore SIGINT; the parent terminates them) and raises
  :class:`SweepInterrupted`, which says how many runs are stored; running the same command again resumes.

:func:`run_batched_sweep` does the same for an engine that trains many runs at once (one call, in this process,
each run stored as soon as it is finished), and :func:`shard_jobs` splits a sweep deterministically into N disjoint
parts, so that any scheduler (a job array, one process per device) runs each part into its own store.

A worker that raises stops the sweep: the pool is terminated, the records of the jobs that finished before are
kept, and :class:`SweepError` names the failing key (also when its process died: killed, out of memory); fixing
the cause and running again resumes. A worker's write
fault the user can fix (a full disk, a read-only or vanished folder: :func:`kappalab.atomic_io.disk_fault`) stops it
with that one-line :class:`~kappalab.atomic_io.DiskWriteError` instead (carried from a pool worker to the parent as
it is, without a traceback), as does a failed append to the store (which leaves the store as it was before that
append). Large arrays belong in files the worker writes itself through :mod:`kappalab.atomic_io` (e.g.
:func:`kappalab.results.save_array` under a folder named in the spec) BEFORE it returns; a file without a record
is simply rewritten when the job reruns.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tqdm import tqdm

from kappalab.atomic_io import DiskWriteError, disk_fault
from kappalab.results import RunStore, StoreError, to_jsonable
from kappalab.worker_pool import WorkerDied, run_in_processes


class Spec(Protocol):
    """A typed job description (a frozen, picklable dataclass): what its worker reads, and ``record()``, the
    JSON-able dict stored as the record's ``params`` (a file format: it must not change for a given run)."""

    def record(self) -> dict[str, Any]: ...


#: a job's spec: a typed :class:`Spec`, or a plain JSON-able mapping (stored as it is)
JobSpec = Spec | Mapping[str, Any]
Worker = Callable[[Any], dict[str, Any]]

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


class SweepError(RuntimeError):
    """A job's worker raised; ``key`` names it and ``remote_traceback`` is the worker's traceback."""

    def __init__(self, key: str, message: str, remote_traceback: str) -> None:
        super().__init__(f"sweep job {key!r} failed: {message}\n--- worker traceback ---\n{remote_traceback}")
        self.key, self.remote_traceback = key, remote_traceback


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the sweep; ``stored`` of ``total`` runs are in the store (the rest rerun on resume)."""

    def __init__(self, stored: int, total: int, store: str) -> None:
        super().__init__(f"interrupted: {stored} of {total} runs are stored in {store}")
        self.stored, self.total, self.store = stored, total, store


@dataclass(frozen=True)
class Job:
    """One unit of a sweep: ``key`` (unique, stable across restarts) and the worker's ``spec``."""

    key: str
    spec: JobSpec = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """What the store keeps as this job's ``params``: the spec's ``record()`` (a mapping: a copy of it)."""
        return dict(self.spec) if isinstance(self.spec, Mapping) else self.spec.record()

    def worker_input(self) -> Any:
        """What the worker receives: the (frozen) spec itself, or a copy of a mapping."""
        return dict(self.spec) if isinstance(self.spec, Mapping) else self.spec


@dataclass(frozen=True)
class SweepSummary:
    """What one call of :func:`run_sweep` did."""

    total: int  #: jobs in the sweep
    skipped: int  #: already in the store when the call started
    completed: int  #: finished and stored by this call
    wall_time_s: float  #: wall time of this call
    run_times_s: tuple[float, ...]  #: wall time of each job completed by this call (inside the worker)


def parse_shard(text: str, name: str = "--shard") -> tuple[int, int]:
    """``"K/N"`` with integers ``1 <= K <= N`` -> ``(K, N)``; a ValueError naming ``name`` otherwise."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"{name}: expected K/N (two integers, e.g. 1/4), got {text!r}") from None
    if not 1 <= k <= n:
        raise ValueError(f"{name}: K/N needs 1 <= K <= N, got {text!r}")
    return k, n


def shard_of(label: str, n: int) -> int:
    """The shard (1..n) of the job named ``label``: ``int(sha256(label)) % n + 1``. It depends on the label alone,
    not on which other jobs a sweep holds, so the same job lands in the same shard in every process that splits
    the sweep, and the n shards partition any list of jobs with distinct labels."""
    return int(hashlib.sha256(label.encode()).hexdigest(), 16) % n + 1


def shard_jobs(jobs: Sequence[Job], k: int, n: int, label: Callable[[Job], str] = lambda job: job.key) -> list[Job]:
    """The jobs of shard ``k`` of ``n`` (:func:`shard_of` of each job's ``label``), in their order: what one
    process of a scheduler (a job array, one process per device) runs into its own store."""
    if not (isinstance(n, int) and isinstance(k, int) and 1 <= k <= n):
        raise ValueError(f"shard k/n needs integers 1 <= k <= n, got {k!r}/{n!r}")
    return [job for job in jobs if shard_of(label(job), n) == k]


def limit_threads(n: int = 1) -> None:
    """Limit torch, BLAS and OpenMP in THIS process to ``n`` threads (environment variables for libraries
    loaded later, threadpoolctl and torch for those already loaded)."""
    for name in THREAD_ENV:
        os.environ[name] = str(n)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(n)
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        pass
    import sys

    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        torch.set_num_threads(n)


def _init_worker(threads: int) -> None:
    """A pool worker: Ctrl-C is the parent's (it tears the pool down), ``threads`` BLAS/torch threads, and tqdm
    with a thread lock (the pool's SIGTERM: :mod:`kappalab.worker_pool`). tqdm's default lock is a multiprocessing
    semaphore registered with the resource tracker; a worker terminated by the pool never unregisters it, and the
    tracker then printed "leaked semaphore objects" after the sweep's last line (measured: almost every Ctrl-C once
    the workers train). A worker draws no bar of its own (the parent draws the sweep's), so a thread lock is all it
    needs."""
    import threading

    from tqdm import tqdm

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit_threads(threads)
    tqdm.set_lock(threading.RLock())


def _eta(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    """One display for a whole sweep: runs done / total and an ETA from the runs finished in this session.

    On a terminal (``stream.isatty()``) a tqdm bar; otherwise one plain line per finished run, so a log file gets
    no carriage returns. ``enabled=False`` shows nothing."""

    def __init__(self, total: int, done: int, desc: str, enabled: bool = True, stream=None) -> None:
        self.total, self.done, self.desc, self.enabled = total, done, desc, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.start, self.new = time.perf_counter(), 0
        self.bar = None
        if enabled and self.stream.isatty():
            self.bar = tqdm(total=total, initial=done, desc=desc, unit="run", dynamic_ncols=True, file=self.stream)

    def update(self) -> None:
        self.done, self.new = self.done + 1, self.new + 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.enabled:
            rate = (time.perf_counter() - self.start) / self.new
            print(f"{self.desc}: {self.done}/{self.total} runs done, ETA {_eta(rate * (self.total - self.done))}",
                  file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


#: (key, ok, result or (message, traceback, DiskWriteError or None), seconds, pid)
Outcome = tuple[str, bool, Any, float, int]


def _call(worker: Worker, job: Job) -> Outcome:
    """Run one job; never raises (errors come back as data, so the parent can name the key)."""
    start = time.perf_counter()
    try:
        result = worker(job.worker_input())
        if not isinstance(result, dict):
            raise TypeError(f"worker must return a dict, got {type(result).__name__}")
        return job.key, True, to_jsonable(result), time.perf_counter() - start, os.getpid()
    except Exception as error:  # noqa: BLE001 - reported to the parent with its traceback
        return job.key, False, (f"{type(error).__name__}: {error}", traceback.format_exc(), disk_fault(error)), \
            time.perf_counter() - start, os.getpid()


def _check_jobs(jobs: Sequence[Job]) -> None:
    seen: set[str] = set()
    for job in jobs:
        if not isinstance(job, Job):
            raise TypeError(f"jobs must be kappalab.sweep.Job instances, got {type(job).__name__}")
        if not isinstance(job.key, str) or not job.key:
            raise ValueError(f"every job needs a non-empty string key, got {job.key!r}")
        if job.key in seen:
            raise ValueError(f"jobs: duplicate key {job.key!r}")
        seen.add(job.key)


def run_sweep(jobs: Sequence[Job], worker: Worker, store: RunStore | str | os.PathLike[str], *,
              workers: int = 1, threads_per_worker: int = 1, progress: bool = True, desc: str = "sweep",
              extra_record: Callable[[Job], dict[str, Any]] | None = None) -> SweepSummary:
    """Run every job not yet stored; see the module docstring.

    Args:
        jobs: the whole sweep (done jobs included: they are skipped by key).
        worker: module-level function ``spec -> dict`` (must be picklable for ``workers > 1``).
        store: a RunStore or the path of its JSONL file.
        workers: processes; 1 runs in this process (its thread count is then left alone).
        threads_per_worker: torch/BLAS threads of each pool process.
        progress: show the sweep's progress (:class:`Progress`).
        desc: its label.
        extra_record: optional ``job -> dict`` merged into each stored record (e.g. provenance).
    """
    _check_jobs(jobs)
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if not isinstance(threads_per_worker, int) or threads_per_worker < 1:
        raise ValueError(f"threads_per_worker must be a positive integer, got {threads_per_worker!r}")
    store = store if isinstance(store, RunStore) else RunStore(store)
    with store.lock():
        return _run_locked(jobs, store, progress, desc, extra_record,
                           _execute_jobs(worker, workers, threads_per_worker))


def _run_locked(jobs: Sequence[Job], store: RunStore, progress: bool, desc: str,
                extra_record: Callable[[Job], dict[str, Any]] | None,
                execute: Callable[[list[Job], Callable[[Outcome], None]], None]) -> SweepSummary:
    """Skip the stored jobs, let ``execute(pending, record)`` run the rest, store each outcome as ``record`` gets
    it (one overall progress display), and sum up."""
    done = store.done_keys()
    pending = [job for job in jobs if job.key not in done]
    by_key = {job.key: job for job in pending}
    start = time.perf_counter()
    times: list[float] = []
    bar = Progress(len(jobs), len(jobs) - len(pending), desc, progress)

    def record(outcome: Outcome) -> None:
        key, ok, payload, seconds, pid = outcome
        if not ok:
            if payload[2] is not None:
                raise payload[2]
            raise SweepError(key, payload[0], payload[1])
        job = by_key[key]
        entry = {"key": key, "params": job.record(), "result": payload, "wall_time_s": seconds, "pid": pid}
        if extra_record is not None:
            entry.update(extra_record(job))
        store.append(entry)
        times.append(seconds)
        bar.update()

    try:
        execute(pending, record)
    except KeyboardInterrupt:
        raise SweepInterrupted(len(jobs) - len(pending) + len(times), len(jobs), str(store.path)) from None
    finally:
        bar.close()
    return SweepSummary(len(jobs), len(jobs) - len(pending), len(times), time.perf_counter() - start,
                        tuple(times))


def _execute_jobs(worker: Worker, workers: int, threads_per_worker: int
                  ) -> Callable[[list[Job], Callable[[Outcome], None]], None]:
    """:func:`run_sweep`'s execution: one job at a time in this process, or a pool of processes."""
    def execute(pending: list[Job], record: Callable[[Outcome], None]) -> None:
        if workers == 1 or len(pending) <= 1:
            for job in pending:
                record(_call(worker, job))
        else:
            _run_pool(pending, worker, min(workers, len(pending)), threads_per_worker, record)
    return execute


#: ``runner(specs)`` of :func:`run_batched_sweep`: yields ``(index, result)`` as each run is finished
BatchRunner = Callable[[list[Any]], Iterator[tuple[int, dict[str, Any]]]]


def run_batched_sweep(jobs: Sequence[Job], runner: BatchRunner, store: RunStore | str | os.PathLike[str], *,
                      progress: bool = True, desc: str = "sweep",
                      extra_record: Callable[[Job], dict[str, Any]] | None = None) -> SweepSummary:
    """:func:`run_sweep` for an engine that trains many runs at once: the jobs not yet stored go to ``runner`` in
    one call, in this process; it forms its own batches and yields ``(index into its list, result)`` as soon as
    each run is finished, and each is stored at once. So the store grows run by run, and a killed sweep loses only
    the runs in flight (the batch being trained and those of it not yet yielded); running it again resumes.

    A record's ``wall_time_s`` is the time since the previous result was stored (a batch's training time lands on
    its first run; their mean is the time per run). A runner that raises stops the sweep with :class:`SweepError`
    naming the first job not stored; the results yielded before are kept."""
    _check_jobs(jobs)
    store = store if isinstance(store, RunStore) else RunStore(store)

    def execute(pending: list[Job], record: Callable[[Outcome], None]) -> None:
        if not pending:
            return
        stored: set[int] = set()
        last = time.perf_counter()
        try:
            for index, result in runner([job.worker_input() for job in pending]):
                payload = to_jsonable(result)
                now = time.perf_counter()
                record((pending[index].key, True, payload, now - last, os.getpid()))
                stored.add(index)
                last = now
        except (StoreError, DiskWriteError):  # already one line (the store's own fault, a disk fault)
            raise
        except Exception as error:  # noqa: BLE001 - named by the first job not stored, with its traceback
            fault = disk_fault(error)
            if fault is not None:
                raise fault from None
            first = next((i for i in range(len(pending)) if i not in stored), len(pending) - 1)
            raise SweepError(pending[first].key, f"{type(error).__name__}: {error}", traceback.format_exc()) \
                from None

    with store.lock():
        return _run_locked(jobs, store, progress, desc, extra_record, execute)


def _run_pool(pending: Iterable[Job], worker: Worker, workers: int, threads: int,
              record: Callable[[Outcome], None]) -> None:
    """Spawned processes (:mod:`kappalab.worker_pool`), each with ``threads`` torch/BLAS threads; results recorded
    in completion order; the pool is torn down at the first error."""
    try:
        run_in_processes(pending, _CallJob(worker), workers, record, _init_worker, (threads,),
                         {name: str(threads) for name in THREAD_ENV})  # read by the children before numpy / torch
    except WorkerDied as died:
        raise SweepError(died.item.key, str(died), "(none: the process ended)") from None


class _CallJob:
    """Picklable ``job -> _call(worker, job)`` (a lambda or closure would not pickle under spawn)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def __call__(self, job: Job) -> Outcome:
        return _call(self.worker, job)
