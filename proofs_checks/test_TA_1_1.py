"""TA.1.1 (Thm A.1(1)): ``R_well(S) >= 0``; for S != 0, ``R_well(S) = 0`` iff S has full rank and kappa(S) = 1.

``R_well = (1/(2p)) sum_{i<=p} (s_1^2 - s_i^2)`` over all p singular values (zeros included). Checked in
float64 with a 80-digit re-check, and exactly (sympy) on scaled rational orthogonal matrices. Verdict: holds.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
import sympy as sp
from hypothesis import given


from .checks import confirm_le
from .evidence import Evidence
from .paper import Undefined, ext64, r_well as r_well_e
from .exact import r_well
from .highprec import MP_LABEL, MP_TOL, mp_extremes, mp_spectral, workdps
from .profiles import budget
from .strategies import spectral_matrices

EV = Evidence("TA.1.1")
MATRICES = spectral_matrices(rank="any", ties=True)


@budget(40)
@given(sm=MATRICES)
def test_r_well_nonnegative(sm):
    confirm_le("TA.1.1 (R_well >= 0)", lambda e: (0 * e.s_max, r_well_e(e)), sm, EV)


@budget(40)
@given(sm=MATRICES)
def test_r_well_zero_exactly_when_full_rank_and_kappa_one(sm):
    with workdps():
        e = mp_extremes(mp_spectral(sm))
        is_zero = abs(r_well_e(e)) <= MP_TOL * e.s_max**2
        well = e.rank == e.p and e.s_max - e.s_min <= MP_TOL * e.s_max
        assert is_zero == well, (f"TA.1.1 iff violated: R_well = {mp.nstr(r_well_e(e), 20)}, "
                                 f"rank {e.rank}/{e.p}, kappa = {mp.nstr(e.s_max / e.s_min, 20)}\n{sm!r}")
    EV.case(sm.family + (",R_well=0" if is_zero else ""), MP_LABEL)


@pytest.mark.parametrize("c", [sp.Rational(1, 1000), 1, 7])
def test_scaled_rational_rotation_has_r_well_exactly_zero(c):
    Q = sp.Matrix([[3, -4], [4, 3]]) / 5  # exactly orthogonal
    assert r_well(c * Q) == 0
    assert r_well(c * sp.diag(1, 1, 0)[:, :2]) == 0  # 3x2 with orthonormal columns: p = 2, full rank
    assert r_well(c * sp.diag(1, 0)) > 0  # rank-deficient: R_well = c^2/4
    EV.case("exact rotations", "exact (sympy)")


def test_zero_matrix_is_outside_the_claim_and_refused():
    # the claim excludes S = 0 (R_well(0) = 0 but kappa(0) = 0/0 is undefined)
    with pytest.raises(Undefined):
        ext64(np.zeros((2, 2)))
