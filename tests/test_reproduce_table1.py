"""``kappalab reproduce table1 --quick`` writes complete files from which every number can be recomputed."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")

from kappalab.cli import main as cli_main  # noqa: E402
from kappalab.immunization import LinearTask, evaluate  # noqa: E402


def _have_data() -> bool:
    try:
        from kappalab.data import load_house_prices

        load_house_prices()
        return True
    except Exception:  # no cached file and no network
        return False


pytestmark = pytest.mark.skipif(not _have_data(), reason="House Prices train.csv not available")


@pytest.mark.parametrize("protocol", ["paper", "official"])
def test_quick_run_is_complete_and_self_consistent(tmp_path, protocol):
    out = tmp_path / protocol
    args = ["reproduce", "table1", "--quick", "--protocol", protocol, "--out", str(out), "--no-progress",
            "--probe-iters", "20"]
    assert cli_main(args) == 0
    for name in ("table1.json", "table1.md", "table1.csv", "figure1.png", "figure1.pdf", "features_P.npy",
                 "features_H.npy", "runs.jsonl"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    data = json.loads((out / "table1.json").read_text())
    assert {r["method"] for r in data["runs"]} == {"ours", "rill_only", "imma", "opt_kappa"}
    X_P, X_H = np.load(out / "features_P.npy"), np.load(out / "features_H.npy")
    assert X_P.dtype == np.float64 and X_P.shape[1] == 79
    task = LinearTask(X_P, np.load(out / "y_P.npy"), X_H, np.load(out / "y_H.npy"), "mse", "files", "files")
    for r in data["runs"]:
        assert r["provenance"]["seed"] == r["seed"] and r["protocol"] == protocol
        theta = np.load(out / r["files"]["theta_I"])
        bias = np.load(out / r["files"]["bias"]) if r["files"]["bias"] else None
        assert (bias is not None) == (protocol == "official")
        again = evaluate(theta, task, bias=bias, shift=r["evaluation"]["shift"])
        for d in ("pinv", "shifted"):
            for k in ("term_i", "term_ii", "rir"):
                assert again[d][k] == pytest.approx(r["evaluation"][d][k], rel=1e-10), (r["key"], d, k)
    # the markdown lists the paper's numbers as a labelled reference next to ours
    md = (out / "table1.md").read_text()
    assert "paper RIR" in md and "356.2" in md
    # resumable: a second call redoes nothing
    assert cli_main(args) == 0
    lines = (out / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 4
