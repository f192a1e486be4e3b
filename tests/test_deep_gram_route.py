"""The deep step's gram route (``spectral_route="gram"``) equals the dense route it replaces.

The dense route forms ``H~ = F^T F`` (``D x D``), takes its spectrum with LAPACK and preconditions the dummy layer with
a ``D x D`` Cholesky of ``Z^T Z + r I``; the gram route reads the ``N x N`` Gram matrix and applies the same inverse
by Woodbury. Both are backward stable, so they differ by rounding. The largest such term is the dense Cholesky
solve's: a backward error ``eps ||A||`` in ``A = Z^T Z + r I`` reaches the solution through ``A^{-1}``, whose
null-space part is ``1/r``: relative error about ``eps * s_max(Z^T Z) / r``. The data below keep that below 1e-12
(asserted), so the 1e-10 tolerance the step must meet is a hundred times the rounding either route can produce, and
a wrong formula (a missing factor 2, a wrong side of the inverse, p or k mixed up) misses it by orders of magnitude.

The official protocol's shifted rule reads the null eigenvalues of ``F^T F + shift I``: the dense route computes them
as ``shift + O(D eps s_max)`` with eigenvectors in null(F) up to rounding, and its ``s_min`` carries that noise
divided by ``shift`` into Opt kappa's gradient; the gram route takes ``s_min = shift`` exactly
(:func:`kappalab.immunization.spectra.gram_extremes_shifted`). The tests use ``SHIFT = 0.1`` so that this
documented noise (about ``D eps s_max / shift``) stays below 1e-11.
"""

import pytest
import torch
from torch import nn

from kappalab.deep import METHODS, ImmunizableModel, ObjectiveConfig, objective_terms, weighted_loss
from kappalab.dummy_layer import DummyLinear

N, D_IN, D = 16, 24, 48  # a minibatch of N rows, features of width D > N: the gram route applies
RIDGE = 0.1
RTOL = 1e-10
SHIFT = 0.1


def _model(protocol: str, seed: int = 0) -> ImmunizableModel:
    g = torch.Generator().manual_seed(seed)
    trainable = nn.Sequential(nn.Linear(D_IN, D, dtype=torch.float64), nn.Tanh())
    classifier = nn.Linear(D, 3, dtype=torch.float64)
    with torch.no_grad():
        for p in [*trainable.parameters(), *classifier.parameters()]:
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / p.shape[-1] ** 0.5)
    return ImmunizableModel(nn.Identity(), trainable, nn.Identity(), classifier, D, dummy=protocol == "paper",
                            ridge=RIDGE)


def _batches(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(N, D_IN, generator=g, dtype=torch.float64), torch.randint(0, 3, (N,), generator=g))
            for _ in range(2)]


def _terms_and_grads(protocol: str, method: str, route: str):
    model = _model(protocol)
    bP, bH = _batches()
    cfg = ObjectiveConfig(lambda_P=0.7, lambda_H=1.3, lambda_kappa=0.01, lambda_imma=0.5, harmful_classes=3,
                          protocol=protocol, official_k=D_IN, spectral_route=route, shift=SHIFT)
    terms = objective_terms(model, method, bP, bH, cfg)
    weighted_loss(terms, cfg).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return {k: v.detach() for k, v in terms.items()}, grads


def test_the_dense_solve_is_accurate_enough_for_the_tolerance():
    Z = _model("paper").pre_features(_batches()[1][0]).detach()
    s_max = float(torch.linalg.eigvalsh(Z.T @ Z)[-1])
    eps = torch.finfo(torch.float64).eps
    assert eps * s_max / RIDGE < 1e-12
    assert D * eps * s_max / SHIFT < 1e-11


@pytest.mark.parametrize("protocol", ["paper", "official"])
@pytest.mark.parametrize("method", METHODS)
def test_terms_and_gradients_equal_the_dense_route(protocol, method):
    dense_terms, dense_grads = _terms_and_grads(protocol, method, "dense")
    gram_terms, gram_grads = _terms_and_grads(protocol, method, "gram")
    assert dense_terms.keys() == gram_terms.keys()
    for name in dense_terms:
        torch.testing.assert_close(gram_terms[name], dense_terms[name], rtol=RTOL, atol=0,
                                   msg=lambda m: f"{protocol}/{method} term {name}: {m}")
    assert dense_grads.keys() == gram_grads.keys() and dense_grads
    for name, g in dense_grads.items():
        err = float(torch.linalg.vector_norm(gram_grads[name] - g))
        assert err <= RTOL * float(torch.linalg.vector_norm(g)), (protocol, method, name, err)


@pytest.mark.parametrize("side", ["input", "output"])
def test_the_woodbury_preconditioner_equals_the_cholesky_one(side):
    g = torch.Generator().manual_seed(3)
    Z = torch.randn(N, D, generator=g, dtype=torch.float64)
    M = torch.randn(N, D, generator=g, dtype=torch.float64)
    grads = []
    for route in ("dense", "gram"):
        layer = DummyLinear(D, D, bias=False, ridge=RIDGE, side=side)
        (layer(Z, precondition=True, route=route) * M).sum().backward()
        grads.append(layer.weight.grad)
    # the preconditioner acts on the side asked for: a wrong side differs at O(1)
    assert float(torch.linalg.vector_norm(grads[1] - grads[0])) <= RTOL * float(torch.linalg.vector_norm(grads[0]))


def test_at_a_small_ridge_the_woodbury_route_is_the_accurate_one():
    """At the paper's dummy ridge (1e-6) and features with ``s_max(Z^T Z) / ridge ~ 1e10``, the dense route's
    ``D x D`` Cholesky solve carries ``eps s_max / ridge`` of rounding; Woodbury's ``N x N`` one carries
    ``eps s_max / (s_min + ridge)`` (``Z`` has full row rank). Both against an SVD reference: the preconditioned
    gradient ``M^T Z V diag(1 / (s^2 + ridge)) V^T`` of ``Z = U diag(s) V^T``."""
    g = torch.Generator().manual_seed(4)
    ridge = 1e-6
    Z = torch.randn(N, D, generator=g, dtype=torch.float64) * 30
    M = torch.randn(N, D, generator=g, dtype=torch.float64)
    _, s, Vh = torch.linalg.svd(Z, full_matrices=False)
    reference = (M.T @ Z @ Vh.T) / (s * s + ridge) @ Vh
    errors = {}
    for route in ("dense", "gram"):
        layer = DummyLinear(D, D, bias=False, ridge=ridge)
        (layer(Z, precondition=True, route=route) * M).sum().backward()
        errors[route] = float((layer.weight.grad - reference).abs().max() / reference.abs().max())
    eps = torch.finfo(torch.float64).eps
    assert errors["gram"] <= 100 * eps * float(s[0] ** 2 / (s[-1] ** 2 + ridge)), errors
    assert errors["gram"] < errors["dense"], errors


def test_the_gram_route_changes_the_step_where_a_term_is_wrong():
    """The comparison above can fail: the same step with R_ill's k taken as D instead of the rank (the official
    code's k) is far outside the tolerance."""
    dense_terms, _ = _terms_and_grads("paper", "rill_only", "dense")
    official_terms, _ = _terms_and_grads("official", "rill_only", "gram")
    assert abs(float(official_terms["r_ill"] / dense_terms["r_ill"]) - 1) > 1e3 * RTOL


def test_an_unknown_route_is_refused():
    with pytest.raises(ValueError, match="spectral_route"):
        ObjectiveConfig(spectral_route="sparse")
    with pytest.raises(ValueError, match="route"):
        DummyLinear(4, 4)(torch.zeros(2, 4, dtype=torch.float64), precondition=True, route="sparse")
