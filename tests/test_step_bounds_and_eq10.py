"""Thm 4.3 / Thm 4.1(4) / Thm A.1(4) step bounds (rtol, the rank threshold, undefined and infinite bounds)
and Eq. 10's PSD threshold.

Each test checks a documented behaviour against an independent reference: a closed form on a diagonal (or
exactly representable) matrix, worked out by hand in the comment, or the documented error message.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kappalab as kl
from kappalab.errors import UndefinedRegularizerError
from core_inputs import EPS, backends


@pytest.mark.parametrize("to", backends())
def test_step_bounds_honour_rtol(to) -> None:
    # S = diag(3, 2, 1e-3). rtol = 1e-2 drops 1e-3 from the rank (k = 2), while ||S||_F^2 = 13 + 1e-6 is the
    # Frobenius norm of S itself (Eq. 12 as written):
    # Thm A.1(4): kappa = 3/2, p = 3: (1/2) / ((2/3)(3/2) + 1/3) = 3/8.
    # Thm 4.1(4): d = (13 + 1e-6)/4 - 4/2, k/(k-1) d^2 = 2 d^2.
    S = to(np.diag([3.0, 2.0, 1e-3]))
    d = (13 + 1e-6) / 4 - 2
    assert float(kl.step_bound_well(S, rtol=1e-2)) == pytest.approx(3 / 8, rel=1e-14)
    assert float(kl.step_bound_ill(S, rtol=1e-2)) == pytest.approx(2 * d * d, rel=1e-14)
    # theta = I, K = S: H = S. Thm 4.3(2) at k = 2: s_min = 2, d^2 / (1 - 2 * 2/2) = -d^2.
    eye = to(np.eye(3))
    assert float(kl.step_bound_theta_ill(eye, S, rtol=1e-2)) == pytest.approx(-d * d, rel=1e-14)
    # Thm 4.3(1) with rtol = 0.9 (threshold 2.7 > s_2 = 2): the second term is void, the bound is the first,
    # 1/((1 - 1/3) 3) = 1/2; with the default rtol it would be min(1/2, (6 - 4)/(3 * 4)) = 1/6.
    assert float(kl.step_bound_theta_well(eye, S, rtol=0.9)) == pytest.approx(1 / 2, rel=1e-14)
    assert float(kl.step_bound_theta_well(eye, S)) == pytest.approx(1 / 6, rel=1e-14)


@pytest.mark.parametrize("to", backends())
def test_step_bound_theta_well_second_term_void_at_the_rank_threshold(to) -> None:
    # H = diag(2^-6, 2^-7), rtol = 1/2: s_2 equals the threshold rtol * s_1 exactly, so it is not above it
    # (the rank rule's "above"): s_2 counts as zero and the bound is the first term 1/((1/2) 2^-6) = 128 (the
    # second term, (s_1 s_2 - s_2^2)/(2 s_2^2) = 1/2, must not enter).
    K = to(np.diag([2.0**-6, 2.0**-7]))
    assert float(kl.step_bound_theta_well(to(np.eye(2)), K, rtol=0.5)) == 128.0


@pytest.mark.parametrize("to", backends())
def test_step_bound_theta_ill_names_h_theta_when_undefined(to) -> None:
    # theta = I, K = 2 I: all eigenvalues of H are equal, R_ill's denominator is 0; the error names H(theta).
    with pytest.raises(UndefinedRegularizerError, match=r"^R_ill\(H\(theta\)\) is undefined: its denominator "
                                                         r"\|\|H\(theta\)\|\|_F\^2"):
        kl.step_bound_theta_ill(to(np.eye(2)), to(2 * np.eye(2)))


@pytest.mark.parametrize("to", backends())
def test_step_bound_theta_ill_pole_is_inf_without_a_warning(to) -> None:
    # H = diag(3, 1): k = 2, s_min = 1 = k/2, so 1 - 2 s_min/k = 0 exactly: +inf, returned, not divided out.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = kl.step_bound_theta_ill(to(np.eye(2)), to(np.diag([3.0, 1.0])))
    assert float(out) == np.inf


@pytest.mark.parametrize("to", backends())
def test_eq10_psd_threshold_boundaries(to) -> None:
    # D = 2, lambda_max = 1: threshold = 2 eps. An eigenvalue of exactly -2 eps is within rounding (accepted and
    # treated as 0); one of exactly +2 eps is not above the threshold either (0); an exact 0 stays 0 (not 0/0).
    theta = to(np.eye(2))
    for small in (-2 * EPS, 2 * EPS, 0.0):
        for reading, top in (("proof", 1.0), ("main_text", 1.0)):
            out = np.asarray(kl.eq10_singular_values(theta, to(np.diag([1.0, small])), reading=reading))
            assert out.tolist() == [top, 0.0], (small, reading, out)
    with pytest.raises(ValueError, match="positive semidefinite"):
        kl.eq10_singular_values(theta, to(np.diag([1.0, -3 * EPS])))
