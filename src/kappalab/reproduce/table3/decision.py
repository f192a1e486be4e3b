"""Table 3's decision table: per direction and protocol, the controls' and each method's RIR under the three
estimators, utility kept, and a verdict by a rule fixed before the runs.

The rule (:data:`RULE`, printed above the table) reads the paper's group estimator (ours, pinv kappa):

* **"the measure cannot be moved here"** for every method of a direction and protocol whose oracle control (the task
  loss plus ``log kappa(H~_P) - log kappa(H~_H)``, Adam) stays below :data:`ORACLE_FLOOR` with utility kept: a verdict
  on the methods would then say nothing;
* **"immunizes"** when the method's interval lies above task_only's interval and above :data:`IMMUNIZES_ABOVE`, with
  utility kept;
* **"does not immunize here"** otherwise;
* **"utility lost"** when D_P accuracy fell by more than :data:`UTILITY_POINTS` points on some seed;
* **"diverged"** when the training of some seed diverged (a non-finite loss, or features that collapsed to zero: the
  run's record says which, and when).

A method run at several settings is read at the one :func:`.grid.selected` chose on the validation part; where no
setting kept utility there, at its least damaging setting, whose row then reads **utility lost** whatever its test part
says (:data:`FALLBACK`, printed under the rule).

Intervals: the hull of the seeds' bootstrap 95% intervals (each over its 20 groups), n the number of seeds; the exact
estimator has no interval (its range over seeds is shown).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...deep.methods import CONTROLS, METHOD_LABELS, METHODS
from ...estimators import ESTIMATOR_NAMES
from .grid import NO_LAMBDA, UTILITY_POINTS, Choice, grid_points, selected, setting_of

ORACLE_FLOOR = 1.5
IMMUNIZES_ABOVE = 2.0
RULE = (f"Verdict (group estimator, fixed before the runs): **immunizes** when a method's interval lies above "
        f"task_only's and above {IMMUNIZES_ABOVE:g} with D_P accuracy within {UTILITY_POINTS:g} points of theta_0's on "
        f"every seed; **the measure cannot be moved here** when the oracle control's RIR stays below "
        f"{ORACLE_FLOOR:g}; otherwise **does not immunize here** (**utility lost** when D_P accuracy fell by more "
        f"than {UTILITY_POINTS:g} points; **diverged** when the training of some seed diverged).")
FALLBACK = ("A method none of whose settings kept D_P accuracy on the validation part is read at its least damaging "
            "setting (the smallest worst-seed drop there; a reading added after the seed-0 grids, before seeds 1-2 "
            "ran), and its row reads **utility lost**.")


@dataclass(frozen=True)
class Row:
    """One method's line of the decision table (over its seeds)."""

    method: str
    n: int
    rir: dict[str, float]  #: estimator -> mean RIR over seeds
    interval: dict[str, tuple[float, float]]  #: estimator -> hull of the seeds' intervals (exact: min-max)
    accuracy_drop: float  #: the largest D_P head accuracy drop from theta_0 over seeds, in points
    setting: str  #: "eta, lambda multiple" of the records read (where chosen on the validation part: among how many
    #: of the method's grid points, so that a selection over a grid not yet run whole says so)
    verdict: str = ""


def _searched(choice: Choice) -> str:
    """How many of the method's grid points its selection chose among."""
    return f"{choice.candidates} of {len(grid_points(choice.method))} grid points run"


def _row(method: str, records: list[dict[str, Any]], init_acc: dict[int, float], choice: Choice | None) -> Row:
    """The row of a method's records; diverged runs count in n but have no estimates (NaN where none finished)."""
    finished = [r for r in records if "diverged" not in r]
    rir, interval, nan = {}, {}, float("nan")
    for est in ESTIMATOR_NAMES:
        values = [r["estimates"][est]["rir"] for r in finished]
        cis = [r["estimates"][est].get("ci95") or (r["estimates"][est]["rir"],) * 2 for r in finished]
        rir[est] = sum(values) / len(values) if values else nan
        interval[est] = (min(c[0] for c in cis), max(c[1] for c in cis)) if cis else (nan, nan)
    # accuracies are fractions of a few hundred test images: rounded to 1e-9 points, so that a drop of exactly the
    # limit (e.g. 10 of 500 images, 2 points) is not turned into a loss by the subtraction's rounding
    drop = round(max((100 * (init_acc[r["seed"]] - r["utility"]["dp_test_acc"]) for r in finished), default=nan), 9)
    eta, multiple = setting_of(records[0])
    setting = ((f"{eta:g}" if method in NO_LAMBDA else f"{eta:g}, x{multiple:g}")
               + ("" if choice is None else f" (selected, {_searched(choice)})" if choice.kept_utility
                  else f" (least damaging: none kept utility; {_searched(choice)})"))
    return Row(method, len(records), rir, interval, drop, setting)


def decide(records: list[dict[str, Any]]) -> list[Row]:
    """The rows of one direction and protocol (controls first), each with its verdict by :data:`RULE`; a method
    whose selection kept no setting has a row that says so, without numbers."""
    records, choices = selected(records)
    init_acc = {r["seed"]: r["utility"]["dp_test_acc"] for r in records if r["method"] == "init"}
    by: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r["method"] != "init" and r["seed"] in init_acc:
            by.setdefault(r["method"], []).append(r)
    rows = {m: _row(m, by[m], init_acc, choices.get(m)) for m in (*CONTROLS, *METHODS) if m in by}
    failed = {m: sum("diverged" in r for r in rs) for m, rs in by.items()}
    oracle, null = rows.get("oracle"), rows.get("task_only")
    out = []
    for m, row in rows.items():
        if failed[m]:
            verdict = f"diverged ({failed[m]} of {row.n} seeds)"
        elif m in choices and not choices[m].kept_utility:
            verdict = "utility lost (validation, every setting)"
        elif row.accuracy_drop > UTILITY_POINTS:
            verdict = "utility lost"
        elif m in CONTROLS:
            verdict = "control"
        elif oracle is None or null is None:
            verdict = "no verdict: a control is missing"
        elif oracle.rir["groups"] < ORACLE_FLOOR:
            verdict = "the measure cannot be moved here"
        elif row.interval["groups"][0] > max(null.interval["groups"][1], IMMUNIZES_ABOVE):
            verdict = "immunizes"
        else:
            verdict = "does not immunize here"
        out.append(Row(row.method, row.n, row.rir, row.interval, row.accuracy_drop, row.setting, verdict))
    nan = float("nan")
    for m, choice in choices.items():
        if choice.setting is None:
            out.append(Row(m, 0, dict.fromkeys(ESTIMATOR_NAMES, nan), dict.fromkeys(ESTIMATOR_NAMES, (nan, nan)),
                           nan, f"none ({_searched(choice)})",
                           "every setting diverged"))
    return out


def decision_table(groups: dict[str, list[dict[str, Any]]]) -> str:
    """Markdown: :data:`RULE` and :data:`FALLBACK`, then one line per (direction and protocol, method); ``groups``
    maps a title (e.g. ``"D_P Fashion-MNIST / D_H MNIST, paper protocol"``) to its records (``init`` included)."""
    lines = [f"{RULE} {FALLBACK}", "", "| direction, protocol | method | eta, lambda multiple | n | RIR exact (range) "
             "| RIR groups [interval] | RIR authors' [interval] | D_P acc. drop (points, worst seed) | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for title, records in groups.items():
        for row in decide(records):
            cells = [f"{row.rir[e]:.3g} [{row.interval[e][0]:.3g}, {row.interval[e][1]:.3g}]"
                     if row.rir[e] == row.rir[e] else "n.a." for e in ESTIMATOR_NAMES]  # NaN: no run finished
            drop = f"{row.accuracy_drop:.1f}" if row.accuracy_drop == row.accuracy_drop else "n.a."
            lines.append(f"| {title} | {METHOD_LABELS[row.method]} | {row.setting} | {row.n} | " + " | ".join(cells)
                         + f" | {drop} | {row.verdict} |")
    return "\n".join(lines) + "\n"
