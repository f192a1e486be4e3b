"""D3.1c (Def. 3.1(c)): for linear models any invertible theta_I attains the same minimum pre-training loss
as the identity: ``min_w ||X theta w - y||^2 = min_w ||X w - y||^2``.

Checked in exact rational arithmetic (sympy): the minimum is ``||y||^2 - ||P y||^2`` with ``P`` the orthogonal
projector onto the column space, and ``col(X theta) = col(X)`` for invertible theta. Verdict: holds (exactly).
Invertibility is needed: a singular theta can raise the minimum (regression example below).
"""

from __future__ import annotations

import sympy as sp
from hypothesis import given, strategies as st

from .evidence import Evidence
from .profiles import budget

EV = Evidence("D3.1c")


def min_loss(A: sp.Matrix, y: sp.Matrix) -> sp.Rational:
    """Exact ``min_w ||A w - y||^2`` via an orthogonal projector onto ``col(A)``."""
    basis = A.columnspace()
    if not basis:
        return (y.T * y)[0]
    B = sp.Matrix.hstack(*basis)
    proj = B * (B.T * B).inv() * B.T * y
    return (y.T * y)[0] - (proj.T * proj)[0]


@st.composite
def problems(draw):
    n = draw(st.integers(1, 5))
    d = draw(st.integers(1, 3))
    ints = st.integers(-3, 3)
    X = sp.Matrix(n, d, [draw(ints) for _ in range(n * d)])
    y = sp.Matrix(n, 1, [draw(ints) for _ in range(n)])
    theta = sp.Matrix(d, d, [draw(ints) for _ in range(d * d)])
    return X, theta, y


@budget(40)
@given(case=problems().filter(lambda c: c[1].det() != 0))
def test_invertible_theta_keeps_min_least_squares_loss_exactly(case):
    X, theta, y = case
    lhs, rhs = min_loss(X * theta, y), min_loss(X, y)
    assert lhs == rhs, f"D3.1c violated: min loss with theta = {lhs}, with I = {rhs}\nX={X}\ntheta={theta}\ny={y}"
    EV.case(f"exact,N={X.rows},D={X.cols},rank={X.rank()}", "exact (sympy)")


def test_singular_theta_can_raise_min_loss_so_invertibility_is_needed():
    # X = I, theta = diag(1, 0), y = e_2: the identity fits y exactly; theta cannot reach the e_2 direction.
    X, theta, y = sp.eye(2), sp.diag(1, 0), sp.Matrix([0, 1])
    assert min_loss(X * theta, y) == 1 and min_loss(X, y) == 0
    EV.note("invertibility is necessary: X = I, theta = diag(1, 0), y = e_2 gives min loss 1 vs 0")
