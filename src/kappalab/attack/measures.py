"""Running an attacker on a model and the attack measures: curves, losses at budgets, reach and slowdown.

* :func:`tune`: every combination of the attacker's grid runs ``selection_budget`` steps on D_H's training rows; the
  one with the lowest validation loss at that step is chosen (the attacker picks what works best for it; a diverged
  run has loss inf and is never chosen unless all diverge; ties go to the first in grid order).
* :func:`attack`: the chosen attacker runs ``steps`` steps; the training loss after every step (index 0 = the
  start, ``W = 0``) is the curve, the training and test loss at each budget (and, where the targets code classes,
  the training and test accuracy, :func:`kappalab.attack.problem.prediction_accuracy`) and the wall time are
  recorded; for an
  attacker that changes the extractor (linear or deep) of a model with D_P rows, D_P's utility at the start and each
  budget (:mod:`.utility`). With
  ``curve_every = k > 1`` (the deep attackers, whose loss is a forward pass over the training rows) the curve is
  computed at steps ``0..k``, at every k-th step and at the budgets, and is NaN at the others: a reach step is then
  the first computed step at or below the target, never before the every-step curve's and at most ``k - 1`` steps
  after it where the curve decreases (a minibatch curve can dip below the target between computed steps).
* :func:`first_reach` and :func:`slowdown`: the one home of the reach rule. theta_0's loss at budget B with the same
  attacker is the target; theta_I reaches it at the first step t with ``curve_I[t] <= target + slack`` (``slack``
  the two models' rounding bounds, :func:`kappalab.attack.problem.rounding_slack`), searched up to
  ``reach_factor * B`` steps; ``slowdown = t / B``, ``reached`` false (slowdown None) when not within them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .extractor_attackers import Extracted
from .problem import loss, prediction_accuracy, prediction_loss, rounding_slack
from .registry import Attacker, Model
from .utility import DPUtility


def _loss(A: np.ndarray, Y: np.ndarray, it: Any) -> float:
    """The harmful loss of an iterate on the rows ``A``: a linear map ``W`` (``A W``) or a deep model's
    :class:`kappalab.attack.deep_attackers.Snapshot` (its predictions of those rows)."""
    return loss(A, Y, it) if isinstance(it, np.ndarray) else prediction_loss(it.predict(A), Y)


def _accuracy(A: np.ndarray, Y: np.ndarray, it: Any) -> float | None:
    """The same iterate's accuracy on those rows (None where the targets do not code classes)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return prediction_accuracy(A @ it if isinstance(it, np.ndarray) else it.predict(A), Y)


def _slack(model: Model, attacker: Attacker, it: Any) -> float:
    """The rounding bound of an iterate's training loss as the curve computed it: a linear map's through the
    design's :class:`kappalab.attack.problem.Rotated` (:meth:`~kappalab.attack.problem.Rotated.slack`), a
    snapshot's from its features (:func:`kappalab.attack.problem.rounding_slack`)."""
    A, Y = _design(model, attacker).train
    if not isinstance(it, np.ndarray):
        return rounding_slack(it.features(A), Y, it.W, it.rounding())
    if attacker.changes_extractor and model.deep is not None:
        return rounding_slack(A, Y, it)  # a deep attack that diverged at once: its start, W = 0
    return _rotated(model, attacker).slack(A, Y, it)


@dataclass(frozen=True)
class Tuning:
    """The grid's validation losses at the selection budget and the chosen combination."""

    chosen: Mapping[str, Any]
    val_losses: tuple[float, ...]  #: in grid order
    selection_budget: int


@dataclass(frozen=True)
class Run:
    """One attacker's run on one model."""

    attacker: str
    params: Mapping[str, Any]
    curve: np.ndarray  #: training loss after 0..steps steps (inf after a divergence)
    #: budget -> {"train": loss, "test": loss, "train_accuracy": ..., "test_accuracy": ...} (accuracy None where
    #: the targets do not code classes, or the run diverged before the budget)
    at_budget: dict[int, dict[str, float | None]]
    wall_s: float  #: seconds for the run's steps (the curve's evaluation excluded)
    slack: float  #: rounding bound of the loss at the last finite iterate
    tuning: Tuning | None = field(default=None)
    curve_every: int = 1  #: the curve's stride (module docstring)
    dp: DPUtility | None = None  #: D_P's utility (an attacker that changes the extractor; module docstring)

    @property
    def steps(self) -> int:
        return self.curve.size - 1


def _design(model: Model, attacker: Attacker):
    return model.inputs if attacker.changes_extractor else model.features


def _rotated(model: Model, attacker: Attacker):
    """The training loss of a linear iterate on the attacker's design (features, or a linear extractor's inputs)."""
    return _design(model, attacker).rotated


def _train_loss(model: Model, attacker: Attacker):
    """The curve's loss of one iterate: a linear map's through the design's rotated problem (``k D C`` a step), a
    deep model's snapshot from its predictions of the training rows."""
    if attacker.changes_extractor and model.deep is not None:
        A, Y = model.inputs.train
        return lambda it: prediction_loss(it.predict(A), Y)
    return _rotated(model, attacker).loss


def _map(step: Any) -> Any:
    """What the loss reads of a step: a linear extractor attacker's end-to-end map, else the step itself."""
    return step.map if isinstance(step, Extracted) else step


def _iterate(model: Model, attacker: Attacker, params: Mapping[str, Any], seed: int, batch_size: int, steps: int,
             keep: set[int], curve_every: int):
    """Run ``steps`` steps; returns the training-loss curve (module docstring: ``curve_every``), the iterates at the
    steps in ``keep``, an extractor attacker's extractors there (a linear one's maps, step 0 ``model.theta``; a deep
    one's snapshots), the last finite iterate and the stepping time."""
    A, Y = _design(model, attacker).train
    curve = np.full(steps + 1, math.inf)
    W0 = np.zeros((A.shape[1], Y.shape[1]))
    curve[0] = loss(A, Y, W0)
    train_loss = _train_loss(model, attacker)
    kept, last, wall = {0: W0} if 0 in keep else {}, W0, 0.0
    extractors = {0: model.theta} if model.theta is not None and attacker.changes_extractor else {}
    it = attacker.start(model, params, seed, batch_size)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for t in range(1, steps + 1):
            t0 = time.perf_counter()
            step = next(it)
            wall += time.perf_counter() - t0
            W = _map(step)
            if t > curve_every and t % curve_every and t not in keep:
                curve[t] = math.nan  # not computed (module docstring)
                continue
            value = train_loss(W)
            if not math.isfinite(value):
                break  # diverged: the rest of the curve stays inf
            curve[t], last = value, W
            if t in keep:
                kept[t] = W
                if isinstance(step, Extracted):
                    extractors[t] = step.extractor()
                elif model.deep is not None and attacker.changes_extractor:
                    extractors[t] = step  # the tail's snapshot after t steps
    return curve, kept, extractors, last, wall


def _final(model: Model, attacker: Attacker, params: Mapping[str, Any], seed: int, batch_size: int, steps: int):
    """The iterate after ``steps`` steps, no loss computed on the way (tuning reads only that one)."""
    it = attacker.start(model, params, seed, batch_size)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for _ in range(steps):
            step = next(it)
    return _map(step)


def tune(model: Model, attacker: Attacker, seed: int, batch_size: int, selection_budget: int) -> Tuning:
    """The attacker's choice on the validation rows (module docstring)."""
    Av, Yv = _design(model, attacker).val
    losses = []
    for params in attacker.grid:
        W = _final(model, attacker, params, seed, batch_size, selection_budget)
        with np.errstate(over="ignore", invalid="ignore"):
            value = _loss(Av, Yv, W)
        losses.append(value if math.isfinite(value) else math.inf)
    best = int(np.argmin(losses))
    return Tuning(dict(attacker.grid[best]), tuple(losses), selection_budget)


def attack(model: Model, attacker: Attacker, seed: int, *, budgets: tuple[int, ...], steps: int, batch_size: int,
           selection_budget: int, curve_every: int = 1) -> Run:
    """Tune, then run ``steps`` steps with the choice; losses at each budget on the training and test rows."""
    if curve_every < 1:
        raise ValueError(f"curve_every must be >= 1, got {curve_every}")
    tuning = tune(model, attacker, seed, batch_size, selection_budget) if len(attacker.grid) > 1 else None
    params = tuning.chosen if tuning is not None else dict(attacker.grid[0])
    curve, kept, extractors, last, wall = _iterate(model, attacker, params, seed, batch_size, steps, set(budgets),
                                                   curve_every)
    design = _design(model, attacker)
    at_budget = {}
    for b in budgets:
        W = kept.get(b)
        at_budget[b] = {"train": float(curve[b]) if b < curve.size else math.inf,
                        "test": _loss(*design.test, W) if W is not None else math.inf,
                        **{f"{rows}_accuracy": _accuracy(*getattr(design, rows), W) if W is not None else None
                           for rows in ("train", "test")}}
    dp = model.dp.utility(extractors, max(budgets)) if model.dp is not None and attacker.changes_extractor else None
    return Run(attacker.name, params, curve, at_budget, wall, _slack(model, attacker, last), tuning, curve_every, dp)


def first_reach(curve: np.ndarray, target: float, slack: float, limit: int) -> int | None:
    """The first step ``t <= limit`` with ``curve[t] <= target + slack``, or None."""
    hit = np.flatnonzero(curve[:limit + 1] <= target + slack)
    return int(hit[0]) if hit.size else None


@dataclass(frozen=True)
class Slowdown:
    budget: int
    target: float  #: theta_0's training loss at the budget
    steps: int | None  #: theta_I's steps to reach it (None: not within reach_factor x budget)
    reached: bool
    slowdown: float | None  #: steps / budget
    limit: int  #: reach_factor x budget

    def as_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "target": self.target, "steps": self.steps, "reached": self.reached,
                "slowdown": self.slowdown, "limit": self.limit}


def slowdown(curve_I: np.ndarray, curve_0: np.ndarray, budget: int, slack: float, reach_factor: int) -> Slowdown:
    """theta_I's steps to theta_0's loss at ``budget`` with the same attacker, and their ratio (module docstring).
    ``curve_I`` must hold at least ``reach_factor * budget`` steps."""
    limit = reach_factor * budget
    if curve_I.size <= limit or curve_0.size <= budget:
        raise ValueError(f"curves too short for budget {budget}: need {limit + 1} and {budget + 1} points, got "
                         f"{curve_I.size} and {curve_0.size}")
    target = float(curve_0[budget])
    steps = first_reach(curve_I, target, slack, limit)
    return Slowdown(budget, target, steps, steps is not None, None if steps is None else steps / budget, limit)
