"""T4.2.1 (Thm 4.2(1)): ``grad_theta R_well(H(theta)) = 2 K theta (s_1 v_1 v_1^T - H/D)`` with D = D_in.

Verdict: holds for the paper's square theta (D_in = D_hid), checked against torch autograd through R_well(H)
and central differences. For a rectangular theta (D_in x D_hid) the correct constant is D_hid = size of H, not
D_in (noted; kappalab uses D_hid).
"""

from __future__ import annotations

from hypothesis import given, strategies as st

from .evidence import Evidence
from .gradients import assert_theta_gradient
from .profiles import budget
from .strategies import thetas_with_h_spectrum

EV = Evidence("T4.2.1")
#: H's spectrum drawn directly: kappa(H) to 1e6, scale 1e-6..1e6, D = 2..8, relative gaps >= 1e-2 (kappa(K) <= 1e3)
CASES = thetas_with_h_spectrum(dims=(2, 8), min_gap=1e-2, max_log_kappa=6, scale=(-6.0, 6.0))


@budget(20)
@given(case=CASES, seed=st.integers(0, 2**31))
def test_theta_gradient_matches_autograd_and_central_differences(case, seed):
    h = case.theta.s**2 * case.K.s
    assert_theta_gradient("T4.2.1", "well", case.theta.matrix, case.K.matrix, h, seed, repr(case))
    EV.case(case.family)
