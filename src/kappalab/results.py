"""Resumable, append-only store of experiment results.

A :class:`RunStore` is a JSON-lines file: one record (a JSON object with a string ``"key"``
naming the run) per line.  Each append writes the whole line including its newline, flushes
and ``os.fsync``-s, so a crash leaves at most one torn last line (without a trailing newline).
Loading ignores such a torn line and reports it with a :class:`UserWarning`; the next append
cuts it off before writing.  Any other unparsable line is corruption and raises ValueError.

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
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

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


class StoreBusyError(RuntimeError):
    """Another process holds the store's lock (two runs on one store)."""


class RunStore:
    """Append-only JSON-lines results file.

    Args:
        path: the ``.jsonl`` file; it and its folder are created on the first append.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def _read(self) -> tuple[list[dict[str, Any]], int]:
        """Parsed complete records and the byte length of the torn tail (0 if none)."""
        if not self.path.exists():
            return [], 0
        data = self.path.read_bytes()
        complete_end = data.rfind(b"\n") + 1
        records = []
        for number, line in enumerate(data[:complete_end].splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{self.path}: line {number} is not valid JSON ({error})") from error
            records.append(record)
        return records, len(data) - complete_end

    def records(self) -> list[dict[str, Any]]:
        """All complete records, in file order; warns if a torn last line is ignored."""
        records, torn = self._read()
        if torn:
            warnings.warn(
                f"{self.path}: ignoring a torn last line of {torn} bytes (no trailing newline; "
                "an interrupted write). It is removed by the next append.",
                UserWarning,
                stacklevel=2,
            )
        return records

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold an exclusive lock (``<store>.lock``, ``flock``) while a run writes to this store; a second holder
        gets :class:`StoreBusyError` at once. The lock dies with its process, so a killed run leaves none."""
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreBusyError(f"{self.path} is in use by another run (wait for it, or use another --out)") \
                    from None
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def done_keys(self) -> set[str]:
        """Keys of the runs already recorded."""
        return {record[KEY_FIELD] for record in self.records()}

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one record as one line, then flush and fsync.

        Raises ValueError if the record has no string ``"key"`` or the key is already stored.
        """
        key = record.get(KEY_FIELD)
        if not isinstance(key, str) or not key:
            raise ValueError(f"record must have a non-empty string {KEY_FIELD!r}, got {key!r}")
        existing, torn = self._read()
        if any(r.get(KEY_FIELD) == key for r in existing):
            raise ValueError(f"{self.path}: a record with key {key!r} is already stored")
        line = json.dumps(to_jsonable(record), sort_keys=True) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "r+b" if self.path.exists() else "wb") as handle:
            handle.seek(0, os.SEEK_END)
            if torn:
                warnings.warn(f"{self.path}: cutting a torn last line of {torn} bytes before appending",
                              UserWarning, stacklevel=2)
                handle.truncate(handle.tell() - torn)
                handle.seek(0, os.SEEK_END)
            handle.write(line.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())


_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def save_array(directory: str | os.PathLike[str], name: str, array: np.ndarray) -> Path:
    """Write ``array`` to ``directory/name.npz`` (compressed; stored under the key ``name``).

    Returns the file's path.  ``name`` may hold letters, digits, ``_``, ``.`` and ``-``.
    """
    if not _NAME.match(name):
        raise ValueError(f"name must match {_NAME.pattern} (no path separators), got {name!r}")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.npz"
    np.savez_compressed(path, **{name: np.asarray(array)})
    return path


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
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    if summary is not None:
        paths.append(folder / f"{stem}.json")
        paths[-1].write_text(json.dumps(to_jsonable(summary), indent=1, sort_keys=True) + "\n")
    if markdown is not None:
        paths.append(folder / f"{stem}.md")
        paths[-1].write_text(markdown)
    if rows:
        paths.append(folder / f"{stem}.csv")
        with open(paths[-1], "w", newline="") as handle:
            if csv_comment:
                handle.write(f"# {csv_comment}\n")
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return paths
