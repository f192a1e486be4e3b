"""The independent measure of Table 2: linear probing by gradient descent with exact line search."""

from __future__ import annotations

from typing import Any

import numpy as np

from .constants import PROBE_BUDGET, PROBE_CHECKPOINTS, PROBE_MAX_ITER, PROBE_TARGETS
from .data import one_vs_rest

def probe_measures(theta: np.ndarray, bias: np.ndarray | None, X_P: np.ndarray, X_H: np.ndarray, a: int, b: int,
                   seed: int, directory: str | None = None, pool: int = 1, dataset: str = "mnist-subset"
                   ) -> dict[str, Any]:
    """Measures of immunization that are not RIR, for ``theta`` (with ``bias``) and for the identity (reference).

    Both use :func:`kappalab.immunization.exact_line_search_gd` (GD with exact line search from w = 0, Eq. 16).

    * ``iters_H`` / ``iters_P``: iterations on ``1/2||Phi w - y||^2`` with ``Phi`` the features of the D_H / D_P
      images and ``y`` a fixed standard normal vector until the relative excess loss is <= each of PROBE_TARGETS
      (None: not within PROBE_MAX_ITER); ``excess_H@t`` / ``excess_P@t`` that loss at PROBE_CHECKPOINTS; and
      ``norm_ratio_H`` / ``norm_ratio_P``, Eq. 16's norm ratio after PROBE_MAX_ITER iterations. The Hessian of
      this problem is exactly H_H / H_P.
    * ``excess_P`` / ``excess_H``: relative excess loss ``(f(w_T) - f*) / (f(0) - f*)`` after T = PROBE_BUDGET
      iterations of a least-squares probe "digit a (resp. b) = +1 vs the other digits except b (resp. a) = -1"
      (a non-degenerate task on the same features): small = the probe learns fast.
    """
    from kappalab.immunization import exact_line_search_gd, features

    out: dict[str, Any] = {}
    for name, th, bi in (("immunized", theta, bias), ("identity", np.eye(theta.shape[0]), None)):
        row: dict[str, Any] = {}
        for task, X in (("P", X_P), ("H", X_H)):
            y = np.random.default_rng([seed, 1 if task == "P" else 2]).standard_normal(len(X))
            curve = exact_line_search_gd(features(th, X, bi), y, PROBE_MAX_ITER, PROBE_TARGETS[0])
            for target in PROBE_TARGETS:
                hit = np.flatnonzero(curve.excess_loss <= target)
                row[f"iters_{task}<={target:g}"] = int(hit[0]) if hit.size else None
            for t in PROBE_CHECKPOINTS:
                row[f"excess_{task}@{t}"] = float(curve.excess_loss[min(t, len(curve.excess_loss) - 1)])
            row[f"norm_ratio_{task}"] = float(curve.norm_ratio[-1])
        for task, digit, other in (("P", a, b), ("H", b, a)):
            X, y = one_vs_rest(digit, other, seed, directory, pool, dataset)
            curve = exact_line_search_gd(features(th, X, bi), y, PROBE_BUDGET, PROBE_TARGETS[0])
            row[f"excess_{task}"] = float(curve.excess_loss[-1])
        out[name] = row
    return out
