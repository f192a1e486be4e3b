"""The attackers that change a deep extractor (kappalab.attack.deep_attackers): fine-tuning and peft's LoRA on a small
convolutional tail shaped like EfficientNet-Lite0's (1 x 1 expansion, BatchNorm, depthwise, 1 x 1 projection, pool).

The LoRA cases need peft (the deep environment: scripts/setup_deep.sh) and are skipped, saying so, where it is not
installed; fine-tuning and the measures run with torch alone, in every environment.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from kappalab.attack.deep_attackers import DeepExtractor, _conv_targets, deep_attack
from kappalab.attack.measures import attack
from kappalab.attack.problem import Split
from kappalab.attack.registry import FUNCTIONS, Attacker, Model
from kappalab.deep import ImmunizableModel, extract_features


def _needs_peft(rank):
    if rank is not None:
        pytest.importorskip("peft", reason="LoRA is peft's: the deep environment (scripts/setup_deep.sh)")

C_IN, SIDE, D = 6, 3, 12


def _model(dtype: torch.dtype = torch.float32) -> ImmunizableModel:
    torch.manual_seed(0)
    tail = nn.Sequential(nn.Conv2d(C_IN, 16, 1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.Conv2d(16, D, 1), nn.BatchNorm2d(D))
    neck = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
    model = ImmunizableModel(nn.Identity(), tail.to(dtype), neck, nn.Linear(D, 10, dtype=torch.float64), D,
                             dummy=True)
    X = torch.randn(64, C_IN, SIDE, SIDE, dtype=dtype)
    model.estimate_norm_statistics(X)  # running statistics that are not the defaults
    return model.eval()


def _data(n: int = 48) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((n, C_IN * SIDE * SIDE)).astype(np.float32).astype(np.float64)
    return X, np.eye(10)[rng.integers(0, 10, n)]


def test_lora_adapts_the_groups_1_convolutions_only():
    assert _conv_targets(_model()) == ["0", "4"]  # the 1 x 1 convolutions; the depthwise one (3) keeps theta_I


@pytest.mark.parametrize("rank", [None, 2])
def test_a_step_at_rate_zero_is_theta_I_itself(rank):
    """peft starts B at zero and a zero rate moves nothing: the snapshot's features are theta_I's exactly (adding a
    zero update is exact), and its probe is zero."""
    _needs_peft(rank)
    model = _model()
    X, Y = _data()
    extractor = DeepExtractor(model, (C_IN, SIDE, SIDE))
    snap = next(deep_attack(extractor, X, Y, seed=0, optimizer="adam", lr=0.0, batch_size=16, rank=rank))
    expected = extract_features(model, extractor.rows(X)).numpy()
    assert np.array_equal(snap.features(X), expected)
    assert not snap.W.any() and np.array_equal(snap.predict(X), np.zeros_like(Y))


def test_lora_trains_the_adapters_and_the_probe_not_theta_I():
    _needs_peft(2)
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    X, Y = _data()
    steps = deep_attack(DeepExtractor(model, (C_IN, SIDE, SIDE)), X, Y, seed=0, optimizer="adam", lr=1e-2,
                        batch_size=16, rank=2)
    snaps = [next(steps) for _ in range(30)]
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items()), "the attack changed theta_I"
    last = snaps[-1].model.state_dict()
    base = {k.replace(".base_layer", ""): v for k, v in last.items() if "lora_" not in k}
    assert all(torch.equal(base[k], v) for k, v in before.items() if k in base), "LoRA moved a base weight"
    assert any("lora_B" in k and v.abs().max() > 0 for k, v in last.items()), "the adapters did not train"
    start = float(np.sum(Y * Y)) / (2 * len(Y))
    losses = [float(np.sum((s.predict(X) - Y) ** 2)) / (2 * len(Y)) for s in (snaps[0], snaps[-1])]
    assert losses[1] < losses[0] < start


def test_fine_tuning_moves_the_tail_and_a_kept_snapshot_stays_as_it_was():
    model = _model()
    X, Y = _data()
    steps = deep_attack(DeepExtractor(model, (C_IN, SIDE, SIDE)), X, Y, seed=0, optimizer="sgd", lr=0.05,
                        batch_size=16)
    first = next(steps)
    kept = first.predict(X)
    for _ in range(20):
        last = next(steps)
    assert np.array_equal(first.predict(X), kept), "a snapshot followed the live model"
    moved = [k for k, v in last.model.state_dict().items() if k.startswith("trainable.") and v.dtype.is_floating_point
             and not torch.equal(v, model.state_dict()[k])]
    assert any(k.endswith("weight") for k in moved)
    assert not any("running" in k for k in moved), "BatchNorm statistics changed: the attack must run in eval mode"


def test_the_attack_measures_read_a_deep_model_through_its_predictions():
    """measures.attack on a deep model: the curve starts at ||Y||^2 / 2N (probe zero), every finite entry is the
    snapshot's own loss, and the rounding slack is positive and below the loss (float32 tail: (k + 3) u)."""
    model = _model()
    X, Y = _data(60)
    extractor = DeepExtractor(model, (C_IN, SIDE, SIDE))
    inputs = Split.of(X, Y, seed=0)
    features = Split.of(extract_features(model, extractor.rows(X)).numpy(), Y, seed=0)
    m = Model(features, inputs, None, deep=extractor)
    attacker = Attacker("finetune", True, ({"optimizer": "adam", "lr": 1e-2},), FUNCTIONS["finetune"][1])
    run = attack(m, attacker, 0, budgets=(1, 5), steps=10, batch_size=12, selection_budget=5)
    A, Yt = inputs.train
    assert run.curve[0] == float(np.sum(Yt * Yt)) / (2 * len(Yt))
    assert np.all(np.isfinite(run.curve)) and run.curve[-1] < run.curve[0]
    assert 0 < run.slack < run.curve[-1]
    assert all(math.isfinite(v["test"]) for v in run.at_budget.values())


def test_d_p_utility_under_a_deep_attacker_is_read_with_the_probe_fitted_before_it():
    """measures.attack with a DeepDPProbe: step 0 reads the probe's own least-squares fit on the tail's features
    (checked against numpy's lstsq); at each budget the fixed probe is read on the features of the tail the attacker
    left there, which a second run of the same seeded attack reproduces (the snapshots are not kept); the extractor
    before the attack keeps its eval mode and weights."""
    from kappalab.attack.utility import DeepDPProbe

    model = _model()
    X, Y = _data(60)
    rng = np.random.default_rng(5)
    AP = rng.standard_normal((40, C_IN * SIDE * SIDE)).astype(np.float32).astype(np.float64)
    YP = np.eye(10)[rng.integers(0, 10, 40)]
    extractor = DeepExtractor(model, (C_IN, SIDE, SIDE))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    probe = DeepDPProbe.of(AP, YP, extractor)
    F0 = extract_features(model, extractor.rows(AP)).numpy()
    W_ref = np.linalg.lstsq(F0, YP, rcond=None)[0]
    ref = float(np.sum((F0 @ W_ref - YP) ** 2)) / (2 * len(YP))
    assert abs(probe.loss_before - ref) <= 1e-9 * max(ref, 1.0)
    assert not model.training and all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())

    inputs = Split.of(X, Y, seed=0)
    m = Model(Split.of(extract_features(model, extractor.rows(X)).numpy(), Y, seed=0), inputs, None, deep=extractor,
              dp=probe)
    params = {"optimizer": "sgd", "lr": 0.5}
    attacker = Attacker("finetune", True, (params,), FUNCTIONS["finetune"][1])
    run = attack(m, attacker, 0, budgets=(1, 5), steps=10, batch_size=12, selection_budget=5)
    assert run.dp is not None and sorted(run.dp.loss) == [0, 1, 5] and run.dp.loss[0] == probe.loss_before
    steps = deep_attack(extractor, *inputs.train, seed=0, batch_size=12, **params)
    snaps = [next(steps) for _ in range(5)]
    for b in (1, 5):
        expected = float(np.sum((snaps[b - 1].features(AP) @ probe.W - YP) ** 2)) / (2 * len(YP))
        assert abs(run.dp.loss[b] - expected) <= 1e-12 * expected
    assert run.dp.loss[5] != run.dp.loss[0], "the attack left the tail's D_P features where they were"
    assert run.dp.as_dict()["at_step"]["0"]["kept"] == 1.0
