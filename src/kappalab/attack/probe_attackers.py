"""Attackers of the l2 probe on frozen features (the paper's threat model): each is an iterator of probe weights.

Every attacker starts from ``W_0 = 0`` and yields ``W_1, W_2, ...`` (one per step; a step is one gradient of the
training loss, or for ``solve`` one factorisation). Each reads the loss through the model's
:class:`kappalab.attack.problem.Rotated` (gradients and curvature in the shared SVD's basis, the same values as
``A^T (A W - Y) / N`` and ``||A P||^2 / N``). ``lr`` below is relative to the Hessian's ``s_max``
(``step = scale / s_max``) wherever the method has a scale-free form:

* ``gd``: Eq. 2's plain gradient descent, step ``1 / s_max`` (what the lab's probes measure).
* ``gd_tuned``: the best fixed step ``scale / s_max`` of a grid (stable for ``scale < 2``).
* ``momentum``: heavy ball, ``V <- beta V - (scale / s_max) G``, ``W <- W + V``.
* ``adam``: Adam (betas 0.9, 0.999, eps 1e-8, bias-corrected) with an absolute learning rate (Adam's steps are
  per coordinate and not scale-free).
* ``lbfgs``: L-BFGS (two-loop recursion, ``memory`` pairs) with the exact line search of a quadratic,
  ``alpha = -<G, P> / <P, H P>`` (one Hessian-vector product, no extra gradient).
* ``solve``: the closed-form minimum-norm least squares from the shared SVD (:meth:`Factor.solve`): one step, and
  its cost does not depend on kappa.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .problem import Rotated

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def _start(problem: Rotated) -> np.ndarray:
    return np.zeros((problem.factor.Vt.shape[1], problem.c.shape[1]))


def gd(problem: Rotated, *, scale: float = 1.0) -> Iterator[np.ndarray]:
    """Gradient descent with the fixed step ``scale / s_max`` (``gd``: scale 1, Eq. 2; ``gd_tuned``: a grid)."""
    W, step = _start(problem), scale / problem.factor.s_max
    while True:
        W = W - step * problem.grad(W)
        yield W


def momentum(problem: Rotated, *, scale: float, beta: float) -> Iterator[np.ndarray]:
    """Heavy-ball momentum with step ``scale / s_max`` and momentum ``beta``."""
    W, step = _start(problem), scale / problem.factor.s_max
    V = np.zeros_like(W)
    while True:
        V = beta * V - step * problem.grad(W)
        W = W + V
        yield W


def adam(problem: Rotated, *, lr: float) -> Iterator[np.ndarray]:
    """Adam on the probe weights (module docstring)."""
    W = _start(problem)
    state = AdamState.like(W)
    while True:
        W = W - state.step(problem.grad(W), lr)
        yield W


class AdamState:
    """Adam's moments for one parameter array; :meth:`step` returns the update to subtract."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.m, self.v, self.t = np.zeros(shape), np.zeros(shape), 0

    @classmethod
    def like(cls, array: np.ndarray) -> "AdamState":
        return cls(array.shape)

    def step(self, grad: np.ndarray, lr: float) -> np.ndarray:
        """``lr m_hat / (sqrt(v_hat) + eps)`` with the bias-corrected moments; the moments are updated in place
        (a fine-tuned extractor's are D_in x D: each avoided temporary is a pass over them)."""
        b1, b2 = ADAM_BETAS
        self.t += 1
        self.m *= b1
        self.m += (1 - b1) * grad
        self.v *= b2
        self.v += (1 - b2) * (grad * grad)
        denom = np.sqrt(self.v / (1 - b2 ** self.t))
        denom += ADAM_EPS
        update = self.m / denom
        update *= lr / (1 - b1 ** self.t)
        return update


def lbfgs(problem: Rotated, *, memory: int) -> Iterator[np.ndarray]:
    """L-BFGS with exact line search on the quadratic (module docstring); a curvature pair with ``<s, y> <= 0``
    (possible only through rounding, the loss being convex) is not stored."""
    W = _start(problem)
    G = problem.grad(W)
    pairs: list[tuple[np.ndarray, np.ndarray, float]] = []
    while True:
        Q = G.copy()
        alphas = []
        for s, y, rho in reversed(pairs):
            a = rho * float(np.sum(s * Q))
            alphas.append(a)
            Q -= a * y
        if pairs:
            s, y, _ = pairs[-1]
            Q *= float(np.sum(s * y)) / float(np.sum(y * y))
        for (s, y, rho), a in zip(pairs, reversed(alphas)):
            Q += (a - rho * float(np.sum(y * Q))) * s
        P = -Q
        AP = problem.factor.s[:, None] * (problem.factor.Vt @ P)  # U^T A P
        curvature = float(np.sum(AP * AP)) / problem.factor.n  # <P, H P>
        if not curvature > 0:  # G = 0 (or P in the null space): the optimum is reached
            yield W
            continue
        step = -float(np.sum(G * P)) / curvature
        S = step * P
        W = W + S
        G_new = problem.grad(W)
        Yd = G_new - G
        sy = float(np.sum(S * Yd))
        if sy > 0:
            pairs.append((S, Yd, 1.0 / sy))
            del pairs[:-memory]
        G = G_new
        yield W


def solve(problem: Rotated) -> Iterator[np.ndarray]:
    """The minimum-norm least-squares solution, reached in one step and kept."""
    W = problem.factor.solve_rotated(problem.c)
    while True:
        yield W
