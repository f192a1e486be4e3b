"""Appendix C.2's lambda selection: the two readings of the gradient-norm balance, the {1, 2, 3, 5} grid, and the
early-stopping selection on validation metrics."""

from __future__ import annotations

import math

import pytest

from kappalab.deep.search import grid, power_of_ten, scales, select

NORMS = {"task": 0.942, "r_ill": 4.69e-3, "r_well": 3.21e5, "kappa_gap": 3.82e6, "harmful": 0.337}


def test_scales_task_reading_balances_each_term_against_the_task() -> None:
    sc = scales(NORMS, "task")
    assert sc == {"lambda_H": 1e2, "lambda_P": 1e-6, "lambda_kappa": 1e-7, "lambda_imma": 1.0}


def test_scales_pair_reading_balances_r_well_against_weighted_r_ill() -> None:
    norms = {**NORMS, "r_well": 3.0e3}
    task, pair = scales(norms, "task"), scales(norms, "pair")
    assert task["lambda_P"] == 1e-4 and pair["lambda_H"] == task["lambda_H"] == 1e2
    assert pair["lambda_P"] == power_of_ten(1e2 * 4.69e-3 / 3.0e3) == 1e-4
    # lambda_H ||grad R_ill|| = 0.314 (not 0.942): the two readings now differ by a decade
    norms = {**NORMS, "r_ill": 3.14e-3, "r_well": 2.65e5}
    assert scales(norms, "task")["lambda_H"] == 1e2
    assert scales(norms, "task")["lambda_P"] == 1e-5 and scales(norms, "pair")["lambda_P"] == 1e-6
    with pytest.raises(ValueError, match="reading"):
        scales(NORMS, "other")


def test_grid_is_multiples_of_the_scale() -> None:
    assert grid(1e2, [0, 1]) == [100, 200, 300, 500, 1000, 2000, 3000, 5000]
    assert grid(1e-6, [-1]) == [1e-7, 2e-7, 3e-7, 5e-7]
    with pytest.raises(ValueError):
        power_of_ten(0.0)


def _ep(rir: float, acc: float) -> dict:
    return {"est_rir": rir, "val_dp_acc": acc}


def test_select_maximises_rir_among_admissible_epochs() -> None:
    cands = [{"epochs": [_ep(1.2, 0.95), _ep(3.0, 0.80)]},  # epoch 2 loses too much D_P accuracy
             {"epochs": [_ep(1.5, 0.94), _ep(1.4, 0.95)], "diverged": None},
             {"epochs": [_ep(math.nan, 0.99)]}]
    assert select(cands, acc_floor=0.9) == (1, 1)
    assert select(cands, acc_floor=0.7) == (0, 2)
    assert select(cands, acc_floor=0.999) is None
