"""Table 3's selection of a setting (kappalab.reproduce.table3.grid): the grid, the rule on the validation part, what
the decision table then reads, the validation part's draw, and the validation measures of a run."""

from __future__ import annotations

import types

import numpy as np
import pytest

from kappalab.reproduce.table3.decision import decide, decision_table
from kappalab.reproduce.table3.grid import GRID, choose, grid_points, grid_points_of, selected


def _record(method: str, seed: int, eta: float, multiple: float, *, val_acc: float, val_rir: float | None = None,
            test_acc: float = 0.8, rir: float = 1.0) -> dict:
    """A record with what the selection and the decision table read."""
    config = {"eta": eta} if multiple == 1.0 else {"eta": eta, "lambda_multiple": multiple}
    record = {"method": method, "seed": seed, "identity": {"config": config}, "utility": {"dp_test_acc": test_acc},
              "validation": {"dp_acc": val_acc}}
    if method != "init":
        record["validation"]["rir_groups"] = val_rir
        record["estimates"] = {e: {"rir": rir, "ci95": (0.9 * rir, 1.1 * rir)} for e in ("groups", "authors")}
        record["estimates"]["exact"] = {"rir": rir}
    return record


def _inits(seeds=(0,), acc: float = 0.80) -> list[dict]:
    return [_record("init", s, eta, m, val_acc=acc) for s in seeds for eta in GRID["eta"]
            for m in GRID["lambda_multiple"]]


def test_the_grid_is_eta_times_the_lambda_multiple_and_eta_alone_without_a_lambda():
    assert len(grid_points("ours")) == len(GRID["eta"]) * len(GRID["lambda_multiple"]) == 9
    assert grid_points("task_only") == [{"eta": eta, "lambda_multiple": 1.0} for eta in GRID["eta"]]
    assert grid_points_of(["task_only"]) == grid_points("task_only")
    assert grid_points_of(["task_only", "oracle"]) == grid_points("oracle")
    assert 1e-5 in GRID["eta"] and {1e-4, 1e-3} <= set(GRID["eta"])  # Table 4's rate, and two with power


def test_the_largest_validation_rir_among_the_settings_that_keep_utility_is_chosen():
    runs = [_record("ours", 0, 1e-3, 100.0, val_acc=0.70, val_rir=50.0),  # largest RIR, 10 points lost
            _record("ours", 0, 1e-3, 10.0, val_acc=0.78, val_rir=9.0),  # exactly 2 points (10 of 500): kept
            _record("ours", 0, 1e-4, 1.0, val_acc=0.80, val_rir=3.0)]
    choice = choose(_inits() + runs, "ours")
    assert choice.setting == (1e-3, 10.0) and choice.rir_groups == 9.0 and choice.candidates == 3
    assert choice.accuracy_drop == pytest.approx(2.0)


def test_when_no_setting_keeps_utility_the_least_damaging_is_read_and_flagged_and_ties_go_to_the_earlier_point():
    lost = [_record("ours", 0, 1e-5, 1.0, val_acc=0.70, val_rir=9.0),  # 10 points lost
            _record("ours", 0, 1e-4, 1.0, val_acc=0.75, val_rir=2.0),  # 5 points: the least damaging
            _record("ours", 0, 1e-3, 1.0, val_acc=0.50, val_rir=90.0)]
    choice = choose(_inits() + lost, "ours")
    assert choice.setting == (1e-4, 1.0) and not choice.kept_utility
    assert choice.accuracy_drop == pytest.approx(5.0) and choice.rir_groups == 2.0
    equal_drops = [_record("ours", 0, 1e-5, m, val_acc=0.75, val_rir=r) for m, r in ((1.0, 2.0), (10.0, 3.0))]
    assert choose(_inits() + equal_drops, "ours").setting == (1e-5, 10.0)  # equal drops: the larger RIR
    tied = [_record("rill_only", 0, eta, 1.0, val_acc=0.8, val_rir=4.0) for eta in reversed(GRID["eta"])]
    choice = choose(_inits() + tied, "rill_only")
    assert choice.setting == (GRID["eta"][0], 1.0) and choice.kept_utility


def test_seeds_added_at_the_choice_do_not_change_it():
    grid = [_record("ours", 0, 1e-5, 1.0, val_acc=0.75, val_rir=1.0),  # the least damaging at seed 0
            _record("ours", 0, 1e-4, 1.0, val_acc=0.74, val_rir=3.0)]
    more = [_record("ours", s, 1e-5, 1.0, val_acc=0.60, val_rir=1.0) for s in (1, 2)]  # worse at seeds 1-2
    before, after = choose(_inits() + grid, "ours"), choose(_inits((0, 1, 2)) + grid + more, "ours")
    assert before == after and after.setting == (1e-5, 1.0)  # compared on seed 0, the seed both settings ran


def test_the_worst_seed_decides_whether_a_setting_keeps_utility_and_the_mean_ranks_it():
    runs = [_record("ours", 0, 1e-3, 1.0, val_acc=0.80, val_rir=30.0),
            _record("ours", 1, 1e-3, 1.0, val_acc=0.75, val_rir=30.0),  # seed 1 loses 5 points
            _record("ours", 0, 1e-4, 1.0, val_acc=0.80, val_rir=2.0),
            _record("ours", 1, 1e-4, 1.0, val_acc=0.80, val_rir=4.0)]
    choice = choose(_inits((0, 1)) + runs, "ours")
    assert choice.setting == (1e-4, 1.0) and choice.rir_groups == pytest.approx(3.0)


def test_the_table_reads_a_gridded_method_at_its_choice_and_a_fixed_setting_as_it_is():
    runs = [_record("ours", 0, 1e-3, 1.0, val_acc=0.60, val_rir=40.0, rir=40.0),
            _record("ours", 0, 1e-4, 1.0, val_acc=0.80, val_rir=5.0, rir=6.0),
            _record("oracle", 0, 1e-3, 1.0, val_acc=0.5, val_rir=90.0, rir=80.0),
            _record("task_only", 0, 1e-3, 1.0, val_acc=0.8, val_rir=1.0, rir=1.0)]
    kept, choices = selected(_inits() + runs)
    assert set(choices) == {"ours"}  # the controls ran at one setting: read as they are
    assert [(r["method"], r["identity"]["config"]["eta"]) for r in kept if r["method"] != "init"] == [
        ("ours", 1e-4), ("oracle", 1e-3), ("task_only", 1e-3)]
    rows = {row.method: row for row in decide(_inits() + runs)}
    assert rows["ours"].rir["groups"] == 6.0 and rows["ours"].setting == "0.0001, x1 (selected, 2 of 9 grid points run)"
    assert rows["task_only"].setting == "0.001" and rows["ours"].verdict == "immunizes"
    assert "| 0.0001, x1 (selected, 2 of 9 grid points run) |" in decision_table({"t": _inits() + runs})


def test_the_validation_part_is_drawn_after_the_others_without_moving_them(monkeypatch):
    from kappalab.reproduce.table3 import real_data

    rng = np.random.default_rng(0)

    def fake(name: str, split: str):
        n = 400 if split == "train" else 100
        return types.SimpleNamespace(images=rng.integers(0, 255, (n, 28, 28), dtype=np.uint8),
                                     labels=np.arange(n) % 10, sha256=f"{name}-{split}")

    datasets = {split: fake("d", split) for split in ("train", "test")}
    monkeypatch.setattr(real_data, "load_dataset", lambda name, split: datasets[split])
    base = {"train": 8, "heldout": 12, "test": 5}
    without = real_data.draw_parts("d", base, seed=3)
    with_val = real_data.draw_parts("d", {**base, "validation": 6}, seed=3)
    for part in base:
        np.testing.assert_array_equal(without.rows[part], with_val.rows[part])
    assert "validation" not in without.identity()["sizes"] and with_val.identity()["sizes"]["validation"] == 60
    val = with_val.rows["validation"]
    assert len(val) == 60 and not set(val) & (set(with_val.rows["train"]) | set(with_val.rows["heldout"]))
    assert np.bincount(datasets["train"].labels[val]).tolist() == [6] * 10
    with pytest.raises(ValueError, match="fewer than"):
        real_data.draw_parts("d", {**base, "validation": 30}, seed=3)  # 40 images per class in all


def test_the_validation_measures_read_the_validation_part_alone():
    torch = pytest.importorskip("torch")
    from torch import nn

    from kappalab.deep import ImmunizableModel
    from kappalab.reproduce.table3.real import RealData, validation_measures

    g = torch.Generator().manual_seed(0)
    d_in, d, n = 6, 4, 24

    def model(scale: float) -> ImmunizableModel:
        trainable = nn.Linear(d_in, d, dtype=torch.float64)
        with torch.no_grad():
            trainable.weight.copy_(torch.eye(d, d_in, dtype=torch.float64) + scale * torch.arange(
                d * d_in, dtype=torch.float64).reshape(d, d_in) / (d * d_in))
            trainable.bias.zero_()
        return ImmunizableModel(nn.Identity(), trainable, nn.Identity(), nn.Linear(d, 3, dtype=torch.float64), d,
                                dummy=False)

    X = {(t, "validation"): torch.randn(n, d_in, generator=g, dtype=torch.float64) for t in ("P", "H")}
    y = {(t, "validation"): torch.randint(0, 3, (n,), generator=g) for t in ("P", "H")}
    data = RealData(parts={}, X=X, y=y, trunk={}, weights_sha256="", load={})
    cfg = types.SimpleNamespace(rir_groups=3, rir_group_size=n)  # every group holds all rows: the exact RIR
    theta0, thetaI = model(0.0), model(0.8)
    with torch.no_grad():
        F0 = {t: theta0.features(X[t, "validation"]).numpy() for t in ("P", "H")}
        FI = {t: thetaI.features(X[t, "validation"]).numpy() for t in ("P", "H")}
    at_init = validation_measures(theta0, data, None, cfg, seed=0, rtol=None)
    assert set(at_init) == {"dp_acc"} and 0 <= at_init["dp_acc"] <= 1
    assert validation_measures(theta0, data, F0, cfg, seed=0, rtol=None)["rir_groups"] == pytest.approx(1.0,
                                                                                                          rel=1e-12)

    def kappa(F: np.ndarray) -> float:  # plain NumPy: the eigenvalues of F^T F are the squared singular values
        s = np.linalg.svd(F, compute_uv=False)
        return float((s[0] / s[-1]) ** 2)

    expected = (kappa(FI["H"]) / kappa(F0["H"])) / (kappa(FI["P"]) / kappa(F0["P"]))
    # kappas of order 10 from 24 x 4 full-rank features: both routes round at ~1e-14 relative, far inside 1e-9
    assert expected != pytest.approx(1.0, rel=1e-3)  # the perturbation moved the measure
    assert validation_measures(thetaI, data, F0, cfg, seed=0, rtol=None)["rir_groups"] == pytest.approx(
        expected, rel=1e-9)


def test_a_setting_that_diverged_on_some_seed_is_not_chosen():
    diverged = {k: v for k, v in _record("ours", 1, 1e-3, 1.0, val_acc=0.0).items() if k != "validation"}
    runs = [_record("ours", 0, 1e-3, 1.0, val_acc=0.80, val_rir=30.0),
            {**diverged, "diverged": "FloatingPointError: ours: non-finite loss during epoch 3"},
            _record("ours", 0, 1e-4, 1.0, val_acc=0.80, val_rir=2.0),
            _record("ours", 1, 1e-4, 1.0, val_acc=0.80, val_rir=4.0)]
    assert choose(_inits((0, 1)) + runs, "ours").setting == (1e-4, 1.0)


def test_a_method_with_no_setting_that_keeps_utility_gets_its_least_damaging_row_read_as_utility_lost():
    runs = [_record("ours", 0, eta, 1.0, val_acc=0.5, val_rir=9.0, rir=30.0) for eta in GRID["eta"]]  # test acc kept
    runs += [_record(m, 0, 1e-3, 1.0, val_acc=0.8, val_rir=1.0) for m in ("oracle", "task_only")]
    diverged = {k: v for k, v in _record("imma", 0, 1e-5, 1.0, val_acc=0.0).items() if k != "validation"}
    runs += [{**diverged, "identity": {"config": {"eta": eta}}, "diverged": "FloatingPointError: imma"}
             for eta in GRID["eta"]]
    rows = {row.method: row for row in decide(_inits() + runs)}
    assert rows["ours"].n == 1 and rows["ours"].rir["groups"] == 30.0 and rows["ours"].accuracy_drop == 0.0
    assert rows["ours"].setting == "1e-05, x1 (least damaging: none kept utility; 3 of 9 grid points run)"
    assert rows["ours"].verdict == "utility lost (validation, every setting)"  # not "immunizes" on the test part
    assert rows["imma"].n == 0 and rows["imma"].verdict == "every setting diverged"
