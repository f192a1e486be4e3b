"""Every ``from kappalab... import NAME`` in the scripts around the package (experiments/, benchmarks/, scripts/)
names something that exists: a rename in src/ that forgets a caller outside it fails here, not in a user's run."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(p for folder in ("experiments", "benchmarks", "scripts") for p in (ROOT / folder).glob("*.py"))


def _imports(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [(node.module, alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("kappalab")
            for alias in node.names]


def _resolves(module: str, name: str) -> bool:
    try:
        found = importlib.import_module(module)
    except ImportError:
        return False
    if hasattr(found, name):
        return True
    try:
        importlib.import_module(f"{module}.{name}")
    except ImportError:
        return False
    return True


def test_there_are_scripts_to_check() -> None:
    assert len(FILES) >= 10 and any(_imports(p) for p in FILES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_kappalab_imports_resolve(path: Path) -> None:
    pytest.importorskip("torch")
    missing = [f"{module}.{name}" for module, name in _imports(path) if not _resolves(module, name)]
    assert not missing, f"{path.relative_to(ROOT)} imports what kappalab does not have: {missing}"
