"""Figure 2's counts: the per-pair log10 RIR matrix and the pairs above each success threshold."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .constants import ALL_PAIRS, METHODS, OTHER_THRESHOLDS, SUCCESS_THRESHOLD


def pair_log_rir(rows: list[dict[str, Any]], method: str) -> np.ndarray:
    """10 x 10 matrix of log10 RIR averaged over seeds (rows: D_P digit, columns: D_H digit; NaN = no run)."""
    M = np.full((10, 10), np.nan)
    for a, b in ALL_PAIRS:
        vals = [math.log10(r["rir"]) for r in rows if r["method"] == method and (r["a"], r["b"]) == (a, b)]
        if vals:
            M[a, b] = float(np.mean(vals))
    return M


def success_counts(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per method: pairs with seed-averaged log10 RIR above log10 of each threshold, and pairs finished."""
    out = {}
    for method in METHODS:
        M = pair_log_rir(rows, method)
        done = int(np.isfinite(M).sum())
        if done:
            out[method] = {"pairs": done, **{f"RIR>{t:g}": int(np.sum(M[np.isfinite(M)] > math.log10(t)))
                                             for t in (OTHER_THRESHOLDS[0], SUCCESS_THRESHOLD, OTHER_THRESHOLDS[1])}}
    return out
