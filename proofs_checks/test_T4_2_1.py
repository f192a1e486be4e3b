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
from .strategies import thetas_and_covariances

EV = Evidence("T4.2.1")
CASES = thetas_and_covariances(theta_kw={"rank": "full", "min_gap": 1e-2, "max_log_kappa": 1, "scale": (-0.3, 0.3)},
                               K_kw={"max_log_kappa": 1, "scale": (-0.3, 0.3)})


@budget(20)
@given(case=CASES, seed=st.integers(0, 2**31))
def test_theta_gradient_matches_autograd_and_central_differences(case, seed):
    assert_theta_gradient("T4.2.1", "well", case.theta.matrix, case.K.matrix, seed, repr(case))
    EV.case(case.family)
