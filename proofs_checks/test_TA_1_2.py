"""TA.1.2 (Thm A.1(2)): ``kappa(S) <= exp( p s_min^-2 R_well(S) )`` (s_min the smallest nonzero singular
value, p = min dimension).

Verdict: holds, including rank-deficient S (the zero singular values only enlarge R_well).
"""

from __future__ import annotations

import mpmath as mp
from hypothesis import given


from .checks import confirm_le
from .evidence import Evidence
from .paper import r_well as r_well_e
from .profiles import budget
from .strategies import spectral_matrices

EV = Evidence("TA.1.2")


@budget(40)
@given(sm=spectral_matrices(rank="any", ties=True, max_log_kappa=12))
def test_kappa_at_most_exp_of_p_r_well_over_smin2(sm):
    confirm_le("TA.1.2", lambda e: (e.s_max / e.s_min, mp.exp(e.p * r_well_e(e) / e.s_min**2)),
               sm, EV)
