"""App. C.2's model selection over stored trajectories: a learning rate from a grid and an early-stopping epoch.

The paper (App. C.2): "For linear models, we search over the set of {0.0005, 0.001, 0.005, 0.01} and report the best
result ... The number of epochs is based on early stopping using RIR and the test accuracy." It states no precise
rule. :class:`Rule` makes one exact (all numbers taken from a :mod:`~kappalab.immunization.trajectory` view):

* an epoch ``e >= 1`` of a run is **admissible** when ``term_ii(e) <= max_term_ii`` (the pre-training task is not
  made harder to probe than at theta = I) and ``loss_P(e) <= (1 + loss_slack) * reference`` (the trained head's
  D_P loss on the view is within ``loss_slack`` of theta = I's: the least-squares head fit on all D_P rows, its
  loss on the view, :func:`~kappalab.immunization.trajectory.direct_losses`; "test accuracy" for a regression);
* **stopping** picks, per run, among its admissible epochs: ``"max_rir"`` the one with the largest RIR (ties: the
  earliest), ``"first"`` the earliest (stop as soon as the run is immunized and fits D_P);
* a **learning rate** is chosen per method: the one whose seeds have the largest mean selected RIR, among the
  learning rates where every seed has an admissible epoch (none: the method has no selection).

The selection is computed on one view (``select_on``) and the chosen (lr, epoch) of each seed is then read on
another (``report_on``): ``full``/``full`` is what the paper did (selected on the data it reports), ``val``/``test``
the honest variant (selected on a validation half of each task, reported on the held-out half).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

STOPPING = ("max_rir", "first")
REPORTED = ("term_i", "term_ii", "rir", "loss_P", "fit_P")


@dataclass(frozen=True)
class Rule:
    """An exact selection rule (see the module docstring)."""

    max_term_ii: float = 1.0
    loss_slack: float = 0.1
    stopping: str = "max_rir"

    def __post_init__(self) -> None:
        if not self.max_term_ii > 0:  # inf: no constraint on (ii)
            raise ValueError(f"max_term_ii must be a number > 0 (inf: no constraint), got {self.max_term_ii!r}")
        if not self.loss_slack >= 0:  # inf: no task-quality constraint
            raise ValueError(f"loss_slack must be a number >= 0 (inf: no constraint), got {self.loss_slack!r}")
        if self.stopping not in STOPPING:
            raise ValueError(f"stopping must be one of {STOPPING}, got {self.stopping!r}")

    def describe(self) -> str:
        """The rule in one sentence."""
        pick = "the largest RIR (earliest on ties)" if self.stopping == "max_rir" else "the earliest"
        conditions = ([] if math.isinf(self.max_term_ii) else [f"(ii) <= {self.max_term_ii:g}"]) + \
            ([] if math.isinf(self.loss_slack) else
             [f"D_P loss <= {1 + self.loss_slack:g} x theta = I's (least-squares head fit on all D_P rows)"])
        return (f"per seed, among epochs >= 1{' with ' + ' and '.join(conditions) if conditions else ''}, {pick}; "
                "per method, the learning rate with the largest mean selected RIR among those where every seed has "
                "such an epoch")

    def admissible(self, traj: Mapping[str, np.ndarray], view: str, reference: float) -> np.ndarray:
        """Boolean mask over the trajectory's epochs (epoch 0, the initialization, is never admissible);
        ``reference``: theta = I's D_P loss on ``view``."""
        ok = (traj[f"{view}.term_ii"] <= self.max_term_ii) & \
             (traj[f"{view}.loss_P"] <= (1.0 + self.loss_slack) * reference)
        return ok & (traj["epoch"] >= 1)

    def stop(self, traj: Mapping[str, np.ndarray], view: str, reference: float) -> int | None:
        """Index (into the trajectory) of the selected epoch of one run, or None when no epoch is admissible."""
        idx = np.flatnonzero(self.admissible(traj, view, reference))
        if idx.size == 0:
            return None
        if self.stopping == "first":
            return int(idx[0])
        rir = traj[f"{view}.rir"][idx]
        return int(idx[int(np.argmax(rir))])  # argmax returns the first maximum: the earliest on ties


def select(runs: Sequence[Mapping[str, Any]], rule: Rule, select_on: str, report_on: str,
           reference: float) -> dict[str, Any]:
    """Apply ``rule`` to the runs of ONE method (each ``{"eta", "seed", "traj"}``; ``traj`` a trajectory's arrays),
    ``reference`` = theta = I's D_P loss on ``select_on``.

    Returns ``{"lr", "per_seed": [{"seed", "epoch", "selected_rir", <report_on metrics>}], "candidates": {lr: mean
    selected RIR or None}}`` (``lr`` None when no learning rate qualifies)."""
    by_lr: dict[float, list[Mapping[str, Any]]] = {}
    for r in runs:
        by_lr.setdefault(float(r["eta"]), []).append(r)
    candidates: dict[float, float | None] = {}
    stops: dict[float, list[int | None]] = {}
    for lr, rs in sorted(by_lr.items()):
        stops[lr] = [rule.stop(r["traj"], select_on, reference) for r in rs]
        candidates[lr] = None if any(i is None for i in stops[lr]) else float(
            np.mean([r["traj"][f"{select_on}.rir"][i] for r, i in zip(rs, stops[lr])]))
    ok = {lr: v for lr, v in candidates.items() if v is not None}
    out: dict[str, Any] = {"rule": asdict(rule), "select_on": select_on, "report_on": report_on, "reference": reference,
                           "candidates": candidates, "lr": None, "per_seed": []}
    if not ok:
        return out
    lr = max(ok, key=lambda k: (ok[k], -k))  # ties: the smaller learning rate
    out["lr"] = lr
    for r, i in sorted(zip(by_lr[lr], stops[lr]), key=lambda t: t[0]["seed"]):
        t = r["traj"]
        out["per_seed"].append({"seed": int(r["seed"]), "epoch": int(t["epoch"][i]),
                                "selected_rir": float(t[f"{select_on}.rir"][i]),
                                **{m: float(t[f"{report_on}.{m}"][i]) for m in REPORTED}})
    return out


def at_epoch(runs: Sequence[Mapping[str, Any]], epoch: int, view: str = "full") -> list[dict[str, Any]]:
    """No selection: each run's metrics at a fixed ``epoch`` (e.g. Sec. 5.1's 100, Table 4's 1000)."""
    out = []
    for r in sorted(runs, key=lambda r: r["seed"]):
        t = r["traj"]
        hits = np.flatnonzero(t["epoch"] == epoch)
        if hits.size != 1:
            raise ValueError(f"run seed {r['seed']} lr {r['eta']}: epoch {epoch} not in its trajectory "
                             f"(epochs {int(t['epoch'][0])}..{int(t['epoch'][-1])})")
        out.append({"seed": int(r["seed"]), "epoch": epoch, **{m: float(t[f"{view}.{m}"][hits[0]])
                                                                for m in REPORTED}})
    return out
