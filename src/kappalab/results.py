"""Resumable, append-only store of experiment results.

A :class:`RunStore` is a JSON-lines file: one record (a JSON object with a non-empty string ``"key"`` naming the
run) per line. Faults are answered so that nothing stored is lost and a rerun resumes:

* **Each append is whole or absent.** The line (with its newline) goes out under the store's lock with
  :func:`kappalab.atomic_io.append_whole` (``os.write`` and ``os.fsync``); if a write fails (a full disk, a folder
  made read-only or removed), the file is cut back to its length before the append and
  :class:`~kappalab.atomic_io.DiskWriteError` says in one line what to do.
* **A torn last line** (no trailing newline: a write killed mid-way) is not a record. The first reader that can take
  the lock (so no write is in flight) moves it to a backup file ``<store>.torn-<UTC time>`` and cuts it off, with one
  :class:`StoreNotice`; its run is redone. A reader that cannot take the lock (another run is writing, or the folder
  is read-only) ignores the tail and leaves the file as it is.
* **A complete line that is not a record** is corruption: reading raises :class:`StoreCorruptError` naming the file
  and the line. :meth:`RunStore.repair` (``kappalab repair-store FILE``) moves every such line to a backup file
  ``<store>.rejected-<UTC time>`` and rewrites the store atomically (temporary file, fsync, rename); their runs are
  then redone.
* **A store or folder that vanishes during a run** is a :class:`~kappalab.atomic_io.DiskWriteError` too, never a
  new store started silently without the runs it held.

Every fault is a :class:`StoreError` or a :class:`~kappalab.atomic_io.DiskWriteError` whose message names the file
and what to do; the CLI prints it as one line and exits with status 2 (:func:`kappalab.cli_options.command`).

Non-finite floats are written as the tokens ``NaN`` / ``Infinity`` that Python's ``json``
module reads back (strict JSON parsers reject them).

Also here, so that every table uses the same ones: :func:`mean_std` (the one aggregation rule) and
:func:`write_report` (the one writer of a report's JSON / CSV / Markdown files).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import os
import re
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kappalab.atomic_io import DiskWriteError, append_whole, atomic_open, disk_fault, save_npz, write_bytes, \
    write_text

KEY_FIELD = "key"


def to_jsonable(value: Any) -> Any:
    """Convert numpy scalars/arrays, tuples, sets, paths and dataclasses into JSON types.

    Mapping keys must be strings (numpy/int keys are converted with ``str``).  Raises TypeError
    naming the type of anything else.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(to_jsonable(v) for v in value)
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    raise TypeError(f"value of type {type(value).__name__} is not JSON-serializable: {value!r:.80}")


# ---- faults: each one line saying what to do (the CLI prints it, exit status 2) ---------------------------------

class StoreError(RuntimeError):
    """A fault of a results store or output file that the user can fix; the message says how."""


class StoreBusyError(StoreError):
    """Another process holds the store's lock (two runs on one store)."""


class StoreCorruptError(StoreError, ValueError):
    """A complete line of a store is not a record; ``path`` and ``line`` (1-based) name the first such line."""

    def __init__(self, path: Path, bad: Sequence[tuple[int, str]]) -> None:
        line, reason = bad[0]
        more = f" (and {len(bad) - 1} more line(s))" if len(bad) > 1 else ""
        super().__init__(f"{path}: line {line} is not a stored run: {reason}{more}; to move the bad line(s) to a "
                         f"backup file and redo their runs: kappalab repair-store {path} (or fix the line by hand)")
        self.path, self.line = path, line


class StoreNotice(UserWarning):
    """A store was set right on its own (a torn last line moved to a backup); the CLI shows it as one line."""


def _vanished(path: Path) -> DiskWriteError:
    return DiskWriteError(path, "the store or its folder vanished during the run (moved or deleted?); put it back "
                          "and run the same command again to resume, or rerun with another --out")


def _backup(path: Path, kind: str, data: bytes) -> Path:
    """Write ``data`` to a new ``<path>.<kind>-<UTC time>[.N]`` (atomically) and return its path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target, n = path.with_name(f"{path.name}.{kind}-{stamp}"), 1
    while target.exists():
        target, n = path.with_name(f"{path.name}.{kind}-{stamp}.{n}"), n + 1
    write_bytes(target, data)
    return target


def _parse(line: bytes) -> tuple[dict[str, Any] | None, str]:
    """``(record, "")`` for a record line, ``(None, reason)`` for anything else."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return None, f"not valid JSON ({error})"
    if not isinstance(record, dict) or not isinstance(record.get(KEY_FIELD), str) or not record[KEY_FIELD]:
        return None, f"not a JSON object with a non-empty string {KEY_FIELD!r}"
    return record, ""


@dataclasses.dataclass(frozen=True)
class Repair:
    """What :meth:`RunStore.repair` did: records kept, the line numbers moved out, and their backup file."""

    kept: int
    rejected: tuple[int, ...]
    backup: Path | None


class RunStore:
    """Append-only JSON-lines results file (see the module docstring for its fault handling).

    Args:
        path: the ``.jsonl`` file; it and its folder are created on the first append.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._seen = False  # the file existed at a read or append of this object (its vanishing is then a fault)
        self._held = False  # this object holds the lock

    def _lines(self) -> tuple[list[bytes], bytes]:
        """The complete lines and the torn tail (b"" if none)."""
        if not self.path.exists():
            if self._seen:
                raise _vanished(self.path)
            return [], b""
        self._seen = True
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        return data[:end].split(b"\n")[:-1], data[end:]

    def _read(self) -> tuple[list[dict[str, Any]], int]:
        """Parsed records and the byte length of the torn tail (0 if none); StoreCorruptError on a bad line."""
        lines, tail = self._lines()
        records, bad = [], []
        for number, line in enumerate(lines, start=1):
            if line.strip():
                record, reason = _parse(line)
                if record is None:
                    bad.append((number, reason))
                else:
                    records.append(record)
        if bad:
            raise StoreCorruptError(self.path, bad)
        return records, len(tail)

    def records(self) -> list[dict[str, Any]]:
        """All records, in file order. A torn last line is set aside (:meth:`_cut_torn`) when that is safe; when
        not (another run is writing, or the folder is read-only or full) it is left alone and skipped."""
        records, torn = self._read()
        if torn:
            with contextlib.suppress(StoreBusyError, DiskWriteError):
                self._cut_torn()
        return records

    def _cut_torn(self) -> None:
        """Under the lock (so no write is in flight), move a torn tail to a backup file and cut it off."""
        with self._writing():
            _, tail = self._lines()
            if not tail:
                return
            backup = _backup(self.path, "torn", tail)
            try:
                with open(self.path, "r+b") as handle:
                    handle.truncate(handle.seek(0, os.SEEK_END) - len(tail))
                    os.fsync(handle.fileno())
            except OSError as error:
                raise (disk_fault(error, self.path) or error) from None
        warnings.warn(f"{self.path}: moved a torn last line ({len(tail)} bytes, an interrupted write) to "
                      f"{backup.name}; its run is redone", StoreNotice, stacklevel=3)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold an exclusive lock (``<store>.lock``, ``flock``) while a run writes to this store; a second holder
        gets :class:`StoreBusyError` at once (a second ``lock()`` in this process included). The lock dies with its
        process, so a killed run leaves none."""
        import fcntl

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.path.with_name(self.path.name + ".lock"), "a")
        except OSError as error:
            raise (disk_fault(error, self.path.parent) or error) from None
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreBusyError(f"{self.path} is in use by another run (wait for it, or use another --out)") \
                    from None
            self._held = True
            try:
                yield
            finally:
                self._held = False
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _writing(self) -> contextlib.AbstractContextManager[None]:
        """The lock for one write of this object: the one it holds, else taken for the write."""
        return contextlib.nullcontext() if self._held else self.lock()

    def done_keys(self) -> set[str]:
        """Keys of the runs already recorded."""
        return {record[KEY_FIELD] for record in self.records()}

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one record as one line, whole or not at all (module docstring), under the lock.

        Raises ValueError if the record has no string ``"key"`` or the key is already stored, and
        :class:`~kappalab.atomic_io.DiskWriteError` (the file as before the call) if the write fails.
        """
        key = record.get(KEY_FIELD)
        if not isinstance(key, str) or not key:
            raise ValueError(f"record must have a non-empty string {KEY_FIELD!r}, got {key!r}")
        line = (json.dumps(to_jsonable(record), sort_keys=True) + "\n").encode("utf-8")
        with self._writing():
            records, torn = self._read()
            if any(r[KEY_FIELD] == key for r in records):
                raise ValueError(f"{self.path}: a record with key {key!r} is already stored")
            if torn:
                self._cut_torn()  # raises rather than append after a tail it could not set aside
            self._write(line)

    def _write(self, line: bytes) -> None:
        """Append ``line`` whole or not at all (:func:`~kappalab.atomic_io.append_whole`)."""
        try:
            append_whole(self.path, line)
        except FileNotFoundError:  # the folder made by lock() is gone
            raise _vanished(self.path) from None
        self._seen = True

    def repair(self) -> Repair:
        """Move every line that is not a record (and a torn tail) to ``<store>.rejected-<UTC time>`` and rewrite
        the store with the rest (temporary file, fsync, atomic rename), under the lock."""
        with self._writing():
            lines, tail = self._lines()
            parsed = [(number, line, _parse(line)[0]) for number, line in enumerate(lines, start=1) if line.strip()]
            good = [line for _, line, record in parsed if record is not None]
            bad = [(number, line) for number, line, record in parsed if record is None]
            bad += [(len(lines) + 1, tail)] if tail else []
            if not bad:
                return Repair(len(good), (), None)
            backup = _backup(self.path, "rejected", b"".join(line + b"\n" for _, line in bad))
            write_bytes(self.path, b"".join(line + b"\n" for line in good))
            return Repair(len(good), tuple(number for number, _ in bad), backup)


_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def save_array(directory: str | os.PathLike[str], name: str, array: np.ndarray) -> Path:
    """Write ``array`` to ``directory/name.npz`` (compressed; stored under the key ``name``).

    Returns the file's path.  ``name`` may hold letters, digits, ``_``, ``.`` and ``-``.
    """
    if not _NAME.match(name):
        raise ValueError(f"name must match {_NAME.pattern} (no path separators), got {name!r}")
    return save_npz(Path(directory) / f"{name}.npz", compressed=True, **{name: np.asarray(array)})


# ---- the one aggregation rule and the one writer ---------------------------------------------------------------

#: The convention of every "mean +- std" this project reports.
MEAN_STD_CONVENTION = ("mean +- sample standard deviation (ddof = 1) over the runs named; with a single run the "
                       "std is undefined: NaN in JSON / CSV, the mean alone in Markdown")


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """``(mean, sample std with ddof = 1)``; std is NaN for one value, both NaN for none
    (:data:`MEAN_STD_CONVENTION`)."""
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return math.nan, math.nan
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else math.nan


def format_mean_std(mean: float, std: float, fmt: str = "{:.4g}") -> str:
    """``"m ± s"``, or ``"m"`` alone when the std is undefined (one run)."""
    return f"{fmt.format(mean)} ± {fmt.format(std)}" if math.isfinite(std) else fmt.format(mean)


def write_report(out: str | os.PathLike[str], stem: str, summary: Mapping[str, Any] | None = None,
                 markdown: str | None = None, rows: Sequence[Mapping[str, Any]] | None = None,
                 csv_comment: str | None = None) -> list[Path]:
    """Write ``OUT/<stem>.json`` (``summary``), ``.md`` (``markdown``) and ``.csv`` (``rows``, one header from the
    first row, an optional ``# comment`` line first); returns the paths written."""
    folder = Path(out)
    paths = []
    if summary is not None:
        paths.append(write_text(folder / f"{stem}.json", json.dumps(to_jsonable(summary), indent=1, sort_keys=True)
                                + "\n"))
    if markdown is not None:
        paths.append(write_text(folder / f"{stem}.md", markdown))
    if rows:
        paths.append(folder / f"{stem}.csv")
        with atomic_open(paths[-1], "w", newline="") as handle:
            if csv_comment:
                handle.write(f"# {csv_comment}\n")
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return paths
