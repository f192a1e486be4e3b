"""T4.1.2 (Thm 4.1(2)): ``1 / log(kappa(S)) <= s_max^2 R_ill(S)``.

Verdict: holds wherever both sides are defined (k >= 2 and kappa > 1); the proof's chain gives the stronger
``1/log kappa <= (k-1)/k s_max^2 R_ill``, which is checked as well. Slack: ``s_max^2 R_ill >= 2k/(k-1)
kappa^2/(kappa^2 - 1)`` (equality when s_1 = ... = s_{k-1}) and ``kappa^2 log kappa/(kappa^2 - 1) -> 1/2`` as
kappa -> 1, so the stated bound is conservative by k/(k-1) (4/3 at k = 4) on ``diag(1, 1, 1, 1 - t)``, t -> 0,
and the proof's bound is tight there.
"""

from __future__ import annotations

from hypothesis import given

from .checks import assert_slack, confirm_le, diagonal, mp_log, scale_side
from .evidence import Evidence
from .paper import r_ill
from .profiles import budget
from .strategies import spectral_matrices

EV = Evidence("T4.1.2")
MATRICES = spectral_matrices(min_rank=2, rank="any", max_log_kappa=12)  # kappa up to 1e12


def stated(e):
    return 1 / mp_log(e.s_max / e.s_min), e.s_max**2 * r_ill(e)


def proof_chain(e):
    return 1 / mp_log(e.s_max / e.s_min), (e.rank - 1) / e.rank * e.s_max**2 * r_ill(e)


@budget(40)
@given(sm=MATRICES)
def test_inverse_log_kappa_at_most_smax2_r_ill(sm):
    confirm_le("T4.1.2", stated, sm, EV)


@budget(25)
@given(sm=MATRICES)
def test_proof_chain_stronger_bound_with_factor_k_minus_1_over_k(sm):
    confirm_le("T4.1.2 (proof's intermediate bound)", proof_chain, sm, EV)


def bound_location(c: float = 1.0, bounds: tuple[str, ...] = ("stated", "proof chain")) -> None:
    """The slack on ``diag(1, 1, 1, 1 - 1e-4)`` (k = 4): k/(k-1) = 4/3 for the stated bound, 1 for the proof's."""
    sm = diagonal([1.0, 1.0, 1.0, 1 - 1e-4])
    if "stated" in bounds:
        assert_slack("T4.1.2", scale_side(stated, c, "lhs"), sm, EV, 4 / 3, 4 / 3 * (1 + 1e-3))
    if "proof chain" in bounds:
        assert_slack("T4.1.2 (proof)", scale_side(proof_chain, c, "lhs"), sm, EV, 1.0, 1 + 1e-3)


def test_bounds_slack_on_witness():
    bound_location()
