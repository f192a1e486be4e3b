"""T4.1.3 (Thm 4.1(3), Eq. 13): if s_min is unique, R_ill is differentiable with
``grad R_ill(S) = (s_k u_k v_k^T - S/k) / (||S||_F^2/(2k) - s_min^2/2)^2``.

Verdict: holds for full-rank S (autograd of the definition + central differences); fails as stated for rank-deficient S: the rank
jumps under a generic perturbation and R_ill is discontinuous there (exact: S = diag(2, 1, 0), R_ill = 4/3, but
R_ill(S + h e3 e3^T) -> 6/5 as h -> 0). Corrected: for k < p the formula is the gradient along the manifold of
rank-k matrices (checked by central differences in rank-preserving directions U_k [A B] V^T).
"""

from __future__ import annotations

import numpy as np
import sympy as sp
from hypothesis import given, strategies as st

from .evidence import Evidence
from .exact import r_ill_denominator
from .gradients import assert_directional_derivative, assert_matches_autograd, grad_tolerance, torch_r_ill
from .highprec import mp_extremes
from .paper import ext64, grad_r_ill, ill_den, r_ill
from .profiles import budget
from .strategies import spectral_matrices

EV = Evidence("T4.1.3")


#: kappa to 1e6, scale 1e-6..1e6, dims 2..8, relative gaps >= 1e-2 (the tolerance follows the gap, not kappa)
FULL_RANK = spectral_matrices(rank="full", min_rank=2, min_gap=1e-2, max_log_kappa=6, dims=(2, 8))


def scale_of_terms(sm) -> float:
    """``(||S||_F / k + s_k) / d^2``: the size of Eq. 13's two terms, the scale of its float64 error."""
    e = ext64(sm.matrix)
    return (np.linalg.norm(sm.matrix) / e.rank + e.s_min) / ill_den(e) ** 2


@budget(20)
@given(sm=FULL_RANK)
def test_full_rank_closed_form_gradient_matches_autograd_of_definition(sm):
    S = sm.matrix
    assert_matches_autograd("T4.1.3", grad_r_ill(ext64(S), S), lambda X: torch_r_ill(X, sm.rank), S,
                            grad_tolerance(sm.s, sm.s.size, "bottom"), scale_of_terms(sm), repr(sm))
    EV.case(sm.family + ",autograd")


@budget(20)
@given(sm=FULL_RANK, seed=st.integers(0, 2**31))
def test_full_rank_closed_form_gradient_matches_central_differences(sm, seed):
    S = sm.matrix
    assert_directional_derivative("T4.1.3", lambda X: r_ill(mp_extremes(X)), grad_r_ill(ext64(S), S), S, seed,
                                  grad_tolerance(sm.s, sm.s.size, "bottom"), scale_of_terms(sm), repr(sm))
    EV.case(sm.family + ",central-differences")


@budget(20)
@given(sm=spectral_matrices(rank="deficient", min_rank=2, min_gap=1e-2, max_log_kappa=4),
       seed=st.integers(0, 2**31))
def test_rank_deficient_gradient_matches_differences_along_rank_preserving_directions(sm, seed):
    k = sm.rank
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((k, sm.V.shape[0]))  # E = U_k [A B] V^T keeps rank <= k exactly
    E = sm.U[:, :k] @ A @ sm.V.T
    S = sm.matrix
    G = grad_r_ill(ext64(S), S)
    h = 1e-5 * np.linalg.norm(S) / np.linalg.norm(E)
    fd = (float(r_ill(ext64(S + h * E))) - float(r_ill(ext64(S - h * E)))) / (2 * h)
    an = float(np.sum(G * E))
    assert abs(fd - an) <= 1e-5 * np.linalg.norm(G) * np.linalg.norm(E), (fd, an, repr(sm))
    EV.case(sm.family + ",rank-preserving")


def test_rank_deficient_r_ill_is_discontinuous_exact():
    h = sp.symbols("h", positive=True)
    r0 = 1 / r_ill_denominator(sp.diag(2, 1, 0))
    # S + h e3 e3^T = diag(2, 1, h): k = 3, s_min = h for h < 1
    r_h = 1 / ((5 + h**2) / 6 - h**2 / 2)
    assert r0 == sp.Rational(4, 3) and sp.limit(r_h, h, 0, "+") == sp.Rational(6, 5)
    EV.counterexample("S = diag(2, 1, 0), direction e3 e3^T", "exact (sympy)", R_ill_S=r0,
                      limit_R_ill_S_plus_hE=sp.Rational(6, 5), statement="R_ill differentiable when s_min unique")
