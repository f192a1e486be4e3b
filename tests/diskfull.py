"""A disk that fills at a chosen write, injected at kappalab's I/O layer (:mod:`kappalab.atomic_io`), and ``kappalab``
commands run in this process (no interpreter or torch start-up per run).

Every file and store line kappalab writes is opened by ``atomic_io._open`` and written by ``atomic_io._write``. A
:class:`DiskFull` counts the opens; at the ``fail_at``-th it lets the first ``os.write`` of that file put out half its
bytes and fails every later one with ``OSError(ENOSPC)``: what a full disk does (a short write, then the error). With
``fail_at=None`` it only counts, which gives a command's number of writes.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kappalab import atomic_io, cli


@dataclass
class DiskFull:
    """Counts the writes (files and store lines opened); the ``fail_at``-th (1-based) fails as a full disk does
    (``fault="enospc"``), or its open is refused as in a folder made read-only (``"eacces"``), or its folder is
    deleted just before it is opened (``"vanish"``)."""

    fail_at: int | None = None
    fault: str = "enospc"
    writes: list[str] = field(default_factory=list)  #: the path of each write, in order
    _doomed: int | None = None  #: the fd of the failing write
    _short: bool = False  #: its short write happened

    @contextlib.contextmanager
    def installed(self) -> Iterator["DiskFull"]:
        real_open, real_write = atomic_io._open, atomic_io._write

        def fault_open(path: Any, flags: int) -> int:
            if len(self.writes) + 1 == self.fail_at and self.fault == "eacces":
                self.writes.append(str(path))
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
            if len(self.writes) + 1 == self.fail_at and self.fault == "vanish":
                shutil.rmtree(Path(path).parent)
            fd = real_open(path, flags)
            self.writes.append(str(path))
            if len(self.writes) == self.fail_at:
                self._doomed = fd
            elif fd == self._doomed:  # the failed file's fd number, reused by a later file
                self._doomed = None
            return fd

        def fault_write(fd: int, data: memoryview) -> int:
            if fd != self._doomed:
                return real_write(fd, data)
            if self._short or len(data) < 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self._short = True
            return real_write(fd, data[: len(data) // 2])

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(atomic_io, "_open", fault_open)
            patch.setattr(atomic_io, "_write", fault_write)
            yield self


@dataclass(frozen=True)
class Done:
    """One ``kappalab`` call: its exit status, stdout and stderr, and the writes it made (or tried; in-process)."""

    code: int
    stdout: str
    stderr: str
    writes: tuple[str, ...] = ()

    def one_line(self) -> str:
        """The only line on stderr (no traceback, no Python warning)."""
        lines = self.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in self.stderr and "Warning" not in self.stderr, self.stderr
        return lines[0]


def kappalab(argv: Sequence[str], fail_at: int | None = None, fault: str = "enospc") -> Done:
    """``kappalab ARGV`` in this process, with the ``fail_at``-th write failing (None: none; ``fault``: how, see
    :class:`DiskFull`). An exception that escapes the command (a traceback for the user) fails the calling test."""
    disk, stdout, stderr = DiskFull(fail_at, fault), io.StringIO(), io.StringIO()
    with disk.installed(), contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
        try:
            code = cli.main(list(argv))
        except SystemExit as done:  # argparse's usage errors and --help exit, as in a process of its own
            code = done.code if isinstance(done.code, int) else 1
    return Done(code, stdout.getvalue(), stderr.getvalue(), tuple(disk.writes))


def store_lines(store: Path) -> list[dict[str, Any]]:
    """Every line of a store, each required to be a whole JSON record (none torn: the file ends with a newline)."""
    data = store.read_bytes() if store.exists() else b""
    assert data == b"" or data.endswith(b"\n"), f"{store} ends in a torn line"
    return [json.loads(line) for line in data.splitlines()]


def leftovers(folder: Path) -> list[Path]:
    """Temporary files of the I/O layer left under ``folder`` (there must be none after a failed write)."""
    return sorted(folder.rglob(".*.tmp"))
