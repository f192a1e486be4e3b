"""kappalab.eq10 (the right-hand side of Prop. 3.2 / Eq. 10) and kappalab.rir (Eq. 15 / Eq. 17).

eq10 only evaluates the paper's formula; these tests check that it evaluates THAT formula (summed term by term in
the test), plus the identities it must satisfy whatever its truth (trace, the aligned case). The verdict on
Prop. 3.2 itself lives in proofs_checks/.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_core_matrices import EPS, from_spectrum, psd_from_spectrum, random_orthogonal

from kappalab import condition_number, eq10_singular_values, rir


def _eq10_by_definition(theta: np.ndarray, K: np.ndarray, reading: str) -> np.ndarray:
    """sigma_i = sum_j ( s_theta,i (u_theta,i^T q_j) gamma_j )^2 with two explicit loops."""
    U, s, _ = np.linalg.svd(theta)
    lam, Q = np.linalg.eigh(K)
    lam = np.clip(lam, 0.0, None)
    gamma = np.sqrt(lam) if reading == "proof" else lam
    n = theta.shape[0]
    return np.array([sum((s[i] * (U[:, i] @ Q[:, j]) * gamma[j]) ** 2 for j in range(n)) for i in range(n)])


def _case(seed: int, rank: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    theta = from_spectrum(rng, 4, 4, np.array([2.0, 1.3, 0.9, 0.5]))
    K = psd_from_spectrum(rng, 4, np.array([6.0, 3.0, 1.0, 0.4])[:rank])
    return theta, K


@pytest.mark.parametrize("reading", ["proof", "main_text"])
@pytest.mark.parametrize("seed,rank", [(0, 4), (1, 4), (2, 2)])
def test_eq10_evaluates_the_stated_sum(reading: str, seed: int, rank: int) -> None:
    theta, K = _case(seed, rank)
    out = eq10_singular_values(theta, K, reading=reading)
    ref = _eq10_by_definition(theta, K, reading)
    # the same SVD/eigh (distinct singular values: U is unique up to signs, which the squares remove); sums of
    # n products of O(1) factors: relative ~ 100 n eps
    np.testing.assert_allclose(out, ref, rtol=100 * 4 * EPS, err_msg=f"theta={theta!r}\nK={K!r}")


def test_eq10_default_reading_is_proof() -> None:
    theta, K = _case(3)
    np.testing.assert_array_equal(eq10_singular_values(theta, K), eq10_singular_values(theta, K, reading="proof"))


@pytest.mark.parametrize("seed", range(3))
def test_eq10_proof_reading_sums_to_trace_of_H(seed: int) -> None:
    """sum_i s_i^2 u_i^T K u_i = tr(Sigma U^T K U Sigma) = tr(theta^T K theta) whatever the SVD's U."""
    theta, K = _case(seed)
    total = float(np.sum(eq10_singular_values(theta, K)))
    np.testing.assert_allclose(total, np.trace(theta.T @ K @ theta), rtol=100 * 4 * EPS,
                               err_msg=f"theta={theta!r}\nK={K!r}")


def test_eq10_is_the_spectrum_of_H_when_theta_is_aligned_with_K(rng: np.random.Generator) -> None:
    """theta = Q diag(t) W^T with Q the eigenvectors of K: H = W diag(t^2 lambda) W^T, and Eq. 10 (proof reading)
    lists exactly t_i^2 lambda_i, in the order of theta's singular values."""
    lam = np.array([5.0, 3.0, 2.0, 0.5])
    Q, W = random_orthogonal(rng, 4), random_orthogonal(rng, 4)
    K = (Q * lam) @ Q.T
    K = 0.5 * (K + K.T)
    t = np.array([2.0, 1.5, 1.0, 0.8])  # descending, so theta's i-th singular pair is (t_i, Q[:, i])
    theta = (Q * t) @ W.T
    out = eq10_singular_values(theta, K)
    np.testing.assert_allclose(out, t**2 * lam, rtol=100 * 4 * EPS, err_msg=f"theta={theta!r}\nK={K!r}")
    np.testing.assert_allclose(np.sort(out), np.sort(np.linalg.eigvalsh(theta.T @ K @ theta)), rtol=1e-12)


def test_eq10_main_text_reading_is_s2_uKKu() -> None:
    """gamma_j = lambda_j: sigma_i = s_i^2 u_i^T K^2 u_i."""
    theta, K = _case(4)
    U, s, _ = np.linalg.svd(theta)
    expected = s**2 * np.einsum("ij,ij->j", U, K @ K @ U)
    np.testing.assert_allclose(eq10_singular_values(theta, K, reading="main_text"), expected, rtol=100 * 4 * EPS)


# ---- RIR ---------------------------------------------------------------------------------------------------------

def _kappa_by_cond(theta: np.ndarray | None, K: np.ndarray, rank: int) -> float:
    """kappa of H = theta^T K theta from numpy's singular values, keeping the ``rank`` largest."""
    H = K if theta is None else theta.T @ K @ theta
    s = np.linalg.svd(H, compute_uv=False)[:rank]
    return s[0] / s[-1]


@pytest.mark.parametrize("rank_H", [4, 3])
def test_rir_terms_are_ratios_of_condition_numbers(rank_H: int) -> None:
    rng = np.random.default_rng(10 + rank_H)
    theta_I = from_spectrum(rng, 4, 4, np.array([3.0, 1.2, 0.8, 0.3]))
    K_P = psd_from_spectrum(rng, 4, np.array([4.0, 2.0, 1.0, 0.5]))
    K_H = psd_from_spectrum(rng, 4, np.array([5.0, 2.5, 1.0, 0.2])[:rank_H])
    out = rir(theta_I, K_P, K_H)
    kH_I, kH_0 = _kappa_by_cond(theta_I, K_H, rank_H), _kappa_by_cond(None, K_H, rank_H)
    kP_I, kP_0 = _kappa_by_cond(theta_I, K_P, 4), _kappa_by_cond(None, K_P, 4)
    # kappa(H) <= ~1e3 here: each kappa to ~ c n eps kappa relative; ratios of them to 1e-10
    rtol = 1e-10
    np.testing.assert_allclose([out.kappa_H_immunized, out.kappa_H_reference, out.kappa_P_immunized,
                                out.kappa_P_reference], [kH_I, kH_0, kP_I, kP_0], rtol=rtol)
    np.testing.assert_allclose([out.term_i, out.term_ii, out.rir],
                               [kH_I / kH_0, kP_I / kP_0, (kH_I / kH_0) / (kP_I / kP_0)], rtol=rtol)


def test_rir_of_identity_is_one() -> None:
    K_P = psd_from_spectrum(np.random.default_rng(20), 3, np.array([3.0, 2.0, 1.0]))
    K_H = psd_from_spectrum(np.random.default_rng(21), 3, np.array([5.0, 1.0, 0.1]))
    out = rir(np.eye(3), K_P, K_H)
    assert (out.term_i, out.term_ii, out.rir) == (1.0, 1.0, 1.0), out


def test_rir_with_reference_theta0_uses_it_in_both_terms(rng: np.random.Generator) -> None:
    theta_I = from_spectrum(rng, 3, 3, np.array([2.0, 1.0, 0.5]))
    theta_0 = from_spectrum(rng, 3, 3, np.array([1.5, 1.0, 0.9]))
    K_P = psd_from_spectrum(rng, 3, np.array([3.0, 2.0, 1.0]))
    K_H = psd_from_spectrum(rng, 3, np.array([4.0, 1.5, 0.5]))
    out = rir(theta_I, K_P, K_H, theta_0)
    np.testing.assert_allclose(out.kappa_H_reference, float(condition_number(theta_0.T @ K_H @ theta_0)), rtol=1e-12)
    np.testing.assert_allclose(out.kappa_P_reference, float(condition_number(theta_0.T @ K_P @ theta_0)), rtol=1e-12)
    # theta_0 = theta_I: both terms are exactly 1 (same computation in numerator and denominator)
    same = rir(theta_I, K_P, K_H, theta_I)
    assert (same.term_i, same.term_ii, same.rir) == (1.0, 1.0, 1.0), same


def test_rir_is_invariant_to_scaling_theta_and_K(rng: np.random.Generator) -> None:
    theta = from_spectrum(rng, 3, 3, np.array([2.0, 1.0, 0.4]))
    K_P = psd_from_spectrum(rng, 3, np.array([3.0, 2.0, 1.0]))
    K_H = psd_from_spectrum(rng, 3, np.array([4.0, 1.5, 0.5]))
    a, b = rir(theta, K_P, K_H), rir(7.0 * theta, 0.01 * K_P, 300.0 * K_H)
    np.testing.assert_allclose([b.term_i, b.term_ii, b.rir], [a.term_i, a.term_ii, a.rir], rtol=1e-12)
