"""TA.1.2 (Thm A.1(2)): ``kappa(S) <= exp( p s_min^-2 R_well(S) )`` (s_min the smallest nonzero singular
value, p = min dimension).

Verdict: holds, including rank-deficient S (the zero singular values only enlarge R_well).
"""

from __future__ import annotations

import mpmath as mp
from hypothesis import given


from .checks import assert_slack, confirm_le, diagonal, scale_side
from .evidence import Evidence
from .paper import r_well as r_well_e
from .profiles import budget
from .strategies import spectral_matrices

EV = Evidence("TA.1.2")


def sides(e):
    return e.s_max / e.s_min, mp.exp(e.p * r_well_e(e) / e.s_min**2)


@budget(40)
@given(sm=spectral_matrices(rank="any", ties=True, max_log_kappa=12))
def test_kappa_at_most_exp_of_p_r_well_over_smin2(sm):
    confirm_le("TA.1.2", sides, sm, EV)


def bound_location(c: float = 1.0) -> None:
    """Tight as kappa -> 1 at p = 2: S = diag(1 + t, 1) gives exp((2t + t^2)/2) vs 1 + t, slack 1 + O(t^2)."""
    assert_slack("TA.1.2", scale_side(sides, c, "rhs"), diagonal([1 + 1e-4, 1.0]), EV, 1.0, 1 + 1e-6)


def test_bound_is_tight_as_kappa_tends_to_one():
    bound_location()
