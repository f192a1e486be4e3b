"""P3.2 (Prop. 3.2, Eq. 10): the singular values of ``H = theta^T K theta`` are
``sigma_i = sum_j (s_theta,i (u_theta,i^T q_j) gamma_j)^2``.

Verdict: fails (both readings of gamma_j). Headline counterexample, exact and independent of the SVD chosen:
theta = U diag(2, 1) with U = [[3/5, -4/5], [4/5, 3/5]], K = diag(4, 1). theta's singular values (2, 1) and K's
eigenvalues (4, 1) are distinct, so u_i and q_j are unique up to sign and Eq. 10 (which sees them only through
(u_i^T q_j)^2) has one value per reading: (208/25, 73/25) (proof) and (128/5, 53/5) (main text), while
eig(H) = (281 +- 9 sqrt(481))/50 = (9.567..., 1.672...). Secondary: the review's 45-degree rotation (U = theta,
V = I), K = diag(4, 1): eig(H) = {4, 1}, proof reading (5/2, 5/2), main-text reading (17/2, 17/2); caveat: its
singular values are equal (1, 1), so its SVD is not unique, and with the equally valid choice U = I,
V = theta^T the proof reading gives exactly (4, 1).
Correct replacement (checked): under the proof reading Eq. 10 is the diagonal of
``M = Sigma U^T K U Sigma`` (similar to H), so it is majorized by eig(H) (Schur-Horn; equal sums = trace) and
equals eig(H) iff M is diagonal (e.g. U's columns are eigenvectors of K).
"""

from __future__ import annotations

import numpy as np
import sympy as sp
from hypothesis import assume, given

from . import exact
from .evidence import Evidence
from .paper import eq10, hessian
from .profiles import budget
from .strategies import thetas_and_covariances

EV = Evidence("P3.2")
CASES = thetas_and_covariances(theta_kw={"rank": "full", "max_log_kappa": 3}, K_kw={"max_log_kappa": 3})


def test_counterexample_with_distinct_singular_values_exact():
    U0 = sp.Matrix([[3, -4], [4, 3]]) / 5
    theta, K = U0 * sp.diag(2, 1), sp.diag(4, 1)
    assert exact.singular_values(theta) == [2, 1]  # distinct: u_1, u_2 unique up to sign
    # u_i from the exact eigenvectors of theta theta^T (not from how theta was built), q_j from K's
    G = theta * theta.T
    u = [sp.Matrix((G - lam * sp.eye(2)).nullspace()[0]).normalized() for lam in (4, 1)]
    assert [sp.simplify((theta.T * u[i]).norm()) for i in range(2)] == [2, 1]  # ||theta^T u_i|| = s_i
    q, lam = [sp.Matrix([1, 0]), sp.Matrix([0, 1])], [4, 1]
    assert all(K * q[j] == lam[j] * q[j] for j in range(2))
    s = [2, 1]
    proof = [sp.nsimplify(sum((s[i] * (u[i].T * q[j])[0] * sp.sqrt(lam[j])) ** 2 for j in range(2)))
             for i in range(2)]
    main = [sp.nsimplify(sum((s[i] * (u[i].T * q[j])[0] * lam[j]) ** 2 for j in range(2))) for i in range(2)]
    eig_H = sorted((theta.T * K * theta).eigenvals(multiple=True), key=lambda x: -float(x))
    root = 9 * sp.sqrt(481)
    assert [sp.simplify(x) for x in eig_H] == [(281 + root) / 50, (281 - root) / 50]
    assert proof == [sp.Rational(208, 25), sp.Rational(73, 25)] and main == [sp.Rational(128, 5), sp.Rational(53, 5)]
    assert sum(proof) == sp.simplify(sum(eig_H))  # Schur-Horn: equal traces, different entries
    assert set(proof).isdisjoint(eig_H) and set(main).isdisjoint(eig_H)
    EV.counterexample("headline: theta = [[3/5,-4/5],[4/5,3/5]] diag(2, 1), K = diag(4, 1) (distinct singular "
                      "values: SVD unique up to sign)", "exact (sympy)", eig_H=eig_H, eq10_proof_reading=proof,
                      eq10_main_text_reading=main)


def test_eq10_proof_reading_depends_on_the_svd_for_a_45_degree_rotation_exact():
    # Secondary: theta's singular values are equal (1, 1), so its SVD is NOT unique; with U = I, V = theta^T the
    # proof reading gives exactly eig(H) = (4, 1). The headline example above has no such freedom.
    c = sp.sqrt(2) / 2
    theta = sp.Matrix([[c, -c], [c, c]])  # SVD: U = theta, Sigma = I, V = I
    K = sp.diag(4, 1)  # K = Q Gamma^2 Q^T with Q = I
    eig_H = sorted((theta.T * K * theta).eigenvals(multiple=True), reverse=True)
    U, s, q, lam = theta, [1, 1], [sp.Matrix([1, 0]), sp.Matrix([0, 1])], [4, 1]
    proof = [sp.simplify(sum((s[i] * (U[:, i].T * q[j])[0] * sp.sqrt(lam[j])) ** 2 for j in range(2)))
             for i in range(2)]
    main = [sp.simplify(sum((s[i] * (U[:, i].T * q[j])[0] * lam[j]) ** 2 for j in range(2))) for i in range(2)]
    assert eig_H == [4, 1] and proof == [sp.Rational(5, 2)] * 2 and main == [sp.Rational(17, 2)] * 2
    eye = [sp.Matrix([1, 0]), sp.Matrix([0, 1])]  # the other valid SVD: U = I
    other = [sum((s[i] * (eye[i].T * q[j])[0] * sp.sqrt(lam[j])) ** 2 for j in range(2)) for i in range(2)]
    assert other == [4, 1]
    EV.counterexample("secondary (SVD not unique: equal singular values): theta = R(45 deg), K = diag(4, 1)",
                      "exact (sympy)", eig_H=eig_H, eq10_proof_reading=proof, eq10_main_text_reading=main,
                      proof_reading_with_U_equal_I=other)


@budget(30)
@given(case=CASES)
def test_eq10_proof_reading_is_diagonal_of_sigma_ut_k_u_sigma_and_majorized_by_spectrum(case):
    theta, K = case.theta.matrix, case.K.matrix
    U, s, _ = np.linalg.svd(theta)
    M = (s[:, None] * (U.T @ K @ U)) * s[None, :]
    sigma = eq10(theta, K, reading="proof")
    lam = np.sort(np.linalg.eigvalsh(hessian(theta, K)))[::-1]
    # rounding of the products s_i s_j u_i^T K u_j, each of size <= s_max^2 ||K||_2 (not lambda_1(H), which can be
    # far smaller: theta^T K theta cancels when theta's large directions meet K's small ones; the deep profile found
    # lambda_1(H) = 0.0153 with products of size ~1)
    scale = np.finfo(float).eps * max(lam[0], s[0] ** 2 * np.linalg.norm(K, 2)) * 10 * theta.shape[0]
    assert np.allclose(sigma, np.diag(M), rtol=0, atol=scale), (sigma, np.diag(M))
    d = np.sort(sigma)[::-1]
    partial = np.cumsum(lam) - np.cumsum(d)
    assert np.all(partial >= -scale * np.arange(1, len(d) + 1)), f"majorization fails: {lam} vs {d}"
    assert abs(partial[-1]) <= scale * len(d), f"trace: {lam.sum()} vs {d.sum()}"
    # Eq. 10 (proof reading) misses the spectrum by exactly M's off-diagonal mass: M and H share their spectrum, so
    # sum lam^2 = ||M||_F^2 = sum d^2 + ||offdiag M||_F^2 (a first-order test such as "d != lam to 1e-9" misses an
    # off-diagonal of 1e-5, whose effect on d is of second order: the deep profile found one)
    offdiag2 = np.linalg.norm(M - np.diag(np.diag(M))) ** 2
    deficit = np.sum(lam ** 2) - np.sum(d ** 2)
    resolved = 4 * scale * (np.sum(np.abs(lam)) + np.sum(np.abs(d)))  # rounding of both sums of squares
    assert abs(deficit - offdiag2) <= resolved, f"sum of squares: {deficit} vs off-diagonal mass {offdiag2}"
    if offdiag2 > resolved:
        assert deficit > 0, f"Eq. 10 equals the spectrum although M is not diagonal: {d} {lam}"
        EV.case(case.family + ",eq10 != spectrum")
    else:
        EV.case(case.family + ",M diagonal")


@budget(20)
@given(case=thetas_and_covariances(theta_kw={"rank": "full", "max_log_kappa": 3, "min_gap": 1e-2},
                                   K_kw={"max_log_kappa": 3, "min_gap": 1e-2}))
def test_eq10_equals_spectrum_when_theta_left_vectors_are_eigenvectors_of_k(case):
    # the premise "theta's left singular vectors are K's eigenvectors" names theta's SVD only when its singular
    # values are distinct: the strategy's min_gap separates the extreme ones only, and a tie inside lets the SVD
    # return any rotation of the tied vectors (the deep profile found s = 0.098, 0.0098 tied with K's order swapped)
    s = np.sort(case.theta.s)[::-1]
    assume(np.all(np.diff(-s) > 1e-2 * s[0]))
    K = case.K.matrix
    theta = (case.K.U * case.theta.s) @ case.theta.V.T  # U_theta = eigenvectors of K
    sigma = np.sort(eq10(theta, K, reading="proof"))[::-1]
    lam = np.sort(np.linalg.eigvalsh(hessian(theta, K)))[::-1]
    assert np.allclose(sigma, lam, rtol=1e-9, atol=1e-12 * lam[0]), (sigma, lam)
    main = np.sort(eq10(theta, K, reading="main_text"))[::-1]
    if not np.allclose(case.K.s, 1.0):
        assert not np.allclose(main, lam, rtol=1e-9, atol=0), "main-text reading should not match (it is s^2 lambda^2)"
    EV.case(case.family + ",aligned")
