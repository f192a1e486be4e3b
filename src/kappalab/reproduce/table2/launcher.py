"""``kappalab reproduce table2 --launcher submitit|local --parts N``: the sweep's ``--shard K/N`` parts as one
submitit job array, then ``--merge`` of their stores into ``--out``.

Each array task runs the same command with the launcher's options replaced by ``--shard K/N --out OUT/shards/K``
(:func:`run_part`, in the job), so a part is exactly what a hand-run shard is: its own store, resumable, each run
under its usual key. When every part has finished, this process merges the parts' folders into ``OUT`` with the
merge's checks (:mod:`.merge`). ``--launcher submitit`` submits to SLURM (``--slurm-partition``, ``--slurm-time``,
``--slurm-account``, ``--gpus-per-task``, ``--cpus-per-task``, ``--mem-gb``; give every part the same ``--device``,
e.g. ``cuda``: SLURM's ``CUDA_VISIBLE_DEVICES`` picks the card); ``--launcher local`` runs the parts as local
processes through submitit's local executor (tests, one machine). submitit's own files (pickled calls, logs) go to
``--launcher-dir`` (default ``OUT/submitit``). submitit is the optional extra ``kappalab[cluster]``.

A part that fails leaves its runs stored; the command names it and its log, and running the same command again
resumes every part and then merges.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kappalab.cli_options import UsageError, positive_int

LAUNCHERS = ("submitit", "local")  #: submitit: SLURM; local: submitit's local executor
#: option -> submitit parameter (AutoExecutor's name: generic, or slurm_ for SLURM only)
SUBMITIT_PARAMETERS = {"slurm_partition": "slurm_partition", "slurm_time": "timeout_min",
                       "slurm_account": "slurm_account", "gpus_per_task": "slurm_gpus_per_task",
                       "cpus_per_task": "cpus_per_task", "mem_gb": "mem_gb"}
SLURM_ONLY = ("slurm_partition", "slurm_account", "gpus_per_task", "mem_gb")
OPTIONS = ("parts", "launcher_dir", *SUBMITIT_PARAMETERS)  #: the options besides --launcher (argparse's names)
LOCAL_TIMEOUT_MIN = 7 * 24 * 60  #: a local part's time limit unless --slurm-time says otherwise


def add_options(parser: argparse.ArgumentParser) -> None:
    """The launcher's options (also the parser :func:`part_argv` strips them with)."""
    group = parser.add_argument_group("job array (submitit; pip install 'kappalab[cluster]')")
    group.add_argument("--launcher", choices=LAUNCHERS, default=None,
                       help="run the sweep as --parts shards in one submitit job array (submitit: SLURM; local: "
                            "local processes), then merge them into --out")
    group.add_argument("--parts", type=positive_int, default=None, metavar="N",
                       help="with --launcher: the number of shards (array tasks)")
    group.add_argument("--launcher-dir", type=Path, default=None, metavar="DIR",
                       help="submitit's folder for the jobs' pickles and logs (default OUT/submitit)")
    group.add_argument("--slurm-partition", default=None, metavar="NAME")
    group.add_argument("--slurm-time", type=positive_int, default=None, metavar="MINUTES",
                       help="time limit of each array task")
    group.add_argument("--slurm-account", default=None, metavar="NAME")
    group.add_argument("--gpus-per-task", type=positive_int, default=None, metavar="G")
    group.add_argument("--cpus-per-task", type=positive_int, default=None, metavar="C")
    group.add_argument("--mem-gb", type=positive_int, default=None, metavar="GB")


@dataclass(frozen=True)
class Launch:
    """What ``--launcher`` asks for: the executor (``submitit``: SLURM; ``local``), the number of parts, submitit's
    folder (``--launcher-dir``; None: ``OUT/submitit``) and the submitit options given (option -> value, in
    :data:`SUBMITIT_PARAMETERS`' order)."""

    launcher: str
    parts: int
    folder: Path | None
    settings: Mapping[str, Any]


def launch_of(launcher: str | None, given: Mapping[str, Any], clash: Sequence[str]) -> Launch | None:
    """``--launcher`` with its options ``given`` (those of :data:`OPTIONS` set: name -> value, in that order),
    checked against each other and against ``clash`` (the command's options given that a job array cannot take);
    one line, status 2, before anything runs. None without ``--launcher``."""
    if launcher is None:
        if given:
            raise UsageError(f"--{next(iter(given)).replace('_', '-')}: only with --launcher {'|'.join(LAUNCHERS)}")
        return None
    if "parts" not in given:
        raise UsageError(f"--launcher {launcher}: needs --parts N (the number of shards)")
    if clash:
        raise UsageError(f"--launcher: cannot be combined with {', '.join(clash)}")
    if launcher == "local":
        slurm = [name for name in SLURM_ONLY if name in given]
        if slurm:
            raise UsageError(f"--{slurm[0].replace('_', '-')}: only with --launcher submitit (SLURM)")
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise UsageError(f"--launcher {launcher}: submitit is not installed (pip install 'kappalab[cluster]')"
                         ) from None
    return Launch(launcher, given["parts"], given.get("launcher_dir"),
                  {name: value for name, value in given.items() if name in SUBMITIT_PARAMETERS})


def part_argv(argv: list[str], k: int, n: int, out: Path) -> list[str]:
    """The command line of part ``k`` of ``n``: ``argv`` without the launcher's options and ``--out``, plus
    ``--shard k/n --out out``."""
    strip = argparse.ArgumentParser(add_help=False)
    add_options(strip)
    strip.add_argument("--out")
    rest = strip.parse_known_args(argv)[1]
    return [*rest, "--shard", f"{k}/{n}", "--out", str(out)]


def run_part(entry: Callable[[list[str]], int], argv: list[str]) -> int:
    """What one array task runs: ``entry`` (``kappalab reproduce table2``'s ``main``, handed down by the command
    line, so that this module does not import it back) with ``argv``; a status other than 0 is an error (its one
    line is in the task's log)."""
    status = entry(argv)
    if status != 0:
        raise RuntimeError(f"kappalab reproduce table2 {' '.join(argv)} exited with status {status}")
    return status


def launch(options: Launch, argv: list[str], out: Path, store: Path, entry: Callable[[list[str]], int]) -> list[Path]:
    """Submit the parts as one job array (each runs ``entry(part_argv)``) and wait for them; returns their folders
    (to merge into ``out``). A part that fails: one line naming it and its log, status 1 (:class:`PartFailed`)."""
    import submitit

    if store.is_file() and store.stat().st_size > 0:
        raise UsageError(f"--out: {store} already holds runs; launch into a new folder (the parts are kept under "
                         f"{out / 'shards'} and resume)")
    n = options.parts
    folders = [out / "shards" / str(k) for k in range(1, n + 1)]
    parameters = {SUBMITIT_PARAMETERS[name]: value for name, value in options.settings.items()}
    if options.launcher == "local":  # submitit's local default (5 minutes) would stop a part mid-sweep
        parameters.setdefault("timeout_min", LOCAL_TIMEOUT_MIN)
    try:
        executor = submitit.AutoExecutor(folder=options.folder or out / "submitit",
                                         cluster="slurm" if options.launcher == "submitit" else "local")
        executor.update_parameters(name="kappalab-table2", **parameters)
        jobs = executor.map_array(functools.partial(run_part, entry),
                                  [part_argv(argv, k, n, folder) for k, folder in enumerate(folders, 1)])
    except Exception as error:  # no SLURM on this machine, or SLURM refused the parameters
        first = (str(error).strip().splitlines() or [""])[0]
        raise UsageError(f"--launcher {options.launcher}: submitit could not submit the job array "
                         f"({type(error).__name__}: {first})") from None
    print(f"table2: {n} parts submitted as one {options.launcher} job array ({jobs[0].job_id.split('_')[0]}); "
          f"waiting", flush=True)
    for k, job in enumerate(jobs, 1):
        try:
            job.result()
        except Exception as error:  # submitit's FailedJobError / UncompletedJobError: name the part and its log
            raise PartFailed(f"part {k}/{n} ({job.job_id}) failed: {str(error).strip().splitlines()[0]}; its log: "
                             f"{job.paths.stderr}; run the same command again to resume") from None
    return folders


class PartFailed(RuntimeError):
    """An array task failed (the command reports it in one line, status 1)."""
