"""The official protocol's "features" route equals its "gram" route, and the "gram" route the dense one, up to
rounding.

Route "features" differentiates each term with respect to the step's features ``Phi = X theta + 1 b^T`` and maps
the result back: theta's gradient ``X_P^T M_P + X_H^T M_H``, a preconditioned term's ``M`` through
:func:`woodbury_features`, IMMA's inner step in feature space with the kernel ``X X_H^T + 1 1^T``. Every identity is
exact in exact arithmetic, so the two routes must agree to a small multiple of float64 rounding: per step to
1e-10 relative (a few dozen operations of condition ~1e3 on eps = 2.2e-16 leave ~1e-12; 1e-10 leaves room and
would still catch any missing term, whose size is O(1) relative), over a 10-step Adam run to 1e-8 (Adam divides by
sqrt(v) + eps, which can amplify a rounding difference in a tiny gradient entry; the same bound as the gram-vs-dense
test).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kappalab.immunization import immunize
from kappalab.immunization.config import Extras, MethodConfig
from kappalab.immunization.methods import TERMS, Term, step_gradients
from kappalab.immunization.protocols import make_protocol
from kappalab.immunization.task import LinearTask
from kappalab.woodbury import woodbury_features, woodbury_precondition

SHIFT = 1e-6
METHODS = ["ours", "rill_only", "opt_kappa", "imma"]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def _first_step(task: LinearTask, cfg: MethodConfig, batch_seed: int = 0):
    """(protocol, parameters at seed 0, a fresh step view of the first batch) of ``cfg`` on ``task``."""
    proto = make_protocol(task, cfg, "cpu")
    p = proto.init_params(0, with_w_H=cfg.method == "imma")
    return proto, p, next(proto.batches(torch.Generator().manual_seed(batch_seed))).for_step()


def _cfg(method: str, route: str, **extra_changes) -> MethodConfig:
    extra = {"shift": SHIFT, "spectral_route": route, "inner_steps": 2, **extra_changes}
    if method == "rill_only":
        extra["supervised_loss"] = False
    return MethodConfig(method=method, protocol="official", eta=1e-3, lambda_P=1.0 if method != "rill_only" else 0.0,
                        lambda_H=10.0, epochs=2, batch_size=8, ridge_P=1.0, ridge_H=1e-2, extra=Extras.of(extra))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("side", ["output", "input"])
@pytest.mark.parametrize("ridge", [1e-7, 1e-2, 1.0])
def test_woodbury_features_maps_back_to_the_preconditioned_gradient(seed, side, ridge):
    """Reference: ``(X^T X + r I)^{-1} = V diag(1 / (s^2 + r)) V^T`` from the full SVD of X (orthogonal factors
    only). Tolerance: the map's condition number ``1 + s_max^2 / r`` times 64 eps. It is the problem's, not the
    method's: the input side of a gradient with a rounding-level component in null(X) divides that component by
    r (measured: both Woodbury forms ~1e-7 from the reference at r = 1e-7, the output side ~1e-15 at every r)."""
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(9, 25, generator=gen, dtype=torch.float64)
    M = torch.randn(9, 25, generator=gen, dtype=torch.float64)
    _, s, Vh = torch.linalg.svd(X, full_matrices=True)
    s2 = torch.zeros(25, dtype=torch.float64)
    s2[:9] = s ** 2
    inverse = Vh.T @ torch.diag(1.0 / (s2 + ridge)) @ Vh
    G = X.T @ M
    reference = G @ inverse if side == "output" else inverse @ G
    tol = 64 * torch.finfo(torch.float64).eps * (1.0 + float(s[0]) ** 2 / ridge)
    cache: dict = {}
    mapped = X.T @ woodbury_features(M, X, ridge, side, cache, "H")
    direct = woodbury_precondition(G, X, ridge, side, cache, "H")
    assert len(cache) == 1  # the N x N factor is shared by both functions
    assert _rel(mapped, reference) < tol, (side, ridge, _rel(mapped, reference), tol)
    assert _rel(direct, reference) < tol, (side, ridge, _rel(direct, reference), tol)
    with pytest.raises(ValueError, match="side"):
        woodbury_features(M, X, ridge, "left")


@pytest.mark.parametrize("method", METHODS)
def test_one_step_gradients_equal_the_gram_route(method, toy_bce_task):
    task = toy_bce_task(1)
    grads = {}
    for route in ("gram", "features"):
        cfg = _cfg(method, route)
        proto, p, batch = _first_step(task, cfg, batch_seed=1)
        assert proto.feature_space(batch) == (route == "features")
        total, _ = step_gradients(proto, p, batch, cfg)
        grads[route] = [total.get(id(t)) for t in p.all()]
    for name, a, b in zip(["theta", "bias", "w_P", "w_H"], grads["features"], grads["gram"]):
        assert (a is None) == (b is None), (method, name)  # R_ill Only leaves the head alone on both routes
        if b is not None:
            assert _rel(a, b) < 1e-10, (method, name, _rel(a, b))


def test_imma_inner_step_in_feature_space_equals_the_parameter_step(toy_bce_task):
    task = toy_bce_task(3)
    phis = {}
    for route in ("gram", "features"):
        proto, p, batch = _first_step(task, _cfg("imma", route), batch_seed=2)
        phis[route] = [Phi.detach() for Phi in proto.adapted_features(p, batch, steps=3, lr=0.5)]
        phi0 = proto.features(p, batch.X_H).detach()
    for a, b in zip(phis["features"], phis["gram"]):
        assert _rel(a, b) < 1e-12
    assert _rel(phis["features"][1], phi0) > 1e-3  # lr 0.5: the inner steps really move the features


@pytest.mark.parametrize("routes", [("dense", "gram"), ("gram", "features")], ids=lambda r: "-vs-".join(r))
@pytest.mark.parametrize("method", METHODS)
def test_short_immunize_run_same_theta_under_each_pair_of_routes(method, routes, toy_bce_task):
    task = toy_bce_task(2)
    reference, fast = (immunize(task, _cfg(method, route), seed=0) for route in routes)
    assert reference.n_steps == fast.n_steps == 10
    rel = np.abs(fast.theta_I - reference.theta_I).max() / np.abs(reference.theta_I).max()
    assert rel < 1e-8, rel
    np.testing.assert_allclose(fast.bias, reference.bias, rtol=0, atol=1e-8 * np.abs(reference.bias).max())


def test_batches_with_more_rows_than_columns_fall_back_to_the_gram_route(toy_bce_task):
    task = toy_bce_task(4, n=40, D=6)  # batch 8 > D 6: no feature leaves, the dense products are the cheap ones
    runs = {route: immunize(task, _cfg("ours", route), seed=0) for route in ("gram", "features")}
    np.testing.assert_array_equal(runs["features"].theta_I, runs["gram"].theta_I)


def test_fused_adam_is_the_same_update_as_the_loop(toy_bce_task):
    task = toy_bce_task(5)
    loop = immunize(task, _cfg("ours", "features"), seed=0)
    fused = immunize(task, _cfg("ours", "features", adam_fused=True), seed=0)
    rel = np.abs(fused.theta_I - loop.theta_I).max() / np.abs(loop.theta_I).max()
    assert rel < 1e-12, rel  # the same elementwise formula; only the operation order may differ


def test_monitor_every_measures_kappa_at_the_named_epochs_and_the_last(toy_bce_task):
    task = toy_bce_task(6)
    run = immunize(task, _cfg("ours", "features", monitor_every=2).replace(epochs=5), seed=0)
    assert run.history["kappa_epoch"] == [2.0, 4.0, 5.0]
    assert len(run.history["kappa_P"]) == len(run.history["kappa_H"]) == 3
    assert len(run.history["R_ill"]) == 5  # the terms are still logged every epoch


@pytest.mark.parametrize("name,value", [("monitor_every", 0), ("monitor_every", 1.5), ("adam_fused", "yes")])
def test_bad_engine_options_are_rejected_by_name(name, value, toy_bce_task):
    with pytest.raises(ValueError, match=name):
        immunize(toy_bce_task(0), _cfg("ours", "features", **{name: value}), seed=0)


def test_feature_route_needs_a_positive_ridge_and_the_official_protocol(toy_bce_task):
    task = toy_bce_task(0)
    cfg = _cfg("ours", "features").replace(ridge_H=0.0)
    with pytest.raises(ValueError, match="ridge_H"):
        immunize(task, cfg, seed=0)
    with pytest.raises(ValueError, match="'features' is not implemented for the 'paper' protocol"):
        make_protocol(task, _cfg("ours", "features").replace(protocol="paper"), "cpu")


def test_a_term_preconditioned_with_the_other_tasks_covariance_is_refused(monkeypatch, toy_bce_task):
    """The feature-space map needs the term's features and its preconditioner to come from the same X."""
    def crossed(proto, p, b, cfg):
        value = proto.reg_ill(proto.gram(p, b, "H"))
        return [Term("crossed", value, p.extractor(), "P")]

    monkeypatch.setitem(TERMS, "ours", crossed)
    cfg = _cfg("ours", "features")
    proto, p, batch = _first_step(toy_bce_task(0), cfg)
    with pytest.raises(ValueError, match="crossed"):
        step_gradients(proto, p, batch, cfg, closed_form=False)  # the autograd step (TERMS) is what is checked


def test_a_term_that_bypasses_the_step_features_is_refused(monkeypatch, toy_bce_task):
    """A term computed from theta directly (not through Protocol.batch_features) would lose its gradient."""
    def direct(proto, p, b, cfg):
        return [Term("direct", (p.theta ** 2).sum(), p.extractor())]

    monkeypatch.setitem(TERMS, "ours", direct)
    cfg = _cfg("ours", "features")
    proto, p, batch = _first_step(toy_bce_task(0), cfg)
    proto.batch_features(p, batch, "P")  # leaves exist, the term ignores them
    with pytest.raises(ValueError, match="direct"):
        step_gradients(proto, p, batch, cfg, closed_form=False)
