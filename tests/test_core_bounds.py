"""kappalab.bounds: the step-size bounds of Thm A.1(4), Thm 4.1(4), Thm 4.3(1), Thm 4.3(2), exactly as stated.

Each bound is recomputed in the test from the spectrum (chosen, or from numpy.linalg.eigvalsh of H). Whether the
theorems hold is decided in proofs_checks/, not here.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, note
from test_core_matrices import EPS, SpectralCase, from_spectrum, psd_from_spectrum, spectral_cases

from kappalab import (UndefinedRegularizerError, step_bound_ill, step_bound_theta_ill, step_bound_theta_well,
                      step_bound_well)


@given(case=spectral_cases())
def test_step_bound_well_is_thm_a1_4(case: SpectralCase) -> None:
    note(repr(case))
    kappa, p = case.kappa, case.p
    expected = (kappa - 1) / ((1 - 1 / p) * kappa + 1 / p)
    # kappa carries relative error ~ c n eps kappa; the bound is Lipschitz in kappa with constant <= 1
    np.testing.assert_allclose(step_bound_well(case.S), expected, rtol=0, atol=20 * max(case.S.shape) * EPS * kappa,
                               err_msg=repr(case))


@given(case=spectral_cases(min_rank=2))
def test_step_bound_ill_is_thm_4_1_4(case: SpectralCase) -> None:
    note(repr(case))
    s, k = case.spectrum, case.rank
    d = np.sum(s**2) / (2 * k) - 0.5 * s[-1] ** 2
    expected = k / (k - 1) * d**2
    # d has absolute error ~ c n eps s_1^2, so d^2 relative error 2 c n eps s_1^2 / d
    rtol = 2 * 20 * max(case.S.shape) * EPS * s[0] ** 2 / d
    np.testing.assert_allclose(step_bound_ill(case.S), expected, rtol=rtol, err_msg=repr(case))


def test_step_bound_ill_needs_two_distinct_nonzero_values() -> None:
    with pytest.raises(UndefinedRegularizerError):
        step_bound_ill(np.diag([2.0, 0.0]))  # k = 1
    with pytest.raises(UndefinedRegularizerError):
        step_bound_ill(3.0 * np.eye(3))  # d = 0


def _H_eigenvalues(theta: np.ndarray, K: np.ndarray) -> np.ndarray:
    H = theta.T @ K @ theta
    return np.linalg.eigvalsh(0.5 * (H + H.T))[::-1]


@pytest.mark.parametrize("seed", range(4))
def test_step_bound_theta_well_is_thm_4_3_1(seed: int) -> None:
    rng = np.random.default_rng(seed)
    theta = from_spectrum(rng, 4, 4, rng.uniform(0.6, 1.6, 4))
    K = psd_from_spectrum(rng, 4, rng.uniform(0.5, 5.0, 4))
    lam, D = _H_eigenvalues(theta, K), 4
    expected = min(1 / ((1 - 1 / D) * lam[0]), (lam[0] * lam[1] - lam[1] ** 2) / (D * lam[1] ** 2))
    # eigenvalues of a kappa <= ~100 matrix to ~ c n eps relative; the bound is a ratio of them
    np.testing.assert_allclose(step_bound_theta_well(theta, K), expected, rtol=1e-12, err_msg=f"{theta!r}\n{K!r}")


def test_step_bound_theta_well_second_term_void_when_s2_is_zero() -> None:
    """Rank-1 H: s_2 = 0 makes the paper's second term 0/0; the bound is the first term (module docstring)."""
    K = np.diag([2.0, 0.0, 0.0])
    out = float(step_bound_theta_well(np.eye(3), K))
    assert out == pytest.approx(1 / ((1 - 1 / 3) * 2.0), rel=4 * EPS)


def test_step_bound_theta_well_is_inf_for_D_equal_1_without_warning() -> None:
    # regression: 1 / ((1 - 1/D) s_1) = 1/0 was evaluated before the D = 1 branch (a NumPy RuntimeWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isinf(float(step_bound_theta_well(np.array([[2.0]]), np.array([[3.0]]))))


@pytest.mark.parametrize("seed", range(4))
def test_step_bound_theta_ill_is_thm_4_3_2_as_written(seed: int) -> None:
    rng = np.random.default_rng(seed)
    theta = from_spectrum(rng, 4, 4, rng.uniform(0.6, 1.6, 4))
    K = psd_from_spectrum(rng, 4, rng.uniform(0.2, 3.0, 4))
    lam = _H_eigenvalues(theta, K)
    k = 4
    d = np.sum(lam**2) / (2 * k) - 0.5 * lam[-1] ** 2
    expected = d**2 / (1 - 2 * lam[-1] / k)
    np.testing.assert_allclose(step_bound_theta_ill(theta, K), expected, rtol=1e-10, err_msg=f"{theta!r}\n{K!r}")


def test_step_bound_theta_ill_sign_and_pole() -> None:
    """The paper's denominator 1 - 2 s_min / k: positive, zero (-> +inf) or negative (returned as written)."""
    # H = K = diag(3, 1): k = 2, s_min = 1, denominator 0
    assert math.isinf(float(step_bound_theta_ill(np.eye(2), np.diag([3.0, 1.0]))))
    # H = diag(30, 10): denominator 1 - 10 = -9 < 0, d = (900 + 100)/4 - 50 = 200 -> 200^2 / -9
    assert float(step_bound_theta_ill(np.eye(2), np.diag([30.0, 10.0]))) == pytest.approx(-40000 / 9, rel=8 * EPS)
    # H = diag(0.3, 0.1): denominator 0.9, d = 0.1/4 - 0.005 = 0.02 -> 0.02^2 / 0.9 (positive)
    assert float(step_bound_theta_ill(np.eye(2), np.diag([0.3, 0.1]))) == pytest.approx(0.02**2 / 0.9, rel=1e-12)
