"""The probe loss and gradient in the SVD basis (kappalab.attack.problem.Rotated) against exact rational arithmetic
on the same float64 inputs, at the condition numbers immunization produces (kappa(H) up to 1e12) and with fewer
rows than columns: the rotated values lie within the documented slack of the exact ones, and that slack is small
enough for the reach rule to tell losses apart."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from kappalab.attack import probe_attackers as pa
from kappalab.attack.problem import Rotated

EPS = np.finfo(np.float64).eps


def _features(N: int, D: int, kappa: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """N x D features whose H = F^T F has condition number kappa (its top min(N, D) eigenvalues geometric)."""
    rng = np.random.default_rng(seed)
    k = min(N, D)
    U = np.linalg.qr(rng.standard_normal((N, k)))[0]
    V = np.linalg.qr(rng.standard_normal((D, k)))[0]
    return U @ np.diag(np.sqrt(np.geomspace(kappa, 1.0, k))) @ V.T, rng.standard_normal((N, 2))


def _exact_residual(A: np.ndarray, Y: np.ndarray, W: np.ndarray) -> list[list[Fraction]]:
    Af, Wf = [[Fraction(x) for x in row] for row in A], [[Fraction(x) for x in row] for row in W]
    return [[sum((Af[i][j] * Wf[j][c] for j in range(A.shape[1])), Fraction(0)) - Fraction(Y[i, c])
             for c in range(Y.shape[1])] for i in range(A.shape[0])]


def _exact_loss(A: np.ndarray, Y: np.ndarray, W: np.ndarray) -> Fraction:
    R = _exact_residual(A, Y, W)
    return sum((r * r for row in R for r in row), Fraction(0)) / (2 * A.shape[0])


def _exact_grad(A: np.ndarray, Y: np.ndarray, W: np.ndarray) -> np.ndarray:
    R = _exact_residual(A, Y, W)
    return np.array([[float(sum((Fraction(A[i, j]) * R[i][c] for i in range(A.shape[0])), Fraction(0))
                            / A.shape[0]) for c in range(Y.shape[1])] for j in range(A.shape[1])])


def _points(A: np.ndarray, Y: np.ndarray, problem: Rotated) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(9)
    W_star = np.linalg.lstsq(A, Y, rcond=None)[0]
    it = pa.gd(problem)
    for _ in range(20):
        W_gd = next(it)
    return {"zero": np.zeros_like(W_star), "optimum": W_star, "gd_20": W_gd,
            "random": rng.standard_normal(W_star.shape) * np.linalg.norm(W_star) / np.sqrt(W_star.size)}


@pytest.mark.parametrize("kappa", [4.0, 1e6, 1e12])
@pytest.mark.parametrize("shape", [(30, 8), (6, 9)])
def test_rotated_loss_is_within_its_slack_of_the_exact_loss(kappa: float, shape: tuple[int, int]) -> None:
    A, Y = _features(*shape, kappa, seed=int(np.log10(kappa)) + shape[0])
    problem = Rotated.of(A, Y)
    start = float(_exact_loss(A, Y, np.zeros((A.shape[1], 2))))
    for name, W in _points(A, Y, problem).items():
        exact = _exact_loss(A, Y, W)
        slack = problem.slack(A, Y, W)
        assert abs(Fraction(problem.loss(W)) - exact) <= Fraction(slack), (name, problem.loss(W), float(exact), slack)
        # not vacuous: within 1e-6 of the loss's scale (the starting loss, or the point's own where it is larger)
        assert slack <= 1e-6 * max(start, float(exact)), (name, slack, start, float(exact))


@pytest.mark.parametrize("kappa", [4.0, 1e12])
@pytest.mark.parametrize("shape", [(30, 8), (6, 9)])
def test_rotated_gradient_is_the_residual_gradient(kappa: float, shape: tuple[int, int]) -> None:
    """A computed SVD is exact for ``A + E``, ``||E|| <= tau s_1`` (tau = max(N, D) eps) with U orthonormal to tau:
    the gradient ``(A+E)^T ((A+E) W - Y) / N`` moves by at most ``tau s_1 (||R|| + s_1 ||W|| + ||Y||) / N`` to first
    order (the last term: c = U^T Y's share); twice that is the bound."""
    A, Y = _features(*shape, kappa, seed=3)
    problem = Rotated.of(A, Y)
    tau, s1 = max(A.shape) * EPS, float(problem.factor.s[0])
    for name, W in _points(A, Y, problem).items():
        R = A @ W - Y
        bound = 2 * tau * s1 * (np.linalg.norm(R) + s1 * np.linalg.norm(W) + np.linalg.norm(Y)) / A.shape[0]
        error = np.linalg.norm(problem.grad(W) - _exact_grad(A, Y, W))
        assert error <= bound, (name, error, bound)


def test_a_loss_change_larger_than_the_slack_is_seen() -> None:
    """Two iterates of gradient descent one step apart at kappa 1e12: their losses differ by more than the two
    slacks, so the rotated curve orders them as the exact losses do."""
    A, Y = _features(30, 8, 1e12, seed=4)
    problem = Rotated.of(A, Y)
    it = pa.gd(problem)
    W1, W2 = next(it), next(it)
    exact = _exact_loss(A, Y, W1) - _exact_loss(A, Y, W2)
    assert exact > 0
    rotated = problem.loss(W1) - problem.loss(W2)
    assert rotated > problem.slack(A, Y, W1) + problem.slack(A, Y, W2)
    assert abs(Fraction(rotated) - exact) <= Fraction(problem.slack(A, Y, W1) + problem.slack(A, Y, W2))


def test_rotated_loss_on_rank_deficient_float32_features() -> None:
    """Features of rank 4 in 8 columns (four exact zero singular values, as dead channels give) at kappa 1e10 on the
    rest, rounded to float32 and back (a deep model's features): the rotated loss stays within its slack of the
    exact loss of those very inputs, at the optimum and at a gradient-descent iterate."""
    rng = np.random.default_rng(11)
    U = np.linalg.qr(rng.standard_normal((30, 4)))[0]
    V = np.linalg.qr(rng.standard_normal((8, 4)))[0]
    A = (U @ np.diag(np.sqrt(np.geomspace(1e10, 1.0, 4))) @ V.T).astype(np.float32).astype(np.float64)
    Y = rng.standard_normal((30, 2))
    problem = Rotated.of(A, Y)
    # float32 rounding lifts the four zero singular values to about 1e-8 of s_1: the float64 rank rule keeps them
    # (Factor.rank is 8 here), so this case reaches the smallest, rounding-made part of the spectrum
    assert problem.factor.s[-1] < 1e-6 * problem.factor.s[0]
    for name, W in _points(A, Y, problem).items():
        exact = _exact_loss(A, Y, W)
        assert abs(Fraction(problem.loss(W)) - exact) <= Fraction(problem.slack(A, Y, W)), name
