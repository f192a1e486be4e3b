"""T4.3.1 (Thm 4.3(1)): if s_max(H_P) is unique and
``0 < eta_P < min{ 1/((1-1/D) s_1), (s_1 s_2 - s_2^2)/(D s_2^2) }``, then
``theta' = theta - eta_P K_P^-1 grad_theta R_well(H_P(theta))`` has ``kappa(H_P(theta')) < kappa(H_P(theta))``.

The step acts on H's eigenvalues exactly: ``s_1' = s_1 (1 - 2 eta (1-1/D) s_1)^2``,
``s_i' = s_i (1 + 2 eta s_i / D)^2``. The stated bound allows (i) the top and second eigenvalue to swap
(the proof's inequality ``1 + 4 eta s_2/D + ... < 1 - 4 eta (1-1/D) s_1 + ...`` is false near the bound), and
(ii) ``s_1'`` to pass through 0 at ``eta = 1/(2(1-1/D) s_1)`` (half the first term) where kappa explodes; and
(iii) at rank(H) = 1 no step can lower kappa = 1.

The second term of the bound is dimensionless while eta scales like 1/K: for K -> c K with small c the second
term binds and (i) happens; for large c the first term binds and (ii) happens (both measured per scale).

Verdict: fails. Counterexamples (exact): (i) theta = I, K = diag(1, 10/11), D = 2, eta = 0.999 * 1/20
(kappa 11/10 -> 528954001000/480541579331 = 1.10074...); (ii) theta = I, K = diag(1000, 1),
eta = 0.4995 * 1/500 (kappa 1000 -> 1002.0).
Corrected sufficient bound (checked): with r = (s_k/s_1)^(1/2) and k >= 2,
``eta < min{ (1 - r) / (2 (1-1/D) s_1 + 2 r s_k / D), D (sqrt(s_1/s_2) - 1) / (2 s_2) }``.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import sympy as sp
from hypothesis import example, given

from .evidence import Evidence
from .exact import diag_theta_step
from .paper import grad_r_well
from .profiles import budget
from .steps import (assert_bound_location, assert_same_ratio, check_step_claim, dynamics_eta_max, measure_bound,
                    scaled_bound, scaled_k, theta_step_problem)
from .strategies import (SpectralMatrix, ThetaK, diagonal_theta_k, h_near_ties, haar_orthogonal,
                         near_bound_fractions, thetas_and_covariances)
from .theta_claims import search_counterexample

EV = Evidence("T4.3.1")
SCALES = (-3, 0, 3)


def stated_bound(e, D):
    """Thm 4.3(1) transcribed: ``min{1/((1-1/D) s_1), (s_1 s_2 - s_2^2)/(D s_2^2)}`` (the second term is 0/0
    when rank(H) = 1; it is then left out)."""
    first = D / ((D - 1) * e.s_max)
    if e.rank < 2:
        return first
    return min(first, (e.s_max * e.s_2 - e.s_2**2) / (D * e.s_2**2))


def corrected_bound(e, D):
    """The corrected sufficient bound of the module docstring (0 when k < 2: no step can lower kappa = 1)."""
    if e.rank < 2:
        return 0 * e.s_max
    sqrt = mp.sqrt if isinstance(e.s_max, mp.mpf) else (lambda x: float(x) ** 0.5)
    r = sqrt(e.s_min / e.s_max)
    first = (1 - r) / (2 * (D - 1) * e.s_max / D + 2 * r * e.s_min / D)
    return min(first, D * (sqrt(e.s_max / e.s_2) - 1) / (2 * e.s_2))


def critical_steps(e, D):
    """The top eigenvalue of H' is ``s_1 (1 - 2 eta (1-1/D) s_1)^2``: 0 at ``eta = D / (2 (D-1) s_1)``."""
    return [D / (2 * (D - 1) * e.s_max)]


PROBLEM = theta_step_problem("T4.3.1", "decrease", "well", stated_bound, critical_steps)
CORRECTED = theta_step_problem("T4.3.1 corrected", "decrease", "well", corrected_bound, critical_steps)


def test_regression_counterexample_violates_claim_exactly():
    # Shrunk by hypothesis.find (see test_search...): theta = I, K = diag(1, 10/11), eta = 0.999 * bound.
    # The bound is its second term (1 - 10/11)/(2 * 10/11) = 1/20; the eigenvalues swap order and kappa grows.
    K = [sp.Integer(1), sp.Rational(10, 11)]
    bound = (K[0] * K[1] - K[1] ** 2) / (2 * K[1] ** 2)
    assert bound == sp.Rational(1, 20) and bound < 1 / ((1 - sp.Rational(1, 2)) * K[0])
    eta = sp.Rational(999, 1000) * bound
    k0, k1, h1 = diag_theta_step([1, 1], K, eta, grad_r_well)
    assert k1 > k0 and k1 == sp.Rational(528954001000, 480541579331), f"exact: kappa {k0} -> {k1}, H' = diag({h1})"
    EV.counterexample("theta = I, K = diag(1, 10/11), eta = 0.999/20", "exact (sympy)", kappa_before=k0,
                      kappa_after=k1, kappa_after_float=float(k1), H_after=h1, claimed="decrease")


def test_second_counterexample_top_eigenvalue_through_zero_exact():
    # Large scale: theta = I, K = diag(1000, 1), D = 2. The bound is its FIRST term 1/((1 - 1/2) 1000) = 1/500
    # (the second is 999/2), but s_1' = 1000 (1 - 1000 eta)^2 vanishes at eta = 1/1000, half the bound; just
    # before it s_1' is tiny and becomes the smallest eigenvalue: kappa jumps from 1000 to about 1002.
    K = [sp.Integer(1000), sp.Integer(1)]
    e_bound = min(1 / ((1 - sp.Rational(1, 2)) * K[0]), (K[0] * K[1] - K[1] ** 2) / (2 * K[1] ** 2))
    assert e_bound == sp.Rational(1, 500)
    eta = sp.Rational(999, 10**6)  # 0.4995 * bound
    k0, k1, h1 = diag_theta_step([1, 1], K, eta, grad_r_well)
    assert h1[0] == sp.Rational(1, 1000) and k0 == 1000 and k1 > k0, (k0, k1, h1)
    EV.counterexample("theta = I, K = diag(1000, 1), eta = 0.4995 * bound (s_1' -> 0)", "exact (sympy)",
                      bound=e_bound, eta=eta, kappa_before=k0, kappa_after=k1, kappa_after_float=float(k1),
                      H_after=h1, claimed="decrease")


def test_rank_one_hessian_cannot_decrease_kappa_inside_stated_bound():
    # Degenerate edge (reading-dependent: the bound's second term is 0/0 when s_2 = 0 and is left out here).
    # theta = diag(1, 0), K = diag(4, 1): H = diag(4, 0), s_max unique, bound = 1/((1 - 1/2) 4) = 1/2 > 0,
    # but kappa = 1 before and after (the zero eigenvalue stays 0; pseudo-inverse kappa of a rank-1 H is 1).
    k0, k1, _ = diag_theta_step([1, 0], [sp.Integer(4), sp.Integer(1)], sp.Rational(1, 8), grad_r_well)
    assert k0 == k1 == 1
    EV.note("degenerate edge: rank(H) = 1 (theta = diag(1, 0), K = diag(4, 1), eta = 1/8): kappa = 1 before and "
            "after, no strict decrease possible")


def test_search_finds_violation_inside_stated_bound():
    search_counterexample(PROBLEM, EV)


@budget(40)
@given(case=thetas_and_covariances(theta_kw={"rank": "any", "min_rank": 2, "max_log_kappa": 3},
                                   K_kw={"max_log_kappa": 3}), f=near_bound_fractions())
@example(case=diagonal_theta_k([1.0, 1.0], [1.0, 10 / 11]), f=0.999)  # the stated bound's counterexample 1
@example(case=diagonal_theta_k([1.0, 1.0], [1000.0, 1.0]), f=0.4995)  # the stated bound's counterexample 2
def test_corrected_bound_decreases_kappa(case, f):
    check_step_claim(CORRECTED, case, f, EV)


@budget(15)
@given(case=h_near_ties(), f=near_bound_fractions())
def test_corrected_bound_decreases_kappa_near_ties_of_h(case, f):
    check_step_claim(CORRECTED, case, f, EV)


@budget(8)
@given(case=thetas_and_covariances(theta_kw={"rank": "full", "min_rank": 2, "min_gap": 1e-3,
                                             "max_log_kappa": 3}))
def test_measure_bounds_under_rescaling_of_K(case):
    """Stated bound: eta_max/bound per family and K -> c K, and the violation it admits: eta_max is below the
    rank-drop step eta_c = D/(2 (D-1) s_1) (kappa -> inf as s_1' -> 0), so a stated bound above eta_c is
    violated. Corrected bound: sufficient at every scale, and eta_max/bound is scale-invariant (eta_max and the
    corrected bound both scale like 1/c)."""
    fam = "theta " + ",".join(case.theta.family.split(",")[1:3])
    corrected = []
    for c in SCALES:
        sc = scaled_k(case, 10.0**c)
        stated = measure_bound(PROBLEM, sc, EV, keys=(f"stated, K x1e{c}", f"stated, {fam}"))
        bound, (eta_c,) = PROBLEM.float_bound(sc), PROBLEM.critical(sc, False)
        if eta_c < 1e3 * bound:  # inside the measured range (steps up to 1000 x the bound)
            assert stated * bound <= eta_c * (1 + 1e-6), f"eta_max {stated * bound} beyond eta_c {eta_c}\n{sc!r}"
        if bound > eta_c * (1 + 1e-6):
            assert stated < 1, f"stated bound {bound} > eta_c = {eta_c} but no violation measured\n{sc!r}"
        corrected.append(measure_bound(CORRECTED, sc, EV, keys=(f"corrected, K x1e{c}",), expect_sufficient=True))
    assert None not in corrected, f"corrected bound vacuous: {corrected}"
    assert_same_ratio("T4.3.1 corrected", corrected, case)


def h_spectrum_after(h, D):
    """The derivation of the module docstring: H's eigenvalues after the step, as functions of eta."""
    return lambda eta: [h[0] * (1 - 2 * eta * (1 - mp.mpf(1) / D) * h[0]) ** 2] + [
        x * (1 + 2 * eta * x / D) ** 2 for x in h[1:]]


def witness_cases(K: list[float], seed: int) -> list[ThetaK]:
    """theta = I (H = K) and theta = V^T (H = V K V^T) for a Haar V: the same H spectrum, rotated."""
    n = len(K)
    V = haar_orthogonal(n, seed)
    rotated = ThetaK(SpectralMatrix(np.ones(n), np.eye(n), V, "witness"),
                     SpectralMatrix(np.array(K), np.eye(n), np.eye(n), "witness"))
    return [diagonal_theta_k([1.0] * n, K), rotated]


def bound_location(c: float = 1.0, problems: tuple[str, ...] = ("stated", "corrected")) -> None:
    """On witnesses (H = diag(h) up to rotation), eta_max from the closed-form eigenvalue dynamics, divided by
    each bound's value, is what the measurement finds: the stated bound admits violations at 0.9955 x (swap) and
    0.4995 x (s_1' -> 0) of itself, the corrected one is conservative by 1.185 on diag(3, 2, 1) and 1.997 on
    diag(1, 10/11). A bound 1.5x larger than stated is violated on diag(3, 2, 1)."""
    for problem in [{"stated": PROBLEM, "corrected": CORRECTED}[p] for p in problems]:
        mutant = scaled_bound(problem, c)
        for K in ([3.0, 2.0, 1.0], [1.0, 10 / 11], [1000.0, 1.0]):
            for case in witness_cases(K, 3):
                with mp.workdps(80):
                    h, D = [mp.mpf(x) for x in K], len(K)
                    bound = problem.bound(case, True)
                    eta_c = problem.critical(case, True)[0]
                    eta_max = dynamics_eta_max(h_spectrum_after(h, D), h[0] / h[-1], "decrease",
                                               eta_c * (1 - mp.mpf(10) ** -20))
                    expected = float(eta_max / bound)
                assert_bound_location(mutant, case, expected, EV, expect_sufficient=problem is CORRECTED)


def test_bounds_are_where_stated_on_witnesses():
    bound_location()
