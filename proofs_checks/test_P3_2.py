"""P3.2 (Prop. 3.2, Eq. 10): the singular values of ``H = theta^T K theta`` are
``sigma_i = sum_j (s_theta,i (u_theta,i^T q_j) gamma_j)^2``.

Verdict: fails (both readings of gamma_j). Review's counterexample reproduced exactly: theta = 45-degree
rotation (U = theta, V = I), K = diag(4, 1): eig(H) = {4, 1}, proof reading gives (5/2, 5/2), main-text reading
(17/2, 17/2). Correct replacement (checked): under the proof reading Eq. 10 is the diagonal of
``M = Sigma U^T K U Sigma`` (similar to H), so it is majorized by eig(H) (Schur-Horn; equal sums = trace) and
equals eig(H) iff M is diagonal (e.g. U's columns are eigenvectors of K).
"""

from __future__ import annotations

import numpy as np
import sympy as sp
from hypothesis import given

from kappalab import eq10_singular_values, hessian

from .evidence import Evidence
from .profiles import budget
from .strategies import thetas_and_covariances

EV = Evidence("P3.2")
CASES = thetas_and_covariances(theta_kw={"rank": "full", "max_log_kappa": 3}, K_kw={"max_log_kappa": 3})


def test_review_counterexample_rotation_45_degrees_exact():
    c = sp.sqrt(2) / 2
    theta = sp.Matrix([[c, -c], [c, c]])  # SVD: U = theta, Sigma = I, V = I
    K = sp.diag(4, 1)  # K = Q Gamma^2 Q^T with Q = I
    eig_H = sorted((theta.T * K * theta).eigenvals(multiple=True), reverse=True)
    U, s, q, lam = theta, [1, 1], [sp.Matrix([1, 0]), sp.Matrix([0, 1])], [4, 1]
    proof = [sp.simplify(sum((s[i] * (U[:, i].T * q[j])[0] * sp.sqrt(lam[j])) ** 2 for j in range(2)))
             for i in range(2)]
    main = [sp.simplify(sum((s[i] * (U[:, i].T * q[j])[0] * lam[j]) ** 2 for j in range(2))) for i in range(2)]
    assert eig_H == [4, 1] and proof == [sp.Rational(5, 2)] * 2 and main == [sp.Rational(17, 2)] * 2
    EV.counterexample("review: theta = R(45 deg), K = diag(4, 1)", "exact (sympy)", eig_H=eig_H,
                      eq10_proof_reading=proof, eq10_main_text_reading=main)


@budget(30)
@given(case=CASES)
def test_eq10_proof_reading_is_diagonal_of_sigma_ut_k_u_sigma_and_majorized_by_spectrum(case):
    theta, K = case.theta.matrix, case.K.matrix
    U, s, _ = np.linalg.svd(theta)
    M = (s[:, None] * (U.T @ K @ U)) * s[None, :]
    eq10 = eq10_singular_values(theta, K, reading="proof")
    lam = np.sort(np.linalg.eigvalsh(hessian(theta, K)))[::-1]
    scale = np.finfo(float).eps * lam[0] * 10 * theta.shape[0]
    assert np.allclose(eq10, np.diag(M), rtol=0, atol=scale), (eq10, np.diag(M))
    d = np.sort(eq10)[::-1]
    partial = np.cumsum(lam) - np.cumsum(d)
    assert np.all(partial >= -scale * np.arange(1, len(d) + 1)), f"majorization fails: {lam} vs {d}"
    assert abs(partial[-1]) <= scale * len(d), f"trace: {lam.sum()} vs {d.sum()}"
    offdiag = np.linalg.norm(M - np.diag(np.diag(M)))
    equal = np.allclose(d, lam, rtol=1e-9, atol=scale)
    if offdiag > 1e-6 * lam[0]:
        assert not equal, f"Eq. 10 equals the spectrum although M is not diagonal: {d} {lam}"
        EV.case(case.family + ",eq10 != spectrum")
    else:
        EV.case(case.family + ",M diagonal")


@budget(20)
@given(case=thetas_and_covariances(theta_kw={"rank": "full", "max_log_kappa": 3, "min_gap": 1e-2},
                                   K_kw={"max_log_kappa": 3, "min_gap": 1e-2}))
def test_eq10_equals_spectrum_when_theta_left_vectors_are_eigenvectors_of_k(case):
    K = case.K.matrix
    theta = (case.K.U * case.theta.s) @ case.theta.V.T  # U_theta = eigenvectors of K
    eq10 = np.sort(eq10_singular_values(theta, K, reading="proof"))[::-1]
    lam = np.sort(np.linalg.eigvalsh(hessian(theta, K)))[::-1]
    assert np.allclose(eq10, lam, rtol=1e-9, atol=1e-12 * lam[0]), (eq10, lam)
    main = np.sort(eq10_singular_values(theta, K, reading="main_text"))[::-1]
    if not np.allclose(case.K.s, 1.0):
        assert not np.allclose(main, lam, rtol=1e-9, atol=0), "main-text reading should not match (it is s^2 lambda^2)"
    EV.case(case.family + ",aligned")
