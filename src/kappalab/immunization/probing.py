"""Linear probing by gradient descent with exact line search (Figure 1, Eq. 16).

Least squares ``f(w) = 1/2 ||Phi w - y||^2`` from ``w_0 = 0``: gradient ``g = Phi^T (Phi w - y)``, exact line
search step ``alpha = ||g||^2 / ||Phi g||^2`` (the minimizer of f along -g, closed form for a quadratic). ``w*``
is the minimum-norm least-squares solution (``lstsq``): from ``w_0 = 0`` the iterates stay in range(Phi^T), so
they converge to it even when Phi is rank deficient. Reported: the norm ratio of Eq. 16,
``||w_t - w*||^2 / ||w_0 - w*||^2``, the relative excess loss ``(f(w_t) - f*) / (f(w_0) - f*)``, and the first
iteration at which each falls below a target (an immunization measure that is not the optimized quantity).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ProbeCurve:
    """Norm ratio and relative excess loss per iteration (index 0 = w_0) and the iterations to each target."""

    norm_ratio: np.ndarray
    excess_loss: np.ndarray
    iters_to_norm_ratio: int | None  #: first t with norm_ratio <= target (None: not within max_iter)
    iters_to_excess_loss: int | None
    target: float


def exact_line_search_gd(Phi: np.ndarray, y: np.ndarray, max_iter: int, target: float = 1e-3) -> ProbeCurve:
    """Run ``max_iter`` steps of exact-line-search GD on ``1/2 ||Phi w - y||^2`` (see module docstring)."""
    Phi = np.asarray(Phi, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if Phi.ndim != 2 or y.shape != (Phi.shape[0],):
        raise ValueError(f"Phi must be N x D and y of length N, got {Phi.shape} and {y.shape}")
    if not (isinstance(max_iter, int) and max_iter >= 1):
        raise ValueError(f"max_iter must be a positive int, got {max_iter!r}")
    if not 0 < target < 1:
        raise ValueError(f"target must be in (0, 1), got {target!r}")
    w_star = np.linalg.lstsq(Phi, y, rcond=None)[0]
    f = lambda w: 0.5 * float(np.sum((Phi @ w - y) ** 2))
    f_star = f(w_star)
    w = np.zeros(Phi.shape[1])
    d0, e0 = float(w_star @ w_star), f(w) - f_star
    ratios, excess = [1.0], [1.0]
    for _ in range(max_iter):
        g = Phi.T @ (Phi @ w - y)
        Pg = Phi @ g
        denom = float(Pg @ Pg)
        if denom == 0.0:
            break
        w = w - (float(g @ g) / denom) * g
        ratios.append(float(np.sum((w - w_star) ** 2)) / d0)
        excess.append(max(f(w) - f_star, 0.0) / e0)
    ratios_a, excess_a = np.asarray(ratios), np.asarray(excess)
    first = lambda a: int(np.argmax(a <= target)) if np.any(a <= target) else None
    return ProbeCurve(ratios_a, excess_a, first(ratios_a), first(excess_a), target)


def features(theta: np.ndarray, X: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """``Phi = X theta (+ 1 b^T)``."""
    Phi = X @ theta
    return Phi + bias if bias is not None else Phi
