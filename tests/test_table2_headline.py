"""Table 2's opening table (kappalab.reproduce.table2.headline) against a plain-NumPy reading of the same rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kappalab.reproduce.table2.constants import ALL_PAIRS, PAPER_TABLE2
from kappalab.reproduce.table2.headline import headlines, markdown


def _rows(rng: np.random.Generator, seeds: dict[int, int]) -> list[dict]:
    """Runs of Ours: seed -> how many of the 90 pairs it has (in ALL_PAIRS order)."""
    return [{"protocol": "official", "method": "ours", "a": a, "b": b, "seed": s, "rir": float(10 ** rng.normal(1, 1)),
             "train_s": float(rng.uniform(1, 2)), "total_s": float(rng.uniform(2, 3)), "key": f"{s}.{a}-{b}"}
            for s, n in seeds.items() for a, b in ALL_PAIRS[:n]]


def test_the_paper_statistic_uses_complete_seeds_only():
    rows = _rows(np.random.default_rng(0), {0: 90, 1: 90, 2: 40})
    (h,) = headlines(rows, "official")
    means = [np.mean([r["rir"] for r in rows if r["seed"] == s]) for s in (0, 1)]
    assert h.complete_seeds == (0, 1) and h.pairs_per_seed == {0: 90, 1: 90, 2: 40}
    assert h.statistic == pytest.approx((np.mean(means), np.std(means, ddof=1)), rel=1e-12)
    assert h.paper == PAPER_TABLE2["ours"][2] and h.n_runs == 220


def test_pair_counts_and_median_pair_use_the_seed_averaged_log_rir():
    rows = _rows(np.random.default_rng(1), {0: 90, 1: 90, 2: 90})
    (h,) = headlines(rows, "official")
    logs = np.array([np.mean([math.log10(r["rir"]) for r in rows if (r["a"], r["b"]) == p]) for p in ALL_PAIRS])
    assert h.n_pairs == 90 and h.pairs_above == int(np.sum(logs > 1)) and h.pairs_below_one == int(np.sum(logs < 0))
    assert h.median_pair == pytest.approx(10 ** np.median(logs), rel=1e-12)
    means = np.array([np.mean([r["rir"] for r in rows if (r["a"], r["b"]) == p]) for p in ALL_PAIRS])
    assert h.pairs_above_mean_rir == int(np.sum(means > 10)) and h.pairs_below_one_mean_rir == int(np.sum(means < 1))
    assert h.pairs_above_mean_rir != h.pairs_above  # the two averages differ here: the columns must name theirs
    assert h.train_s == pytest.approx(np.median([r["train_s"] for r in rows]))


def test_a_partial_sweep_says_so():
    (h,) = headlines(_rows(np.random.default_rng(2), {0: 89}), "official")
    assert h.statistic is None and "not yet" in markdown([h]) and h.n_pairs == 89
    assert headlines(_rows(np.random.default_rng(2), {0: 9}), "paper") == []  # other protocol: no row


def test_one_complete_seed_reads_as_its_mean_alone():
    (h,) = headlines(_rows(np.random.default_rng(3), {0: 90, 1: 12}), "official")
    assert h.complete_seeds == (0,) and math.isnan(h.statistic[1])
    assert f"{h.statistic[0]:.4g} (seed 0) |" in markdown([h])
