"""The committed full-MNIST stores of Table 2 with trajectories (docs/reproduction/table2/paper_alg1/: the paper
protocol, Alg. 1; docs/reproduction/table2/official_traj/: the official protocol): the records carry their data,
every number of each report recomputes from the stored trajectories, and the two routes to a run's final (i), (ii),
RIR (the trajectory's thin-QR route on the train part, the record's spectra of X theta (+ 1 b^T)) agree. Eq. 15
from the stored spectra is recomputed in plain NumPy, outside kappalab, by tests/test_stores_independent.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kappalab.reproduce.table2 import selection, table2_config
from kappalab.results import RunStore, to_jsonable

ROOT = Path(__file__).resolve().parents[1] / "docs" / "reproduction" / "table2"
#: protocol -> (store folder, its size at least: docs/reproduction/table2.md says which runs)
STORES = {"paper": (ROOT / "paper_alg1", 120), "official": (ROOT / "official_traj", 120)}


@pytest.fixture(scope="module", params=sorted(STORES))
def store(request: pytest.FixtureRequest) -> tuple[str, Path, list[dict]]:
    protocol = request.param
    folder, min_runs = STORES[protocol]
    recs = RunStore(folder / selection.store_name(protocol)).records()
    assert len(recs) >= min_runs
    return protocol, folder, recs


def test_records_carry_their_data_and_steps(store: tuple[str, Path, list[dict]]) -> None:
    protocol, folder, records = store
    shas = {(r["result"]["data"]["name"], r["result"]["data"]["sha256"], r["result"]["data"]["test_sha256"])
            for r in records}
    assert len(shas) == 1 and next(iter(shas))[0] == "mnist"  # one dataset: full MNIST, train and t10k
    for r in records:
        data = r["result"]["data"]
        assert len(data["rows_per_digit"]) == 10 and sum(data["rows_per_digit"]) == 60000
        assert sum(data["test_rows_per_digit"]) == 10000
        assert set(data["pair_rows"]) == {"train", "validation", "test"}
        assert (folder / r["result"]["files"]["spectra"]).is_file(), r["key"]
        assert r["identity"]["data"]["sha256"] == data["sha256"]
        assert r["identity"]["config"]["protocol"] == protocol and r["key"].startswith(f"{protocol}.traj.")
        # paper: one full-batch step per epoch; official: 64-row minibatches of each digit's train rows, drop_last
        per_epoch = 1 if protocol == "paper" else data["pair_rows"]["train"] // 64
        assert r["result"].get("steps_per_epoch", 1) == per_epoch
        assert r["result"]["n_steps"] == r["params"]["epochs"] * per_epoch and r["params"]["epochs"] == 30


def test_trajectory_route_agrees_with_the_record(store: tuple[str, Path, list[dict]]) -> None:
    """The last trajectory point on the train part (singular values of R theta, X = QR) and the record's headline
    (singular values of X theta): the same Eq. 15 by two products; measured agreement 1e-6 relative or better."""
    _, folder, records = store
    worst = 0.0
    for r in records:
        with np.load(folder / r["result"]["files"]["trajectory"]) as z:
            assert int(z["epoch"][-1]) == 30
            for m in ("term_i", "term_ii", "rir"):
                worst = max(worst, abs(float(z[f"train.{m}"][-1]) / r["result"]["gram"][m] - 1.0))
    assert worst < 1e-6, worst


def test_report_recomputes_from_the_store(store: tuple[str, Path, list[dict]]) -> None:
    protocol, folder, records = store
    committed = json.loads((folder / f"selection_{protocol}.json").read_text())
    runs = selection.load_runs(folder, records)
    rows = to_jsonable(selection.selection_records(runs, table2_config(protocol, "ours").eta))
    table = to_jsonable(selection.store_table(runs))
    assert committed["n_runs"] == len(runs)
    assert json.dumps(table, sort_keys=True) == json.dumps(committed["table"], sort_keys=True)
    assert json.dumps(rows, sort_keys=True) == json.dumps(committed["records"], sort_keys=True)
