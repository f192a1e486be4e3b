"""Every committed real-network Table 3 record that keeps its group spectra (the runs with power: the controls and
the methods at >= 300 steps, in powered/ and in the unfinished parts of its sweeps) recomputes, in plain NumPy, from
what it stores: the groups estimator's terms from ``group_spectra`` and the exact estimator's from
``singular_values``, both at the stored ``rank_rtol``; its checkpoints are ordered in steps and end at ``n_steps``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_table3_measures import _kappa_from_singular_values as _kappa  # the plain-NumPy rank rule, written once

ROOT = Path(__file__).resolve().parents[1]
#: the committed stores with power, and the unfinished parts of such sweeps (their records recompute alike; the
#: decision table reads powered/ only)
STORES = sorted(p for folder in ("powered", "unfinished")
                for p in (ROOT / "docs" / "reproduction" / "table3" / folder).glob("**/runs.jsonl"))
RECORDS = [r for path in STORES for r in map(json.loads, path.read_text().splitlines()) if "group_spectra" in r]


def _decision_script():
    """experiments/table3_decision.py as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("table3_decision", ROOT / "experiments" / "table3_decision.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def _rtol(record: dict, n: int, d: int) -> float:
    """The stored rule, or the float64 default max(N, D) eps of the records made without one."""
    return record["rank_rtol"] if record.get("rank_rtol") is not None else max(n, d) * float(np.finfo(float).eps)


def test_there_are_powered_records():
    assert RECORDS, "no committed real-network record with group_spectra under docs/reproduction/table3/"


@pytest.mark.parametrize("record", RECORDS, ids=[r["key"] for r in RECORDS])
def test_the_groups_estimator_recomputes_from_the_stored_spectra(record):
    spectra = record["group_spectra"]
    size, dim = len(spectra["H_0"][0]), len(record["singular_values"]["H_0"])
    rtol = _rtol(record, size, dim)
    k = {key: np.array([_kappa(s, rtol) for s in groups]) for key, groups in spectra.items()}
    i_g, ii_g = k["H_I"] / k["H_0"], k["P_I"] / k["P_0"]
    stored = record["estimates"]["groups"]
    assert stored["term_i"] == pytest.approx(i_g.mean(), rel=1e-9)
    assert stored["term_ii"] == pytest.approx(ii_g.mean(), rel=1e-9)
    assert stored["rir"] == pytest.approx((i_g / ii_g).mean(), rel=1e-9)


@pytest.mark.parametrize("record", RECORDS, ids=[r["key"] for r in RECORDS])
def test_the_exact_estimator_recomputes_from_the_stored_singular_values(record):
    sv = record["singular_values"]
    n = record["identity"]["data"]["H"]["sizes"]["heldout"]
    rtol = _rtol(record, n, len(sv["H_0"]))
    kappa = {key: _kappa(s, rtol) for key, s in sv.items()}
    stored = record["estimates"]["exact"]
    assert stored["term_i"] == pytest.approx(kappa["H_I"] / kappa["H_0"], rel=1e-9)
    assert stored["term_ii"] == pytest.approx(kappa["P_I"] / kappa["P_0"], rel=1e-9)


@pytest.mark.parametrize("record", RECORDS, ids=[r["key"] for r in RECORDS])
def test_checkpoints_run_along_training(record):
    steps = [c["step"] for c in record["checkpoints"]]
    assert len(steps) >= 4 and steps == sorted(steps) and steps[-1] == record["n_steps"]
    assert record["checkpoints"][-1]["estimates"]["groups"]["rir"] == pytest.approx(
        record["estimates"]["groups"]["rir"], rel=1e-9)


def test_table3_md_opens_with_the_decision_table_of_the_store():
    """table3.md's first 40 lines hold the decision table as experiments/table3_decision.py renders it from the
    store's selection grids, the controls' rows included; its pilots' table and checkpoint tables are the script's
    too."""
    script = _decision_script()
    page = (ROOT / "docs" / "reproduction" / "table3.md").read_text()
    head = "\n".join(page.splitlines()[:40])
    table = script.render()
    assert table in page and table.splitlines()[-1] in head
    assert "Oracle (control)" in table and "Task only (control)" in table
    assert "(pilot)" not in table and "(grid)" not in script.render_pilots()
    assert script.render_pilots() in page and script.render_checkpoints() in page


def test_figure3_of_every_store_is_drawn_from_its_records(tmp_path):
    """Each store's Figure 3 is committed beside it, and draws theta_0 first, then the controls, then the methods,
    one probe curve per record of that method."""
    from kappalab.reproduce.table3.report import figure3

    script = _decision_script()
    for title, path in script.store_paths().items():
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        curves = script.probe_curves(records)
        finished = [r for r in records if "diverged" not in r]
        assert next(iter(curves)) == "init" and set(curves) == {r["method"] for r in finished}
        assert sum(map(len, curves.values())) == len(finished)
        assert len({len(c) for per_seed in curves.values() for c in per_seed}) == 1  # one epoch axis
        assert (path.parent / "figure3.png").exists(), f"{path.parent}: run experiments/table3_decision.py --figures"
        figure3(curves, tmp_path, title)
        assert (tmp_path / "figure3.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


NORM_STATISTICS = sorted((ROOT / "docs" / "reproduction" / "table3" / "powered").glob("**/norm_statistics.json"))


@pytest.mark.parametrize("path", NORM_STATISTICS, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_the_statistics_diagnostic_covers_its_store_and_is_quoted(path):
    """experiments/table3_norm_statistics.py's JSON has one entry per finished method run of its store, each
    agreeing with the run's record as trained (D_P test accuracy, group RIR), and table3.md quotes its table."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("norm_statistics", ROOT / "experiments" / "table3_norm_statistics.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    saved = json.loads(path.read_text())
    records = {r["key"]: r for r in map(json.loads, (path.parent / "runs.jsonl").read_text().splitlines())}
    finished = {k for k, r in records.items() if r["method"] != "init" and "diverged" not in r}
    assert [e["key"] for e in saved["runs"]] == [k for k in records if k in finished]
    for e in saved["runs"]:
        r = records[e["key"]]
        assert e["dp_acc_as_trained"]["test"] == r["utility"]["dp_test_acc"]
        assert e["rir_groups_as_trained"] == r["estimates"]["groups"]["rir"]
        assert 0 <= e["dp_acc_statistics_reestimated"]["test"] <= 1
        lo, hi = e["rir_groups_reestimated_ci"]
        assert lo <= e["rir_groups_statistics_reestimated"] <= hi
    page = (ROOT / "docs" / "reproduction" / "table3.md").read_text()
    assert script.table(saved["runs"], saved["theta0_dp_test_acc"]) in page
    assert script.block() in page  # the block as --write makes it
