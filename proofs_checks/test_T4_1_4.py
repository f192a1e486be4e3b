"""T4.1.4 (Thm 4.1(4)): if s_min is unique and ``0 < eta < k/(k-1) d^2`` with
``d = ||S||_F^2/(2k) - s_min^2/2``, then ``S' = S - eta grad R_ill(S)`` has ``kappa(S') > kappa(S)``.

Derivation (checked exactly below): ``grad R_ill = (s_k u_k v_k^T - S/k) / d^2`` shares S's singular vectors, so
``s_i' = s_i (1 + eta/(k d^2))`` for i < k and ``s_k' = s_k (1 - eta (k-1)/(k d^2))`` (zeros stay zero). For
``0 < eta < k d^2/(k-1)``, s_k' is in (0, s_k) and the others grow: kappa increases. At ``eta = k d^2/(k-1)``,
exactly the stated bound, ``s_k' = 0``: the rank drops and the pseudo-inverse kappa falls to
``s_1'/s_{k-1}' < kappa``. So the bound is sufficient AND tight: the measured ``eta_max / bound`` is exactly 1
(the failure is an isolated step, evaluated in 80 digits), for every scale c in {1e-3, 1, 1e3} of S (bound and
step both scale like c^4). Verdict: holds.
"""

from __future__ import annotations

import numpy as np
import sympy as sp
from hypothesis import given

from .evidence import Evidence
from .exact import diag_extremes
from .paper import grad_r_ill, ill_den, kappa
from .profiles import budget
from .steps import (assert_bound_location, assert_bound_ratio_scale_invariant, check_step_claim,
                    matrix_step_problem, scaled_bound)
from .strategies import SpectralMatrix, haar_orthogonal, near_bound_fractions, spectral_matrices

EV = Evidence("T4.1.4")
SCALES = (-3, 0, 3)


def stated_bound(e):
    """Thm 4.1(4)'s bound transcribed: ``k/(k-1) d^2``."""
    d = ill_den(e)
    return e.rank * d * d / (e.rank - 1)


def critical_steps(e):
    """``s_k' = s_k (1 - eta (k-1)/(k d^2)) = 0`` at ``eta = k d^2/(k-1)`` (the derivation's value, written from
    the dynamics, not by calling :func:`stated_bound`; the two agree, which is what tightness means)."""
    d2 = ill_den(e) ** 2
    return [1 / ((e.rank - 1) / (e.rank * d2))]


PROBLEM = matrix_step_problem("T4.1.4", "increase", grad_r_ill, stated_bound, critical_steps)


def test_singular_value_dynamics_and_tightness_exact():
    eta = sp.symbols("eta", positive=True)
    for s in ([3, 2, 1], [4, 3, 1, 0], [2, 1]):
        s = [sp.Integer(x) for x in s]
        e = diag_extremes(s)
        k, d = e.rank, ill_den(e)
        S = np.diag(np.array(s, dtype=object))
        S1 = S - eta * grad_r_ill(e, S)
        for i in range(k - 1):
            assert sp.simplify(S1[i, i] - s[i] * (1 + eta / (k * d**2))) == 0
        assert sp.simplify(S1[k - 1, k - 1] - s[k - 1] * (1 - eta * (k - 1) / (k * d**2))) == 0
        assert all(S1[i, i] == 0 for i in range(k, len(s)))
        bound = stated_bound(e)
        assert sp.simplify(S1[k - 1, k - 1].subs(eta, bound)) == 0  # s_k' = 0 exactly at the bound
        at = [S1[i, i].subs(eta, bound) for i in range(len(s))]
        nz = [x for x in at if x != 0]
        k_at = max(nz) / min(nz)  # pseudo-inverse kappa at the bound
        inside = [abs(S1[i, i].subs(eta, bound * sp.Rational(999999, 1000000))) for i in range(k)]
        assert max(inside) / min(inside) > kappa(e)  # just inside: increases (exact)
        if k > 2:
            assert k_at < kappa(e), (k_at, kappa(e))  # at the bound: rank drops, kappa falls
        EV.counterexample(f"tightness: S = diag{tuple(s)}, eta = stated bound (excluded by the claim)",
                          "exact (sympy)", bound=bound, kappa_before=kappa(e), kappa_at_bound=k_at,
                          note="s_k' = 0: the open bound cannot be enlarged")
    EV.note("exact: s_i' = s_i (1 + eta/(k d^2)), s_k' = s_k (1 - eta (k-1)/(k d^2)); the bound is where s_k' = 0")
    EV.case("exact derivation", "exact (sympy)")


@budget(40)
@given(sm=spectral_matrices(rank="any", min_rank=2), f=near_bound_fractions())
def test_step_inside_stated_bound_increases_kappa(sm, f):
    check_step_claim(PROBLEM, sm, f, EV)


@budget(15)
@given(sm=spectral_matrices(rank="any", min_rank=2, min_gap=1e-3, max_log_kappa=6))
def test_measure_stated_bound_and_scale_invariance(sm):
    assert_bound_ratio_scale_invariant(PROBLEM, sm, EV, SCALES, expected=1.0)


def bound_location(c: float = 1.0) -> None:
    """Tight: on every witness the first failing step is the rank drop s_k' = 0, exactly at the bound."""
    problem = scaled_bound(PROBLEM, c)
    for s, seed in [((3.0, 2.0, 1.0), 0), ((3.0, 2.0, 1.0), 5), ((4.0, 3.0, 1.0, 0.0), 9), ((2.0, 1.0), 3)]:
        n = len(s)
        sm = SpectralMatrix(np.array(s), haar_orthogonal(n, seed), haar_orthogonal(n, seed + 1 if seed else 0),
                            "witness")
        assert_bound_location(problem, sm, 1.0, EV, rtol=1e-9)


def test_bound_is_tight_on_witnesses():
    bound_location()
