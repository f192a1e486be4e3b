"""Table 3's decision table from the committed powered stores (``docs/reproduction/table3/powered/<set>/<direction>/
<protocol>/runs.jsonl``: the runs with the controls), rendered by :func:`kappalab.reproduce.table3.decision.
decision_table`; table3.md carries it between the ``table3-decision`` markers (tests/test_table3_powered_store.py
checks that it is this script's output).

Usage: python experiments/table3_decision.py [--figures] [--write]
  prints the decision table (the grids), the pilots' table, then the checkpoint tables; --figures also writes each
  store's Figure 3 (``figure3.png``/``.pdf`` beside its runs.jsonl: the D_H probe's test accuracy against its
  epochs, theta_0 and every control and method); --write rewrites table3.md's three generated blocks
  (``table3-decision``, ``table3-decision-pilots``, ``table3-checkpoints``) in place.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kappalab.deep.methods import CONTROLS, METHODS
from kappalab.reproduce.table3.decision import decision_table
from kappalab.reproduce.table3.report import checkpoint_table, figure3

DOCS = Path(__file__).resolve().parents[1] / "docs" / "reproduction"
POWERED = DOCS / "table3" / "powered"
DIRECTIONS = {"fmnist_vs_mnist": "D_P Fashion-MNIST / D_H MNIST", "mnist_vs_fmnist": "D_P MNIST / D_H Fashion-MNIST"}
#: a store's protocol folder -> its title (``<protocol>_frozen_bn``: the tail's BatchNorm statistics frozen during
#: immunization, ``--set norm_statistics=frozen``; the others train with batch statistics, the authors' code's;
#: ``..._f32``: the tail in float32, ``--set tail_precision=float32``)
SETTINGS = {f"{protocol}{bn}{f32}": f"{protocol} protocol{bn_title}{f32_title}"
            for protocol in ("paper", "official")
            for bn, bn_title in (("", ""), ("_frozen_bn", ", BatchNorm statistics frozen"))
            for f32, f32_title in (("", ""), ("_f32", ", tail in float32"))}


def store_paths() -> dict[str, Path]:
    """Title -> runs.jsonl of every powered store, in path order."""
    out = {}
    for path in sorted(POWERED.glob("*/*/*/runs.jsonl")):
        which, direction, protocol = path.relative_to(POWERED).parts[:3]
        out[f"{DIRECTIONS[direction]}, {SETTINGS[protocol]} ({which})"] = path
    return out


def stores() -> dict[str, list[dict]]:
    """Title -> records of every powered store, in path order."""
    return {title: [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            for title, path in store_paths().items()}


def probe_curves(records: list[dict]) -> dict[str, list[list[float]]]:
    """Figure 3's curves of one store: theta_0 (``"init"``), the controls, then the methods, one curve per seed
    (diverged runs have none)."""
    by: dict[str, list[list[float]]] = {}
    for r in records:
        if "diverged" not in r:  # a diverged run has no probe curve
            by.setdefault(r["method"], []).append(r["utility"]["probe_curve"])
    return {m: by[m] for m in ("init", *CONTROLS, *METHODS) if m in by}


def write_figures() -> list[Path]:
    """Each store's Figure 3 beside its runs.jsonl; returns the folders written."""
    folders = []
    for (title, path), records in zip(store_paths().items(), stores().values()):
        figure3(probe_curves(records), path.parent, f"Figure 3, EfficientNet-Lite0: {title}")
        folders.append(path.parent)
    return folders


def render() -> str:
    """The decision table: the selection grids' stores (``powered/grid/``)."""
    return decision_table({title: records for title, records in stores().items() if title.endswith("(grid)")})


def render_pilots() -> str:
    """The same table for the pilots' stores (``powered/pilot/``: fixed settings and the BatchNorm diagnostic)."""
    return decision_table({title: records for title, records in stores().items() if title.endswith("(pilot)")})


def render_checkpoints() -> str:
    """Every powered run's estimators at its checkpoints, one table per store."""
    return "\n".join(f"{title}:\n\n{checkpoint_table(records)}" for title, records in stores().items())


def write_blocks(page: Path = DOCS / "table3.md") -> None:
    """Rewrite the page's ``table3-decision``, ``table3-decision-pilots`` and ``table3-checkpoints`` blocks with
    :func:`render`, :func:`render_pilots` and :func:`render_checkpoints`."""
    from kappalab.atomic_io import write_text
    from kappalab.doc_blocks import replace_block

    text = page.read_text()
    for name, body in (("table3-decision", render()), ("table3-decision-pilots", render_pilots()),
                       ("table3-checkpoints", render_checkpoints())):
        text = replace_block(text, name, body, str(page))
    write_text(page, text)


if __name__ == "__main__":
    print(render() + "\n" + render_pilots() + "\n" + render_checkpoints(), end="")
    if "--write" in sys.argv[1:]:
        write_blocks()
    if "--figures" in sys.argv[1:]:
        for folder in write_figures():
            print(f"wrote {folder}/figure3.png, .pdf", file=sys.stderr)
