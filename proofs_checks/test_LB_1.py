"""LB.1 (Lemma B.1): with ``R'_ill(S) = 1/2 (s_min^2 - ||S||_F^2 / k)``,
``1/kappa(S) <= exp( k/(k-1) s_1^-2 R'_ill(S) )`` for k >= 2.

``R'_ill = -1/R_ill`` (:func:`proofs_checks.paper.ill_den` with the sign flipped). Verdict: holds for k >= 2 (the
lemma's ``k/(k-1)`` is undefined at k = 1).
"""

from __future__ import annotations

import mpmath as mp
from hypothesis import given

from .checks import assert_slack, confirm_le, diagonal, scale_side
from .evidence import Evidence
from .paper import ill_den
from .profiles import budget
from .strategies import spectral_matrices

EV = Evidence("LB.1")


def sides(e):
    r_prime = -ill_den(e)
    return e.s_min / e.s_max, mp.exp(e.rank / (e.rank - 1) * r_prime / e.s_max**2)


@budget(40)
@given(sm=spectral_matrices(min_rank=2, rank="any", max_log_kappa=12))
def test_inverse_kappa_at_most_exp_of_scaled_r_ill_prime(sm):
    confirm_le("LB.1", sides, sm, EV)


def bound_location(c: float = 1.0) -> None:
    """Tight as kappa -> 1 with s_1 = ... = s_{k-1}: then the exponent is -(1 - 1/kappa^2)/2 and both sides are
    1 - t + O(t^2) for kappa = 1/(1 - t); slack 1 + 1e-8 at t = 1e-4."""
    for s in ([1.0, 1.0, 1 - 1e-4], [1.0, 1 - 1e-4]):
        assert_slack("LB.1", scale_side(sides, c, "rhs"), diagonal(s), EV, 1.0, 1 + 1e-6)


def test_bound_is_tight_as_kappa_tends_to_one():
    bound_location()
