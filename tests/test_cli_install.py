"""What ``pip install .`` ships: every package under src/ and the claim checks, and the configs as package data.

(The install itself, into a fresh venv and run from outside the repository, is checked by hand; see the README's
"Installing without the repository".)"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_under_src_and_the_claim_checks_are_shipped() -> None:
    config = _setuptools()
    found = {".".join(p.parent.relative_to(ROOT / "src").parts) for p in (ROOT / "src").rglob("__init__.py")}
    assert set(config["packages"]) == found | {"proofs_checks"}
    assert config["package-dir"] == {"": "src", "proofs_checks": "proofs_checks"}
    assert (ROOT / "proofs_checks" / "__init__.py").is_file() and (ROOT / "proofs_checks" / "conftest.py").is_file()


def test_configs_and_registry_are_package_data() -> None:
    data = _setuptools()["package-data"]["kappalab"]
    assert "configs/*.json" in data and "verify/*.json" in data
    assert (ROOT / "src" / "kappalab" / "configs" / "table1_paper_ours.json").is_file()  # where the pattern points
