"""T4.1.1 (Thm 4.1(1)): ``R_ill(S) >= 0``, and ``R_ill(S) = 0`` iff ``kappa(S) = inf``.

Findings (exact and property checks):

* ``R_ill > 0`` (strictly) wherever it is defined, and it is finite there.
* Under the paper's pseudo-inverse ``kappa = s_1 / s_k`` (s_k the smallest NONZERO singular value) kappa is
  finite for every nonzero S, so both sides of the "iff" are always false: the equivalence is vacuous.
* Under the full-dimension reading ``kappa = s_1 / s_p`` (kappa = inf for rank-deficient S) the "if" direction
  fails: ``S = diag(2, 1, 0)`` has kappa = inf and ``R_ill = 4/3`` (k = 2).
* R_ill is undefined (zero denominator) when all nonzero singular values are equal, e.g. ``S = I`` or any
  rank-1 S; the checks raise ``Undefined`` there.
* What the proof shows is a limit: ``R_ill <= 2k/((kappa^2 - 1) s_min^2) -> 0`` as kappa -> inf with s_min
  fixed. That corrected statement is checked exactly on ``diag(t, 1)``.

Verdict: fails as stated (vacuous or false depending on the reading of kappa; undefined at kappa = 1); the
corrected statement (R_ill > 0 where defined; R_ill -> 0 as kappa -> inf at fixed s_min) holds.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from hypothesis import given

from .checks import confirm_le
from .evidence import Evidence
from .paper import Undefined, ext64, kappa, r_ill
from .exact import r_ill_denominator, singular_values
from .profiles import budget
from .strategies import spectral_matrices

EV = Evidence("T4.1.1")


@budget(40)
@given(sm=spectral_matrices(min_rank=2, rank="any"))
def test_r_ill_strictly_positive_where_defined(sm):
    confirm_le("T4.1.1 (R_ill > 0)", lambda e: (0 * e.s_max, r_ill(e)), sm, EV,
               strict=True)


@budget(25)
@given(sm=spectral_matrices(rank="deficient", min_rank=2))
def test_pseudo_inverse_kappa_is_finite_for_rank_deficient_matrices(sm):
    # Against the DRAWN spectrum (k nonzero values, p - k exact zeros): the float64 rank rule finds exactly k and
    # kappa = s_1/s_k, finite, to the SVD's accuracy ~ p eps kappa (relative); a rank rule that counted a rounding
    # residue of the zeros (~eps s_1) as nonzero would give kappa ~ 1e16 and fail here.
    e = ext64(sm.matrix)
    k = sm.rank
    expected = sm.s[0] / sm.s[k - 1]
    got = float(kappa(e))
    tol = 8 * max(sm.matrix.shape) * np.finfo(float).eps * expected
    assert e.rank == k and np.isfinite(got) and abs(got - expected) <= tol * expected, (
        f"rank {e.rank} (drawn {k}), kappa {got!r} vs s_1/s_k = {expected!r}\n{sm!r}")
    EV.case(sm.family + ",kappa-finite")


def test_full_dimension_kappa_reading_gives_counterexample_to_if_direction():
    # kappa = s_1/s_p = 2/0 = inf, yet R_ill (k = rank = 2) = 1/(5/4 - 1/2) = 4/3 != 0: "kappa = inf => R_ill = 0"
    # fails. Exact arithmetic.
    S = sp.diag(2, 1, 0)
    s = singular_values(S)
    assert s[-1] == 0  # s_p = 0: kappa = inf under the full-dimension reading
    assert s[0] / s[1] == 2  # while the pseudo-inverse kappa s_1/s_k is 2: finite, so "kappa = inf" never holds
    r = 1 / r_ill_denominator(S)
    assert r == sp.Rational(4, 3) and r != 0
    EV.counterexample("kappa = s_1/s_p reading: S = diag(2, 1, 0)", "exact (sympy)", S=S, kappa="inf",
                      R_ill=r, statement="kappa(S) = inf => R_ill(S) = 0")


@pytest.mark.parametrize("S", [np.eye(3), np.diag([2.0, 2.0, 0.0]), np.outer([1.0, 2.0], [3.0, 1.0, 1.0])],
                         ids=["identity", "equal-nonzero-spectrum", "rank-1"])
def test_r_ill_undefined_when_all_nonzero_singular_values_equal(S):
    assert r_ill_denominator(sp.Matrix(S).applyfunc(sp.nsimplify)) == 0
    with pytest.raises(Undefined):
        r_ill(ext64(S))
    EV.note("R_ill is undefined (denominator exactly 0) when all nonzero singular values are equal: S = I, "
            "rank-1 S, diag(2, 2, 0)")


def test_corrected_statement_r_ill_tends_to_zero_as_kappa_grows_at_fixed_smin():
    t = sp.symbols("t", positive=True)
    # S = diag(t, 1): k = 2, s_min = 1, kappa = t; denominator (t^2 + 1)/4 - 1/2 = (t^2 - 1)/4
    r = 1 / ((t**2 + 1) / 4 - sp.Rational(1, 2))
    assert sp.limit(r, t, sp.oo) == 0
    assert 1 / r_ill_denominator(sp.diag(3, 1)) == r.subs(t, 3)  # the hand-derived form equals paper.py's at t = 3
    EV.note("corrected: R_ill > 0 wherever defined, and R_ill -> 0 as kappa -> inf with s_min fixed "
            "(exact limit on diag(t, 1))")
