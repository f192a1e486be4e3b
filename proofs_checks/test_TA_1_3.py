"""TA.1.3 (Thm A.1(3)): if s_max is unique, ``grad R_well(S) = s_1 u_1 v_1^T - S/p``.

The paper's closed form (:mod:`proofs_checks.paper`) is checked against torch autograd of the definition
(``svdvals``, float64) and central differences in random directions; rank-deficient and rectangular S included (R_well does
not depend on the rank). A tie at s_max raises ``DegenerateSpectrumError``. Verdict: holds.
"""

from __future__ import annotations

import sympy as sp
from hypothesis import given, strategies as st

from .evidence import Evidence
from .gradients import assert_directional_derivative, assert_matches_autograd, grad_tolerance, torch_r_well
from .highprec import mp_extremes
from .paper import ext64, grad_r_well, r_well
from .profiles import budget
from .strategies import spectral_matrices

EV = Evidence("TA.1.3")
#: kappa to 1e6, scale 1e-6..1e6, dims 2..8, relative gaps >= 1e-2 (the tolerance follows the gap, not kappa)
GAPPED = spectral_matrices(rank="any", min_gap=1e-2, max_log_kappa=6, dims=(2, 8))


@budget(20)
@given(sm=GAPPED)
def test_closed_form_gradient_matches_autograd_of_definition(sm):
    S = sm.matrix
    assert_matches_autograd("TA.1.3", grad_r_well(ext64(S), S), torch_r_well, S,
                            grad_tolerance(sm.s, sm.s.size, "top"), sm.s[0], repr(sm))
    EV.case(sm.family + ",autograd")


@budget(20)
@given(sm=GAPPED, seed=st.integers(0, 2**31))
def test_closed_form_gradient_matches_central_differences(sm, seed):
    S = sm.matrix
    assert_directional_derivative("TA.1.3", lambda X: r_well(mp_extremes(X)), grad_r_well(ext64(S), S), S, seed,
                                  grad_tolerance(sm.s, sm.s.size, "top"), sm.s[0], repr(sm))
    EV.case(sm.family + ",central-differences")


def test_tied_top_singular_value_makes_r_well_non_differentiable_exact():
    # S = diag(2, 2, 1), E = e1 e1^T: R_well(S + hE) = (2+h)^2/2 - (9 + 4h + h^2)/6 for h > 0, but for h < 0 the
    # top singular value stays 2: the one-sided derivatives along E and -E are 4/3 and 2/3 (not opposite), so
    # uniqueness of s_max is needed.
    h = sp.symbols("h", positive=True)
    r = lambda s: max(s) ** 2 / 2 - sum(x**2 for x in s) / 6  # noqa: E731  (diagonal S, p = 3)
    plus = sp.diff(r([2 + h, 2, 1]).expand(), h).subs(h, 0)
    minus = sp.diff((sp.Integer(2) ** 2 / 2 - ((2 - h) ** 2 + 5) / 6).expand(), h).subs(h, 0)
    assert plus == sp.Rational(4, 3) and minus == sp.Rational(2, 3) and minus != -plus
    EV.note("tie at s_max: one-sided derivatives 4/3 and 2/3 along +-e1e1^T at diag(2, 2, 1): not differentiable")
