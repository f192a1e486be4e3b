"""kappalab.alignment on constructed pairs with known answers (exact references: the construction itself, sympy,
mpmath; a different solver, scipy.linalg.subspace_angles, for random subspaces)."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
import scipy.linalg
import sympy as sp
import torch

from kappalab import rir
from kappalab.alignment import (best_rir, eigensystem, eigenspace_angles, leading_eigenspace, principal_angles,
                                weighted_alignment, whitening_theta)
from kappalab.errors import DegenerateSpectrumError

EPS = np.finfo(np.float64).eps


def orthogonal(D: int, seed: int) -> np.ndarray:
    Q, R = np.linalg.qr(np.random.default_rng(seed).standard_normal((D, D)))
    return Q * np.sign(np.diag(R))


def givens(D: int, planes: list[tuple[int, int, float]]) -> np.ndarray:
    """Product of rotations by angle a in the (i, j) coordinate planes (disjoint planes: they commute)."""
    G = np.eye(D)
    for i, j, a in planes:
        R = np.eye(D)
        R[i, i] = R[j, j] = math.cos(a)
        R[i, j], R[j, i] = -math.sin(a), math.sin(a)
        G = G @ R
    return G


def covariance(Q: np.ndarray, lam: list[float]) -> np.ndarray:
    K = (Q * np.asarray(lam, dtype=float)) @ Q.T
    return 0.5 * (K + K.T)


# ---- principal angles -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b", [(0.0, 0.0), (1e-9, 0.7), (0.3, math.pi / 2), (math.pi / 4, 1.2)])
def test_principal_angles_of_rotated_coordinate_planes(a, b):
    # span(e1, e2) against span(cos a e1 + sin a e3, cos b e2 + sin b e4), both turned by one orthogonal Q:
    # the angles are a and b exactly (the construction); float error is absolute ~eps.
    D = 7
    Q = orthogonal(D, 1)
    I = np.eye(D)
    A = I[:, :2]
    B = np.column_stack([math.cos(a) * I[0] + math.sin(a) * I[2], math.cos(b) * I[1] + math.sin(b) * I[3]])
    got = principal_angles(Q @ A, Q @ B)
    np.testing.assert_allclose(got, sorted([a, b]), rtol=0, atol=20 * D * EPS)


def test_tiny_angle_has_full_relative_accuracy_without_rotation():
    # Without the rounding of a rotated basis the sine path resolves 1e-12 rad to a relative 1e-15 (the cosine path
    # alone would return 0: cos(1e-12) = 1 in float64).
    a = 1e-12
    A = np.eye(3)[:, :1]
    B = np.array([[math.cos(a)], [math.sin(a)], [0.0]])
    assert principal_angles(A, B)[0] == pytest.approx(a, rel=1e-15)


def test_principal_angles_match_high_precision_reference_on_random_subspaces():
    # Reference: mpmath at 50 digits (cosines = singular values of A^T B) and scipy's implementation.
    rng = np.random.default_rng(3)
    D, a, b = 9, 4, 3
    A = np.linalg.qr(rng.standard_normal((D, a)))[0]
    B = np.linalg.qr(rng.standard_normal((D, b)))[0]
    got = principal_angles(A, B)
    with mp.workdps(50):
        cos = mp.svd_r(mp.matrix(A.T.tolist()) * mp.matrix(B.tolist()), compute_uv=False)
        ref = sorted(float(mp.acos(min(c, 1))) for c in cos)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-13)
    np.testing.assert_allclose(got, np.sort(scipy.linalg.subspace_angles(A, B)), rtol=0, atol=1e-13)


def test_angles_do_not_depend_on_signs_or_on_the_basis_inside_the_subspace():
    rng = np.random.default_rng(4)
    D = 8
    A = np.linalg.qr(rng.standard_normal((D, 3)))[0]
    B = np.linalg.qr(rng.standard_normal((D, 3)))[0]
    base = principal_angles(A, B)
    W = orthogonal(3, 5)  # another orthonormal basis of span(B)
    np.testing.assert_allclose(principal_angles(-A, B @ W), base, rtol=0, atol=1e-14)


# ---- leading eigenspaces ----------------------------------------------------------------------------------------

def test_aligned_covariances_have_zero_angles():
    # Exact answer 0; the computed subspaces carry the Davis-Kahan rounding error ~ D eps lambda_1 / gap each.
    Q = orthogonal(6, 7)
    lam, mu = [9, 5, 3, 2, 1, 0.5], [40, 30, 0.1, 0.05, 0.02, 0.01]
    K_P, K_H = covariance(Q, lam), covariance(Q, mu)
    for r in (1, 2, 3, 5):
        tol = 10 * 6 * EPS * max(lam[0] / (lam[r - 1] - lam[r]), mu[0] / (mu[r - 1] - mu[r]))
        assert np.abs(eigenspace_angles(K_P, K_H, r)).max() < tol


def test_eigenspaces_rotated_by_known_angles():
    # K_H's eigenbasis is K_P's turned by a in the (1, 4) plane and by b in the (2, 5) plane: the leading 2-spaces
    # meet at angles (a, b) and the leading 1-spaces at a.
    D, a, b = 6, 0.25, 1.1
    Q = orthogonal(D, 8)
    G = givens(D, [(0, 3, a), (1, 4, b)])
    K_P = covariance(Q, [10, 6, 3, 2, 1, 0.5])
    K_H = covariance(Q @ G, [7, 4, 2.5, 1.5, 1, 0.2])
    np.testing.assert_allclose(eigenspace_angles(K_P, K_H, 2), [a, b], rtol=0, atol=1e-12)
    np.testing.assert_allclose(eigenspace_angles(K_P, K_H, 1), [a], rtol=0, atol=1e-12)


def test_repeated_eigenvalue_cut_is_refused_and_whole_cluster_is_basis_free():
    D = 5
    Q = orthogonal(D, 9)
    K = covariance(Q, [5, 3, 3, 1, 0.5])  # lambda_2 = lambda_3
    with pytest.raises(DegenerateSpectrumError, match="leading 2-dimensional eigenspace of K is not determined"):
        leading_eigenspace(K, 2)
    # r = 3 spans the whole cluster: any rotation inside it (another valid eigenbasis) gives the same subspace.
    Qr = Q.copy()
    Qr[:, 1:3] = Q[:, 1:3] @ orthogonal(2, 10)
    V1 = leading_eigenspace(K, 3)
    V2 = leading_eigenspace(covariance(Qr, [5, 3, 3, 1, 0.5]), 3)
    assert np.abs(principal_angles(V1, V2)).max() < 1e-13
    assert np.abs(principal_angles(V1, Q[:, :3])).max() < 1e-13


def test_eigenspace_bad_arguments():
    K = covariance(orthogonal(4, 11), [4, 3, 0, 0])
    with pytest.raises(ValueError, match="r must be an integer in 1..4"):
        leading_eigenspace(K, 0)
    with pytest.raises(ValueError, match="r = 3 exceeds rank"):
        leading_eigenspace(K, 3)
    with pytest.raises(ValueError, match="must have orthonormal columns"):
        principal_angles(np.ones((4, 1)), np.eye(4)[:, :1])
    with pytest.raises(ValueError, match="same shape"):
        weighted_alignment(np.eye(3), np.eye(4))


# ---- weighted alignment -----------------------------------------------------------------------------------------

def test_weighted_alignment_aligned_reversed_and_exact_rotation():
    Q = orthogonal(4, 12)
    lam, mu = [8, 4, 2, 1], [5, 3, 2, 1]
    assert weighted_alignment(covariance(Q, lam), covariance(Q, mu)) == pytest.approx(1.0, abs=1e-14)
    reversed_value = Fraction(sum(l * m for l, m in zip(lam, mu[::-1])), sum(l * m for l, m in zip(lam, mu)))
    assert weighted_alignment(covariance(Q, lam), covariance(Q, mu[::-1])) == pytest.approx(
        float(reversed_value), rel=1e-14)
    # 2 x 2 rotation with cos = 3/5, sin = 4/5: tr(K_P R K_H R^T) / (p1 h1 + p2 h2), exact in sympy
    c, s = sp.Rational(3, 5), sp.Rational(4, 5)
    R = sp.Matrix([[c, -s], [s, c]])
    KP, KH = sp.diag(3, 1), R * sp.diag(2, 1) * R.T
    exact = (KP * KH).trace() / (3 * 2 + 1 * 1)
    got = weighted_alignment(np.array(KP, dtype=float), np.array(KH, dtype=float))
    assert got == pytest.approx(float(exact), rel=1e-14)


# ---- best RIR -----------------------------------------------------------------------------------------------------

def generalized_reference(KP: sp.Matrix, KH: sp.Matrix) -> float:
    """sup RIR for invertible K_P from the roots of det(K_H - t K_P) (sympy, 40 digits): the generalised eigenvalue
    spread times kappa(K_P) / kappa(K_H)."""
    t = sp.symbols("t")
    gen = [sp.N(r, 40) for r in sp.Poly((KH - t * KP).det(), t).nroots(n=40)]
    eP = [sp.N(v, 40) for v in sp.Poly(KP.charpoly()).nroots(n=40)]
    eH = [sp.N(v, 40) for v in sp.Poly(KH.charpoly()).nroots(n=40)]
    return float((max(gen) / min(gen)) * (max(eP) / min(eP)) / (max(eH) / min(eH)))


def test_best_rir_of_the_S31_aligned_example_is_4():
    # Exactly aligned, same order (Sec. 3.1's case): K_P = diag(4, 1), K_H = diag(2, 1); best RIR = 2 * 4 / 2 = 4.
    r = best_rir(np.diag([4.0, 1.0]), np.diag([2.0, 1.0]))
    assert r.value == pytest.approx(4.0, rel=1e-15) and r.escape_dim == 0
    assert rir(r.theta, np.diag([4.0, 1.0]), np.diag([2.0, 1.0])).rir == pytest.approx(4.0, rel=1e-14)
    assert generalized_reference(sp.diag(4, 1), sp.diag(2, 1)) == pytest.approx(4.0, rel=1e-15)


def test_best_rir_matches_generalised_eigenvalues_and_bounds_random_thetas():
    KP = sp.Matrix([[5, 2, 1], [2, 4, 1], [1, 1, 3]])
    KH = sp.Matrix([[2, -1, 0], [-1, 6, 2], [0, 2, 1]])
    K_P, K_H = np.array(KP, dtype=float), np.array(KH, dtype=float)
    r = best_rir(K_P, K_H)
    assert r.value == pytest.approx(generalized_reference(KP, KH), rel=1e-12)
    assert rir(r.theta, K_P, K_H).rir == pytest.approx(r.value, rel=1e-12)
    rng = np.random.default_rng(13)
    achieved = [rir(rng.standard_normal((3, 3)), K_P, K_H).rir for _ in range(300)]
    assert max(achieved) <= r.value * (1 + 1e-10)
    assert max(achieved) > 0.5 * r.value  # the sampling reaches the region: the bound is not vacuous


def test_best_rir_finite_for_nested_ranges_and_infinite_otherwise():
    D = 5
    Q = orthogonal(D, 14)
    K_P = covariance(Q, [6, 4, 3, 1, 0])  # range = span(q1..q4)
    K_H_nested = covariance(Q @ givens(D, [(0, 1, 0.4)]), [5, 2, 1, 0, 0])  # range inside span(q1..q3)
    r = best_rir(K_P, K_H_nested)
    assert math.isfinite(r.value) and r.escape_dim == 0 and (r.rank_P, r.rank_H) == (4, 3)
    assert rir(r.theta, K_P, K_H_nested).rir == pytest.approx(r.value, rel=1e-10)
    rng = np.random.default_rng(15)
    assert max(rir(rng.standard_normal((D, D)), K_P, K_H_nested).rir for _ in range(200)) <= r.value * (1 + 1e-10)

    K_H_out = covariance(Q @ givens(D, [(2, 4, 0.3)]), [5, 2, 1, 0, 0])  # q3 turned towards null(K_P) = span(q5)
    out = best_rir(K_P, K_H_out)
    assert out.value == math.inf and out.escape_dim == 1 and out.theta is None
    assert out.max_escape_sine == pytest.approx(math.sin(0.3), abs=1e-12)
    # the unbounded family of the docstring: theta_t = I + (t - 1) u u^T with u spanning null(K_P)
    u = Q[:, 4]
    values = [rir(np.eye(D) + (t - 1) * np.outer(u, u), K_P, K_H_out).rir for t in (1e1, 1e2, 1e3)]
    assert values[0] < values[1] < values[2] and values[2] > 1e4 * values[0] / 2  # grows like t^2


def test_whitening_theta_makes_H_P_a_projector():
    Q = orthogonal(4, 16)
    K_P = covariance(Q, [9, 4, 1, 0])
    theta = whitening_theta(K_P)
    H = theta.T @ K_P @ theta
    np.testing.assert_allclose(H, Q[:, :3] @ Q[:, :3].T, atol=1e-14)


def test_torch_path_matches_numpy():
    Q = orthogonal(5, 17)
    K_P = covariance(Q, [7, 5, 2, 1, 0.3])
    K_H = covariance(Q @ givens(5, [(0, 2, 0.6)]), [3, 2.5, 2, 0.4, 0.1])
    tP, tH = torch.tensor(K_P), torch.tensor(K_H)
    ang = eigenspace_angles(tP, tH, 2)
    assert isinstance(ang, torch.Tensor) and ang.dtype == torch.float64
    np.testing.assert_allclose(ang.numpy(), eigenspace_angles(K_P, K_H, 2), atol=1e-14)
    assert float(weighted_alignment(tP, tH)) == pytest.approx(float(weighted_alignment(K_P, K_H)), rel=1e-14)
    bt, bn = best_rir(tP, tH), best_rir(K_P, K_H)
    assert isinstance(bt.theta, torch.Tensor) and bt.value == pytest.approx(bn.value, rel=1e-12)


def test_eigensystem_is_reused_and_its_tolerance_is_not_silently_replaced():
    Q = orthogonal(4, 18)
    K_P, K_H = covariance(Q, [5, 3, 2, 1]), covariance(Q @ givens(4, [(0, 1, 0.2)]), [4, 3, 2, 1])
    es = eigensystem(K_P, name="K_P")
    assert es.rank == 4 and es.kappa == pytest.approx(5.0, rel=1e-14)
    assert best_rir(es, K_H).value == pytest.approx(best_rir(K_P, K_H).value, rel=1e-14)
    with pytest.raises(ValueError, match="decomposed with rtol=None, not the requested rtol=0.001"):
        best_rir(es, K_H, rtol=1e-3)


def test_best_rir_with_a_rank_one_harmful_covariance_is_kappa_of_K_P():
    # kappa(H_H) = 1 for every theta (rank 1), so the supremum is kappa(K_P) / 1, reached by whitening (H_P a projector)
    Q = orthogonal(3, 19)
    K_P, K_H = covariance(Q, [9, 3, 1]), covariance(orthogonal(3, 20), [2, 0, 0])
    r = best_rir(K_P, K_H)
    assert r.value == pytest.approx(9.0, rel=1e-13) and r.rank_H == 1
    assert rir(r.theta, K_P, K_H).rir == pytest.approx(9.0, rel=1e-12)
