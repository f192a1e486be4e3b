"""T4.2.2 (Thm 4.2(2)): ``grad_theta R_ill(H(theta)) = 2 K theta (s_k v_k v_k^T - H/k) / d^2``.

Verdict: holds for invertible theta (rank(H) = rank(K) is then locally constant), checked against torch autograd
and central differences; for singular theta R_ill(H(theta)) is discontinuous (as in T4.1.3): theta = diag(2,1,0),
K = I gives R_ill = 4/15 but R_ill -> 6/17 under theta_33 = h -> 0.
"""

from __future__ import annotations

import sympy as sp
from hypothesis import given, strategies as st

from .evidence import Evidence
from .exact import r_ill_denominator
from .gradients import assert_theta_gradient
from .profiles import budget
from .test_T4_2_1 import CASES

EV = Evidence("T4.2.2")


@budget(20)
@given(case=CASES, seed=st.integers(0, 2**31))
def test_theta_gradient_matches_autograd_and_central_differences(case, seed):
    h = case.theta.s**2 * case.K.s
    assert_theta_gradient("T4.2.2", "ill", case.theta.matrix, case.K.matrix, h, seed, repr(case))
    EV.case(case.family)


def test_singular_theta_makes_r_ill_discontinuous_exact():
    h = sp.symbols("h", positive=True)
    r0 = 1 / r_ill_denominator(sp.diag(4, 1, 0))
    r_h = 1 / ((17 + h**4) / 6 - h**4 / 2)  # H = diag(4, 1, h^2), k = 3, s_min = h^2
    assert r0 == sp.Rational(4, 15) and sp.limit(r_h, h, 0, "+") == sp.Rational(6, 17)
    EV.counterexample("theta = diag(2, 1, 0), K = I, theta_33 = h -> 0", "exact (sympy)", R_ill=r0,
                      limit=sp.Rational(6, 17))
