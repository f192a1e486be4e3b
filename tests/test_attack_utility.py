"""D_P's utility under the extractor attackers (:mod:`kappalab.attack.utility`), against values computed here with
plain NumPy (``lstsq`` for D_P's probe, the SVD for kappa): an extractor left alone keeps all of it, one halved keeps
3/4, a zero one none (broken); the step kept is the extractor of that step, not the live array the attack goes on
updating."""

from __future__ import annotations

import numpy as np
import pytest

from kappalab.attack.extractor_attackers import Extracted, extractor_attack
from kappalab.attack.problem import Split
from kappalab.attack.utility import KEPT_FRACTION, DPUtility, dp_utility

EPS = np.finfo(np.float64).eps


def _realizable(seed: int, n: int = 120, d: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """D_P inputs, an invertible extractor and targets the extractor's features fit exactly."""
    rng = np.random.default_rng(seed)
    X, theta = rng.standard_normal((n, d)), rng.standard_normal((d, d)) + 3 * np.eye(d)
    return X, theta, X @ theta @ rng.standard_normal((d, 2))


def _loss(P: np.ndarray, Y: np.ndarray) -> float:
    return float(((P - Y) ** 2).sum() / (2 * len(Y)))


def test_the_fixed_probe_reads_an_untouched_extractor_as_kept_a_halved_one_as_three_quarters_and_zero_as_broken():
    X, theta, Y = _realizable(1)
    split = Split.of(X, Y, 3)
    u = dp_utility(split, {0: theta, 1: theta.copy(), 10: 0.5 * theta, 100: np.zeros_like(theta)}, 100)
    (Xtr, Ytr), (Xte, Yte) = split.train, split.test
    W_P = np.linalg.lstsq(Xtr @ theta, Ytr, rcond=None)[0]  # an independent least-squares solver
    zero = _loss(np.zeros_like(Yte), Yte)
    assert u.loss_zero == pytest.approx(zero, rel=1e-14)
    scale = zero  # the targets' own scale: every loss below is a rounding of a value in [0, zero]
    # the realizable fit: its loss is rounding, about (kappa eps)^2 of the scale; 1e-20 of it is far above that
    assert u.loss[0] <= 1e-20 * scale and u.loss[1] == u.loss[0]
    assert u.loss[10] == pytest.approx(_loss(Xte @ (0.5 * theta) @ W_P, Yte), rel=1e-9)
    assert u.loss[10] == pytest.approx(zero / 4, rel=1e-9)  # predictions halved: residual Y / 2
    assert u.loss[100] == zero
    assert u.kept(1) == 1.0 and u.kept(10) == pytest.approx(0.75, rel=1e-9) and u.kept(100) == 0.0
    assert u.broken is True
    not_broken = dp_utility(split, {0: theta, 100: 0.5 * theta}, 100)
    assert not_broken.broken is False and not_broken.kept(100) > KEPT_FRACTION
    s = np.linalg.svd(Xtr @ theta, compute_uv=False)
    assert u.kappa_P[0] == pytest.approx((s[0] / s[-1]) ** 2, rel=1e3 * max(Xtr.shape) * EPS * (s[0] / s[-1]) ** 2)
    assert u.kappa_P[10] == pytest.approx(u.kappa_P[0], rel=1e-9)  # kappa is scale-free
    assert u.kappa_P[100] is None  # zero features: kappa undefined
    rec = u.as_dict()
    assert rec["broken"] is True and set(rec["at_step"]) == {"0", "1", "10", "100"}
    assert rec["at_step"]["10"]["kept"] == u.kept(10)


def test_undefined_cases_read_none() -> None:
    """Nothing to keep (D_P's probe no better than 0 before the attack): kept and broken are None; the largest budget
    not measured (the attack diverged before it): broken is None; no extractor before the attack: refused."""
    worse = DPUtility(100, 1.0, {0: 2.0, 100: 3.0}, {0: 1.0, 100: 1.0})
    assert worse.kept(100) is None and worse.broken is None
    diverged = DPUtility(100, 1.0, {0: 0.1, 10: 0.2}, {0: 1.0, 10: 1.0})
    assert diverged.kept(10) == pytest.approx(0.8 / 0.9) and diverged.broken is None
    X, theta, Y = _realizable(2)
    with pytest.raises(ValueError, match="step 0"):
        dp_utility(Split.of(X, Y, 0), {10: theta}, 10)


@pytest.mark.parametrize("rank", [None, 2])
def test_a_step_s_extractor_is_a_copy_of_that_step_and_its_map(rank: int | None) -> None:
    """``Extracted.extractor()`` is M at that step (theta + B A for LoRA), kept unchanged by later steps, and the
    step's map is that M times the probe (compared within the products' rounding)."""
    rng = np.random.default_rng(4)
    X, theta = rng.standard_normal((64, 6)), rng.standard_normal((6, 6))
    Y = rng.standard_normal((64, 1))
    it = extractor_attack(X, Y, theta, seed=0, optimizer="sgd", lr=1e-2, batch_size=16, rank=rank)
    first = next(it)
    assert isinstance(first, Extracted)
    M1, map1 = first.extractor(), first.map.copy()
    for _ in range(5):
        later = next(it)
    assert np.array_equal(first.map, map1)  # the map is the step's own array
    assert not np.array_equal(later.extractor(), M1)  # the attack moved on; the copy did not
    if rank is None:
        M_live = first.theta  # fine-tuning's M is the live array: it moved with the attack
        assert np.array_equal(M_live, later.extractor())
    W = np.linalg.lstsq(M1, map1, rcond=None)[0]  # the probe of step 1, recovered from its map
    bound = 1e3 * EPS * np.abs(M1).sum(axis=1, keepdims=True) @ np.abs(W).max(axis=0, keepdims=True)
    assert np.all(np.abs(M1 @ W - map1) <= bound)


def test_run_group_records_dp_utility_for_extractor_attackers_only() -> None:
    """On a group with D_P rows, fine-tuning's record holds D_P's utility at the start and every budget, the start
    the fixed probe's loss on theta (computed here with lstsq); gradient descent on the probe has none (the
    extractor is untouched)."""
    from kappalab.attack.registry import settings
    from kappalab.attack.scope import Group, ModelSpec, run_group

    XP, theta, YP = _realizable(5, n=150)
    rng = np.random.default_rng(6)
    XH = rng.standard_normal((150, 5))
    yH = XH @ rng.standard_normal(5)
    group = Group("t", 0, None, XH, yH, (ModelSpec("ours", theta, "immunized", "k", 1.0),
                                         ModelSpec("direct", np.eye(5), "reference")), dp=(XP, YP))
    records, _ = run_group(group, ("gd", "finetune"), log=lambda line: None)
    by = {(r["method"], r["attacker"]): r for r in records}
    assert by[("ours", "gd")]["dp_utility"] is None
    u = by[("ours", "finetune")]["dp_utility"]
    assert set(u["at_step"]) == {"0", *map(str, settings().budgets)} and u["budget"] == max(settings().budgets)
    split = Split.of(XP, YP, 0)
    (Xtr, Ytr), (Xte, Yte) = split.train, split.test
    W_P = np.linalg.lstsq(Xtr @ theta, Ytr, rcond=None)[0]
    assert u["at_step"]["0"]["loss"] <= 1e-20 * _loss(np.zeros_like(Yte), Yte)  # realizable: rounding only
    assert u["at_step"]["0"]["loss"] == pytest.approx(_loss(Xte @ theta @ W_P, Yte), abs=1e-20 * _loss(0 * Yte, Yte))
    assert isinstance(u["broken"], bool)
