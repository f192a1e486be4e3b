"""``kappalab analyze alignment|monotonicity``: the paper's explanations tested on its own data.

* ``alignment`` (:mod:`.alignment_on_data`): Sec. 3.1's eigenvector-alignment measures of K_P and K_H on House
  Prices and the Table 2 MNIST pairs against the RIR each method achieved in the committed stores.
* ``monotonicity`` (:mod:`.monotonicity`): per optimizer step of a small documented sample of Table 1 and Table 2
  runs, whether kappa(H_P) went down and kappa(H_H) up, and the step's size relative to Thm 4.3's stated and
  corrected bounds.

Outputs go to ``results/analyze/<subcommand>/`` unless ``--out`` says otherwise (``docs/theory_on_data`` holds the
committed copy). ``main(argv) -> int``: 0 on success, 2 on a usage error (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kappalab.cli_options import command, positive_int, seed

DEFAULT_OUT = Path("results") / "analyze"


class UsageError(Exception):
    """A bad command line; reported as one line and exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints usage + message and exits; we want one line
        raise UsageError(f"{self.prog}: {message}")


def _pairs(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        parts = item.strip().split("-")
        if len(parts) != 2 or not all(p.isdigit() and len(p) == 1 for p in parts) or parts[0] == parts[1]:
            raise argparse.ArgumentTypeError(f"expected digit pairs like 0-1,7-3 (two different digits), got {item!r}")
        out.append((int(parts[0]), int(parts[1])))
    return out


#: what --help prints above the options (the module docstring and docs/theory_on_data.md hold the long account)
HELP = """The paper's explanations tested on its own data. alignment: Sec. 3.1's eigenvector-alignment measures of K_P
and K_H on House Prices and the Table 2 MNIST pairs, against the RIR each method reached in the committed stores.
monotonicity: per optimizer step of a small sample of Table 1 and Table 2 runs, whether kappa(H_P) went down and
kappa(H_H) up, and the step's size against Thm 4.3's stated and corrected bounds. Outputs go to
results/analyze/<subcommand>/ unless --out says otherwise (docs/theory_on_data/ holds the committed copy).
Details: docs/theory_on_data.md."""

EXAMPLES = """examples:
  kappalab analyze alignment
  kappalab analyze monotonicity --skip-table2
  kappalab analyze alignment --out docs/theory_on_data"""


def parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    ap = _Parser(prog="kappalab analyze", description=HELP, epilog=EXAMPLES, formatter_class=raw)
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    al = sub.add_parser("alignment", help="alignment of K_P, K_H vs achieved RIR (reads the committed stores)",
                        description="Sec. 3.1's eigenvector-alignment measures of K_P and K_H against the RIR each "
                                    "method reached in the committed Table 1 / Table 2 stores. Details: "
                                    "docs/theory_on_data.md.")
    al.add_argument("--out", type=Path, default=None, help=f"output folder (default {DEFAULT_OUT}/alignment)")
    al.add_argument("--root", type=Path, default=Path("."),
                    help="repository root holding docs/reproduction (default .)")
    al.add_argument("--seed", type=seed, default=0, help="bootstrap seed (default 0)")
    mo = sub.add_parser("monotonicity", help="per-step kappa moves and Thm 4.3 step bounds in a sample of runs",
                        description="Per optimizer step of a small sample of Table 1 and Table 2 runs: whether "
                                    "kappa(H_P) went down and kappa(H_H) up, and the step against Thm 4.3's bounds. "
                                    "Details: docs/theory_on_data.md.")
    mo.add_argument("--out", type=Path, default=None, help=f"output folder (default {DEFAULT_OUT}/monotonicity)")
    mo.add_argument("--table1-seeds", type=seed, nargs="+", default=[0, 1], help="Table 1 (paper protocol) seeds")
    mo.add_argument("--table1-epochs", type=positive_int, default=100, help="Table 1 epochs (= full-batch steps)")
    mo.add_argument("--table2-pairs", type=_pairs, default=[(0, 1), (7, 3)], help="Table 2 digit pairs, e.g. 0-1,7-3")
    mo.add_argument("--table2-seed", type=seed, default=0, help="Table 2 seed")
    mo.add_argument("--table2-epochs", type=positive_int, default=1, help="Table 2 epochs (7 minibatch steps each)")
    mo.add_argument("--table2-steps", type=positive_int, default=4, help="Table 2: measure the first N steps")
    mo.add_argument("--skip-table2", action="store_true", help="only the Table 1 sample")
    return ap


@command("kappalab analyze")  # a disk fault while writing the outputs: one line, status 2
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser().parse_args(argv)
    except UsageError as error:
        print(str(error), file=sys.stderr)
        return 2
    except SystemExit as done:  # --help
        return int(done.code or 0)
    out = args.out or DEFAULT_OUT / args.command
    command = "kappalab analyze " + " ".join(argv)
    if args.command == "alignment":
        from .alignment_on_data import run

        if not (args.root / "docs" / "reproduction").is_dir():
            print(f"kappalab analyze alignment: --root {args.root} has no docs/reproduction folder", file=sys.stderr)
            return 2
        record = run(out, args.root, args.seed, command)
        print(f"[analyze] alignment: {len(record['mnist'])} MNIST pairs, {len(record['house_prices'])} House Prices "
              f"splits -> {out}")
        return 0
    from .monotonicity import run as run_monotonicity

    summary = run_monotonicity(out, args, command)
    print(f"[analyze] monotonicity: {summary['n_steps']} steps -> {out}")
    return 0
