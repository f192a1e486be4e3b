"""Rank correlation with a bootstrap confidence interval, and the verdict rule of ``docs/theory_on_data.md``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata, spearmanr

BOOTSTRAP_REPS = 2000  #: resamples of the pairs
CONFIDENCE = 0.95  #: two-sided percentile interval


@dataclass(frozen=True)
class RankCorrelation:
    """Spearman's rho of ``x`` and ``y`` with a percentile bootstrap interval (pairs resampled with replacement)."""

    rho: float
    low: float
    high: float
    n: int

    def verdict(self, predicted_sign: int) -> str:
        """"supports" when the interval excludes 0 on the predicted side, "contradicts" when it excludes 0 on the
        other side, "cannot tell" when it contains 0."""
        if self.low > 0 or self.high < 0:
            return "supports" if (self.low > 0) == (predicted_sign > 0) else "contradicts"
        return "cannot tell"


def spearman_bootstrap(x: np.ndarray, y: np.ndarray, seed: int = 0, reps: int = BOOTSTRAP_REPS) -> RankCorrelation:
    """Spearman's rho of finite ``x`` and ``y`` and its bootstrap interval (resamples whose x or y is constant are
    dropped: their rho is undefined)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 3:
        raise ValueError(f"x and y must be 1-D of equal length >= 3, got shapes {x.shape} and {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("x and y must be finite")
    boot = bootstrap_rhos(x, y, seed, reps)
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.quantile(boot, [alpha, 1 - alpha])
    return RankCorrelation(float(spearmanr(x, y).statistic), float(low), float(high), int(x.size))


def bootstrap_rhos(x: np.ndarray, y: np.ndarray, seed: int, reps: int) -> np.ndarray:
    """Spearman's rho of ``reps`` resamples (rows drawn by ``numpy.random.default_rng(seed)``), as Pearson's
    correlation of average ranks, vectorised; resamples with a constant x or y are dropped."""
    idx = np.random.default_rng(seed).integers(0, x.size, (reps, x.size))
    rx, ry = rankdata(x[idx], axis=1), rankdata(y[idx], axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    norm = np.sqrt((rx * rx).sum(axis=1) * (ry * ry).sum(axis=1))
    keep = norm > 0
    return (rx * ry).sum(axis=1)[keep] / norm[keep]
