"""One step of the attackers of ``kappalab attack`` with its curve point, at Table 2's size (``pytest
--benchmark-only -k attack_step``; one group per attacker family, so pytest-benchmark prints the two forms' ratio
from one run).

The design is full MNIST's D_H for a pair, 60% of 11,898 rows for training (7,139 x 784), one target column; the
extractor is 784 x 784 (the cost depends on the shapes, not on the values). ``"residual"`` is the textbook form
the attackers used before: the gradient ``A^T (A W - Y) / N`` and the curve's loss from the residual ``A W - Y``
(three passes over the N x D design a step); for the extractor attackers the minibatch's ``X_b M`` (64 x 784 x 784)
and the curve on the inputs. ``"rotated"`` is kappalab's: both through the shared SVD
(:class:`kappalab.attack.problem.Rotated`, ``k x D`` with k = 784) and the reassociated minibatch products
(:mod:`kappalab.attack.extractor_attackers`). Before timing, each pair's results are compared: the step's iterate
to 1e-10 relative, the loss within the rotated form's documented slack."""

from __future__ import annotations

import numpy as np
import pytest

from kappalab.attack.extractor_attackers import batch_grads
from kappalab.attack.problem import Rotated, loss

N, D, BATCH = 7139, 784, 64
FORMS = ("residual", "rotated")


def _design():
    rng = np.random.default_rng(0)
    X = rng.random((N, D))
    theta = rng.uniform(-1, 1, (D, D)) / np.sqrt(D)
    Y = np.sign(rng.standard_normal((N, 1)))
    return X, theta, Y


@pytest.fixture(scope="module")
def design():
    X, theta, Y = _design()
    A = X @ theta
    return X, theta, Y, A, Rotated.of(A, Y), Rotated.of(X, Y)


def _probe_step(form, A, Y, problem, W, step):
    if form == "residual":
        W = W - step * (A.T @ (A @ W - Y) / N)
        return W, loss(A, Y, W)
    W = W - step * problem.grad(W)
    return W, problem.loss(W)


def _finetune_step(form, X, Y, problem, M, W, rows, lr):
    Xb, Yb = X[rows], Y[rows]
    if form == "residual":
        Fb = Xb @ M
        R = Fb @ W - Yb
        dM, dW = Xb.T @ (R @ W.T) / BATCH, Fb.T @ R / BATCH
        M, W = M - lr * dM, W - lr * dW
        return M, W, loss(X, Y, M @ W)
    _, dM, dW = batch_grads(Xb, Yb, M, W)
    M, W = M - lr * dM, W - lr * dW
    return M, W, problem.loss(M @ W)


@pytest.mark.parametrize("form", FORMS)
def test_attack_step_probe(benchmark, threads: int, design, form: str) -> None:
    """Gradient descent's step at 1 / s_max and its curve point (every probe attacker's inner loop)."""
    X, theta, Y, A, problem, _ = design
    W0 = np.random.default_rng(1).standard_normal((D, 1)) * 1e-3
    step = 1 / problem.factor.s_max
    (W_r, l_r), (W_k, l_k) = (_probe_step(f, A, Y, problem, W0, step) for f in FORMS)
    assert np.linalg.norm(W_r - W_k) <= 1e-10 * np.linalg.norm(W_r)
    assert abs(l_r - l_k) <= problem.slack(A, Y, W_k)
    benchmark.group = "attack step: a probe attacker's step and curve point (7139 x 784 features)"
    benchmark.extra_info.update({"form": form, "N": N, "D": D, "threads": threads})
    benchmark.pedantic(_probe_step, args=(form, A, Y, problem, W0, step), rounds=20, iterations=1, warmup_rounds=2)


@pytest.mark.parametrize("form", FORMS)
def test_attack_step_finetune(benchmark, threads: int, design, form: str) -> None:
    """Fine-tuning's SGD step on a 64-row minibatch and its curve point on the inputs."""
    X, theta, Y, _, _, inputs = design
    W0 = np.random.default_rng(2).standard_normal((D, 1)) * 1e-3
    rows = np.random.default_rng(3).permutation(N)[:BATCH]
    (M_r, W_r, l_r), (M_k, W_k, l_k) = (_finetune_step(f, X, Y, inputs, theta, W0, rows, 1e-2) for f in FORMS)
    assert np.linalg.norm(M_r - M_k) <= 1e-10 * np.linalg.norm(M_r)
    assert np.linalg.norm(W_r - W_k) <= 1e-10 * np.linalg.norm(W_r)
    assert abs(l_r - l_k) <= inputs.slack(X, Y, M_k @ W_k)
    benchmark.group = "attack step: fine-tuning's minibatch step and curve point (784 x 784 extractor)"
    benchmark.extra_info.update({"form": form, "N": N, "D": D, "batch": BATCH, "threads": threads})
    benchmark.pedantic(_finetune_step, args=(form, X, Y, inputs, theta, W0, rows, 1e-2), rounds=20, iterations=1,
                       warmup_rounds=2)
