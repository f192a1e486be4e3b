"""Command line: ``kappalab verify``, ``kappalab reproduce NAME ...`` and ``kappalab main``.

Each sub-command lives in its own module with a ``main(argv) -> int`` entry point, imported only when used:
``verify`` -> :mod:`kappalab.verify`, ``reproduce table1|table2|table3`` -> ``kappalab.reproduce.<name>``.
"""

from __future__ import annotations

import importlib
import sys

USAGE = """usage: kappalab COMMAND [ARGS]

commands:
  verify [ARGS]            run proofs_checks and write docs/verdicts.md and docs/verdicts.json
  reproduce NAME [ARGS]    reproduce a table: NAME is table1, table2 or table3 (see --help of each)
  main                     the README's main job: verify, then reproduce Table 1 (paper protocol) on the
                           embedded default data
"""

REPRODUCIBLE = ("table1", "table2", "table3")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "verify":
        return importlib.import_module("kappalab.verify").main(rest)
    if command == "reproduce":
        if not rest or rest[0] not in REPRODUCIBLE:
            print(f"kappalab reproduce: NAME must be one of {', '.join(REPRODUCIBLE)}\n\n{USAGE}", file=sys.stderr)
            return 2
        return importlib.import_module(f"kappalab.reproduce.{rest[0]}").main(rest[1:])
    if command == "main":
        code = main(["verify"])
        return code or main(["reproduce", "table1", "--protocol", "paper"])
    print(f"kappalab: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
