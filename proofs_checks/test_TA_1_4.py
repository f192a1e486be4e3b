"""TA.1.4 (Thm A.1(4)): if s_max is unique and ``0 < eta < (kappa-1)/((1-1/p) kappa + 1/p)``, then
``S' = S - eta grad R_well(S)`` has ``kappa(S') < kappa(S)``.

Derivation (checked exactly below): ``grad R_well = s_1 u_1 v_1^T - S/p`` shares S's singular vectors, so
``s_1' = s_1 (1 - eta (1 - 1/p))`` and ``s_i' = s_i (1 + eta/p)`` for i > 1 (zeros stay zero). The stated bound
is exactly the step at which ``s_1' = s_k'``; below it, ``kappa' = max(s_1', s_2') / s_k' < kappa``. Past it
s_1' is the smallest and ``kappa' = s_2'/s_1'`` (p > 2 or k < p), which reaches kappa at
``eta_max = (s_1^2 - s_2 s_k) / ((1-1/p) s_1^2 + s_2 s_k/p)``: the bound is sufficient, conservative by
``eta_max/bound`` and TIGHT in the limit ``s_2 -> s_1`` (e.g.
``s = (1, 0.999, 0.1)``: 1.00016; checked on witnesses, where a bound 1.5x larger is violated). Both the bound
(a function of kappa) and the step are invariant under ``S -> c S``, which the measurement checks for c in
{1e-3, 1, 1e3}. Verdict: holds.
"""

from __future__ import annotations

import numpy as np
import sympy as sp
from hypothesis import given

from .evidence import Evidence
from .exact import diag_extremes
from .paper import grad_r_well, kappa
from .profiles import budget
from .steps import (assert_bound_location, assert_bound_ratio_scale_invariant, check_step_claim,
                    matrix_step_problem, scaled_bound)
from .strategies import SpectralMatrix, haar_orthogonal, near_bound_fractions, spectral_matrices

EV = Evidence("TA.1.4")
MATRICES = spectral_matrices(rank="any", min_rank=2)
SCALES = (-3, 0, 3)


def stated_bound(e):
    """The paper's bound transcribed from Thm A.1(4), multiplied through by p (exact for sympy input)."""
    kap = kappa(e)
    return (kap - 1) * e.p / ((e.p - 1) * kap + 1)


def critical_steps(e):
    """``s_1' = 0`` at ``eta = p/(p-1)`` (the rank drops there)."""
    return [e.s_max * e.p / ((e.p - 1) * e.s_max)]


PROBLEM = matrix_step_problem("TA.1.4", "decrease", grad_r_well, stated_bound, critical_steps)


def test_singular_value_dynamics_and_bound_location_exact():
    eta = sp.symbols("eta", positive=True)
    for s in ([3, 2, 1], [5, 2, 1, 0]):
        s = [sp.Integer(x) for x in s]
        p, e = len(s), diag_extremes(s)
        S = np.diag(np.array(s, dtype=object))
        S1 = S - eta * grad_r_well(e, S)
        assert sp.simplify(S1[0, 0] - s[0] * (1 - eta * (1 - sp.Rational(1, p)))) == 0
        for i in range(1, p):
            assert sp.simplify(S1[i, i] - s[i] * (1 + eta / p)) == 0
        k, bound = e.rank, stated_bound(e)
        assert sp.simplify(S1[0, 0].subs(eta, bound) - S1[k - 1, k - 1].subs(eta, bound)) == 0
    EV.note("exact: s_1' = s_1 (1 - eta (1 - 1/p)), s_i' = s_i (1 + eta/p); the bound is where s_1' = s_k'")
    EV.case("exact derivation", "exact (sympy)")


@budget(40)
@given(sm=MATRICES, f=near_bound_fractions())
def test_step_inside_stated_bound_decreases_kappa(sm, f):
    check_step_claim(PROBLEM, sm, f, EV)


# Full rank only: on a rank-deficient S the float64 scan meets the computed null singular values (rounding noise
# that the step amplifies past the rank threshold at some scales but not at others), so eta_max/bound measured on
# S = diag(1, 0.01, 0) rotated came out 1.0107 at one scale and 1.0 at the others (a full-suite CI run). The claim
# itself is checked on rank-deficient S by the step test above; this measurement's rank-deficient case is open.
@budget(10)
@given(sm=spectral_matrices(rank="full", min_rank=2, min_gap=1e-3, max_log_kappa=6))
def test_measure_stated_bound_and_scale_invariance(sm):
    assert_bound_ratio_scale_invariant(PROBLEM, sm, EV, SCALES)


#: witnesses (s, seed of the orthogonal factors): near-tie s_2 -> s_1, where the bound is nearly tight
WITNESSES = [((1.0, 0.999, 0.1), 0), ((1.0, 0.999, 0.1), 7), ((2.0, 2.0 - 2e-6, 0.5, 0.0), 11)]


def witness(s, seed) -> SpectralMatrix:
    n = len(s)
    return SpectralMatrix(np.array(s), haar_orthogonal(n, seed), haar_orthogonal(n, seed + 1 if seed else 0),
                          "witness")


def bound_location(c: float = 1.0) -> None:
    """On each witness the bound (times ``c``) sits at ``s_1' = s_k'`` and eta_max at the closed form of the
    module docstring (both from the singular-value dynamics, not from :func:`stated_bound`)."""
    problem = scaled_bound(PROBLEM, c)
    for s, seed in WITNESSES:
        p, nz = len(s), [x for x in s if x > 0]
        s1, s2, sk = nz[0], nz[1], nz[-1]
        at_crossing = (s1 - sk) / ((1 - 1 / p) * s1 + sk / p)
        eta_max = (s1**2 - s2 * sk) / ((1 - 1 / p) * s1**2 + s2 * sk / p)
        assert_bound_location(problem, witness(s, seed), eta_max / at_crossing, EV)


def test_bound_is_where_stated_on_near_tight_witnesses():
    bound_location()
