"""The seed-spread store (docs/reproduction/table2/seed_spread/: Ours, official protocol, full MNIST, pairs 0-1 and
4-1, seeds 0-4) says what table2.md quotes from it: per pair the range, mean and sample std of term (i) and the
ranges of (ii) and RIR under the shifted kappa (each record's ``result.evaluate.shifted``), and every record is a
plain official run of Ours on md5-verified full MNIST with all balanced rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1] / "docs" / "reproduction"
STORE = ROOT / "table2" / "seed_spread" / "runs_official.jsonl"


def _fmt(x: float, digits: int) -> str:
    return f"{x:.{digits}f}"


@pytest.mark.parametrize(("a", "b"), [(0, 1), (4, 1)])
def test_the_page_quotes_the_store(a: int, b: int) -> None:
    records = [json.loads(line) for line in STORE.read_text().splitlines()]
    mine = [r for r in records if (r["params"]["a"], r["params"]["b"]) == (a, b)]
    assert sorted(r["params"]["seed"] for r in mine) == [0, 1, 2, 3, 4]
    for r in mine:
        assert (r["params"]["protocol"], r["params"]["method"]) == ("official", "ours")
        data = r["result"]["data"]
        assert data["name"] == "mnist" and data["checksum_verified"]
        assert data["rows_used"]["P"] == min(data["rows_per_digit"][a], data["rows_per_digit"][b])
    shifted = np.array([[r["result"]["evaluate"]["shifted"][k] for k in ("term_i", "term_ii", "rir")] for r in mine])
    i, ii, rir = shifted.T
    row = (f"| {a}-{b} | 0-4 | {_fmt(i.min(), 2)} - {_fmt(i.max(), 2)} ({_fmt(i.mean(), 2)} ± {_fmt(i.std(ddof=1), 2)})"
           f" | {_fmt(ii.min(), 4)} - {_fmt(ii.max(), 4)} | {_fmt(rir.min(), 1)} - {_fmt(rir.max(), 1)} |")
    assert row in (ROOT / "table2.md").read_text()
