"""The measures a real-network Table 3 record keeps (kappalab.reproduce.table3.measures): the group spectra give back
the "groups" estimator in plain NumPy, the singular values the exact one (at the stored rank tolerance), the
displacement is the relative change of each module, the checkpoints fall where asked."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from kappalab.estimators import estimate_all  # noqa: E402
from kappalab.reproduce.table3.measures import (checkpoint_epochs, displacement, features_rtol,  # noqa: E402
                                                 group_spectra)

N, D, GROUPS, SIZE = 240, 40, 6, 30


def _features(seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    F0 = {t: rng.standard_normal((N, D)) @ np.diag(np.logspace(0, -2, D)) for t in ("P", "H")}
    FI = {"P": F0["P"] + 0.01 * rng.standard_normal((N, D)),
          "H": F0["H"] @ np.diag(np.logspace(0, -1, D))}  # D_H's weak directions weakened: RIR > 1
    return F0, FI


def _kappa_from_singular_values(s: list[float], rtol: float) -> float:
    """Plain NumPy: (s_1 / s_k)^2 with s_k the smallest singular value above rtol * s_1."""
    s = np.sort(np.asarray(s))[::-1]
    kept = s[s > rtol * s[0]]
    return float((kept[0] / kept[-1]) ** 2)


def test_group_spectra_recompute_the_groups_estimator():
    F0, FI = _features(0)
    rtol = features_rtol(SIZE, D)
    spectra = group_spectra(F0, FI, groups=GROUPS, group_size=SIZE, seed=3)
    est = estimate_all(F0["P"], F0["H"], FI["P"], FI["H"], seed=3, groups=GROUPS, group_size=SIZE, n_boot=10,
                       n_boot_exact=0, rtol=rtol)["groups"]
    k = {key: [_kappa_from_singular_values(s, rtol) for s in groups] for key, groups in spectra.items()}
    i_g = np.array(k["H_I"]) / np.array(k["H_0"])
    ii_g = np.array(k["P_I"]) / np.array(k["P_0"])
    assert len(spectra["H_0"]) == GROUPS and len(spectra["H_0"][0]) == SIZE
    assert est.term_i == pytest.approx(i_g.mean(), rel=1e-12)
    assert est.term_ii == pytest.approx(ii_g.mean(), rel=1e-12)
    assert est.rir == pytest.approx((i_g / ii_g).mean(), rel=1e-12) and est.rir > 1.5


def test_singular_values_recompute_the_exact_estimator_at_the_stored_rtol():
    F0, FI = _features(1)
    rtol = features_rtol(N, D)
    est = estimate_all(F0["P"], F0["H"], FI["P"], FI["H"], seed=0, groups=GROUPS, group_size=SIZE, n_boot=10,
                       n_boot_exact=0, rtol=rtol)["exact"]
    sv = {f"{t}_{w}": np.linalg.svd(F[t], compute_uv=False) for w, F in (("0", F0), ("I", FI)) for t in ("P", "H")}
    kappa = {key: _kappa_from_singular_values(s, rtol) for key, s in sv.items()}
    assert est.term_i == pytest.approx(kappa["H_I"] / kappa["H_0"], rel=1e-12)
    assert est.rir == pytest.approx(kappa["H_I"] / kappa["H_0"] / (kappa["P_I"] / kappa["P_0"]), rel=1e-12)
    assert est.ci95 is None and "n_boot_exact = 0" in est.ci_note


def test_features_rtol_is_the_input_precision_rule():
    assert features_rtol(2560, 1280) == 2560 * float(np.finfo(np.float32).eps)
    assert features_rtol(10, 20, np.float64) == 20 * float(np.finfo(np.float64).eps)


def test_float32_inputs_make_a_rounding_level_singular_value_count_as_zero():
    """Features of rank 5 computed from float32 inputs: float64's rule keeps the rounding-level singular values as
    signal (kappa ~ 1e14 and more); the input-precision rule keeps exactly the 5 that are there."""
    rng = np.random.default_rng(0)
    X = (rng.standard_normal((200, 5)) @ rng.standard_normal((5, 30))).astype(np.float32)
    F = X.astype(np.float64) @ rng.standard_normal((30, 30))
    s = np.linalg.svd(F, compute_uv=False)
    assert np.sum(s > features_rtol(*F.shape) * s[0]) == 5
    assert np.sum(s > features_rtol(*F.shape, np.float64) * s[0]) > 5


def test_displacement_is_the_relative_change_per_module():
    base = nn.Sequential()
    base.trainable = nn.Sequential(nn.Linear(3, 3, dtype=torch.float64), nn.Linear(3, 2, dtype=torch.float64))
    base.classifier = nn.Linear(2, 2, dtype=torch.float64)
    import copy

    model = copy.deepcopy(base)
    with torch.no_grad():
        model.trainable[1].weight.mul_(1.5)
        model.trainable[1].bias.mul_(1.5)
    got = displacement(model, base)
    assert set(got) == {"trainable.0", "trainable.1", "classifier"}
    assert got["trainable.0"] == 0 and got["classifier"] == 0
    assert got["trainable.1"] == pytest.approx(0.5, rel=1e-12)


@pytest.mark.parametrize("epochs, expected", [(1, (1,)), (3, (1, 2, 3)), (8, (2, 4, 6, 8)), (23, (6, 12, 17, 23))])
def test_checkpoints_spread_over_training(epochs, expected):
    assert checkpoint_epochs(epochs) == expected


def test_norm_statistics_are_re_estimated_on_the_given_inputs():
    """After ``estimate_norm_statistics(X)`` a BatchNorm layer's running mean and (unbiased) variance are those of its
    own inputs over X, computed here directly; the other parameters and the momentum are untouched."""
    from kappalab.deep import ImmunizableModel

    torch.manual_seed(0)
    lin = nn.Linear(4, 6, dtype=torch.float64)
    bn = nn.BatchNorm1d(6, dtype=torch.float64)
    model = ImmunizableModel(nn.Identity(), nn.Sequential(lin, bn), nn.Identity(), nn.Linear(6, 2, dtype=torch.float64),
                             6, dummy=False)
    X = torch.randn(96, 4, dtype=torch.float64) * 3 + 1
    weight = lin.weight.detach().clone()
    model.estimate_norm_statistics(X, batch_size=32)
    with torch.no_grad():
        Z = lin(X)
    batches = Z.split(32)  # the cumulative average weights each batch equally
    assert torch.allclose(bn.running_mean, torch.stack([b.mean(0) for b in batches]).mean(0), rtol=1e-12)
    assert torch.allclose(bn.running_var, torch.stack([b.var(0) for b in batches]).mean(0), rtol=1e-12)
    assert torch.equal(lin.weight, weight) and bn.momentum == 0.1 and model.training


def test_a_checkpoint_records_the_estimators_and_the_measures_at_its_step():
    from kappalab.reproduce.table3.measures import Checkpoints

    rng = np.random.default_rng(0)
    F0 = {t: rng.standard_normal((40, 6)) for t in ("P", "H")}
    FI = {t: F @ np.diag([1, 1, 1, 1, 1, 1e-2]) for t, F in F0.items()}
    calls = []
    cp = Checkpoints((2, 4), 13, lambda: FI, F0, seed=0, groups=3, group_size=20, rtol=None,
                     measures=lambda: calls.append(1) or {"dp_test_acc": 0.5})
    for epoch in range(1, 5):
        cp(epoch, {"task": float(epoch)})
    assert [c["step"] for c in cp.entries] == [26, 52] and len(calls) == 2
    assert all(c["dp_test_acc"] == 0.5 for c in cp.entries) and cp.entries[1]["train_terms"] == {"task": 4.0}
    # the exact estimator in plain NumPy at the default rank rule max(N, D) eps (well inside: s_min / s_1 ~ 1e-2)
    k = {(t, w): _kappa_from_singular_values(np.linalg.svd(F[t], compute_uv=False), 40 * np.finfo(float).eps)
         for w, F in (("0", F0), ("I", FI)) for t in ("P", "H")}
    exact = (k["H", "I"] / k["H", "0"]) / (k["P", "I"] / k["P", "0"])
    assert cp.entries[0]["estimates"]["exact"]["rir"] == pytest.approx(exact, rel=1e-9)


def test_features_that_collapse_to_zero_end_the_run_as_diverged_with_the_checkpoints_so_far():
    """A tail whose activations all died gives zero held-out features: kappa is undefined, so the checkpoint raises
    what train_measured records as a divergence (naming the task and the epoch), and the earlier checkpoints stay."""
    from kappalab.deep.train import DIVERGED
    from kappalab.errors import CollapsedFeaturesError
    from kappalab.reproduce.table3.measures import Checkpoints

    rng = np.random.default_rng(2)
    F0 = {t: rng.standard_normal((30, 4)) for t in ("P", "H")}
    live = {"H": F0["H"]}
    cp = Checkpoints((1, 2), 5, lambda: {"P": F0["P"], "H": live["H"]}, F0, seed=0, groups=2, group_size=10,
                     rtol=None)
    cp(1, {"task": 1.0})
    live["H"] = np.zeros_like(F0["H"])
    with pytest.raises(CollapsedFeaturesError, match="epoch 2: .* of D_H are all zero") as raised:
        cp(2, {"task": 2.0})
    assert isinstance(raised.value, DIVERGED) and [c["epoch"] for c in cp.entries] == [1]


def test_a_row_group_of_features_that_collapsed_to_zero_ends_the_run_as_diverged():
    """Features that are not all zero, but zero on every row of one of the group estimator's row groups, leave that
    group's kappa undefined: the checkpoint raises the same divergence, naming the epoch (a grid run of the official
    protocol met this at eta 1e-3, multiple 10, and its traceback stopped the sweep)."""
    from kappalab.deep.train import DIVERGED
    from kappalab.errors import CollapsedFeaturesError
    from kappalab.estimators import random_groups
    from kappalab.reproduce.table3.measures import Checkpoints

    rng = np.random.default_rng(3)
    F0 = {t: rng.standard_normal((30, 4)) for t in ("P", "H")}
    first_group = random_groups(30, 2, 10, np.random.default_rng(0))[0]  # the estimator's first D_H group (seed 0)
    FH = np.zeros_like(F0["H"])
    live_row = next(i for i in range(30) if i not in first_group)
    FH[live_row] = 1.0
    cp = Checkpoints((1,), 5, lambda: {"P": F0["P"], "H": FH}, F0, seed=0, groups=2, group_size=10, rtol=None)
    with pytest.raises(CollapsedFeaturesError, match="epoch 1: a row group of theta_I's held-out features is all zero"
                       ) as raised:
        cp(1, {"task": 1.0})
    assert FH.any() and isinstance(raised.value, DIVERGED) and cp.entries == []


def test_kept_checkpoints_survive_a_resume_and_a_retrained_epoch_replaces_its_entry(tmp_path):
    """A training that resumes from its epoch checkpoint records the checkpoints its earlier process measured (read
    back from ``keep``); an epoch trained again (the process died after measuring it, before saving it) replaces
    its entry instead of adding a second one."""
    from kappalab.reproduce.table3.measures import Checkpoints

    rng = np.random.default_rng(1)
    F0 = {t: rng.standard_normal((30, 4)) for t in ("P", "H")}
    keep = tmp_path / "ours.checkpoints.json"

    def checkpoints(features):
        return Checkpoints((1, 2, 3), 5, lambda: features, F0, seed=0, groups=2, group_size=10, rtol=None, keep=keep)

    first = checkpoints({t: 2 * F for t, F in F0.items()})
    first(1, {"task": 1.0})
    first(2, {"task": 2.0})
    resumed = checkpoints({t: F @ np.diag([1, 1, 1, 0.5]) for t, F in F0.items()})
    assert resumed.entries == first.entries  # what the first process measured, read back
    resumed(2, {"task": 2.5})  # epoch 2 again
    resumed(3, {"task": 3.0})
    assert [(c["epoch"], c["train_terms"]["task"]) for c in resumed.entries] == [(1, 1.0), (2, 2.5), (3, 3.0)]
    assert [c["epoch"] for c in checkpoints(F0).entries] == [1, 2, 3]  # the file holds them all


def test_same_features_accepts_summation_order_and_refuses_another_model():
    from kappalab.reproduce.table3.measures import KEPT_FEATURES_RTOL, same_features

    kept = np.random.default_rng(0).standard_normal((40, 12))
    scale = np.abs(kept).max()
    assert same_features(kept * (1 + 4 * np.finfo(float).eps), kept)  # a few ulps: another summation order
    assert not same_features(kept + 10 * KEPT_FEATURES_RTOL * scale, kept)  # another model's features
    assert not same_features(kept[:-1], kept)
