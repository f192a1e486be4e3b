"""Stress the sweep's teardown: N sweeps of 30 fast jobs in 2 worker processes, each stopped by one job's full disk.

Each sweep's jobs sleep 0, 1 or 3 ms (drawn), and one of jobs 3-12 (drawn) raises ENOSPC, so the pool is torn down
while the other worker is anywhere: inside a job, sending its result, or waiting for the next one. A teardown that
does not return within 60 s is a hang: the sweep's number and every thread's stack are printed and the script exits
with status 1.

    PYTHONPATH=src OMP_NUM_THREADS=1 .venv/bin/python experiments/pool_teardown_stress.py 1500

prints a line every 100 sweeps and ``done N teardowns, 0 hangs, S s`` at the end (docs/reliability.md: the runs,
on this code and on the multiprocessing.Pool it replaced).
"""

from __future__ import annotations

import argparse
import errno
import faulthandler
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

HANG_S = 60


def job(params: dict) -> dict:
    time.sleep(params["sleep"])
    if params["name"] == params["fails"]:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "x.npy")
    return {}


def main() -> None:
    from kappalab.atomic_io import DiskWriteError
    from kappalab.results import RunStore
    from kappalab.sweep import Job, run_sweep

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", type=int, help="how many sweeps (teardowns)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    start = time.perf_counter()
    for i in range(1, args.sweeps + 1):
        said = threading.Timer(HANG_S - 1, print, (f"sweep {i} has not returned in {HANG_S - 1} s",), {"flush": True})
        said.start()
        faulthandler.dump_traceback_later(HANG_S, exit=True)
        fails = f"j{rng.randint(3, 12)}"
        jobs = [Job(f"j{k}", {"name": f"j{k}", "fails": fails, "sleep": rng.choice([0.0, 0.0, 0.001, 0.003])})
                for k in range(30)]
        with tempfile.TemporaryDirectory() as folder:
            try:
                run_sweep(jobs, job, RunStore(Path(folder) / "runs.jsonl"), workers=2, progress=False)
            except DiskWriteError:
                pass
            else:
                sys.exit(f"sweep {i} was not stopped by {fails}'s full disk")
        faulthandler.cancel_dump_traceback_later()
        said.cancel()
        if i % 100 == 0:
            print(f"{i} teardowns, {time.perf_counter() - start:.0f} s", flush=True)
    print(f"done {args.sweeps} teardowns, 0 hangs, {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
