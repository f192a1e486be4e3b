"""Each immunization method on a tiny synthetic LinearTask; Ours moves the two condition numbers apart."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kappalab.configs import names  # noqa: E402
from kappalab import condition_number, grad_theta_r_well, hessian, preconditioned_step  # noqa: E402
from kappalab.immunization import (METHODS, PROTOCOLS, LinearTask, MethodConfig, evaluate, immunize,  # noqa: E402
                                   table1_config)
from kappalab.immunization.protocols import make_protocol  # noqa: E402
from kappalab.immunization.methods import step_gradients  # noqa: E402


def tiny_task(rng: np.random.Generator, n: int = 40, d: int = 6) -> LinearTask:
    """Two tasks whose covariances have different, well separated spectra and random eigenvectors."""
    def data(scales):
        Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
        X = rng.standard_normal((n, d)) * scales @ Q.T
        return X, X @ rng.standard_normal(d) + 0.1 * rng.standard_normal(n)
    X_P, y_P = data(np.linspace(1.0, 3.0, d))
    X_H, y_H = data(np.linspace(0.5, 2.0, d))
    return LinearTask(X_P, y_P, X_H, y_H, "mse", "tiny", "synthetic")


#: every shipped (protocol, method) config of Table 1 (the authors'-hint baseline opt_kappa_log: paper protocol only)
SHIPPED = [(p, m) for p in PROTOCOLS for m in METHODS if f"table1_{p}_{m}" in names()]


@pytest.mark.parametrize("protocol, method", SHIPPED)
def test_every_method_runs_and_returns_a_finite_extractor(rng, method, protocol):
    task = tiny_task(rng)
    cfg = table1_config(protocol, method).replace(epochs=3, batch_size=None if protocol == "paper" else 16)
    run = immunize(task, cfg, seed=0)
    assert run.theta_I.shape == (6, 6) and run.theta_I.dtype == np.float64 and np.isfinite(run.theta_I).all()
    assert (run.bias is not None) == (protocol == "official")
    assert run.n_steps == (3 if protocol == "paper" else 3 * (40 // 16))
    assert len(run.history["kappa_P"]) == 3
    ev = evaluate(run, task)
    for d in ("pinv", "shifted"):
        assert np.isfinite(ev[d]["rir"]) and ev[d]["rir"] > 0
    # the optional blocks: leaving them out changes nothing else
    lean = evaluate(run, task, sensitivity=("pinv",), endpoints=False)
    assert "spectra" not in lean and set(lean["sensitivity"]) == {"pinv"}
    assert lean["pinv"] == ev["pinv"] and lean["sensitivity"]["pinv"] == ev["sensitivity"]["pinv"]
    with pytest.raises(ValueError, match="sensitivity"):
        evaluate(run, task, sensitivity=("exact",))


def test_seeds_change_the_run_and_the_same_seed_repeats_it(rng):
    task = tiny_task(rng)
    cfg = table1_config("paper", "ours").replace(epochs=2)
    a, b, c = immunize(task, cfg, 0), immunize(task, cfg, 0), immunize(task, cfg, 1)
    np.testing.assert_array_equal(a.theta_I, b.theta_I)
    assert not np.allclose(a.theta_I, c.theta_I)


def test_ours_raises_kappa_H_and_keeps_kappa_P_lower(rng):
    """From theta = I, a few epochs of Eq. 11 increase kappa(H_H) and leave kappa(H_P) below kappa(H_H)."""
    task = tiny_task(rng)
    cfg = table1_config("paper", "ours").replace(epochs=60, eta=0.05).with_extra(theta_init="identity")
    run = immunize(task, cfg, seed=0)
    kH0 = float(condition_number(task.X_H.T @ task.X_H, psd=True))
    K_H, K_P = task.X_H.T @ task.X_H, task.X_P.T @ task.X_P
    kH = float(condition_number(hessian(run.theta_I, K_H), psd=True))
    kP = float(condition_number(hessian(run.theta_I, K_P), psd=True))
    kP0 = float(condition_number(K_P, psd=True))
    assert kH > 2 * kH0, (kH0, kH)
    assert kP < kH, (kP, kH)
    assert evaluate(run, task)["pinv"]["rir"] > 1.0
    assert kP / kP0 < kH / kH0


def test_paper_update_equals_core_preconditioned_step(rng):
    """The paper protocol's preconditioned regularizer direction is the core's (K + ridge I)^-1 grad."""
    task = tiny_task(rng)
    task = LinearTask(np.hstack([task.X_P[:, :5], task.X_P[:, 4:5]]), task.y_P, task.X_H, task.y_H, "mse", "t", "s")
    base = table1_config("paper", "ours")
    cfg = base.replace(lambda_H=0.0, lambda_P=1.0, ridge_P=1e-3).with_extra(supervised_loss=False)
    proto = make_protocol(task, cfg, "cpu")
    p = proto.init_params(0, with_w_H=False)
    grads, _ = step_gradients(proto, p, proto._full, cfg)
    theta = p.theta.detach().numpy()
    K = 0.5 * (task.X_P.T @ task.X_P + (task.X_P.T @ task.X_P).T)  # singular: rank 5 of 6
    eta = 0.1
    expected = preconditioned_step(theta, K, grad_theta_r_well(theta, K), eta, ridge=1e-3)
    got = theta - eta * grads[id(p.theta)].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max())


def test_official_preconditioning_multiplies_from_the_right_of_theta(rng):
    task = tiny_task(rng)
    base = table1_config("official", "ours")
    cfg = base.replace(lambda_H=0.0, batch_size=None).with_extra(supervised_loss=False)
    proto = make_protocol(task, cfg, "cpu")
    p = proto.init_params(0, with_w_H=False)
    grads, terms = step_gradients(proto, p, proto._full, cfg)
    raw = torch.autograd.grad(terms[0].value, p.theta)[0].numpy()
    A = task.X_P.T @ task.X_P + cfg.ridge_P * np.eye(6)
    np.testing.assert_allclose(grads[id(p.theta)].numpy(), raw @ np.linalg.inv(A), rtol=1e-8, atol=1e-12)


def test_bad_inputs_name_the_argument(rng):
    task = tiny_task(rng)
    with pytest.raises(ValueError, match="task"):
        immunize("not a task", table1_config("paper", "ours"), 0)
    with pytest.raises(ValueError, match="y_H"):
        immunize(LinearTask(task.X_P, task.y_P, task.X_H, None, "mse", "t", "s"), table1_config("paper", "imma"), 0)
    with pytest.raises(ValueError, match="eta"):
        MethodConfig("ours", "paper", 0.0, 1, 1, 1, None, 0, 0)
    with pytest.raises(ValueError, match="X_P"):
        LinearTask(task.X_P.astype(np.float32), task.y_P, task.X_H, task.y_H, "mse", "t", "s")
