"""Choosing the lambdas and the number of epochs the way Appendix C.2 describes, as a reproducible procedure.

Appendix C.2: "We choose lambda_P and lambda_H by balancing the gradient norm of R_well and R_ill. Specifically, we
obtain the scale of lambda_P and lambda_H first and search over multiples of {1, 2, 3, 5}. [...] The number of
epochs is based on early stopping using RIR and the test accuracy."

1. **Scale** (:func:`scales`), from the gradient norms of the unweighted terms at theta_0
   (:func:`~kappalab.deep.methods.gradient_norms`, averaged over a few batch pairs). Two readings of "balancing":

   * ``"task"``: every regularizer is balanced against the task loss: ``lambda_t = 10^round(log10(||grad L|| /
     ||grad t||))`` (also used for Opt kappa's and IMMA's weights);
   * ``"pair"``: R_well and R_ill are balanced against each other, ``lambda_P ||grad R_well|| = lambda_H ||grad
     R_ill||``, with ``lambda_H ||grad R_ill||`` on the task-gradient scale (so lambda_H is as in ``"task"`` and
     ``lambda_P = 10^round(log10(lambda_H ||grad R_ill|| / ||grad R_well||))``).

2. **Grid** (:func:`grid`): multiples ``m * 10^(j + e)`` of each scale ``10^j``, ``m`` in {1, 2, 3, 5}, ``e`` in a
   small set of decade offsets (the config's ``search`` block).

3. **Early stopping and selection** (:func:`select`): every candidate is trained for ``max_epochs`` epochs on the
   training part of a train/validation split of the training data; after each epoch RIR_theta0 (Eq. 17, the
   paper's group estimator, on validation samples) and the D_P validation accuracy are recorded. Among all
   (candidate, epoch) pairs whose D_P validation accuracy is at least theta_0's minus ``acc_tolerance``, the one
   with the largest estimated RIR is chosen. The test split is never looked at.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Iterable, Sequence

from .methods import balanced_scale

MULTIPLIERS: tuple[int, ...] = (1, 2, 3, 5)
READINGS: tuple[str, ...] = ("task", "pair")
TERM_OF = {"lambda_P": "r_well", "lambda_H": "r_ill", "lambda_kappa": "kappa_gap", "lambda_imma": "harmful"}


def power_of_ten(x: float) -> float:
    """``10^round(log10(x))`` for a finite ``x > 0``."""
    if not (x > 0 and math.isfinite(x)):
        raise ValueError(f"x must be finite and > 0, got {x!r}")
    return 10.0 ** round(math.log10(x))


def scales(norms: dict[str, float], reading: str) -> dict[str, float]:
    """The power-of-ten scale of every weight whose term has a gradient norm in ``norms`` (keys ``task``,
    ``r_well``, ``r_ill``, ``kappa_gap``, ``harmful``), under ``reading`` (see the module docstring)."""
    if reading not in READINGS:
        raise ValueError(f"reading must be one of {READINGS}, got {reading!r}")
    out = {w: balanced_scale(norms["task"], norms[t]) for w, t in TERM_OF.items() if t in norms}
    if reading == "pair" and "r_well" in norms and "r_ill" in norms:
        out["lambda_P"] = power_of_ten(out["lambda_H"] * norms["r_ill"] / norms["r_well"])
    return out


def grid(scale: float, offsets: Iterable[int], multipliers: Sequence[int] = MULTIPLIERS) -> list[float]:
    """``m * scale * 10^e`` for ``e`` in ``offsets`` and ``m`` in ``multipliers``, sorted, rounded to 12
    significant digits (so 3 * 1e-7 prints as 3e-07)."""
    vals = {float(f"{m * scale * 10.0 ** e:.12g}") for e, m in itertools.product(offsets, multipliers)}
    return sorted(vals)


def admissible(epoch_metrics: dict[str, Any], acc_floor: float) -> bool:
    """A (candidate, epoch) is admissible when its D_P validation accuracy is at least ``acc_floor`` and its
    estimated RIR is finite."""
    return epoch_metrics["val_dp_acc"] >= acc_floor and math.isfinite(epoch_metrics["est_rir"])


def select(candidates: list[dict[str, Any]], acc_floor: float, key: str = "est_rir"
           ) -> tuple[int, int] | None:
    """The (candidate index, epoch) with the largest ``key`` among admissible ones (ties: the earlier candidate,
    then the earlier epoch), or None when nothing is admissible. ``candidates[i]["epochs"]`` is the list of
    per-epoch metrics (epoch ``e`` at index ``e - 1``); a diverged candidate has ``"diverged"`` set and is
    skipped from the epoch it diverged on (its earlier epochs stay eligible)."""
    best, best_val = None, -math.inf
    for i, cand in enumerate(candidates):
        for e, m in enumerate(cand.get("epochs", []), start=1):
            if admissible(m, acc_floor) and m[key] > best_val:
                best, best_val = (i, e), m[key]
    return best
