"""Test-only fault injection for the subprocess tests of tests/test_store_faults.py (never installed).

A process started with this folder first on PYTHONPATH imports this module at start-up. ``KAPPALAB_FAULT=MODE:N``
lets the first N writes of a results store (a ``*.jsonl`` file) succeed, then injects MODE:

* ``enospc``: the disk fills during record N+1: ``os.write`` writes half of it, then every further write to a store
  raises ``OSError(ENOSPC)`` (as a real full disk does: a short write, then the error);
* ``readonly``: opening the store for writing raises ``PermissionError(EACCES)`` (the store's folder made
  read-only; a chmod cannot show this here, where the tests may run as root, whom permission bits do not stop);
* ``vanish``: the store's folder is deleted (``shutil.rmtree``) just before the store is opened for writing.
"""

from __future__ import annotations

import errno
import os
import shutil

_MODE, _, _COUNT = os.environ.get("KAPPALAB_FAULT", "").partition(":")
_WRITES = os.O_WRONLY | os.O_RDWR


def _is_store(path: object) -> bool:
    return str(path).endswith(".jsonl")


def _install() -> None:
    real_open, real_write = os.open, os.write
    state = {"left": int(_COUNT), "full": False}

    def fault_open(path, flags, *args, **kwargs):  # noqa: ANN001, ANN202 - os.open's signature
        if _is_store(path) and flags & _WRITES:
            if state["left"] == 0:
                if _MODE == "readonly":
                    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
                if _MODE == "vanish":
                    shutil.rmtree(os.path.dirname(os.path.abspath(path)))
            state["left"] -= 1
        return real_open(path, flags, *args, **kwargs)

    def fault_write(fd, data):  # noqa: ANN001, ANN202 - os.write's signature
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if _is_store(target) and state["left"] < 0:
            if state["full"]:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            state["full"] = True
            return real_write(fd, bytes(data)[: len(data) // 2])
        return real_write(fd, data)

    os.open = fault_open
    if _MODE == "enospc":
        os.write = fault_write


if _MODE in ("enospc", "readonly", "vanish"):
    _install()
