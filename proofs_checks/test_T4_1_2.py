"""T4.1.2 (Thm 4.1(2)): ``1 / log(kappa(S)) <= s_max^2 R_ill(S)``.

Verdict: holds wherever both sides are defined (k >= 2 and kappa > 1); the proof's chain gives the stronger
``1/log kappa <= (k-1)/k s_max^2 R_ill``, which is checked as well.
"""

from __future__ import annotations

from hypothesis import given

from .checks import confirm_le, mp_log
from .evidence import Evidence
from .paper import r_ill
from .profiles import budget
from .strategies import spectral_matrices

EV = Evidence("T4.1.2")
MATRICES = spectral_matrices(min_rank=2, rank="any", max_log_kappa=12)  # kappa up to 1e12


@budget(40)
@given(sm=MATRICES)
def test_inverse_log_kappa_at_most_smax2_r_ill(sm):
    confirm_le("T4.1.2", lambda e: (1 / mp_log(e.s_max / e.s_min),
                                    e.s_max**2 * r_ill(e)), sm, EV)


@budget(25)
@given(sm=MATRICES)
def test_proof_chain_stronger_bound_with_factor_k_minus_1_over_k(sm):
    confirm_le("T4.1.2 (proof's intermediate bound)",
               lambda e: (1 / mp_log(e.s_max / e.s_min),
                          (e.rank - 1) / e.rank * e.s_max**2 * r_ill(e)), sm, EV)
