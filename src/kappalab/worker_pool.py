"""Items through spawned worker processes, each with a pipe of its own: the sweep's process pool.

:func:`run_in_processes` sends one item at a time to each idle worker and hands each result to ``on_result`` in
the order they finish. An exception there (or Ctrl-C in this process) tears the workers down and propagates.

Why not ``multiprocessing.Pool``: its workers share one task queue and one result queue with their locks, and
``Pool.terminate`` kills workers that may hold such a lock. ``experiments/pool_teardown_stress.py`` (sweeps of fast
jobs, each stopped by one job's full disk; docs/reliability.md) saw it hang for good inside ``Pool.terminate``:

* workers killed by SIGTERM's default: one died while putting its result, holding the result queue's write lock,
  which the pool's task thread then waited for;
* workers unwinding SIGTERM by a Python handler: one never exited (the parent's stack: ``Pool.terminate`` joining
  it). Likely: it was blocking on the task queue's lock, which the terminating pool holds for good, with its
  handler still pending (a Python handler runs only when the main thread is back in the interpreter).

Here a worker shares nothing with another: killed in the middle of a message, it spoils only its own pipe, which
goes with it.

Teardown: SIGTERM to every worker still running. A worker inside an item leaves by ``SystemExit`` (:func:`_stop`),
so the item's ``finally`` blocks run and an atomic write in progress removes its temporary file; a worker between
items dies at once (the default disposition is back there); a worker still alive after :data:`STOP_WAIT_S` is
killed. A worker that dies by itself (killed from outside, out of memory) stops the run with :class:`WorkerDied`,
which names its item.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

#: seconds a terminated worker has to unwind its item (and remove its temporary files) before it is killed
STOP_WAIT_S = 20.0


class WorkerDied(RuntimeError):
    """A worker process ended without sending its item's result; ``item`` is the item it was running."""

    def __init__(self, item: Any, exitcode: int | None) -> None:
        super().__init__(f"its worker process ended without a result (exit code {exitcode})")
        self.item, self.exitcode = item, exitcode


def _stop(signum: int, frame: object) -> None:
    """SIGTERM inside an item: leave by ``SystemExit``, which the item's callable does not catch, so its ``finally``
    blocks run (an unhandled SIGTERM kills the process where it stands, and a temporary file it was writing stayed
    behind)."""
    raise SystemExit(128 + signum)


def run_item(call: Callable[[Any], Any], item: Any) -> Any:
    """``call(item)`` with SIGTERM unwinding it (:func:`_stop`), and SIGTERM's default disposition after it."""
    signal.signal(signal.SIGTERM, _stop)
    try:
        return call(item)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _serve(conn: Connection, call: Callable[[Any], Any], initializer: Callable[..., None],
           initargs: tuple[Any, ...]) -> None:
    """A worker process: ``initializer(*initargs)``, then each item received until ``None`` (or the parent's end
    of the pipe is gone)."""
    initializer(*initargs)
    while True:
        try:
            item = conn.recv()
        except EOFError:
            return
        if item is None:
            return
        conn.send(run_item(call, item))


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection  #: this process's end of the worker's pipe
    item: Any = None  #: the item it is running


def _feed(worker: _Worker, todo: Iterator[Any]) -> bool:
    """Send ``worker`` its next item (True), or ``None`` when there is none (False: it exits; an item is never
    ``None``)."""
    worker.item = next(todo, None)
    try:
        worker.conn.send(worker.item)
    except OSError:  # its end of the pipe is gone: the worker died
        if worker.item is None:
            return False  # after its last result: it had nothing more to do
        raise _died(worker) from None
    return worker.item is not None


def _died(worker: _Worker) -> WorkerDied:
    """The error for a worker whose process ended, with its exit code (read once the process is reaped: the end of
    its pipe can be seen first)."""
    worker.process.join(STOP_WAIT_S)
    return WorkerDied(worker.item, worker.process.exitcode)


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` set in ``os.environ`` for the block (spawned children read it at their start), then restored."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_in_processes(items: Iterable[Any], call: Callable[[Any], Any], workers: int,
                     on_result: Callable[[Any], None], initializer: Callable[..., None],
                     initargs: tuple[Any, ...] = (), env: Mapping[str, str] | None = None) -> None:
    """``on_result(call(item))`` for every item, ``call`` running in ``workers`` spawned processes (``call``,
    ``initializer`` and the items, never ``None``, must pickle); ``env`` is the workers' environment on top of this
    process's."""
    ctx = mp.get_context("spawn")
    todo = iter(items)
    pool: list[_Worker] = []
    try:
        with _environment(env or {}):
            for _ in range(workers):
                ours, theirs = ctx.Pipe()
                process = ctx.Process(target=_serve, args=(theirs, call, initializer, initargs), daemon=True)
                process.start()
                theirs.close()
                pool.append(_Worker(process, ours))
        busy = [worker for worker in pool if _feed(worker, todo)]
        while busy:
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
            for worker in list(busy):
                if worker.conn in ready:  # a result, or the end of the pipe of a worker that died
                    try:
                        result = worker.conn.recv()
                    except EOFError:
                        raise _died(worker) from None
                    on_result(result)
                    if not _feed(worker, todo):
                        busy.remove(worker)
                elif worker.process.sentinel in ready:
                    raise _died(worker)
    except BaseException:
        _tear_down(pool, terminate=True)
        raise
    _tear_down(pool, terminate=False)


def _tear_down(pool: list[_Worker], terminate: bool) -> None:
    """Join every worker (after SIGTERM with ``terminate``), killing those still alive after :data:`STOP_WAIT_S`;
    close the pipes."""
    started = [w for w in pool if w.process.pid is not None]
    if terminate:
        for worker in started:
            if worker.process.is_alive():
                worker.process.terminate()
    deadline = time.monotonic() + STOP_WAIT_S
    for worker in started:
        worker.process.join(max(0.0, deadline - time.monotonic()))
    for worker in started:
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()
    for worker in pool:
        worker.conn.close()
