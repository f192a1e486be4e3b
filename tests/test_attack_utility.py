"""D_P's utility under the extractor attackers (:mod:`kappalab.attack.utility`), against values computed here with
plain NumPy (``lstsq`` for D_P's probe): an extractor left alone keeps all of it, one halved keeps 3/4, a zero one
none (broken); the step kept is the extractor of that step, not the live array the attack goes on updating."""

from __future__ import annotations

import numpy as np
import pytest

from kappalab.attack.extractor_attackers import Extracted, extractor_attack
from kappalab.attack.utility import KEPT_FRACTION, DPProbe, DPUtility

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
    probe = DPProbe.of(X, Y, theta)
    W_P = np.linalg.lstsq(X @ theta, Y, rcond=None)[0]  # an independent least-squares solver
    # the fit is unique (full column rank): two backward-stable solvers agree to kappa(F) max(N, D) eps (a zero
    # residual: no kappa^2 term), times 10 for the constants
    bound = 10 * np.linalg.cond(X @ theta) * max(X.shape) * EPS * np.abs(W_P).max()
    assert np.abs(probe.W - W_P).max() <= bound
    u = probe.utility({0: theta, 1: theta.copy(), 10: 0.5 * theta, 100: np.zeros_like(theta)}, 100)
    zero = _loss(np.zeros_like(Y), Y)
    assert u.loss_zero == pytest.approx(zero, rel=1e-14)
    # realizable: the fit's loss is rounding, about (kappa eps)^2 of the targets' scale; 1e-20 of it is far above
    assert u.loss[0] <= 1e-20 * zero and u.loss[1] == u.loss[0]
    assert u.loss[10] == pytest.approx(_loss(X @ (0.5 * theta) @ W_P, Y), rel=1e-9)
    assert u.loss[10] == pytest.approx(zero / 4, rel=1e-9)  # predictions halved: residual Y / 2
    assert u.loss[100] == zero
    assert u.kept(1) == 1.0 and u.kept(10) == pytest.approx(0.75, rel=1e-9) and u.kept(100) == 0.0
    assert u.broken is True
    not_broken = probe.utility({0: theta, 100: 0.5 * theta}, 100)
    assert not_broken.broken is False and not_broken.kept(100) > KEPT_FRACTION
    rec = u.as_dict()
    assert rec["broken"] is True and set(rec["at_step"]) == {"0", "1", "10", "100"}
    assert rec["at_step"]["10"]["kept"] == u.kept(10)


def test_an_attacked_invertible_extractor_keeps_at_most_all_of_it() -> None:
    """Not realizable (noisy targets): for invertible theta and M the fixed probe's reading on X M can only lose
    (it lies in the span the fit searched), within the rounding of the two products."""
    rng = np.random.default_rng(9)
    X, theta = rng.standard_normal((90, 4)), rng.standard_normal((4, 4)) + 3 * np.eye(4)
    Y = rng.standard_normal((90, 1))
    probe = DPProbe.of(X, Y, theta)
    moved = {0: theta, **{t: theta + 0.3 * rng.standard_normal((4, 4)) for t in (1, 2, 3)}}
    u = probe.utility(moved, 3)
    assert 0 < u.utility(0) < 1
    for t in (1, 2, 3):
        assert u.kept(t) <= 1 + 1e-10


def test_undefined_cases_read_none() -> None:
    """Nothing to keep (D_P's probe no better than 0 before the attack): kept and broken are None; the largest budget
    not measured (the attack diverged before it): broken is None; no extractor before the attack, or D_P inputs of
    the wrong width: refused."""
    nothing = DPUtility(100, 1.0, {0: 1.0, 100: 3.0})
    assert nothing.kept(100) is None and nothing.broken is None
    diverged = DPUtility(100, 1.0, {0: 0.1, 10: 0.2})
    assert diverged.kept(10) == pytest.approx(0.8 / 0.9) and diverged.broken is None
    X, theta, Y = _realizable(2)
    with pytest.raises(ValueError, match="step 0"):
        DPProbe.of(X, Y, theta).utility({10: theta}, 10)
    with pytest.raises(ValueError, match="theta's rows"):
        DPProbe.of(X[:, :3], Y, theta)


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
    W_P = np.linalg.lstsq(XP @ theta, YP, rcond=None)[0]
    zero = _loss(np.zeros_like(YP), YP)
    assert u["at_step"]["0"]["loss"] <= 1e-20 * zero  # realizable: rounding only
    assert u["at_step"]["0"]["loss"] == pytest.approx(_loss(XP @ theta @ W_P, YP), abs=1e-20 * zero)
    assert u["loss_zero"] == pytest.approx(zero, rel=1e-14) and isinstance(u["broken"], bool)
