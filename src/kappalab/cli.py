"""Command line: ``kappalab verify``, ``kappalab reproduce NAME ...``, ``kappalab analyze ...``,
``kappalab measure ...``, ``kappalab attack ...`` and ``kappalab main``.

Each sub-command lives in its own module with a ``main(argv) -> int`` entry point, imported only when used:
``verify`` -> :mod:`kappalab.verify`, ``reproduce table1|table2|table3`` -> :data:`REPRODUCIBLE`,
``analyze`` -> ``kappalab.analyze`` (when that module is installed), ``measure`` -> :mod:`kappalab.measure`, ``attack`` -> :mod:`kappalab.attack.cli`;
``repair-store`` is :func:`repair_store`.
``--help`` works everywhere and never starts work; a usage error is one line on stderr and exit status 2.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

USAGE = """usage: kappalab COMMAND [ARGS]

commands:
  verify [ARGS]            run the claim checks (proofs_checks) and write verdicts.md / verdicts.json
                           (default under results/verify)
  reproduce NAME [ARGS]    reproduce a table: NAME is table1, table2 or table3 (see kappalab reproduce NAME --help)
  analyze [ARGS]           analyses of stored results (see kappalab analyze --help)
  measure [ARGS]           RIR_theta0 of any model from its features (or a timm model and two image folders) by
                           three estimators: exact, ours by groups, the authors' (see kappalab measure --help)
  attack [ARGS]            how much slower each probe attacker (gd, adam, lbfgs, solve, ...) learns the harmful
                           task on theta_I's features than on theta_0's (see kappalab attack --help)
  main                     the README's main job: verify, then reproduce Table 1 (paper protocol) on the
                           embedded default data; outputs under results/
  repair-store FILE...     move the lines of a results store (.jsonl) that are not runs to a backup file beside
                           it; the next run of the same command redoes those runs

Every command takes --help. Outputs go under results/ unless --out (--out-dir for verify) says otherwise.
"""

REPRODUCE_USAGE = """usage: kappalab reproduce NAME [ARGS]

NAME:
  table1    Table 1 and Figure 1: House Prices, linear extractor (kappalab reproduce table1 --help)
  table2    Table 2 and Figure 2: MNIST digit pairs, linear extractor (kappalab reproduce table2 --help)
  table3    Table 3 and Figure 3: deep nets, and a CPU-scale proxy (kappalab reproduce table3 --help)
"""

MAIN_USAGE = """usage: kappalab main

Runs `kappalab verify`, then `kappalab reproduce table1 --protocol paper` (4 methods x 5 seeds, ~7 min on one
CPU core); outputs under results/verify and results/table1. Ends with a one-screen summary: how many of the paper's
claims got each verdict (the IDs of those that do not hold) and Table 1's row for Ours beside the paper's, with
the paths of the full reports. Takes no arguments.
"""

#: reproduce NAME -> the module whose ``main(argv)`` runs it (table3's command line parses without torch)
REPRODUCIBLE = {"table1": "kappalab.reproduce.table1.cli", "table2": "kappalab.reproduce.table2.cli",
                "table3": "kappalab.reproduce.table3.cli"}
HELP = ("-h", "--help")


def _usage_error(prog: str, message: str) -> int:
    print(f"{prog}: error: {message} (see {prog} --help)", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    if argv[0] in HELP:
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "verify":
        return importlib.import_module("kappalab.verify").main(rest)
    if command == "reproduce":
        if rest and rest[0] in HELP:
            print(REPRODUCE_USAGE)
            return 0
        if not rest or rest[0] not in REPRODUCIBLE:
            return _usage_error("kappalab reproduce", f"NAME must be one of {', '.join(REPRODUCIBLE)}"
                                + (f", got {rest[0]!r}" if rest else ""))
        return importlib.import_module(REPRODUCIBLE[rest[0]]).main(rest[1:])
    if command == "analyze":
        if importlib.util.find_spec("kappalab.analyze") is None:
            return _usage_error("kappalab analyze", "this installation has no kappalab.analyze module")
        return importlib.import_module("kappalab.analyze").main(rest)
    if command == "measure":
        return importlib.import_module("kappalab.measure").main(rest)
    if command == "attack":
        return importlib.import_module("kappalab.attack.cli").main(rest)
    if command == "repair-store":
        return repair_store(rest)
    if command == "main":
        if rest and rest[0] in HELP:
            print(MAIN_USAGE)
            return 0
        if rest:
            return _usage_error("kappalab main", f"takes no arguments, got {rest[0]!r}")
        return _main_job()
    return _usage_error("kappalab", f"unknown command {command!r}")


def _main_job() -> int:
    """``kappalab main``: verify, then Table 1 (paper protocol) if every claim check passed; then the summary of what
    this call wrote (a verdicts.json left by an earlier call is not summarized)."""
    from kappalab.cli_options import RESULTS
    from kappalab.findings import summary

    verdicts, table1 = RESULTS / "verify" / "verdicts.json", RESULTS / "table1" / "table1_paper.json"
    stamp = lambda: verdicts.stat().st_mtime_ns if verdicts.is_file() else None  # noqa: E731
    before = stamp()
    code = main(["verify"])
    if code != 0:
        why = "not run (a claim check failed or did not complete; see kappalab verify's output above)"
    else:
        code = main(["reproduce", "table1", "--protocol", "paper"])
        why = f"did not complete (exit status {code})"
    if stamp() not in (None, before):  # verify wrote it in this call
        print(summary(verdicts, table1 if code == 0 else None, why))
    return code


def repair_store(argv: list[str]) -> int:
    """``kappalab repair-store FILE...``: :meth:`kappalab.results.RunStore.repair` on each store, one line each."""
    from kappalab.cli_options import Parser, UsageError, command
    from kappalab.results import RunStore

    parser = Parser(prog="kappalab repair-store", description=(
        "Move every line of each results store (a .jsonl file) that is not a stored run, and a torn last line, to "
        "a backup file FILE.rejected-<UTC time> beside it, and rewrite the store with the rest (atomically). The "
        "next run of the command that wrote the store redoes the runs of the lines moved out."))
    parser.add_argument("stores", nargs="+", metavar="FILE", help="a store, e.g. results/table1/runs_paper.jsonl")

    @command("kappalab repair-store")
    def run(args: list[str]) -> int:
        stores = parser.parse_args(args).stores
        missing = [path for path in stores if not Path(path).is_file()]
        if missing:
            raise UsageError(f"FILE: no file {missing[0]}")
        for path in stores:
            done = RunStore(path).repair()
            print(f"{path}: {done.kept} run(s) kept" + (f"; line(s) {', '.join(map(str, done.rejected))} moved to "
                                                       f"{done.backup}" if done.backup else "; nothing to repair"))
        return 0

    return run(argv)


if __name__ == "__main__":
    raise SystemExit(main())
