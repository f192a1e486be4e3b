"""kappalab.dummy_layer: the linear layer whose backward preconditions the weight gradient (Sec. 4.4, App. C.3).

A linear feature extractor ``f(x) = x^T theta`` is an ``nn.Linear`` with ``W = theta^T``. One SGD step through
``DummyLinear(side="input", K=K, ridge=r)`` must be Alg. 1's ``theta - eta (K + r I)^{-1} grad_theta``
(:func:`kappalab.preconditioned_step`). ``side="output"`` (the official code's left solve on W) is a different
update: ``W - eta (K + r I)^{-1} grad_W``, i.e. ``theta - eta grad_theta (K + r I)^{-1}``.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_core_matrices import psd_from_spectrum

import kappalab as kl

torch = pytest.importorskip("torch")
from kappalab.dummy_layer import DummyLinear, precondition_weight_grad  # noqa: E402

pytestmark = pytest.mark.needs_torch

#: Two Cholesky solves of systems with kappa(K + rI) <= 50 and a few matrix products: ~ c * D * eps * kappa
#: relative to the update's size, i.e. ~1e-13 here; 1e-11 keeps margin.
STEP_RTOL = 1e-11


def _problem(device, D: int = 4, N: int = 12, seed: int = 0):
    """Data X (N x D), targets y, a probe w, theta (D x D) and a PD covariance K with kappa = 40."""
    rng = np.random.default_rng(seed)
    t = lambda a: torch.as_tensor(a, dtype=torch.float64, device=device)  # noqa: E731
    return (t(rng.standard_normal((N, D))), t(rng.standard_normal(N)), t(rng.standard_normal(D)),
            t(rng.standard_normal((D, D))), t(psd_from_spectrum(rng, D, np.array([8.0, 3.0, 1.0, 0.2])[:D])))


def _loss(features: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Linear probing loss ||X theta w - y||^2 on the features X theta."""
    return ((features @ w - y) ** 2).sum()


def _layer(theta: torch.Tensor, side: str, ridge: float, bias: bool = False) -> DummyLinear:
    D_in, D_hid = theta.shape
    layer = DummyLinear(D_in, D_hid, bias=bias, ridge=ridge, side=side, device=theta.device)
    with torch.no_grad():
        layer.weight.copy_(theta.T)  # W = theta^T
    return layer


def _plain_grad_theta(X, y, w, theta) -> torch.Tensor:
    th = theta.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(_loss(X @ th, w, y), th)
    return g


def _assert_close(out: torch.Tensor, ref: torch.Tensor, rtol: float, msg: str) -> None:
    diff, size = float(torch.linalg.norm(out - ref)), float(torch.linalg.norm(ref))
    assert diff <= rtol * size, f"||out - ref|| = {diff:.3e} > {rtol:.0e} * {size:.3e}\nout={out}\nref={ref}\n{msg}"


@pytest.mark.parametrize("ridge", [0.0, 1e-3, 0.5])
def test_input_side_step_is_preconditioned_step(torch_device, ridge: float) -> None:
    X, y, w, theta, K = _problem(torch_device)
    layer = _layer(theta, "input", ridge)
    _loss(layer(X, precondition=True, K=K), w, y).backward()
    eta = 0.05
    theta_new = (layer.weight - eta * layer.weight.grad).detach().T
    expected = kl.preconditioned_step(theta, K, _plain_grad_theta(X, y, w, theta), eta, ridge=ridge)
    _assert_close(theta_new, expected, STEP_RTOL, f"ridge={ridge}\nK={K}\ntheta={theta}")


def test_input_side_with_batch_covariance(torch_device) -> None:
    """K=None: the batch's own X^T X, as in the paper's pseudo-code."""
    X, y, w, theta, _ = _problem(torch_device)
    layer = _layer(theta, "input", 1e-6)
    _loss(layer(X, precondition=True), w, y).backward()
    expected = kl.preconditioned_step(theta, X.T @ X, _plain_grad_theta(X, y, w, theta), 1.0, ridge=1e-6)
    # kappa(X^T X) of a 12 x 4 Gaussian is O(10); same error budget as above
    _assert_close((layer.weight - layer.weight.grad).detach().T, expected, STEP_RTOL, f"X={X}")


def test_output_side_is_the_left_solve_and_differs_from_alg1(torch_device) -> None:
    X, y, w, theta, K = _problem(torch_device)
    ridge, eta = 1e-3, 0.05
    layer = _layer(theta, "output", ridge)
    _loss(layer(X, precondition=True, K=K), w, y).backward()
    W_new = (layer.weight - eta * layer.weight.grad).detach()
    grad_W = _plain_grad_theta(X, y, w, theta).T
    A = K + ridge * torch.eye(4, dtype=K.dtype, device=K.device)
    left = theta.T - eta * torch.linalg.solve(A, grad_W)  # the official code's solve(X^T X + ridge I, grad_W)
    _assert_close(W_new, left, STEP_RTOL, f"K={K}")
    alg1 = kl.preconditioned_step(theta, K, grad_W.T, eta, ridge=ridge).T
    diff = float(torch.linalg.norm(W_new - alg1))
    step = float(torch.linalg.norm(alg1 - theta.T))
    # not a rounding difference: the two updates differ by a sizeable fraction of the step itself
    assert diff > 1e-3 * step, f"side='output' unexpectedly equals Alg. 1's update: diff {diff:.3e}, step {step:.3e}"


def test_output_side_equals_input_side_when_K_is_scalar(torch_device) -> None:
    """With K = c I the inverse commutes with everything, so both sides give the same update (a sanity check that
    the difference above comes from K's non-commutativity, not from a bookkeeping error)."""
    X, y, w, theta, _ = _problem(torch_device)
    K = 3.0 * torch.eye(4, dtype=torch.float64, device=torch_device)
    grads = []
    for side in ("input", "output"):
        layer = _layer(theta, side, 0.0)
        _loss(layer(X, precondition=True, K=K), w, y).backward()
        grads.append(layer.weight.grad)
    _assert_close(grads[1], grads[0], 1e-14, "K = 3 I")  # division by 3 in both: identical up to one rounding


def test_without_precondition_it_is_nn_linear(torch_device) -> None:
    X, y, w, theta, _ = _problem(torch_device)
    layer = _layer(theta, "input", 1e-3, bias=True)
    out = layer(X)
    ref = torch.nn.functional.linear(X, layer.weight, layer.bias)
    assert torch.equal(out, ref)
    _loss(out, w, y).backward()
    _assert_close(layer.weight.grad.T, _plain_grad_theta(X, y - float(layer.bias.detach() @ w), w, theta), 1e-13,
                  "plain backward")  # same products, different order: a few roundings


def test_bias_and_input_gradients_are_not_preconditioned(torch_device) -> None:
    X, y, w, theta, K = _problem(torch_device)
    pre, plain = _layer(theta, "input", 1e-3, bias=True), _layer(theta, "input", 1e-3, bias=True)
    with torch.no_grad():
        pre.bias.copy_(torch.arange(4.0, dtype=torch.float64))
        plain.bias.copy_(pre.bias)
    Xa, Xb = X.clone().requires_grad_(True), X.clone().requires_grad_(True)
    _loss(pre(Xa, precondition=True, K=K), w, y).backward()
    _loss(plain(Xb), w, y).backward()
    _assert_close(pre.bias.grad, plain.bias.grad, 1e-14, "bias gradient")
    _assert_close(Xa.grad, Xb.grad, 1e-14, "input gradient")
    # forward values agree too (bias included)
    assert torch.allclose(pre(X, precondition=True, K=K), plain(X), rtol=1e-15, atol=0)


def test_precondition_weight_grad_sides(torch_device) -> None:
    rng = np.random.default_rng(3)
    G = torch.as_tensor(rng.standard_normal((4, 4)), device=torch_device)
    K = torch.as_tensor(psd_from_spectrum(rng, 4, np.array([5.0, 2.0, 1.0, 0.5])), device=torch_device)
    A = K + 0.1 * torch.eye(4, dtype=K.dtype, device=K.device)
    _assert_close(precondition_weight_grad(G, K, 0.1, "input"), G @ torch.linalg.inv(A), 1e-12, "G A^-1")
    _assert_close(precondition_weight_grad(G, K, 0.1, "output"), torch.linalg.inv(A) @ G, 1e-12, "A^-1 G")
    with pytest.raises(ValueError, match="side must be 'input' or 'output', got 'left'"):
        precondition_weight_grad(G, K, 0.1, "left")


def test_constructor_validates_arguments() -> None:
    with pytest.raises(ValueError, match="ridge must be >= 0"):
        DummyLinear(3, 3, ridge=-1.0)
    with pytest.raises(ValueError, match="ridge must be >= 0"):
        DummyLinear(3, 3, ridge=float("nan"))
    with pytest.raises(ValueError, match="side must be 'input' or 'output'"):
        DummyLinear(3, 3, side="both")
    with pytest.raises(ValueError, match="needs in_features == out_features"):
        DummyLinear(3, 2, side="output")
    assert DummyLinear(3, 2).weight.dtype == torch.float64, "float64 by default"


def test_singular_covariance_without_ridge_is_an_error(torch_device) -> None:
    # regression: cholesky_ex's info was ignored, so a singular K + ridge I gave NaN weight gradients silently
    X, y, w, theta, _ = _problem(torch_device)
    K = torch.diag(torch.tensor([2.0, 1.0, 0.0, 0.0], dtype=torch.float64, device=torch_device))
    layer = _layer(theta, "input", 0.0)
    with pytest.raises(ValueError, match="ridge"):
        _loss(layer(X, precondition=True, K=K), w, y).backward()


def test_check_false_skips_the_positive_definiteness_test(torch_device) -> None:
    """``check=False`` (CUDA hot loops with a known-regularized covariance) does not read Cholesky's info back."""
    X, y, w, theta, _ = _problem(torch_device)
    K = torch.diag(torch.tensor([2.0, 1.0, 0.0, 0.0], dtype=torch.float64, device=torch_device))
    layer = DummyLinear(4, 4, bias=False, ridge=0.0, check=False, device=torch_device)
    _loss(layer(X, precondition=True, K=K), w, y).backward()  # no exception; the result is not meaningful
    assert layer.weight.grad is not None
