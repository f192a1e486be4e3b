"""The method registry (kappalab.methods): its orders match the paper's transcribed tables, the shipped configs name
only registered methods of the engine that runs them, and it imports without torch."""

from __future__ import annotations

import json
import subprocess
import sys

from kappalab.configs import CONFIG_DIR
from kappalab.methods import CONTROLS, DEEP_METHODS, LABELS, LINEAR_METHODS, PAPER_ORDER, SPECS
from kappalab.reproduce.table1.constants import PAPER_TABLE1
from kappalab.reproduce.table2.constants import PAPER_TABLE2
from kappalab.reproduce.table3.constants import PAPER_TABLE3


def test_paper_order_is_the_row_order_of_the_transcribed_tables() -> None:
    assert tuple(PAPER_TABLE1) == PAPER_ORDER
    assert tuple(PAPER_TABLE2) == PAPER_ORDER
    assert all(set(rows) == set(DEEP_METHODS) for rows in PAPER_TABLE3.values())


def test_names_and_labels_are_unique_and_the_groups_disjoint() -> None:
    assert len(set(LABELS.values())) == len(SPECS)
    assert set(PAPER_ORDER) == {m.name for m in SPECS.values() if m.paper}
    assert set(CONTROLS) == {m.name for m in SPECS.values() if m.control}
    assert not set(CONTROLS) & set(LINEAR_METHODS)


def test_shipped_configs_name_registered_methods_of_their_engine() -> None:
    seen: set[str] = set()
    for path in sorted(CONFIG_DIR.glob("table*.json")):
        data = json.loads(path.read_text())
        if path.name.startswith("table3_"):
            names = data.get("methods", [])
            assert set(names) <= set(DEEP_METHODS + CONTROLS), path.name
        else:
            names = [data["method"]] if "method" in data else []
            assert set(names) <= set(LINEAR_METHODS), path.name
        seen.update(names)
    assert set(PAPER_ORDER) <= seen


def test_the_registry_imports_without_torch() -> None:
    code = "import sys, kappalab.methods; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
