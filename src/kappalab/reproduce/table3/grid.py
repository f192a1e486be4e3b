"""Table 3's selection of a setting for the runs with power (Appendix C.2, as a rule fixed before the runs).

* **The grid** (:data:`GRID`, :func:`grid_points`): the learning rate ``eta`` in {1e-5 (Table 4's), 1e-4, 1e-3} times
  the lambda multiple in {1, 10, 100} of the balanced scale at theta_0 (``lambda_multiple``, see
  :func:`kappalab.reproduce.table3.real.run_lambdas`). ``task_only`` has no lambda: its grid is ``eta`` alone.
  ``kappalab reproduce table3 --grid`` runs every point for the methods and seeds asked, with a config that draws the
  validation part (``--set per_class.validation=N``).
* **The rule** (:func:`choose`), the same for every method and control: among the method's settings whose D_P head
  accuracy on the validation part stays within :data:`UTILITY_POINTS` of theta_0's on every seed (and whose training
  diverged on none), the one with the largest group RIR on the validation part (mean over seeds; ties: the earlier
  grid point). The settings are compared on the seeds every one of them ran (the grid runs one seed whole, then the
  chosen setting the others), so that adding seeds at the choice does not change it. Only the validation part is
  read: the table's held-out and test parts are not.
* **When no setting keeps utility** (a reading added after both directions' seed-0 grids kept none, before any
  method's seeds 1-2 ran): the *least damaging* setting, the smallest worst-seed accuracy drop (ties: the larger
  RIR, then the earlier grid point), among those that diverged on no compared seed; the choice says so
  (``kept_utility`` False) and the decision table reads its rows as **utility lost**. No setting is chosen when
  every setting diverged.
* **What the table reads** (:func:`selected`): a method run at several settings contributes its chosen setting's
  records only; a method run at one setting is read as it is (the fixed-setting runs).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from ...methods import SPECS

GRID: dict[str, tuple[float, ...]] = {"eta": (1e-5, 1e-4, 1e-3), "lambda_multiple": (1.0, 10.0, 100.0)}
#: methods whose objective has no lambda, so that the lambda multiple changes nothing
NO_LAMBDA: tuple[str, ...] = tuple(name for name, spec in SPECS.items() if not spec.lambdas)
#: a setting keeps utility when D_P accuracy falls by at most this many points from theta_0's
UTILITY_POINTS = 2.0

Setting = tuple[float, float]  #: (eta, lambda_multiple)


def grid_points(method: str) -> list[dict[str, float]]:
    """The ``--set`` overrides of every grid point of ``method``, in grid order."""
    multiples = (1.0,) if method in NO_LAMBDA else GRID["lambda_multiple"]
    return [{"eta": eta, "lambda_multiple": m} for eta, m in itertools.product(GRID["eta"], multiples)]


def grid_points_of(methods: list[str]) -> list[dict[str, float]]:
    """The grid points any of ``methods`` runs at, in grid order."""
    full = [{"eta": eta, "lambda_multiple": m} for eta, m in itertools.product(*GRID.values())]
    return [p for p in full if any(p in grid_points(m) for m in methods)]


def setting_of(record: dict[str, Any]) -> Setting:
    """A record's ``(eta, lambda_multiple)`` from its run identity (runs recorded without a multiple have 1)."""
    config = record["identity"]["config"]
    return float(config["eta"]), float(config.get("lambda_multiple", 1.0))


@dataclass(frozen=True)
class Choice:
    """The selection of one method: its chosen ``setting`` (None: every setting diverged), the validation RIR and
    worst-seed accuracy drop there, how many settings were candidates, and whether the setting kept utility (False:
    none did, and this is the least damaging one)."""

    method: str
    setting: Setting | None
    rir_groups: float | None
    accuracy_drop: float | None
    candidates: int
    kept_utility: bool = True


def _init_accuracy(records: list[dict[str, Any]]) -> dict[tuple[Setting, int], float]:
    return {(setting_of(r), r["seed"]): r["validation"]["dp_acc"] for r in records
            if r["method"] == "init" and "validation" in r}


def choose(records: list[dict[str, Any]], method: str) -> Choice:
    """The rule of the module docstring over ``method``'s records that carry validation measures (``init`` records
    of the same setting and seed give theta_0's accuracy)."""
    init = _init_accuracy(records)
    by: dict[Setting, list[dict[str, Any]]] = {}
    for r in records:
        if r["method"] == method and (setting_of(r), r["seed"]) in init:
            by.setdefault(setting_of(r), []).append(r)
    seeds = set.intersection(*({r["seed"] for r in runs} for runs in by.values())) if by else set()
    scored: list[tuple[Setting, float, float]] = []  # (setting, worst-seed drop, mean RIR), in grid order
    for setting in sorted(by, key=_grid_order):
        runs = [r for r in by[setting] if r["seed"] in seeds]
        if not runs or any("validation" not in r for r in runs):  # a seed diverged (or was measured without it)
            continue
        # rounded like decision.py's drop: 10 of 500 images is exactly 2 points, not a loss
        drop = round(max(100 * (init[setting, r["seed"]] - r["validation"]["dp_acc"]) for r in runs), 9)
        scored.append((setting, drop, sum(r["validation"]["rir_groups"] for r in runs) / len(runs)))
    kept = [s for s in scored if s[1] <= UTILITY_POINTS]
    if kept:  # max keeps the first of equals: ties go to the earlier grid point
        setting, drop, rir = max(kept, key=lambda s: s[2])
        return Choice(method, setting, rir, drop, len(by))
    if scored:
        setting, drop, rir = min(scored, key=lambda s: (s[1], -s[2]))
        return Choice(method, setting, rir, drop, len(by), kept_utility=False)
    return Choice(method, None, None, None, len(by))


def _grid_order(setting: Setting) -> tuple[int, ...]:
    """A setting's place in the grid (settings off the grid last, in numeric order)."""
    eta, multiple = setting
    on = eta in GRID["eta"] and multiple in GRID["lambda_multiple"]
    return (0, GRID["eta"].index(eta), GRID["lambda_multiple"].index(multiple)) if on else (1, eta, multiple)


def selected(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Choice]]:
    """The records the table reads (module docstring) and the choice of every method run at several settings.

    Every ``init`` record is kept: theta_0 is the same at every setting."""
    settings: dict[str, set[Setting]] = {}
    for r in records:
        if r["method"] != "init":
            settings.setdefault(r["method"], set()).add(setting_of(r))
    choices = {m: choose(records, m) for m, s in settings.items() if len(s) > 1}
    keep = {m: ({choices[m].setting} if m in choices else s) for m, s in settings.items()}
    out = [r for r in records if r["method"] == "init" or setting_of(r) in keep[r["method"]]]
    return out, choices
