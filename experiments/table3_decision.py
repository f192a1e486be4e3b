"""Table 3's decision table from the committed powered stores (``docs/reproduction/table3/powered/<set>/<direction>/
<protocol>/runs.jsonl``: the runs with the controls), rendered by :func:`kappalab.reproduce.table3.decision.
decision_table`; table3.md carries it between the ``table3-decision`` markers (tests/test_table3_powered_store.py
checks that it is this script's output).

Usage: python experiments/table3_decision.py  (prints the decision table, then the checkpoint tables)
"""

from __future__ import annotations

import json
from pathlib import Path

from kappalab.reproduce.table3.decision import decision_table
from kappalab.reproduce.table3.real_report import checkpoint_table

POWERED = Path(__file__).resolve().parents[1] / "docs" / "reproduction" / "table3" / "powered"
DIRECTIONS = {"fmnist_vs_mnist": "D_P Fashion-MNIST / D_H MNIST", "mnist_vs_fmnist": "D_P MNIST / D_H Fashion-MNIST"}


def stores() -> dict[str, list[dict]]:
    """Title -> records of every powered store, in path order."""
    out = {}
    for path in sorted(POWERED.glob("*/*/*/runs.jsonl")):
        which, direction, protocol = path.relative_to(POWERED).parts[:3]
        title = f"{DIRECTIONS[direction]}, {protocol} protocol ({which})"
        out[title] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def render() -> str:
    """The decision table."""
    return decision_table(stores())


def render_checkpoints() -> str:
    """Every powered run's estimators at its checkpoints, one table per store."""
    return "\n".join(f"{title}:\n\n{checkpoint_table(records)}" for title, records in stores().items())


if __name__ == "__main__":
    print(render() + "\n" + render_checkpoints(), end="")
