"""One optimizer step of Table 2's official protocol (64-row batches, D = 784, float64) under the three spectral
routes, per method: what the "gram" and "features" routes buy (``pytest --benchmark-only -k immunization_step``;
one benchmark group per method, so pytest-benchmark prints the routes' ratios from one run).

Each timed call is ``step_gradients`` on a fresh step view of the same batch plus the Adam update (the config's
``adam_fused``); data are random (the cost does not depend on the pixels). Before timing, the test checks the
route's gradients against the next slower route (so a fast wrong route cannot pass): "features" against "gram" to
1e-8 relative (equal algebra, measured ~1e-12), "gram" against "dense" to 1e-4 relative: at ridge_H = 1e-7 the
dense route's D x D Cholesky solve is itself off by ~4e-6 from an SVD-based reference (Woodbury by ~1e-13) and its
rounded null eigenvalue moves Opt kappa's gradient by ~1e-7 (docs/reproduction/table2.md, "Spectral routes";
measured here: 2e-6).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kappalab.immunization.config import Extras, MethodConfig  # noqa: E402
from kappalab.immunization.methods import step_gradients  # noqa: E402
from kappalab.immunization.protocols import make_protocol  # noqa: E402
from kappalab.immunization.task import LinearTask  # noqa: E402

D, N_TASK, BATCH = 784, 128, 64
ROUTES = ("dense", "gram", "features")
REFERENCE = {"gram": ("dense", 1e-4), "features": ("gram", 1e-8)}  #: route -> (checked against, relative bound)
METHODS = ("ours", "rill_only", "opt_kappa", "imma")


def _task() -> LinearTask:
    gen = torch.Generator().manual_seed(0)
    X_P = torch.randn(N_TASK, D, generator=gen, dtype=torch.float64).numpy()
    X_H = torch.randn(N_TASK, D, generator=gen, dtype=torch.float64).numpy()
    zeros, ones = X_P[:, 0] * 0.0, X_H[:, 0] * 0.0 + 1.0
    return LinearTask(X_P=X_P, y_P=zeros, X_H=X_H, y_H=ones, loss="bce", name="bench", data_label="random")


def _cfg(method: str, route: str) -> MethodConfig:
    """Table 2's official settings (experiments/configs/table2_official*.json) with the route under test."""
    extra = {"shift": 1e-6, "spectral_route": route, "adam_fused": True, "inner_steps": 1, "inner_lr": 1e-3}
    if method == "rill_only":
        extra["supervised_loss"] = False
    return MethodConfig(method=method, protocol="official", eta=1e-3, lambda_P=0.0 if method == "rill_only" else 1.0,
                        lambda_H=5e7, epochs=1, batch_size=BATCH, ridge_P=1.0, ridge_H=1e-7, extra=Extras.of(extra))


def _setup(method: str, route: str):
    task = _task()
    cfg = _cfg(method, route)
    proto = make_protocol(task, cfg, "cpu")
    p = proto.init_params(0, with_w_H=method == "imma")
    batch = next(proto.batches(torch.Generator().manual_seed(1)))
    opt = torch.optim.Adam(p.all(), lr=cfg.eta, fused=True)
    return proto, p, batch, cfg, opt


def _gradients(method: str, route: str) -> list[torch.Tensor | None]:
    proto, p, batch, cfg, _ = _setup(method, route)
    total, _ = step_gradients(proto, p, batch.for_step(), cfg)
    return [total.get(id(t)) for t in p.all()]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("method", METHODS)
def test_immunization_step(benchmark, method: str, route: str) -> None:
    if route in REFERENCE:
        other, bound = REFERENCE[route]
        for a, b in zip(_gradients(method, route), _gradients(method, other)):
            assert (a is None) == (b is None)
            if b is not None:
                rel = float((a - b).abs().max() / b.abs().max())
                assert rel < bound, (method, route, other, rel)
    proto, p, batch, cfg, opt = _setup(method, route)

    def step() -> None:
        grads, _ = step_gradients(proto, p, batch.for_step(), cfg)
        for param in p.all():
            param.grad = grads.get(id(param))
        opt.step()

    benchmark.group = f"immunization step: {method}"
    benchmark.extra_info.update({"route": route, "D": D, "batch": BATCH, "dtype": "float64",
                                 "threads": torch.get_num_threads()})
    benchmark.pedantic(step, rounds=5, iterations=1, warmup_rounds=1)
