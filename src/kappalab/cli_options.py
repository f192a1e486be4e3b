"""What every ``kappalab`` command shares: one-line usage errors, checked argument types, the default output
folder, ``--config`` / ``--set``, and the wrapper that turns user errors and Ctrl-C into one line.

User errors exit with status 2 and ONE line on stderr naming the argument and the problem (no traceback); so do
faults of the results on disk (a corrupt store line, a full disk at any write, a read-only or vanished output
folder: see :mod:`kappalab.results` and :mod:`kappalab.atomic_io`), and a store's own notice (a torn last line set
aside) is one line, not a Python warning. Ctrl-C during a sweep stops every worker and prints one line on how to
resume (status 130).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar

#: every command's default output folder lives under this (relative to the working directory), never under docs/
RESULTS = Path("results")
Number = TypeVar("Number", int, float)


class UsageError(ValueError):
    """A user error: the message names the argument (``--seeds: ...``)."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``PROG: error: MESSAGE``, status 2) instead of usage + message."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _number(convert: Callable[[str], Number], admits: Callable[[Number], bool], what: str) -> Callable[[str], Number]:
    """An argparse type: ``convert(text)`` where ``admits`` holds it, else ``expected WHAT, got 'TEXT'`` (argparse
    puts the argument's name in front)."""
    def parse(text: str) -> Number:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not admits(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value
    parse.__name__ = what.replace(" ", "_")
    return parse


#: argparse types: a count (>= 1), a seed (>= 0), a rate or scale (finite, > 0), a budget (>= 0, inf allowed)
positive_int = _number(int, lambda v: v >= 1, "a positive integer")
seed = _number(int, lambda v: v >= 0, "a non-negative integer seed")
positive_float = _number(float, lambda v: math.isfinite(v) and v > 0, "a finite number > 0")
budget = _number(float, lambda v: v >= 0, "a number >= 0 (or inf)")


def unique(values: Sequence[Any], name: str) -> tuple[Any, ...]:
    """``values`` as a tuple, refusing repeats (``--seeds 0 0`` would run one seed and report two)."""
    repeated = sorted({v for v in values if list(values).count(v) > 1}, key=str)
    if repeated:
        raise UsageError(f"{name}: repeated value(s) {repeated}")
    return tuple(values)


def check_device(device: str, name: str = "--device") -> str:
    """``cpu``, ``cuda`` or ``cuda:N``; a CUDA device must exist."""
    import torch

    if device == "cpu":
        return device
    if not (device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        raise UsageError(f"{name}: expected cpu, cuda or cuda:N, got {device!r}")
    if not torch.cuda.is_available():
        raise UsageError(f"{name}: {device!r} requested but CUDA is not available (torch {torch.__version__})")
    index = int(device[5:]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        raise UsageError(f"{name}: {device!r} but only {torch.cuda.device_count()} CUDA device(s)")
    return device


def check_out(path: Path, name: str = "--out") -> Path:
    """An output folder: creatable (no regular file on its path), created here."""
    for parent in (path, *path.parents):
        if parent.exists() and not parent.is_dir():
            raise UsageError(f"{name}: {parent} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"{name}: cannot create {path} ({error.strerror})") from None
    return path


def add_config_options(parser: argparse.ArgumentParser, what: str) -> None:
    """``--config FILE`` and repeatable ``--set KEY=VALUE``."""
    parser.add_argument("--config", default=None, metavar="FILE",
                        help=f"a config file ({what}) instead of the shipped one")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="override one config value (repeatable; dotted keys, e.g. lambda_H=3e7, extra.shift=1e-5;"
                             " VALUE is JSON, else a string)")


@contextlib.contextmanager
def data_errors(argument: str) -> Iterator[None]:
    """Turn a data loader's error (missing, corrupt or truncated file) into a one-line usage error naming
    ``argument``."""
    try:
        yield
    except (ValueError, FileNotFoundError, OSError, ImportError, RuntimeError) as error:
        raise UsageError(f"{argument}: {str(error).splitlines()[0] if str(error) else type(error).__name__}") \
            from None


@contextlib.contextmanager
def _store_notices(prog: str) -> Iterator[None]:
    """Show each :class:`kappalab.results.StoreNotice` as one line ``PROG: MESSAGE`` (no source path); other
    warnings through the usual handler."""
    from kappalab.results import StoreNotice

    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None) -> None:  # type: ignore[no-untyped-def]
            if issubclass(category, StoreNotice):
                print(f"{prog}: {message}", file=sys.stderr)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def command(prog: str) -> Callable[[Callable[[list[str]], int]], Callable[[Sequence[str] | None], int]]:
    """Decorate a ``main(argv) -> int``: user errors -> one line + status 2; Ctrl-C -> one line + status 130."""
    def wrap(main: Callable[[list[str]], int]) -> Callable[[Sequence[str] | None], int]:
        @functools.wraps(main)
        def run(argv: Sequence[str] | None = None) -> int:
            from kappalab.configs import ConfigError
            from kappalab.atomic_io import DiskWriteError, disk_fault
            from kappalab.results import StoreError
            from kappalab.sweep import SweepInterrupted

            args = list(sys.argv[1:] if argv is None else argv)
            try:
                with _store_notices(prog):
                    return main(args)
            except (UsageError, ConfigError, StoreError, DiskWriteError) as error:
                print(f"{prog}: error: {error}", file=sys.stderr)
                return 2
            except OSError as error:  # a write fault the user can fix: one line; any other is a bug (traceback)
                fault = disk_fault(error)
                if fault is None:
                    raise
                print(f"{prog}: error: {fault}", file=sys.stderr)
                return 2
            except SweepInterrupted as stop:
                print(f"{prog}: {stop}; run the same command again to resume", file=sys.stderr)
                return 130
            except KeyboardInterrupt:
                print(f"{prog}: interrupted; finished runs are stored, run the same command again to resume",
                      file=sys.stderr)
                return 130
        return run
    return wrap
