"""The dummy layer inside the deep pipeline reproduces Alg. 1's update exactly on a linear model (rebuttal Q8)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from kappalab import grad_theta_r_ill, grad_theta_r_well, preconditioned_step  # noqa: E402
from kappalab.deep import ImmunizableModel, ObjectiveConfig, TrainConfig, make_optimizer, objective_terms  # noqa: E402
from kappalab.deep import weighted_loss  # noqa: E402

torch.set_num_threads(1)
D, N, C, RIDGE, ETA = 6, 40, 3, 1e-3, 0.05


def _linear_model(theta: torch.Tensor) -> ImmunizableModel:
    """f(x) = x^T theta through the dummy layer (W = theta^T), nothing else trainable but a linear head."""
    head = nn.Linear(D, C).double()
    model = ImmunizableModel(nn.Identity(), nn.Identity(), nn.Identity(), head, D, ridge=RIDGE, side="input")
    with torch.no_grad():
        model.dummy.weight.copy_(theta.T)
    return model


def _data(rng: np.random.Generator, scale: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.as_tensor(rng.standard_normal((N, D)) * scale)
    return X, torch.as_tensor(rng.integers(0, C, N))


def test_one_ours_step_is_alg1_update(rng: np.random.Generator) -> None:
    """theta' = theta - eta grad L - eta lambda_P (K_P + rI)^-1 grad R_well(H_P) - eta lambda_H (K_H + rI)^-1
    grad R_ill(H_H), with K = X^T X of each batch and the gradients of Thm 4.2, equals one SGD step (no momentum)
    of the pipeline's 'ours' objective. The task loss's gradient is NOT preconditioned (Alg. 1)."""
    theta = torch.as_tensor(np.linalg.qr(rng.standard_normal((D, D)))[0] @ np.diag(np.linspace(1, 2, D)))
    bP, bH = _data(rng, np.linspace(0.5, 2.0, D)), _data(rng, np.linspace(2.0, 0.3, D))
    cfg = ObjectiveConfig(lambda_P=0.3, lambda_H=1e5, harmful_classes=C, reg_rtol=1e-12, on_degenerate="raise")
    model = _linear_model(theta)
    opt = make_optimizer(model, TrainConfig(lr=ETA, momentum=0.0, nesterov=False, classifier_weight_decay=0.0))
    weighted_loss(objective_terms(model, "ours", bP, bH, cfg), cfg).backward()

    # Reference: the task-loss gradient by plain autograd in theta, the regularizer gradients by the core.
    th = theta.clone().requires_grad_(True)
    task = nn.functional.cross_entropy(model.classifier(bP[0] @ th), bP[1], label_smoothing=cfg.label_smoothing)
    (g_task,) = torch.autograd.grad(task, th)
    K_P, K_H = bP[0].T @ bP[0], bH[0].T @ bH[0]
    step_P = preconditioned_step(theta, K_P, grad_theta_r_well(theta, K_P), ETA * cfg.lambda_P, RIDGE) - theta
    step_H = preconditioned_step(theta, K_H, grad_theta_r_ill(theta, K_H), ETA * cfg.lambda_H, RIDGE) - theta
    expected = theta - ETA * g_task + step_P + step_H
    opt.step()
    got = model.dummy.weight.detach().T
    assert step_H.abs().max() > 1e-6 and step_P.abs().max() > 1e-6, "the test must exercise both regularizers"
    err = float((got - expected).abs().max() / expected.abs().max())
    assert err < 1e-12, f"relative error {err:.3e}\ngot\n{got}\nexpected\n{expected}"


@pytest.mark.parametrize("method", ["opt_kappa", "imma"])
def test_baselines_are_not_preconditioned(method: str, rng: np.random.Generator) -> None:
    """Opt kappa and IMMA take plain gradients: the dummy weight's gradient equals that of a model without the
    dummy layer's preconditioning (the same objective on plain features x theta)."""
    theta = torch.as_tensor(rng.standard_normal((D, D)))
    bP, bH = _data(rng, np.ones(D)), _data(rng, np.ones(D))
    cfg = ObjectiveConfig(lambda_kappa=1e-3, lambda_imma=1.0, harmful_classes=C)
    a, b = _linear_model(theta), _linear_model(theta)
    b.classifier.load_state_dict(a.classifier.state_dict())
    b.dummy.ridge = 1e30  # preconditioning would then scale the gradient by ~1e-30
    for m in (a, b):
        weighted_loss(objective_terms(m, method, bP, bH, cfg), cfg).backward()
    torch.testing.assert_close(a.dummy.weight.grad, b.dummy.weight.grad, rtol=1e-12, atol=0)


def test_a_float32_tail_gives_float64_features_within_its_rounding_bound():
    """A float32 tail (conv, ReLU, mean pool) under a float64 head: the features are float64, and they differ from
    the same tail's float64 features by at most the float32 rounding bound of the convolution's inner products,
    ``(n + 3) u (|W| * |x|)`` pooled (n = inputs per output, u = 2^-24; the cast of x, the ReLU and the mean add at
    most 3 u), computed here in float64; the float32 weights receive float32 gradients."""
    rng = np.random.default_rng(5)
    conv = nn.Conv2d(8, D, 3, bias=False).double()
    x = torch.as_tensor(rng.standard_normal((N, 8, 5, 5)))

    def model(dtype: torch.dtype) -> ImmunizableModel:
        tail = nn.Sequential(nn.Conv2d(8, D, 3, bias=False), nn.ReLU()).to(dtype)
        with torch.no_grad():
            tail[0].weight.copy_(conv.weight)
        neck = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        return ImmunizableModel(nn.Identity(), tail, neck, nn.Linear(D, C).double(), D, dummy=False)

    fast, exact = model(torch.float32), model(torch.float64)
    F32 = fast.features(x.float())
    F64 = exact.features(x).detach()
    pooled_abs = nn.functional.avg_pool2d(nn.functional.conv2d(x.abs(), conv.weight.abs()), 3).flatten(1).detach()
    n, u = 8 * 3 * 3, 2.0 ** -24
    bound = (n + 3) * u * pooled_abs
    assert F32.dtype == torch.float64
    assert torch.all((F32.detach() - F64).abs() <= bound)
    assert (F32.detach() - F64).abs().max() > 0  # the bound is checked against a real difference
    F32.pow(2).sum().backward()
    grad = fast.trainable[0].weight.grad
    assert grad.dtype == torch.float32 and torch.isfinite(grad).all() and grad.abs().max() > 0
