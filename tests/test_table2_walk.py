"""The committed protocol walk (docs/reproduction/table2/walk/walk.json, made by experiments/table2_walk.py) is what its
stores say, recomputed in plain NumPy from each run's stored spectra (not through kappalab): per step and method the
runs at the walk's pairs and seeds, their (i), (ii), RIR (the rank decided on K at n eps, pinv kappa), the per-seed
means over the pairs, mean and sample std over the seeds, and each step's factor. The walk's own runs carry their
step's name (``extra.walk_step``) in their identity, and table2.md shows walk.md's table.

Tolerance 1e-12 relative: the same IEEE divisions and means on the same stored numbers, in another order."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_table2_full90_store import _rir as plain_rir  # Eq. 15 from stored spectra in plain NumPy

TABLE2 = Path(__file__).resolve().parents[1] / "docs" / "reproduction" / "table2"
WALK = TABLE2 / "walk"

pytestmark = pytest.mark.skipif(not (WALK / "walk.json").exists(), reason="no walk committed yet")


def _walk() -> dict:
    return json.loads((WALK / "walk.json").read_text())


def _runs(row: dict, pairs: set[tuple[int, int]], seeds: set[int]) -> list[dict]:
    folder = TABLE2 / row["store"]
    store = folder / f"runs_{row['protocol']}.jsonl"
    out = []
    for r in map(json.loads, store.read_text().splitlines() if store.exists() else []):
        p = r["params"]
        if not row["reused"]:  # a walk store holds its own step's runs only
            assert r["identity"]["config"]["extra"]["walk_step"] == row["step"], r["key"]
        if p["method"] != row["method"] or (p["a"], p["b"]) not in pairs or p["seed"] not in seeds:
            continue
        with np.load(folder / r["result"]["spectra_file"]) as z:
            term_i, term_ii, rir = plain_rir(z)
        out.append({"pair": (p["a"], p["b"]), "seed": p["seed"], "term_i": term_i, "term_ii": term_ii, "rir": rir})
    return out


def test_every_step_recomputes_from_its_stored_spectra():
    walk = _walk()
    pairs = {tuple(int(x) for x in p.split("-")) for p in walk["pairs"]}
    seeds = set(walk["seeds"])
    previous: dict[str, tuple[str, dict[int, float], dict]] = {}
    for row in walk["rows"]:
        runs = _runs(row, pairs, seeds)
        assert len(runs) == row["n_runs"] and len({(r["pair"], r["seed"]) for r in runs}) == len(runs), row["step"]
        complete = [s for s in sorted(seeds) if {r["pair"] for r in runs if r["seed"] == s} == pairs]
        for term in ("rir", "term_i", "term_ii"):
            stat = row[term]
            assert stat["seeds"] == complete
            means = [np.mean([r[term] for r in runs if r["seed"] == s]) for s in complete]
            assert stat["seed_means"] == pytest.approx(means, rel=1e-12)
            if means:
                assert stat["mean"] == pytest.approx(np.mean(means), rel=1e-12)
            if len(means) > 1:
                assert stat["std"] == pytest.approx(np.std(means, ddof=1), rel=1e-12)
        assert row["complete"] == (complete == sorted(seeds))
        # the factor: against the nearest earlier step with a complete seed, on the seeds both have complete
        mine = {s: np.mean([r["rir"] for r in runs if r["seed"] == s]) for s in complete}
        before = previous.get(row["method"])
        shared = sorted(set(mine) & set(before[1])) if before else []
        if shared:
            assert row["factor"]["from"] == before[0] and row["factor"]["seeds"] == shared
            assert row["factor"]["value"] == pytest.approx(
                np.mean([mine[s] for s in shared]) / np.mean([before[1][s] for s in shared]), rel=1e-12)
            ratios = [r["rir"] / before[2][r["pair"], r["seed"]] for r in runs if r["seed"] in shared]
            assert row["factor"]["run_ratios"] == pytest.approx([min(ratios), max(ratios)], rel=1e-12)
        else:
            assert row["factor"] is None
        if mine:
            previous[row["method"]] = (row["step"], mine, {(r["pair"], r["seed"]): r["rir"] for r in runs})


def test_the_walk_has_its_endpoints_and_table2_md_shows_its_table():
    rows = _walk()["rows"]
    ours = [r for r in rows if r["method"] == "ours"]
    assert ours[0]["protocol"] == "official" and ours[0]["overrides"] == {} and ours[0]["complete"]
    assert ours[-1]["protocol"] == "paper" and ours[-1]["overrides"] == {"extra.spectral_route": "closed_form"}
    assert (WALK / "walk.md").read_text() in (TABLE2.parent / "table2.md").read_text()
