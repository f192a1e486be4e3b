"""One optimizer step of the deep nets' Table 3 under the two spectral routes (``pytest --benchmark-only -k
deep_step``; one group per method and protocol, so pytest-benchmark prints the routes' ratio from one run).

The model is EfficientNet-Lite0's trained tail as Table 3 trains it, with random weights (the cost does not depend
on them): cached trunk activations ``64 x 320 x 7 x 7`` -> 1x1 conv to 1280 channels, BatchNorm, ReLU6, global
pooling -> the 1280 x 1280 dummy layer (paper protocol) -> a 10-class head; float64, SGD with Nesterov momentum
(:func:`kappalab.deep.train.make_optimizer`). ``"dense"`` forms ``H~`` (1280 x 1280) and solves the dummy layer's
preconditioner at that size; ``"gram"`` works on the 64 x 64 minibatch Gram matrix (:mod:`kappalab.deep.methods`).
Before timing, the gram route's gradients are checked against the dense route's to 1e-8 relative at a dummy ridge
of 1e-2, where the dense route's own rounding (``eps s_max(Z^T Z) / ridge``, 3e-10 here) allows that check; at the
paper's ridge 1e-6 (timed) that bound is 3e-6 and the dense route is the inaccurate one (tests/test_deep_gram_route.py
compares both with an SVD reference). Each timed round starts from the same theta_0 (``setup``), so the rounds time
the same step.

``test_deep_step_tail_precision`` times the real network's step (the gram route, Ours, paper protocol) with its tail
in float64 and in float32 (``--set tail_precision=float32``): the tail shaped as EfficientNet-Lite0's from
``blocks.6`` at 112 px (trunk activations ``64 x 192 x 4 x 4`` -> MBConv 192 -> 1152 -> depthwise 5 x 5 -> 320 ->
``conv_head`` 1280, BatchNorm and ReLU6, pooled), random weights; the features are float64 either way.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from kappalab.deep import ImmunizableModel, ObjectiveConfig, objective_terms, weighted_loss  # noqa: E402
from kappalab.deep.methods import regularizer  # noqa: E402
from kappalab.deep.train import TrainConfig, make_optimizer  # noqa: E402

BATCH, C_IN, SIDE, D = 64, 320, 7, 1280
ROUTES = ("dense", "gram")


def _model(protocol: str, ridge: float = 1e-6) -> ImmunizableModel:
    torch.manual_seed(0)
    trainable = nn.Sequential(nn.Conv2d(C_IN, D, 1, bias=False), nn.BatchNorm2d(D), nn.ReLU6())
    neck = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
    model = ImmunizableModel(nn.Identity(), trainable, neck, nn.Linear(D, 10), D, dummy=protocol == "paper",
                             ridge=ridge)
    return model.to(torch.float64)


def _batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, C_IN, SIDE, SIDE, generator=g, dtype=torch.float64),
             torch.randint(0, 10, (BATCH,), generator=g)) for _ in range(2)]


def _cfg(protocol: str, route: str) -> ObjectiveConfig:
    return ObjectiveConfig(lambda_P=1.0, lambda_H=1.0, lambda_kappa=1e-3, harmful_classes=10, protocol=protocol,
                           official_k=224, spectral_route=route, on_degenerate="ignore")


def _step(model, method, protocol, route, batches, opt=None):
    cfg = _cfg(protocol, route)
    model.zero_grad(set_to_none=True)
    weighted_loss(objective_terms(model, method, *batches, cfg), cfg).backward()
    if opt is not None:
        opt.step()


def _gradients(method: str, protocol: str, route: str) -> list[torch.Tensor]:
    model = _model(protocol, ridge=1e-2)
    _step(model, method, protocol, route, _batches())
    return [p.grad for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("method,protocol", [("ours", "paper"), ("rill_only", "paper"), ("opt_kappa", "paper"),
                                             ("ours", "official")])
def test_deep_step(benchmark, threads: int, method: str, protocol: str, route: str) -> None:
    if route == "gram":
        for a, b in zip(_gradients(method, protocol, "gram"), _gradients(method, protocol, "dense"), strict=True):
            rel = float((a - b).abs().max() / b.abs().max())
            assert rel < 1e-8, (method, protocol, rel)
    theta0, batches = _model(protocol), _batches()

    def setup():
        model = copy.deepcopy(theta0)
        return (model, method, protocol, route, batches, make_optimizer(model, TrainConfig(lr=1e-4))), {}

    benchmark.group = f"deep step: {method}, {protocol} protocol"
    benchmark.extra_info.update({"route": route, "D": D, "batch": BATCH, "dtype": "float64", "threads": threads})
    benchmark.pedantic(_step, setup=setup, rounds=3, iterations=1, warmup_rounds=1)


@pytest.mark.parametrize("route", ROUTES)
def test_deep_regularizers(benchmark, threads: int, route: str) -> None:
    """The part of the step the route changes: Ours' two regularizers and their backward through the dummy layer,
    from the pre-features ``Z`` (64 x 1280) of both tasks (the network's own forward and backward excluded)."""
    g = torch.Generator().manual_seed(2)
    Z_P, Z_H = (torch.randn(BATCH, D, generator=g, dtype=torch.float64) for _ in range(2))
    model = _model("paper")
    cfg = _cfg("paper", route)

    def regularizers() -> None:
        model.zero_grad(set_to_none=True)
        F_P = model.head_features(Z_P, precondition=True, route=route)
        F_H = model.head_features(Z_H, precondition=True, route=route)
        loss = regularizer("r_well", F_P, cfg) + regularizer("r_ill", F_H, cfg)
        loss.backward()

    benchmark.group = "deep step: Ours' regularizers and the dummy layer's backward"
    benchmark.extra_info.update({"route": route, "D": D, "batch": BATCH, "dtype": "float64", "threads": threads})
    benchmark.pedantic(regularizers, rounds=5, iterations=1, warmup_rounds=1)


def _lite0_tail(dtype: torch.dtype) -> ImmunizableModel:
    torch.manual_seed(0)
    wide = 1152

    def conv(c_in: int, c_out: int, k: int = 1, groups: int = 1) -> list[nn.Module]:
        return [nn.Conv2d(c_in, c_out, k, padding=k // 2, groups=groups, bias=False), nn.BatchNorm2d(c_out)]

    trainable = nn.Sequential(*conv(192, wide), nn.ReLU6(), *conv(wide, wide, 5, wide), nn.ReLU6(), *conv(wide, 320),
                              *conv(320, D), nn.ReLU6()).to(dtype)
    neck = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
    return ImmunizableModel(nn.Identity(), trainable, neck, nn.Linear(D, 10).double(), D, dummy=True)


@pytest.mark.parametrize("tail", ["float64", "float32"])
def test_deep_step_tail_precision(benchmark, threads: int, tail: str) -> None:
    dtype = getattr(torch, tail)
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(BATCH, 192, 4, 4, generator=g, dtype=torch.float64).to(dtype),
                torch.randint(0, 10, (BATCH,), generator=g)) for _ in range(2)]
    theta0 = _lite0_tail(dtype)
    assert theta0.features(batches[0][0]).dtype == torch.float64

    def setup():
        model = copy.deepcopy(theta0)
        return (model, "ours", "paper", "gram", batches, make_optimizer(model, TrainConfig(lr=1e-4))), {}

    benchmark.group = "deep step: EfficientNet-Lite0's tail in float64 and float32 (Ours, paper, gram route)"
    benchmark.extra_info.update({"tail": tail, "D": D, "batch": BATCH, "threads": threads})
    benchmark.pedantic(_step, setup=setup, rounds=3, iterations=1, warmup_rounds=1)
