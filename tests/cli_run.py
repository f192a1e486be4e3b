"""Running ``kappalab ARGS`` for a test, two ways: in fresh processes (the real boundary: exit status and stderr as a
user sees them) or in this process through :func:`kappalab.cli.main` (no interpreter and torch start per case); the
in-process way also for a script's ``main(argv)`` (benchmarks/*.py).

The in-process run reproduces what a fresh ``python -m kappalab.cli ARGS`` shows on its standard streams: the exit
status as the interpreter computes it from ``main``'s return value or a ``SystemExit`` (argparse's errors and
``--help``), an uncaught exception as ``Traceback ...`` on stderr with status 1, and Python warnings printed on stderr
under a fresh interpreter's default filters (pytest records warnings instead of printing them). The streams are read
with ``capfd``, so output written to file descriptors 1 and 2 directly (a C extension, a handler holding the original
``sys.stderr``) is seen too.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import traceback
import warnings
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import pytest

ROOT = Path(__file__).resolve().parents[1]


class Outcome(NamedTuple):
    """What the user sees of one command: exit status, stdout, stderr."""

    code: int
    stdout: str
    stderr: str


def in_processes(cases: dict[str, list[str]], cwd: Path, parallel: int = 4) -> dict[str, Outcome]:
    """name -> outcome of ``kappalab ARGS`` (``cases[name]``), each in a fresh Python, ``parallel`` at a time."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    out, names = {}, list(cases)
    for i in range(0, len(names), parallel):
        procs = {n: subprocess.Popen([sys.executable, "-m", "kappalab.cli", *cases[n]], cwd=cwd, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for n in names[i:i + parallel]}
        for n, p in procs.items():
            stdout, stderr = p.communicate(timeout=300)
            out[n] = Outcome(p.returncode, stdout, stderr)
    return out


def _show_on_stderr(message, category, filename, lineno, file=None, line=None) -> None:  # type: ignore[no-untyped-def]
    """Python's own ``showwarning``: the formatted warning on the current ``sys.stderr``."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


@contextlib.contextmanager
def _fresh_interpreter_warnings():  # type: ignore[no-untyped-def]
    """The warning filters of a fresh interpreter started without -W / PYTHONWARNINGS (``sys.warnoptions`` empty),
    with warnings printed on stderr."""
    with warnings.catch_warnings():
        warnings.resetwarnings()  # no filter: the action is "default" (print the first of each place)
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category, append=True)
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
        warnings.showwarning = _show_on_stderr
        yield


def _status(code: object) -> int:
    """The exit status a Python process gets from ``SystemExit(code)`` (a non-int code is printed on stderr)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def in_process(argv: list[str], cwd: Path, capfd: pytest.CaptureFixture[str],
               main: Callable[[Sequence[str]], object] | None = None) -> Outcome:
    """The outcome of ``kappalab ARGS`` (or of the script whose entry point is ``main``: ``raise SystemExit(main())``)
    run here, in ``cwd``, as a fresh process would show it."""
    if main is None:
        from kappalab.cli import main

    capfd.readouterr()  # drop what came before
    with contextlib.chdir(cwd), _fresh_interpreter_warnings():
        try:
            code = _status(main(list(argv)))
        except SystemExit as stop:
            code = _status(stop.code)
        except Exception:  # what the interpreter prints for an uncaught exception, and its status
            traceback.print_exc()
            code = 1
    captured = capfd.readouterr()
    return Outcome(code, captured.out, captured.err)
