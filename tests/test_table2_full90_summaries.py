"""The committed summaries of the full-MNIST 90-pair stores (docs/reproduction/table2/full90/plain_vs_split.json and
terms.json) are what their scripts in experiments/ compute from the committed stores today, and agree with the
opening table (headline.json)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
FULL90 = ROOT / "docs" / "reproduction" / "table2" / "full90"
SUMMARIES = {"table2_plain_vs_split": "plain_vs_split.json", "table2_terms": "terms.json"}


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _assert_close(committed, fresh, path: str) -> None:
    """Numbers within 1e-12 relative (the same arithmetic on the same stored numbers; a mean or corrcoef may round
    otherwise on another BLAS), everything else equal."""
    if isinstance(committed, dict):
        assert isinstance(fresh, dict) and committed.keys() == fresh.keys(), path
        for key in committed:
            _assert_close(committed[key], fresh[key], f"{path}.{key}")
    elif isinstance(committed, list):
        assert isinstance(fresh, list) and len(committed) == len(fresh), path
        for i, (c, f) in enumerate(zip(committed, fresh)):
            _assert_close(c, f, f"{path}[{i}]")
    elif isinstance(committed, float):
        assert fresh == pytest.approx(committed, rel=1e-12), path
    else:
        assert fresh == committed, path


@pytest.mark.parametrize("name", sorted(SUMMARIES))
def test_the_committed_summary_is_what_the_stores_give(name: str) -> None:
    fresh = json.loads(json.dumps(_script(name).report()))
    _assert_close(json.loads((FULL90 / SUMMARIES[name]).read_text()), fresh, name)


def test_every_protocol_compares_ours_on_shared_runs() -> None:
    for protocol, block in json.loads((FULL90 / "plain_vs_split.json").read_text())["protocols"].items():
        ours = block["methods"]["ours"]
        assert ours["runs"] == len(ours["per_run"]) >= 10, protocol
        assert ours["ratio_min"] <= ours["ratio_median"] <= ours["ratio_max"]


def test_the_pinv_terms_agree_with_the_opening_table() -> None:
    """terms.json's pinv RIR (from each record's result.gram) against headline.json's statistic (from the stored
    spectra, report.run_rows): the same runs, two readings."""
    headline = {(h["protocol"], h["method"]): h for h in json.loads((FULL90 / "headline.json").read_text())["rows"]}
    rows = [r for r in json.loads((FULL90 / "terms.json").read_text())["rows"] if r["kappa"] == "pinv"]
    assert {(r["protocol"], r["method"]) for r in rows} == set(headline)
    for r in rows:
        h = headline[r["protocol"], r["method"]]
        assert r["rir"]["seeds"] == list(h["complete_seeds"])
        assert r["rir"]["mean"] == pytest.approx(h["statistic"][0], rel=1e-9)
        assert r["rir"]["seed_means"] == pytest.approx(list(h["seed_means"]), rel=1e-9)


def test_the_report_opens_with_the_committed_headline() -> None:
    """docs/reproduction/table2.md's opening table is headline.md, as experiments/table2_headline.py wrote it."""
    page = (ROOT / "docs" / "reproduction" / "table2.md").read_text()
    opening = page[:page.index("<!-- end: table2-answer -->")]
    assert (FULL90 / "headline.md").read_text().strip() in opening


def test_the_report_quotes_the_committed_selection_comparison() -> None:
    """The table of table2.md's section on the 10-pair selection studies is plain_vs_split.json's, as its script
    renders it."""
    page = (ROOT / "docs" / "reproduction" / "table2.md").read_text()
    committed = json.loads((FULL90 / "plain_vs_split.json").read_text())
    assert _script("table2_plain_vs_split").markdown(committed) in page
