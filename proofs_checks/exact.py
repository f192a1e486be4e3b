"""Exact (sympy) versions of the paper's scalar quantities for small rational/algebraic matrices.

Singular values come from the exact eigenvalues of ``S^T S``; these helpers state the DEFINITIONS (Eq. 1, 3, 12)
in exact arithmetic so that a counterexample can be certified without any rounding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sympy as sp

if TYPE_CHECKING:
    from .paper import Ext


def singular_values(S: sp.Matrix) -> list[sp.Expr]:
    """All min(m, n) singular values, descending, exact."""
    G = S.T * S if S.cols <= S.rows else S * S.T
    vals = []
    for lam, mult in G.eigenvals().items():
        vals += [sp.sqrt(sp.nsimplify(lam))] * mult
    return sorted(vals, key=lambda v: -float(v))


def nonzero(vals: list[sp.Expr]) -> list[sp.Expr]:
    return [v for v in vals if sp.simplify(v) != 0]


def r_ill_denominator(S: sp.Matrix) -> sp.Expr:
    """``||S||_F^2/(2k) - s_k^2/2`` with k the exact rank."""
    s = nonzero(singular_values(S))
    k = len(s)
    return sp.simplify(sum(x**2 for x in s) / (2 * k) - s[-1] ** 2 / 2)


def r_well(S: sp.Matrix) -> sp.Expr:
    s = singular_values(S)
    return sp.simplify(s[0] ** 2 / 2 - sum(x**2 for x in s) / (2 * len(s)))


def diag_extremes(h: list) -> Ext:
    """Exact :class:`~proofs_checks.paper.Ext` of ``diag(h)`` (h >= 0, sympy numbers), so that the formulas of
    :mod:`proofs_checks.paper` evaluate exactly on sympy object arrays."""
    import numpy as np

    from .paper import Ext

    n = len(h)
    order = sorted(range(n), key=lambda i: -h[i])
    eye = np.array([[sp.Integer(int(i == j)) for j in range(n)] for i in range(n)], dtype=object)
    Q = eye[:, order]
    return Ext([h[i] for i in order], Q, Q, sum(1 for x in h if x != 0))


def diag_theta_step(theta_diag: list, K_diag: list, eta, grad_from_extremes) -> tuple:
    """Exact ``(kappa(H), kappa(H'), H')`` for diagonal theta and K under
    ``theta' = theta - eta K^-1 (2 K theta grad R(H))`` with ``grad R(H) = grad_from_extremes(e, H)``."""
    import numpy as np

    theta = np.diag(np.array(theta_diag, dtype=object))
    K = np.diag(np.array(K_diag, dtype=object))
    H = theta.T @ K @ theta
    e = diag_extremes([H[i, i] for i in range(len(theta_diag))])
    grad = 2 * (K @ (theta @ grad_from_extremes(e, H)))
    theta1 = theta - eta * (grad / np.array(K_diag, dtype=object)[:, None])
    H1 = theta1.T @ K @ theta1
    assert all(H1[i, j] == 0 for i in range(len(K_diag)) for j in range(len(K_diag)) if i != j)
    h1 = [abs(sp.nsimplify(H1[i, i])) for i in range(len(K_diag))]
    e1 = diag_extremes(h1)
    return e.s_max / e.s_min, e1.s_max / e1.s_min, h1
