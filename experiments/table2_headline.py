"""Table 2's opening table from stored sweeps: per protocol and method, the paper's statistic over the 90 pairs
(90-pair mean per seed, mean ± std over complete seeds), the median pair, pairs with RIR > 10 and < 1, the paper's
value and the seconds per run (:mod:`kappalab.reproduce.table2.headline`). Writes OUT/headline.{md,json}.

    python experiments/table2_headline.py --out docs/reproduction/table2/full90 docs/reproduction/table2/full90/parts/*
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kappalab.reproduce.table2.headline import write_headline


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="store folders (sweeps, shards or merges)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    try:
        items = write_headline(args.folders, args.out)
    except (FileNotFoundError, ValueError) as error:
        print(f"table2_headline: {error}", file=sys.stderr)
        return 2
    print((args.out / "headline.md").read_text(), end="")
    return 0 if items else 2


if __name__ == "__main__":
    sys.exit(main())
