"""Test-only fault injection for the subprocess tests of tests/test_store_faults.py (never installed).

A process started with this folder first on PYTHONPATH imports this module at start-up, and so does every worker
process it spawns. ``KAPPALAB_FAULT=enospc:N[:NAME]`` lets the first N writes (in each process) of the files whose
name holds ``NAME`` (default ``.jsonl``: the results stores; an atomic write's temporary file
``.theta.npy.PID.RANDOM.tmp`` holds its target's name) succeed; at the next one the disk fills: ``os.write`` writes
half of it, then every further write to such a file raises ``OSError(ENOSPC)`` (as a real full disk does: a short
write, then the error).
"""

from __future__ import annotations

import errno
import os

_MODE, _, _REST = os.environ.get("KAPPALAB_FAULT", "").partition(":")
_COUNT, _, _NAME = _REST.partition(":")
_WRITES = os.O_WRONLY | os.O_RDWR


def _matches(path: object) -> bool:
    return (_NAME or ".jsonl") in os.path.basename(str(path))


def _install() -> None:
    real_open, real_write = os.open, os.write
    state = {"left": int(_COUNT), "full": False}

    def fault_open(path, flags, *args, **kwargs):  # noqa: ANN001, ANN202 - os.open's signature
        if _matches(path) and flags & _WRITES:
            state["left"] -= 1
        return real_open(path, flags, *args, **kwargs)

    def fault_write(fd, data):  # noqa: ANN001, ANN202 - os.write's signature
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if _matches(target) and state["left"] < 0:
            if state["full"]:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            state["full"] = True
            return real_write(fd, bytes(data)[: len(data) // 2])
        return real_write(fd, data)

    os.open, os.write = fault_open, fault_write


if _MODE == "enospc":
    _install()
