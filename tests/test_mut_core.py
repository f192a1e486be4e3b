"""Tests added to kill surviving mutants of the core formula modules (docs/mutation.md names each one).

Each test checks a documented behaviour against an independent reference: a closed form on a diagonal (or
exactly representable) matrix, worked out by hand in the comment, or the documented error message.
"""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch

import kappalab as kl
from kappalab import gram
from kappalab import kappa as K
from kappalab.errors import DegenerateSpectrumError, UndefinedRegularizerError
from test_kappa import _orthogonal, built

EPS = float(np.finfo(float).eps)
NAN_2x2 = [[1.0, np.nan], [0.0, 1.0]]  # NaN in the upper triangle (eigvalsh reads the lower one)


def backends():
    return [pytest.param(np.asarray, id="numpy"), pytest.param(lambda a: torch.tensor(a, dtype=torch.float64),
                                                               id="torch")]


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


def test_preconditioned_step_is_differentiable_in_torch() -> None:
    # Alg. 1's step theta - eta K^-1 G stays in torch (no host round trip), so autograd flows through it:
    # d/dG <1, theta - eta K^-1 G> = -eta K^-1 1 1^T (K symmetric); here K = diag(2, 4), eta = 1/2.
    theta = torch.eye(2, dtype=torch.float64)
    K = torch.diag(torch.tensor([2.0, 4.0], dtype=torch.float64)).requires_grad_(True)
    G = torch.ones(2, 2, dtype=torch.float64, requires_grad=True)
    kl.preconditioned_step(theta, K, G, 0.5).sum().backward()
    torch.testing.assert_close(G.grad, torch.tensor([[-0.25, -0.25], [-0.125, -0.125]], dtype=torch.float64),
                               rtol=4 * EPS, atol=0)  # Cholesky of diag(2, 4): sqrt(2)^2 is 2 to 1 ulp


@pytest.mark.parametrize("to", backends())
def test_preconditioned_step_cholesky_errors_name_the_matrix(to) -> None:
    theta, G = to(np.eye(2)), to(np.ones((2, 2)))
    # ridge = 0 and K indefinite: the message names K and suggests a ridge
    with pytest.raises(ValueError, match=r"^K is not positive definite \(Cholesky failed[^)]*\) \(K is singular "
                                         r"or indefinite: pass ridge > 0\)$"):
        kl.preconditioned_step(theta, to(np.diag([1.0, -1.0])), G, 0.1)
    # ridge = 1/2 and K + ridge I = diag(3/2, -1/2) still indefinite: the message names K + ridge * I, no hint
    with pytest.raises(ValueError, match=r"^K \+ ridge \* I is not positive definite \(Cholesky failed[^)]*\)$"):
        kl.preconditioned_step(theta, to(np.diag([1.0, -1.0])), G, 0.1, ridge=0.5)


def test_preconditioned_step_without_checks_does_not_scan_for_finiteness() -> None:
    # check=False skips the finiteness scan (documented: it costs a device sync in hot loops): a NaN in grad
    # propagates to the result instead of raising in the solver.
    G = np.array([[np.nan, 0.0], [0.0, 1.0]])
    out = kl.preconditioned_step(np.eye(2), np.diag([2.0, 4.0]), G, 0.5, check=False)
    assert np.isnan(out[0, 0]) and out[1, 1] == 1 - 0.5 / 4


# ---- kappalab.kappa ---------------------------------------------------------------------------------------------

def meta(n: int = 3) -> torch.Tensor:
    return torch.eye(n, dtype=torch.float64, device="meta")


# ---- spectrum ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("to", backends())
def test_spectrum_default_is_the_singular_values_of_the_unit_scaled_matrix(to) -> None:
    # S = diag(3, -1): max|s_ij| = 3 = 0.75 * 2^2, so scale = 2 and the values are those of S / 4: singular values
    # (0.75, 0.25). (Its eigenvalues (3, -1) are not a PSD spectrum: psd=True must refuse it.)
    values, scale = K.spectrum(to(np.diag([3.0, -1.0])))
    assert scale == 2
    assert np.asarray(values).tolist() == [0.75, 0.25]
    with pytest.raises(ValueError, match=r"^S must be positive semidefinite: its smallest eigenvalue is -1\.0"):
        K.spectrum(to(np.diag([3.0, -1.0])), psd=True)


@pytest.mark.parametrize("to", backends())
def test_spectrum_psd_checks_and_their_names(to) -> None:
    with pytest.raises(ValueError, match=r"^K must be positive semidefinite"):
        K.spectrum(to(np.diag([3.0, -1.0])), psd=True, name="K")
    with pytest.raises(ValueError, match=r"^S must be symmetric"):
        K.spectrum(to([[1.0, 0.5], [0.0, 1.0]]), psd=True)
    with pytest.raises(ValueError, match=r"^S must be square, got shape \(2, 3\)"):
        K.spectrum(to(np.ones((2, 3))), psd=True)
    with pytest.raises(ValueError, match=r"^K must be a 2-D matrix"):
        K.spectrum(to(np.ones(3)), name="K")
    with pytest.raises(ValueError, match=r"^S contains non-finite entries \(1 NaN, 0 Inf\)"):
        K.spectrum(to(NAN_2x2))
    # the PSD check's tolerance is rtol: lambda_min = -1e-10 * lambda_max passes at rtol = 1e-8, fails at the
    # default 2 eps; the values are those of S (scale 2: S / 4)
    S = to(np.diag([2.0, -2e-10]))
    values, scale = K.spectrum(S, psd=True, rtol=1e-8)
    assert scale == 2 and np.asarray(values).tolist() == [0.5, -0.5e-10]
    with pytest.raises(ValueError, match=r"must be positive semidefinite"):
        K.spectrum(S, psd=True)


def test_spectrum_unchecked_leaves_the_finiteness_scan_out() -> None:
    # check=False skips the scan (documented: no host sync); the decomposition then meets the NaN itself. NumPy's
    # svd of a NaN matrix fails to converge (LinAlgError, not kappalab's ValueError).
    with pytest.raises(np.linalg.LinAlgError):
        K.spectrum(np.array(NAN_2x2), check=False)


# ---- kappa_of_features ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("to", backends())
def test_kappa_of_features_errors_name_F(to) -> None:
    with pytest.raises(ValueError, match=r"^F contains non-finite entries \(1 NaN, 0 Inf\)"):
        K.kappa_of_features(to(NAN_2x2))
    with pytest.raises(ValueError, match=r"^F must be a 2-D matrix"):
        K.kappa_of_features(to(np.ones(3)))
    with pytest.raises(ValueError, match=r"^F has rank zero \(it is the zero matrix\)"):
        K.kappa_of_features(to(np.zeros((2, 3))))


def test_kappa_of_features_unchecked() -> None:
    # check=False: no finiteness scan (svd meets the NaN) and no zero test (0 / 0 = nan, on the device), but the
    # meta-tensor test, which is free, still runs and names F
    with pytest.raises(np.linalg.LinAlgError):
        K.kappa_of_features(np.array(NAN_2x2), check=False)
    with np.errstate(invalid="ignore"):
        assert np.isnan(K.kappa_of_features(np.zeros((2, 3)), check=False))
    with pytest.raises(ValueError, match=r"^F is a tensor on the 'meta' device"):
        K.kappa_of_features(meta(), check=False)


@pytest.mark.parametrize("to", backends())
def test_kappa_of_features_rank_arguments(to) -> None:
    # F = diag(2, 1, 1/2): s = (2, 1, 1/2), kappa(H) = (s_1 / s_k)^2
    F = to(np.diag([2.0, 1.0, 0.5]))
    assert float(K.kappa_of_features(F)) == 16.0
    assert float(K.kappa_of_features(F, rank=2)) == 4.0
    assert float(K.kappa_of_features(F, rtol=0.3)) == 4.0  # 1/2 <= 0.3 * 2: k = 2
    # the default rtol is max(N, D) eps relative to s_1: with D = 100 columns, s_2 = 50 eps is below 100 eps
    # (k = 1, kappa 1); a rule over the min(N, D) = 2 values (2 eps) would keep it (kappa (1 / (50 eps))^2)
    F = np.zeros((2, 100))
    F[0, 0], F[1, 1] = 0.5, 25 * EPS
    assert float(K.kappa_of_features(to(F))) == 1.0


@pytest.mark.parametrize("to", backends())
def test_kappa_of_features_is_scale_free_bit_for_bit(to) -> None:
    # F built from its exact singular values (1, 1/3, 1/7) (rational orthogonal factors): kappa(H) = 49 up to the
    # rounding of F's entries (relative 2 * 3 eps * kappa(F) on the ratio, see test_kappa's module docstring);
    # scaling F by 2^j changes no bit (the power-of-4 unit scaling), even where LAPACK would rescale (|j| >= 600)
    F0 = built([Fraction(1), Fraction(1, 3), Fraction(1, 7)], (5, 3))
    base = float(K.kappa_of_features(to(F0)))
    assert base == pytest.approx(49.0, rel=2 * 2 * 3 * EPS * 7 * 49)
    for j in (-1000, -600, 600, 1000):
        assert float(K.kappa_of_features(to(np.ldexp(F0, j)))) == base, j


# ---- the shifted kappa ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("to", backends())
def test_kappa_shifted_keeps_only_the_top_eigenvalue(to) -> None:
    # S = diag(0, 0, 1): S + 1e-6 I has eigenvalues (1e-6, 1e-6, 1 + 1e-6), exactly; only the largest is above
    # the shift, so kappa = 1 (the check looks at the largest eigenvalue, not at the second or third from the top)
    assert float(K.kappa_shifted(to(np.diag([0.0, 0.0, 1.0])))) == 1.0


@pytest.mark.parametrize("to", backends())
def test_kappa_shifted_errors_name_S(to) -> None:
    with pytest.raises(ValueError, match=r"^S must be square, got shape \(2, 3\)"):
        K.kappa_shifted(to(np.ones((2, 3))))
    with pytest.raises(ValueError, match=r"^S must be a 2-D matrix"):
        K.kappa_shifted(to(np.ones(3)))
    with pytest.raises(ValueError, match=r"^S contains non-finite entries"):
        K.kappa_shifted(to(NAN_2x2))


def test_kappa_shifted_unchecked() -> None:
    # check=False: no finiteness scan (eigvalsh reads the lower triangle, where the NaN is not: eigenvalues (1, 1)),
    # the meta-tensor test still names S
    assert float(K.kappa_shifted(np.array(NAN_2x2), check=False)) == 1.0
    with pytest.raises(ValueError, match=r"^S is a tensor on the 'meta' device"):
        K.kappa_shifted(meta(), check=False)


# ---- eigenvalues and singular values ----------------------------------------------------------------------------

@pytest.mark.parametrize("n", [127, 128])
def test_eigenvalues_route_switches_at_128(n) -> None:
    # AUTO_TRIDIAG_MIN_N = 128: below it NumPy's eigh values, from it on eigvalsh's (the two LAPACK routes differ
    # in the last bits on this matrix, which the assert on their difference makes sure of)
    X = np.random.default_rng(1).standard_normal((n + 5, n))
    A = X.T @ X
    via_eigh, via_eigvalsh = np.linalg.eigh(A)[0], np.linalg.eigvalsh(A)
    assert not np.array_equal(via_eigh, via_eigvalsh)
    assert np.array_equal(K.eigenvalues(A), via_eigh if n < 128 else via_eigvalsh)


def test_decompositions_name_their_meta_argument() -> None:
    with pytest.raises(ValueError, match=r"^A is a tensor on the 'meta' device"):
        K.eigenvalues(meta())
    with pytest.raises(ValueError, match=r"^S is a tensor on the 'meta' device"):
        K.singular_values(meta())


@pytest.mark.parametrize("psd", [False, True])
def test_condition_number_reports_a_bad_rtol_before_looking_at_S(psd) -> None:
    # a 1-d S is bad input too, but rtol is checked first: the one line names rtol
    with pytest.raises(ValueError, match=r"^rtol must be None or a relative tolerance in \[0, 1\), got 1\.5"):
        K.condition_number(np.ones(3), 1.5, psd=psd)


def test_psd_message_shows_the_callers_eigenvalue() -> None:
    # eq10 decomposes K itself (no unit scaling, scale 0): the message shows K's eigenvalue -1 and the floor
    # -rtol * max|lambda| = -2 eps (rtol = 2 eps for a 2 x 2 K)
    import kappalab as kl

    with pytest.raises(ValueError, match=r"^K must be positive semidefinite: its smallest eigenvalue is "
                                         r"-1\.000000e\+00, below -rtol \* max\|lambda\| = -4\.440892e-16$"):
        kl.eq10_singular_values(np.eye(2), np.diag([1.0, -1.0]))


@pytest.mark.parametrize("to", backends())
def test_kappa_of_spectrum_accepts_rank_one(to) -> None:
    assert float(K.kappa_of_spectrum(to([3.0, 2.0, 1.0]), rank=1)) == 1.0
    assert float(K.kappa_of_spectrum(to([3.0, 2.0, 1.0]), rank=3)) == 3.0


@pytest.mark.parametrize("to", backends())
def test_condition_number_arguments_reach_the_rank_rule(to) -> None:
    # psd check at rtol: lambda = (2, -2e-10) passes at rtol = 1e-8 (and -2e-10 is then no nonzero value: k = 1)
    assert float(K.condition_number(to(np.diag([2.0, -2e-10])), 1e-8, psd=True)) == 1.0
    # the default rtol uses the larger side: S (2 x 100) with singular values (1/2, 25 eps): 25 eps < 100 eps * 1/2
    # only for max(m, n) = 100, so k = 1
    S = np.zeros((2, 100))
    S[0, 0], S[1, 1] = 0.5, 25 * EPS
    assert float(K.condition_number(to(S))) == 1.0
    with pytest.raises(ValueError, match=r"^S has rank zero \(it is the zero matrix\)"):
        K.condition_number(to(np.zeros((2, 2))))


def test_condition_number_unchecked_skips_the_finiteness_scan() -> None:
    with pytest.raises(np.linalg.LinAlgError):
        K.condition_number(np.array(NAN_2x2), check=False)


@pytest.mark.parametrize("to", backends())
def test_feature_spectrum(to) -> None:
    # F (3 x 2) with columns (2, 0, 0) and (0, 1, 0): singular values (2, 1), H = F^T F = diag(4, 1)
    F = np.zeros((3, 2))
    F[0, 0], F[1, 1] = 2.0, 1.0
    assert np.asarray(K.feature_spectrum(to(F))).tolist() == [4.0, 1.0]
    with pytest.raises(ValueError, match=r"^F contains non-finite entries \(1 NaN, 0 Inf\)"):
        K.feature_spectrum(to(NAN_2x2))
    with pytest.raises(ValueError, match=r"^X_P must be a 2-D matrix"):
        K.feature_spectrum(to(np.ones(3)), name="X_P")


def test_feature_spectrum_unchecked_skips_the_finiteness_scan() -> None:
    with pytest.raises(np.linalg.LinAlgError):
        K.feature_spectrum(np.array(NAN_2x2), check=False)


# ---- kappalab.rir -------------------------------------------------------------------------------------------------

def test_rir_passes_rtol_to_every_kappa() -> None:
    # theta_I = diag(1, 2), K_H = diag(1, 1e-3), K_P = diag(1, 1/2): H_H(theta_I) = diag(1, 4e-3),
    # H_P(theta_I) = diag(1, 2). Default rtol (2 eps): term (i) = (1 / 4e-3) / (1 / 1e-3) = 1/4, term (ii) = 2/2.
    # rtol = 1e-2 drops 4e-3 and 1e-3 from the rank (k = 1 for both H_H and K_H): term (i) = 1/1.
    theta_I, K_H, K_P = np.diag([1.0, 2.0]), np.diag([1.0, 1e-3]), np.diag([1.0, 0.5])
    default = kl.rir(theta_I, K_P, K_H)
    assert (default.term_i, default.term_ii) == (pytest.approx(0.25, rel=4 * EPS), 1.0)
    cut = kl.rir(theta_I, K_P, K_H, rtol=1e-2)
    assert (cut.term_i, cut.term_ii, cut.rir) == (1.0, 1.0, 1.0)
    assert (cut.kappa_H_immunized, cut.kappa_H_reference, cut.kappa_P_immunized) == (1.0, 1.0, 2.0)


def test_rir_refuses_a_covariance_that_is_not_psd() -> None:
    # K_H = diag(1, -1) is symmetric but indefinite: its "kappa" as a PSD matrix is undefined (its singular values
    # (1, 1) would give 1 silently)
    with pytest.raises(ValueError, match=r"must be positive semidefinite: its smallest eigenvalue is -1"):
        kl.rir(np.eye(2), np.eye(2), np.diag([1.0, -1.0]))


# ---- kappalab.linear ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("to", backends())
def test_grad_theta_r_ill_passes_rtol(to) -> None:
    # theta = I, K = H = diag(4, 2, 1e-3). rtol = 1e-2: k = 2, s_k = 2, v_k = e_2, ||H||_F^2 = 20 + 1e-6 (all of H),
    # d = ||H||_F^2 / (2k) - s_k^2 / 2 = 3 + 2.5e-7. Thm 4.2(2): 2 K theta (s_k v_k v_k^T - H/k) / d^2
    # = 2 diag(4, 2, 1e-3) (diag(0, 2, 0) - diag(2, 1, 5e-4)) / d^2 = diag(-16, 4, -1e-6) / d^2.
    d = (20 + 1e-6) / 4 - 2
    got = np.asarray(kl.grad_theta_r_ill(to(np.eye(3)), to(np.diag([4.0, 2.0, 1e-3])), rtol=1e-2))
    np.testing.assert_allclose(got, np.diag([-16.0, 4.0, -1e-6]) / d**2, rtol=1e-14, atol=1e-14 / d**2)


def test_grad_theta_r_ill_passes_solver_and_check() -> None:
    with pytest.raises(ValueError, match=r"^solver must be 'auto' or one of"):
        kl.grad_theta_r_ill(np.eye(2), np.diag([2.0, 1.0]), solver="nope")
    # check=False skips the checks that cost a host sync: K's symmetry (H is symmetrized anyway) and R_ill's
    # zero-denominator test, so for K = 2 I the degeneracy policy is what raises
    K_asym = np.array([[2.0, 1e-3], [0.0, 1.0]])  # theta = I: H = (K + K^T) / 2, eigenvalues about 2 and 1
    assert np.isfinite(kl.grad_theta_r_ill(np.eye(2), K_asym, check=False)).all()
    with pytest.raises(ValueError, match=r"^K must be symmetric"):
        kl.grad_theta_r_ill(np.eye(2), K_asym)
    with pytest.raises(DegenerateSpectrumError, match=r"^s_min = s_k \(smallest nonzero\) of H\(theta\) is not "
                                                      r"unique"):
        kl.grad_theta_r_ill(np.eye(2), 2 * np.eye(2), check=False)
    with pytest.raises(UndefinedRegularizerError, match=r"^R_ill\(H\(theta\)\) is undefined"):
        kl.grad_theta_r_ill(np.eye(2), 2 * np.eye(2))


@pytest.mark.parametrize("to", backends())
def test_preconditioned_step_singularity_test(to) -> None:
    theta, G = to(np.eye(4)), to(np.ones((4, 4)))
    # K = diag(1, 1, 1, 2^-50): Cholesky pivots (1, 1, 1, 2^-25) exactly, (min / max)^2 = 2^-50 = D eps for D = 4:
    # "<= D eps" is singular, and the message shows D eps = 4 * 2^-52
    with pytest.raises(ValueError, match=r"^K is singular to working precision \(Cholesky pivot ratio\^2 = "
                                         r"8\.882e-16 <= D \* eps = 8\.882e-16\)"):
        kl.preconditioned_step(theta, to(np.diag([1.0, 1.0, 1.0, 2.0**-50])), G, 0.5)
    # K = diag(1/4, 3 eps / 4) (D = 2): pivots (1/2, sqrt(3 eps) / 2), ratio^2 = 3 eps > 2 eps: a valid step,
    # theta - eta K^-1 G with K^-1 G = diag(4, 4 / (3 eps)) @ ones
    K = np.diag([0.25, 0.75 * EPS])
    out = np.asarray(kl.preconditioned_step(to(np.eye(2)), to(K), to(np.ones((2, 2))), 0.5))
    np.testing.assert_allclose(out, np.eye(2) - 0.5 * np.array([[4.0, 4.0], [4 / (3 * EPS)] * 2]), rtol=1e-12)
    # the test is made on K only when ridge = 0 and check is on: a tiny ridge, or check=False, lets the step run
    tiny = to(np.diag([1.0, 0.0]))
    assert np.isfinite(np.asarray(kl.preconditioned_step(to(np.eye(2)), tiny, to(np.ones((2, 2))), 0.5,
                                                         ridge=1e-18))).all()
    out = kl.preconditioned_step(to(np.eye(2)), to(np.diag([1.0, 1e-17])), to(np.ones((2, 2))), 0.5, check=False)
    np.testing.assert_allclose(np.asarray(out)[1], np.array([0.0, 1.0]) - 0.5e17, rtol=1e-12)


@pytest.mark.parametrize("to", backends())
def test_preconditioned_step_names_grad(to) -> None:
    with pytest.raises(ValueError, match=r"^grad contains non-finite entries \(1 NaN, 0 Inf\)"):
        kl.preconditioned_step(to(np.eye(2)), to(np.eye(2)), to(NAN_2x2), 0.5)


@pytest.mark.parametrize("which", ["well", "ill"])
def test_linear_theta_gradients_pass_their_arguments(which) -> None:
    f = kl.grad_theta_r_well if which == "well" else kl.grad_theta_r_ill
    K = np.diag([4.0, 2.0, 1.0])
    with pytest.raises(ValueError, match=r"^rtol must be None or a relative tolerance in \[0, 1\)"):
        f(np.eye(3), K, rtol=1.5)
    with pytest.raises(ValueError, match=r"^solver must be 'auto' or one of"):
        f(np.eye(3), K, solver="nope")
    # check=False skips K's symmetry test (H is symmetrized anyway)
    assert np.isfinite(f(np.eye(2), np.array([[2.0, 1e-3], [0.0, 1.0]]), check=False)).all()
    # a relative gap of 1e-6 at the needed end is degenerate for gap_rtol = 1e-3 only
    near = np.diag([1 + 1e-6, 1.0, 0.5]) if which == "well" else np.diag([2.0, 1 + 1e-6, 1.0])
    assert np.isfinite(f(np.eye(3), near)).all()
    with pytest.raises(DegenerateSpectrumError, match=r"of H\(theta\) is not unique.*\(gap_rtol = 1\.0e-03\)"):
        f(np.eye(3), near, gap_rtol=1e-3)
    # H = 0: the rank-zero test names H(theta); check=False skips it (then R_well's policy refuses the repeated
    # s_1 = s_2 = 0, and R_ill's formula divides 0/0: not finite, no exception)
    with pytest.raises(ValueError, match=r"^H\(theta\) has rank zero"):
        f(np.eye(2), np.zeros((2, 2)))
    if which == "well":
        with pytest.raises(DegenerateSpectrumError):
            f(np.eye(2), np.zeros((2, 2)), check=False)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            assert not np.isfinite(f(np.eye(2), np.zeros((2, 2)), check=False)).all()


def test_linear_r_ill_gradient_unchecked_at_rank_one() -> None:
    # H = diag(1, 0): k = 1, R_ill undefined; s_k = s_1 is unique (no s_{k-1}), so with check=False the formula
    # divides by d = 0 (no exception); with check the error names H(theta)
    with np.errstate(divide="ignore", invalid="ignore"):
        assert not np.isfinite(kl.grad_theta_r_ill(np.eye(2), np.diag([1.0, 0.0]), check=False)).all()
    with pytest.raises(UndefinedRegularizerError, match=r"^R_ill\(H\(theta\)\) is undefined"):
        kl.grad_theta_r_ill(np.eye(2), np.diag([1.0, 0.0]))


def test_hessian_shapes_and_unchecked_finiteness() -> None:
    with pytest.raises(ValueError, match=r"^K must be D_in x D_in with D_in = theta.shape\[0\] = 3, got K of shape "
                                         r"\(2, 2\)$"):
        kl.hessian(np.ones((3, 2)), np.eye(2))
    with pytest.raises(ValueError, match=r"^K contains non-finite entries"):
        kl.hessian(np.eye(2), np.array(NAN_2x2))
    assert np.isnan(kl.hessian(np.eye(2), np.array(NAN_2x2), check=False)).any()  # check=False: no scan


# ---- kappalab.gram ------------------------------------------------------------------------------------------------
# Both routes: N >= D forms H = F^T F (D x D); N < D works on the Gram matrix F F^T (N x N). The rank rule is the
# one of the D x D matrix H: rtol relative to s_max, default D * eps (not N * eps, not max(N, D) * eps).

def _diag_features(N: int, D: int, values: list[float]) -> np.ndarray:
    """N x D features with F[i, i] = values[i]: H = F^T F has eigenvalues values^2 (and zeros)."""
    F = np.zeros((N, D))
    F[np.arange(len(values)), np.arange(len(values))] = values
    return F


@pytest.mark.parametrize("N, D", [(3, 3), (2, 3)], ids=["H route", "Gram route"])
def test_feature_extremes_pass_rtol_and_solver(N, D) -> None:
    # F = diag(2, 0.05) (N x D): H has eigenvalues (4, 0.0025, 0...); rtol = 1e-2 (threshold 0.04) drops 0.0025
    F = _diag_features(N, D, [2.0, 0.05])
    e = gram.feature_extremes(F)
    assert (int(e.rank), float(e.s_min)) == (2, pytest.approx(0.0025, rel=4 * EPS))
    e = gram.feature_extremes(F, rtol=1e-2)
    assert (int(e.rank), float(e.s_min)) == (1, 4.0)
    with pytest.raises(ValueError, match=r"^solver must be 'auto' or one of"):
        gram.feature_extremes(F, solver="nope")


def test_feature_extremes_default_rtol_is_D_eps() -> None:
    # H = diag(1, 2^-48) exactly (F[1, 1] = 2^-24): 2^-48 = 16 eps lies above D eps = 2 eps (D = 2, N = 100: rank 2)
    # and, with D = 100 and N = 2 (Gram route), below D eps = 100 eps (rank 1), although 16 eps > N eps there
    assert int(gram.feature_extremes(_diag_features(100, 2, [1.0, 2.0**-24])).rank) == 2
    assert int(gram.feature_extremes(_diag_features(2, 100, [1.0, 2.0**-24])).rank) == 1


@pytest.mark.parametrize("N, D, what", [(3, 2, r"F\^T F"), (3, 3, r"F\^T F"), (2, 3, r"F F\^T")],
                         ids=["H route", "square: H route", "Gram route"])
def test_feature_extremes_checks_and_names(N, D, what) -> None:
    with pytest.raises(ValueError, match=rf"^{what} has rank zero \(it is the zero matrix\)"):
        gram.feature_extremes(np.zeros((N, D)))
    with pytest.raises(ValueError, match=rf"^{what.replace('F', 'Z')} has rank zero"):
        gram.feature_extremes(np.zeros((N, D)), name="Z")
    # check=False: no rank-zero test (a host sync); the zero spectrum comes back (the Gram route's vectors F^T u
    # are then 0 / 0)
    with np.errstate(invalid="ignore"):
        assert int(gram.feature_extremes(np.zeros((N, D)), check=False).rank) == 0
    bad = np.zeros((N, D))
    bad[0, 1] = np.nan
    with pytest.raises(ValueError, match=r"^F contains non-finite entries \(1 NaN, 0 Inf\)"):
        gram.feature_extremes(bad)
    if (N, D) == (3, 2):  # check=False: no finiteness scan, the NaN reaches H's spectrum (eigh returns NaN here)
        with np.errstate(invalid="ignore"):
            assert np.isnan(float(gram.feature_extremes(bad, check=False).s_max))
    with pytest.raises(ValueError, match=r"^Z must be a 2-D matrix"):
        gram.feature_extremes(np.ones(3), name="Z")


def test_regularizers_from_features_pass_their_arguments() -> None:
    F = _diag_features(3, 3, [2.0, 1.0, 0.05])  # H = diag(4, 1, 0.0025), ||H||_F^2 = 17 + 6.25e-6
    fro2 = 17 + 6.25e-6
    # Eq. 12: R_ill = 1 / (||H||_F^2 / (2k) - s_k^2 / 2); rtol = 1e-2 gives k = 2, s_k = 1; the default k = 3
    assert float(gram.r_ill_from_features(F)) == pytest.approx(1 / (fro2 / 6 - 0.0025**2 / 2), rel=1e-14)
    assert float(gram.r_ill_from_features(F, rtol=1e-2)) == pytest.approx(1 / (fro2 / 4 - 0.5), rel=1e-14)
    for f in (gram.r_well_from_features, gram.r_ill_from_features):
        with pytest.raises(ValueError, match=r"^rtol must be None or a relative tolerance in \[0, 1\)"):
            f(F, rtol=1.5)
        with pytest.raises(ValueError, match=r"^solver must be 'auto' or one of"):
            f(F, solver="nope")
        with pytest.raises(ValueError, match=r"^F contains non-finite entries"):
            f(_diag_features(3, 3, [1.0, np.nan]))
    # check=False: no rank-zero test (a host sync): R_well(0) = 0 comes back, R_ill(0) is 1 / (0/0)
    assert float(gram.r_well_from_features(np.zeros((3, 3)), check=False)) == 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        assert np.isnan(gram.r_ill_from_features(np.zeros((3, 3)), check=False))
    # R_ill of equal singular values is undefined: the error names F^T F; check=False returns 1/0 = inf instead
    with pytest.raises(UndefinedRegularizerError, match=r"^R_ill\(F\^T F\) is undefined"):
        gram.r_ill_from_features(np.eye(3))
    with np.errstate(divide="ignore"):
        assert float(gram.r_ill_from_features(np.eye(3), check=False)) == np.inf


@pytest.mark.parametrize("tracked", [False, True], ids=["psd_extremes", "tracker"])
def test_regularizers_from_covariance_pass_their_arguments(tracked) -> None:
    from kappalab.tracker import ExtremeTracker

    def call(theta, K, **kw):
        return gram.regularizers_from_covariance(theta, K, tracker=ExtremeTracker() if tracked else None, **kw)

    with pytest.raises(ValueError, match=r"^H\(theta\) has rank zero \(it is the zero matrix\)"):
        call(np.eye(2), np.zeros((2, 2)))
    # check=False: no rank-zero test; the degeneracy policy of the gradient is what refuses H = 0
    with pytest.raises(DegenerateSpectrumError, match=r"^s_max = s_1 of H\(theta\) is not unique"):
        call(np.eye(2), np.zeros((2, 2)), check=False)
    with pytest.raises(ValueError, match=r"^K must be symmetric"):
        call(np.eye(2), np.array([[2.0, 1e-3], [0.0, 1.0]]))
    if not tracked:  # the tracker has its own rtol and solver
        # theta = I, K = H = diag(4, 2, 1e-3): rtol = 1e-2 gives k = 2, s_k = 2, R_ill = 1 / ((20 + 1e-6)/4 - 2)
        out = call(np.eye(3), np.diag([4.0, 2.0, 1e-3]), rtol=1e-2)
        assert float(out.r_ill) == pytest.approx(1 / ((20 + 1e-6) / 4 - 2), rel=1e-14)
        with pytest.raises(ValueError, match=r"^solver must be 'auto' or one of"):
            call(np.eye(2), np.diag([2.0, 1.0]), solver="nope")


def test_regularizers_from_data_pass_rtol_on_both_routes() -> None:
    # H route: X = diag(2, 1, 0.05), theta = I: H = diag(4, 1, 0.0025). rtol = 1e-2: k = 2, s_k = 1 (v_k = e_2),
    # d = ||H||_F^2 / 4 - 1/2; Thm 4.2(2): 2 K theta (e_2 e_2^T - H/2) / d^2 = diag(-16, 1, -6.25e-6) / d^2
    X = _diag_features(3, 3, [2.0, 1.0, 0.05])
    d = (17 + 0.05**4) / 4 - 0.5
    out = gram.regularizers_from_data(np.eye(3), X, rtol=1e-2)
    assert float(out.r_ill) == pytest.approx(1 / d, rel=1e-14)
    expected = np.diag([-16.0, 1.0, -0.05**4]) / d**2
    for grad in (out.grad_ill, gram.grad_theta_r_ill_from_data(np.eye(3), X, rtol=1e-2)):
        np.testing.assert_allclose(grad, expected, rtol=1e-13, atol=1e-15)
    # Gram route: X = [[2, 0, 0], [0, 0.05, 0]] (N = 2 < D = 3): rtol = 1e-2 leaves k = 1, where R_ill is undefined
    Xg = _diag_features(2, 3, [2.0, 0.05])
    assert np.isfinite(gram.regularizers_from_data(np.eye(3), Xg).r_ill)
    with pytest.raises(UndefinedRegularizerError, match=r"all k = 1 nonzero"):
        gram.regularizers_from_data(np.eye(3), Xg, rtol=1e-2)


def test_regularizers_from_data_default_rtol_is_D_eps() -> None:
    # H = diag(1, 2^-48) = diag(1, 16 eps). D = 2, N = 100: D eps = 2 eps keeps it (k = 2, R_ill defined);
    # D = 100, N = 2 (Gram route): D eps = 100 eps drops it (k = 1, R_ill undefined), though N eps = 2 eps would not
    assert np.isfinite(gram.regularizers_from_data(np.eye(2), _diag_features(100, 2, [1.0, 2.0**-24])).r_ill)
    with pytest.raises(UndefinedRegularizerError, match=r"all k = 1 nonzero"):
        gram.regularizers_from_data(np.eye(100), _diag_features(2, 100, [1.0, 2.0**-24]))


def test_regularizers_from_data_checks_and_names() -> None:
    nan_X = _diag_features(3, 2, [1.0, 1.0])
    nan_X[0, 1] = np.nan
    with pytest.raises(ValueError, match=r"^X contains non-finite entries \(1 NaN, 0 Inf\)"):
        gram.regularizers_from_data(np.eye(2), nan_X)
    with pytest.raises(ValueError, match=r"^theta contains non-finite entries \(1 NaN, 0 Inf\)"):
        gram.regularizers_from_data(np.array(NAN_2x2), np.eye(2))
    # check=False: no finiteness scan; the NaN reaches the spectrum, and the gradient's gap test refuses it
    with pytest.raises(DegenerateSpectrumError, match=r"gap to s_2 is nan"):
        gram.regularizers_from_data(np.eye(2), nan_X, check=False)
    with pytest.raises(DegenerateSpectrumError, match=r"gap to s_2 is nan"):
        gram.regularizers_from_data(np.array(NAN_2x2), np.eye(2), check=False)
    with pytest.raises(ValueError, match=r"^F F\^T has rank zero"):  # Gram route
        gram.regularizers_from_data(np.eye(3), np.zeros((2, 3)))
    with pytest.raises(TypeError, match=r"^mixed NumPy arrays and torch tensors"):
        gram.regularizers_from_data(np.eye(2), torch.eye(2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^X must be N x D_in with D_in = theta.shape\[0\] = 3, got X of shape "
                                         r"\(4, 2\)$"):
        gram.regularizers_from_data(np.ones((3, 2)), np.ones((4, 2)))
    # theta D_in x D with D_in = 3 != D = 2: X (N x D_in) fits; H = theta^T X^T X theta = diag(4, 1)
    theta = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    out = gram.regularizers_from_data(theta, _diag_features(4, 3, [2.0, 1.0, 7.0]))
    assert float(out.r_ill) == 1 / (17 / 4 - 0.5)


@pytest.mark.parametrize("which", ["well", "ill"])
def test_theta_gradients_from_data_pass_their_arguments(which) -> None:
    f = gram.grad_theta_r_well_from_data if which == "well" else gram.grad_theta_r_ill_from_data
    # only the needed extreme must be unique: H = diag(2, 1, 1) (R_well: s_1 = 2 unique) and H = diag(1, 1, 1/2)
    # (R_ill: s_k = 1/2 unique); the other end is degenerate and must not be looked at
    ok = np.diag(np.sqrt([2.0, 1.0, 1.0] if which == "well" else [1.0, 1.0, 0.5]))
    assert np.isfinite(f(np.eye(3), ok)).all()
    # the needed end degenerate (H = I for R_well, H = diag(4, 1, 1) for R_ill): the default policy raises,
    # on_degenerate="ignore" returns the formula's value (one subgradient)
    bad = np.eye(3) if which == "well" else np.diag([2.0, 1.0, 1.0])
    with pytest.raises(DegenerateSpectrumError):
        f(np.eye(3), bad)
    assert np.isfinite(f(np.eye(3), bad, on_degenerate="ignore")).all()
    # gap_rtol = 1e-3 calls a relative gap of 1e-6 degenerate; the default 1.5e-8 does not
    near = np.diag(np.sqrt([1 + 1e-6, 1.0, 0.25] if which == "well" else [4.0, 1 + 1e-6, 1.0]))
    assert np.isfinite(f(np.eye(3), near)).all()
    with pytest.raises(DegenerateSpectrumError, match=r"\(gap_rtol = 1\.0e-03\)"):
        f(np.eye(3), near, gap_rtol=1e-3)
    with pytest.raises(ValueError, match=r"^rtol must be None or a relative tolerance in \[0, 1\)"):
        f(np.eye(3), near, rtol=1.5)
    with pytest.raises(ValueError, match=r"^solver must be 'auto' or one of"):
        f(np.eye(3), near, solver="nope")
    with pytest.raises(ValueError, match=r"^theta contains non-finite entries"):
        f(np.array(NAN_2x2), np.eye(2))
    with pytest.raises(DegenerateSpectrumError, match=r"is nan"):
        f(np.array(NAN_2x2), np.eye(2), check=False)


def test_regularizers_from_covariance_gap_rtol_and_rank_one() -> None:
    with pytest.raises(DegenerateSpectrumError, match=r"\(gap_rtol = 1\.0e-03\)"):
        gram.regularizers_from_covariance(np.eye(2), np.diag([1 + 1e-6, 1.0]), gap_rtol=1e-3)
    # H = diag(1, 0): k = 1, R_ill undefined (its denominator ||H||_F^2/2 - s_1^2/2 is 0): with check it says so
    with pytest.raises(UndefinedRegularizerError, match=r"^R_ill\(H\(theta\)\) is undefined.*all k = 1"):
        gram.regularizers_from_covariance(np.eye(2), np.diag([1.0, 0.0]))


def test_gram_route_extremes_are_those_of_H() -> None:
    # F = [[2, 0, 0], [0, 0.05, 0]] (N = 2 < D = 3): H = diag(4, 0.0025, 0), a symmetric D x D matrix, so its
    # extreme singular vectors are u = v = +-e_1 (top) and +-e_2 (smallest nonzero), in R^D, and p = D = 3
    e = gram.feature_extremes(_diag_features(2, 3, [2.0, 0.05]))
    assert e.p == 3
    for u, v, k in ((e.u_max, e.v_max, 0), (e.u_min, e.v_min, 1)):
        assert np.array_equal(np.abs(v), np.eye(3)[k]) and np.array_equal(u, v)


@pytest.mark.parametrize("N, D", [(3, 2), (2, 2), (2, 3)], ids=["H route", "square: H route", "Gram route"])
def test_regularizers_from_data_zero_rank_one_and_gap(N, D) -> None:
    what = r"H\(theta\)" if N >= D else r"F F\^T"
    with pytest.raises(ValueError, match=rf"^{what} has rank zero \(it is the zero matrix\)"):
        gram.regularizers_from_data(np.eye(D), np.zeros((N, D)))
    # check=False: no rank-zero test; the degeneracy policy refuses H = 0 instead
    with np.errstate(invalid="ignore"), pytest.raises(DegenerateSpectrumError, match=r"^s_max = s_1 of H\(theta\)"):
        gram.regularizers_from_data(np.eye(D), np.zeros((N, D)), check=False)
    # H = diag(1, 0, ...): k = 1 and R_ill is undefined; check says so
    with pytest.raises(UndefinedRegularizerError, match=r"^R_ill\(H\(theta\)\) is undefined.*all k = 1"):
        gram.regularizers_from_data(np.eye(D), _diag_features(N, D, [1.0]))
    # a relative gap of 1e-6 between s_1 and s_2 is degenerate for gap_rtol = 1e-3 only
    near = _diag_features(N, D, [1.0, (1 - 1e-6) ** 0.5])
    with pytest.raises(DegenerateSpectrumError, match=r"\(gap_rtol = 1\.0e-03\)"):
        gram.regularizers_from_data(np.eye(D), near, gap_rtol=1e-3, which=("max",))
    assert np.isfinite(gram.regularizers_from_data(np.eye(D), near, which=("max",)).grad_well).all()


@pytest.mark.parametrize("dtype", ["float64", "float32", "torch"])
@pytest.mark.parametrize("route", ["covariance", "data", "gram"])
def test_regularizers_and_theta_gradients_on_every_route(route, dtype) -> None:
    # theta = I, H = diag(4, 1, 1/4) (K = H; X = sqrt(H) padded to N = 4 > D = 3 rows; Gram route: theta = I_4 and
    # X with N = 3 < D = 4). Thm 4.2(1): 2 H (s_1 e_1 e_1^T - H/p) = diag(64/3, -2/3, -1/24) for p = 3.
    # Thm 4.2(2): k = 3, s_k = 1/4, ||H||_F^2 = 273/16, d = 273/96 - 1/32 = 45/16:
    # 2 H (s_k e_3 e_3^T - H/3) / d^2 = diag(-32/3, -2/3, 1/12) / d^2. The result keeps the input's kind and dtype.
    def t(a):
        return torch.tensor(a, dtype=torch.float64) if dtype == "torch" else np.asarray(a, dtype=dtype)

    if route == "covariance":
        out = gram.regularizers_from_covariance(t(np.eye(3)), t(np.diag([4.0, 1.0, 0.25])))
    elif route == "data":
        out = gram.regularizers_from_data(t(np.eye(3)), t(_diag_features(4, 3, [2.0, 1.0, 0.5])))
    else:
        out = gram.regularizers_from_data(t(np.eye(4)), t(_diag_features(3, 4, [2.0, 1.0, 0.5])))
    p = 3 if route != "gram" else 4  # R_well's p is D
    well = 2 * np.diag([4.0, 1.0, 0.25]) @ (np.diag([4.0, 0, 0]) - np.diag([4.0, 1.0, 0.25]) / p)
    ill = np.diag([-32 / 3, -2 / 3, 1 / 12]) / (45 / 16) ** 2
    if route == "gram":
        well, ill = np.pad(well, (0, 1)), np.pad(ill, (0, 1))
    tol = 1e-13 if dtype != "float32" else 1e-5
    for got, want in ((out.grad_well, well), (out.grad_ill, ill)):
        if dtype == "torch":
            assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
            got = got.numpy()
        else:
            assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    assert float(out.r_ill) == pytest.approx(16 / 45, rel=tol)
    assert float(out.extremes.s_max) == pytest.approx(4.0, rel=tol) and int(out.extremes.rank) == 3


@pytest.mark.parametrize("to", backends())
def test_gradient_of_r_ill_names_h_theta_and_honours_check(to) -> None:
    # H = diag(1, 0): k = 1, R_ill undefined. Both closed-form paths (NumPy's coefficients + BLAS update, torch's
    # generic expression) must name H(theta), and check=False (the hot loop) must skip the test (R_ill = 1/0 = inf)
    theta, K = to(np.eye(2)), to(np.diag([1.0, 0.0]))
    with pytest.raises(UndefinedRegularizerError, match=r"^R_ill\(H\(theta\)\) is undefined"):
        gram.regularizers_from_covariance(theta, K, which=("min",))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = gram.regularizers_from_covariance(theta, K, which=("min",), check=False)
    assert float(out.r_ill) == np.inf


# ---- kappalab.regularizers ----------------------------------------------------------------------------------------
# S = diag(2, 1, 1/2): R_well = s_1^2/2 - ||S||_F^2/(2p) = 2 - 5.25/6; grad R_well = s_1 e_1 e_1^T - S/p
# = diag(4/3, -1/3, -1/6). R_ill: k = 3, s_k = 1/2, d = 5.25/6 - 1/8 = 3/4, R_ill = 4/3;
# grad R_ill = (s_k e_3 e_3^T - S/3) / d^2 = diag(-2/3, -1/3, 1/3) / (9/16).
REG_S = np.diag([2.0, 1.0, 0.5])
REG_VALUES = {"r_well": 2 - 5.25 / 6, "r_ill": 4 / 3}
REG_GRADS = {"r_well": np.diag([4 / 3, -1 / 3, -1 / 6]), "r_ill": np.diag([-2 / 3, -1 / 3, 1 / 3]) * 16 / 9}


@pytest.mark.parametrize("psd", [False, True], ids=["svd", "psd"])
@pytest.mark.parametrize("which", ["r_well", "r_ill"])
def test_regularizers_known_values_and_arguments(which, psd) -> None:
    value, grad = getattr(kl, which), getattr(kl, f"grad_{which}")
    assert float(value(REG_S, psd=psd)) == pytest.approx(REG_VALUES[which], rel=1e-14)
    np.testing.assert_allclose(grad(REG_S, psd=psd), REG_GRADS[which], rtol=1e-14, atol=1e-15)
    for f in (value, grad):
        with pytest.raises(ValueError, match=r"^rtol must be None or a relative tolerance in \[0, 1\)"):
            f(REG_S, psd=psd, rtol=1.5)
        with pytest.raises(ValueError, match=r"^S contains non-finite entries \(1 NaN, 0 Inf\)"):
            f(np.array(NAN_2x2), psd=psd)
        with pytest.raises(ValueError, match=r"^S must be a 2-D matrix"):
            f(np.ones(3), psd=psd)
        if psd:
            with pytest.raises(ValueError, match=r"^solver must be 'auto' or one of"):
                f(REG_S, psd=True, solver="nope")
            with pytest.raises(ValueError, match=r"^S must be symmetric"):
                f(np.array([[2.0, 1.0], [0.0, 1.0]]), psd=True)
            with pytest.raises(ValueError, match=r"^S must be positive semidefinite"):
                f(np.diag([2.0, 1.0, -1.0]), psd=True)
            with pytest.raises(ValueError, match=r"^S must be square"):
                f(np.ones((2, 3)), psd=True)
        else:  # the SVD route takes any matrix: diag(2, 1, -1/2) has the singular values of REG_S
            assert float(f(np.diag([2.0, 1.0, 0.5]) @ np.diag([1.0, 1.0, -1.0])).ravel()[0]) == pytest.approx(
                float(f(REG_S).ravel()[0]), rel=1e-14)
    with pytest.raises(ValueError, match=r"^on_degenerate must be 'raise', 'warn' or 'ignore', got 'bogus'"):
        value(REG_S, psd=psd, on_degenerate="bogus")
    for policy in ("raise", "warn", "ignore"):
        assert float(value(REG_S, psd=psd, on_degenerate=policy)) == pytest.approx(REG_VALUES[which], rel=1e-14)
    # check=False: no rank-zero test (a host sync): R_well(0) = 0 comes back
    if which == "r_well":
        with pytest.raises(ValueError, match=r"^S has rank zero"):
            value(np.zeros((2, 2)), psd=psd)
        assert float(value(np.zeros((2, 2)), psd=psd, check=False)) == 0.0


@pytest.mark.parametrize("psd", [False, True], ids=["svd", "psd"])
def test_r_ill_passes_rtol(psd) -> None:
    # S = diag(2, 1, 0.05), rtol = 0.1 (threshold 0.2): k = 2, s_k = 1, ||S||_F^2 = 5.0025, d = 5.0025/4 - 1/2
    S = np.diag([2.0, 1.0, 0.05])
    d = 5.0025 / 4 - 0.5
    assert float(kl.r_ill(S, psd=psd, rtol=0.1)) == pytest.approx(1 / d, rel=1e-14)
    np.testing.assert_allclose(kl.grad_r_ill(S, psd=psd, rtol=0.1), np.diag([-1.0, 0.5, -0.025]) / d**2,
                               rtol=1e-14, atol=1e-16)


@pytest.mark.parametrize("psd", [False, True], ids=["svd", "psd"])
@pytest.mark.parametrize("which", ["r_well", "r_ill"])
def test_regularizer_gradients_degeneracy_policy_and_gap(which, psd) -> None:
    grad = getattr(kl, f"grad_{which}")
    # the needed end repeated (s_1 for R_well, s_k for R_ill): raise by default, a subgradient with "ignore"
    bad = np.diag([1.0, 1.0, 0.5]) if which == "r_well" else np.diag([2.0, 1.0, 1.0])
    label = r"s_max = s_1" if which == "r_well" else r"s_min = s_k \(smallest nonzero\)"
    with pytest.raises(DegenerateSpectrumError, match=rf"^{label} of S is not unique"):
        grad(bad, psd=psd)
    assert np.isfinite(grad(bad, psd=psd, on_degenerate="ignore")).all()
    with pytest.warns(UserWarning):
        grad(bad, psd=psd, on_degenerate="warn")
    # a relative gap of 1e-6 is degenerate for gap_rtol = 1e-3 only
    near = np.diag([1 + 1e-6, 1.0, 0.5]) if which == "r_well" else np.diag([2.0, 1 + 1e-6, 1.0])
    assert np.isfinite(grad(near, psd=psd)).all()
    with pytest.raises(DegenerateSpectrumError, match=r"\(gap_rtol = 1\.0e-03\)"):
        grad(near, psd=psd, gap_rtol=1e-3)


@pytest.mark.parametrize("which", ["r_well", "r_ill"])
def test_regularizers_backpropagate_the_closed_form(which) -> None:
    S = torch.tensor(REG_S, requires_grad=True)
    getattr(kl, which)(S).backward()
    np.testing.assert_allclose(S.grad.numpy(), REG_GRADS[which], rtol=1e-14, atol=1e-15)
    with pytest.raises(DegenerateSpectrumError):  # the policy applies before autograd (s_1 or s_k repeated)
        bad = np.diag([1.0, 1.0, 0.5]) if which == "r_well" else np.diag([2.0, 1.0, 1.0])
        getattr(kl, which)(torch.tensor(bad, requires_grad=True))
    # gap_rtol reaches that policy: a relative gap of 1e-6 is degenerate for gap_rtol = 1e-3
    near = np.diag([1 + 1e-6, 1.0, 0.5]) if which == "r_well" else np.diag([2.0, 1 + 1e-6, 1.0])
    getattr(kl, which)(torch.tensor(near, requires_grad=True))
    with pytest.raises(DegenerateSpectrumError, match=r"\(gap_rtol = 1\.0e-03\)"):
        getattr(kl, which)(torch.tensor(near, requires_grad=True), gap_rtol=1e-3)


def test_regularizers_out_of_range_warn_and_return_ieee_values() -> None:
    from kappalab.errors import FloatRangeWarning

    # S = diag(2^600, 1): R_well = 2^1200 / 2 - (2^1200 + 1) / 4 ~ 2^1198, above float64's range: inf, with a warning
    with pytest.warns(FloatRangeWarning, match=r"^R_well\(S\) has magnitude ~1e\+361, above the normal range of "
                                               r"float64: returned as inf$"):
        assert float(kl.r_well(np.diag([2.0**600, 1.0]))) == np.inf
    with warnings.catch_warnings():  # check=False: no range test, no warning
        warnings.simplefilter("error")
        assert float(kl.r_well(np.diag([2.0**600, 1.0]), check=False)) == np.inf
    # S = diag(2^-600, 2^-601): R_ill = 1 / (||S||_F^2/4 - s_2^2/2) = (16/3) 2^1200: inf too
    with pytest.warns(FloatRangeWarning, match=r"^R_ill\(S\) has magnitude .* above the normal range"):
        assert float(kl.r_ill(np.diag([2.0**-600, 2.0**-601]))) == np.inf
    # S = diag(2^-600, 2^-601): R_well = 2^-1200 (1/2 - 5/16) ~ 1e-362, below float64's normal range
    with pytest.warns(FloatRangeWarning, match=r"^R_well\(S\) has magnitude ~1e-362, below the normal range of "
                                               r"float64: returned as a subnormal number or 0$"):
        assert float(kl.r_well(np.diag([2.0**-600, 2.0**-601]))) == 0.0
    # S = diag(2^-1030, 2^-1031) (subnormal entries): the value warns once, for itself (no gradient is formed);
    # the gradient, ~ s_1 = 2^-1030, warns under its own name
    tiny = np.diag([2.0**-1030, 2.0**-1031])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert float(kl.r_well(tiny)) == 0.0
    assert [str(w.message) for w in caught] == ["R_well(S) has magnitude ~1e-621, below the normal range of float64: "
                                                "returned as a subnormal number or 0"]
    with pytest.warns(FloatRangeWarning, match=r"^grad R_well\(S\) has magnitude ~1e-310, below the normal range"):
        kl.grad_r_well(tiny)
    # grad R_ill scales as c^-3: S = diag(2^-400, 2^-401) gives entries ~ 2^1200: inf, with the warning naming it
    with pytest.warns(FloatRangeWarning, match=r"^grad R_ill\(S\) has magnitude .* above the normal range"):
        assert np.isinf(kl.grad_r_ill(np.diag([2.0**-400, 2.0**-401]))).any()


def test_extremes_route_checks_and_names() -> None:
    from kappalab.regularizers import extremes

    # default: the SVD route, any matrix (diag(3, -1) has singular values 3, 1); psd=True: eigenvalues, PSD checked
    e = extremes(np.diag([3.0, -1.0]))
    assert (float(e.s_max), float(e.s_min), int(e.rank)) == (3.0, 1.0, 2)
    with pytest.raises(ValueError, match=r"^K must be positive semidefinite"):
        extremes(np.diag([3.0, -1.0]), psd=True, name="K")
    for psd in (False, True):
        with pytest.raises(ValueError, match=r"^K must be a 2-D matrix"):
            extremes(np.ones(3), psd=psd, name="K")
    with pytest.raises(ValueError, match=r"^K contains non-finite entries"):
        extremes(np.array(NAN_2x2), psd=True, name="K")
    # check=False: no finiteness scan; NumPy's SVD meets the NaN
    with pytest.raises(np.linalg.LinAlgError):
        extremes(np.array(NAN_2x2), check=False)


def test_formulas_from_extremes_check_by_default_and_name_S() -> None:
    from kappalab import regularizers as R

    e = R.extremes(np.eye(2))  # k = 2 equal singular values: R_ill's denominator is 0
    for f in (R.ill_denominator, R.r_ill_from_extremes, lambda e: R.grad_r_ill_from_extremes(e, np.eye(2))):
        with pytest.raises(UndefinedRegularizerError, match=r"^R_ill\(S\) is undefined: its denominator "
                                                            r"\|\|S\|\|_F\^2/\(2k\) - s_min\^2/2 = 0\.0+e"):
            f(e)
    assert float(R.ill_denominator(e, check=False)) == 0.0


@pytest.mark.parametrize("psd", [False, True], ids=["svd", "psd"])
def test_r_ill_unchecked_returns_the_pole(psd) -> None:
    # S = I: all singular values equal, R_ill's denominator is exactly 0. check=False (the hot loop) skips the
    # test: the value is 1/0 = inf and the gradient's formula divides by 0 (no exception either way)
    with np.errstate(divide="ignore", invalid="ignore"):
        assert float(kl.r_ill(np.eye(2), psd=psd, check=False)) == np.inf
        assert not np.isfinite(kl.grad_r_ill(np.eye(2), psd=psd, check=False, on_degenerate="ignore")).all()
    with pytest.raises(UndefinedRegularizerError, match=r"^R_ill\(S\) is undefined"):
        kl.r_ill(np.eye(2), psd=psd)


def test_r_ill_zero_denominator_bound() -> None:
    # S = diag(1, 1 - delta) (k = p = 2): d = ||S||_F^2/4 - s_2^2/2 is computed exactly here, d = delta/2 (to
    # rounding), and R_ill is undefined when d <= p eps (||S||_F^2/(2k) + s_1 s_2) ~ 2 eps (1/2 + 1) = 3 eps.
    # delta = 11 * 2^-53 = 5.5 eps: d = 2.75 eps, undefined. delta = 2^-49 = 8 eps: d = 4 eps, defined, R_ill = 2^50
    # exactly. (Bounds a factor off, e.g. 2 eps (fro2/(3k) + s_1 s_2) ~ 2.67 eps or 2 eps (fro2 + s_1 s_2) ~ 6 eps,
    # flip one of the two.)
    # the message is scale-free (relative to s_max^2): d = 2.75 eps = 6.106e-16, bound 3 eps (to rounding) = 6.661e-16
    message = (r"^R_ill\(S\) is undefined: its denominator \|\|S\|\|_F\^2/\(2k\) - s_min\^2/2 = 6\.106e-16 s_max\^2 "
               r"is zero within rounding \(bound 6\.661e-16 s_max\^2\): all k = 2 nonzero singular values are equal "
               r"\(s_min / s_max = 0\.99999999999999878\)$")
    with pytest.raises(UndefinedRegularizerError, match=message):
        kl.r_ill(np.diag([1.0, 1.0 - 11 * 2.0**-53]))
    assert float(kl.r_ill(np.diag([1.0, 1.0 - 2.0**-49]))) == 2.0**50


def test_torch_hot_loop_uses_S_as_given() -> None:
    # torch with check=False reads nothing back to the host, so S is not unit-scaled (module docstring, "Scale"): at
    # S = diag(2^600, 1), s_1^2 = 2^1200 overflows in the computation itself and R_well = inf - inf is NaN; NumPy
    # (scaled whatever check says) and torch with check=True return the rescaled inf
    S = np.diag([2.0**600, 1.0])
    assert torch.isnan(kl.r_well(torch.tensor(S), check=False))
    assert float(kl.r_well(S, check=False)) == np.inf
    from kappalab.errors import FloatRangeWarning

    with pytest.warns(FloatRangeWarning, match=r"^R_well\(S\) has magnitude"):
        assert float(kl.r_well(torch.tensor(S))) == np.inf
    # check=False leaves the finiteness scan out: NumPy's SVD meets the NaN itself
    with pytest.raises(np.linalg.LinAlgError):
        kl.r_well(np.array(NAN_2x2), check=False)


# ---- kappalab.spectral --------------------------------------------------------------------------------------------
# A = Q diag(lambda) Q^T with Q an exactly orthogonal rational matrix (test_kappa's construction): the eigenpairs
# are known; n = 10 >= 8, so the extreme-only solvers run (below 8 they defer to "eigh").

FULL = [10.0, 7.0, 5.0, 4.0, 3.0, 2.5, 2.0, 1.5, 1.2, 1.0]
DEFICIENT = [10.0, 7.0, 5.0, 3.0, 2.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def _spectral_case(values: list[float]) -> tuple[np.ndarray, np.ndarray]:
    Q = np.array([[float(x) for x in row] for row in _orthogonal(len(values), 0)])
    return built([Fraction(v) for v in values], (len(values), len(values))), Q


@pytest.mark.parametrize("solver", ["eigh", "tridiag", "subset", "lobpcg", "arpack", "auto"])
@pytest.mark.parametrize("values", [FULL, DEFICIENT], ids=["full rank", "rank 6"])
def test_psd_extremes_every_solver_against_the_known_eigenpairs(solver, values) -> None:
    from kappalab import spectral

    A, Q = _spectral_case(values)
    before = dict(spectral.FALLBACKS)
    e = spectral.psd_extremes(A, solver=solver)
    k = sum(v > 0 for v in values)
    # values: the float A is the exact one rounded entrywise (Weyl: within n eps/2 max|a_ij|), plus the solver's
    # backward error; the iterative solvers are converged to about 1e-10 relative (their residual test)
    tol = 1e-12 if solver in ("eigh", "tridiag", "subset", "auto") else 1e-9
    assert int(e.rank) == k and e.p == 10
    for got, want in ((e.s_max, 10.0), (e.s_2, 7.0), (e.s_min, values[k - 1]), (e.s_km1, values[k - 2])):
        assert float(got) == pytest.approx(want, rel=tol, abs=tol)
    assert float(e.fro2) == pytest.approx(sum(v * v for v in values), rel=1e-14)
    assert float(e.threshold) == 10 * EPS * float(e.s_max)
    for u, v, col in ((e.u_max, e.v_max, 0), (e.u_min, e.v_min, k - 1)):  # eigenvectors up to sign, u = v
        assert np.array_equal(u, v)
        assert abs(float(v @ Q[:, col])) == pytest.approx(1.0, abs=1e-6 if tol > 1e-12 else 1e-12)
    # the extreme-only solvers cannot count a deficient rank: they defer to "eigh", and say so
    deferred = solver in ("subset", "lobpcg", "arpack") and k < 10
    assert spectral.FALLBACKS.get(solver, 0) - before.get(solver, 0) == int(deferred)


def test_psd_extremes_extreme_solvers_defer_below_n_8() -> None:
    from kappalab import spectral

    A = np.diag([3.0, 2.0, 1.0])
    before = spectral.FALLBACKS.get("subset", 0)
    e = spectral.psd_extremes(A, solver="subset")
    assert (float(e.s_max), float(e.s_min), int(e.rank)) == (3.0, 1.0, 3)
    assert spectral.FALLBACKS["subset"] == before + 1


def test_psd_extremes_checks_and_names() -> None:
    from kappalab import spectral

    A = np.diag([2.0, 1.0])
    with pytest.raises(ValueError, match=r"^solver must be 'auto' or one of \['eigh', 'arpack', 'lobpcg', 'subset', "
                                         r"'tridiag'\], got 'nope'$"):
        spectral.psd_extremes(A, solver="nope")
    with pytest.raises(ValueError, match=r"^solver 'tridiag' takes NumPy arrays; use 'eigh' \(or 'auto'\) for torch"):
        spectral.psd_extremes(torch.tensor(A), solver="tridiag")
    with pytest.raises(ValueError, match=r"^K contains non-finite entries"):
        spectral.psd_extremes(np.array([[1.0, np.nan], [np.nan, 1.0]]), name="K")
    with pytest.raises(ValueError, match=r"^K must be symmetric"):
        spectral.psd_extremes(np.array([[1.0, 0.5], [0.0, 1.0]]), name="K")
    with pytest.raises(ValueError, match=r"^K has rank zero"):
        spectral.psd_extremes(np.zeros((2, 2)), name="K")
    # scale: the matrix is 2^-scale times the caller's; the message shows the caller's eigenvalue -4
    with pytest.raises(ValueError, match=r"^K must be positive semidefinite: its smallest eigenvalue is -4\.0+e\+00"):
        spectral.psd_extremes(np.diag([2.0, -1.0]), name="K", scale=2)
    # rtol is the PSD tolerance as well as the rank rule's: -1e-10 passes at rtol = 1e-8 (and is no nonzero value)
    e = spectral.psd_extremes(np.diag([1.0, -1e-10]), rtol=1e-8)
    assert (int(e.rank), float(e.threshold)) == (1, 1e-8)
    # check=False: none of these tests (a host sync each); the zero matrix gives rank 0
    assert int(spectral.psd_extremes(np.zeros((2, 2)), check=False).rank) == 0
    assert int(spectral.psd_extremes(np.diag([1.0, -1.0]), check=False).rank) == 1


def test_require_unique_policies_and_boundary() -> None:
    from kappalab import spectral
    from kappalab.errors import DegenerateSpectrumWarning

    e = spectral.psd_extremes(np.diag([2.0, 1.0, 0.5]))  # gap_top = 1, gap_bottom = 0.5, s_max = 2
    # unique means gap > gap_rtol * s_max: a gap equal to it is degenerate
    spectral.require_unique(e, "max", "raise", 0.4999, "H")
    with pytest.raises(DegenerateSpectrumError, match=r"^s_max = s_1 of H is not unique: gap to s_2 is 1\.000e\+00 "
                                                      r"<= gap_rtol \* s_max = 1\.000e\+00 \(gap_rtol = 5\.0e-01\)"):
        spectral.require_unique(e, "max", "raise", 0.5, "H")
    spectral.require_unique(e, "min", "raise", 0.2499, "H")
    with pytest.raises(DegenerateSpectrumError, match=r"^s_min = s_k \(smallest nonzero\) of H is not unique: gap to "
                                                      r"s_\{k-1\} is 5\.000e-01"):
        spectral.require_unique(e, "min", "raise", 0.25, "H")
    with pytest.warns(DegenerateSpectrumWarning, match=r"^s_max = s_1 of H is not unique"):
        spectral.require_unique(e, "max", "warn", 0.5, "H")
    spectral.require_unique(e, "max", "ignore", 0.5, "H")
    with pytest.raises(ValueError, match=r"^on_degenerate must be 'raise', 'warn' or 'ignore', got 'bogus'"):
        spectral.require_unique(e, "max", "bogus", None, "H")
    with pytest.raises(ValueError, match=r"^gap_rtol must be None or a non-negative relative gap, got -1"):
        spectral.require_unique(e, "max", "ignore", -1, "H")
    # the default gap_rtol is sqrt(eps): a relative gap of 1e-9 is degenerate, 1e-7 is not
    spectral.require_unique(spectral.psd_extremes(np.diag([1 + 1e-7, 1.0])), "max", "raise", None, "H")
    with pytest.raises(DegenerateSpectrumError, match=r"\(gap_rtol = 1\.5e-08\)"):
        spectral.require_unique(spectral.psd_extremes(np.diag([1 + 1e-9, 1.0])), "max", "raise", None, "H")


def test_svd_extremes_of_a_rectangular_matrix() -> None:
    from kappalab import spectral

    # S (2 x 3) = [[0, 3, 0], [1, 0, 0]]: singular values (3, 1), u_max = e_1, v_max = e_2 (in R^3), p = 2
    S = np.array([[0.0, 3.0, 0.0], [1.0, 0.0, 0.0]])
    e = spectral.svd_extremes(S)
    assert (float(e.s_max), float(e.s_min), float(e.s_2), int(e.rank), e.p, float(e.fro2)) == (3.0, 1.0, 1.0, 2, 2,
                                                                                                 10.0)
    assert np.array_equal(np.abs(e.u_max), [1.0, 0.0]) and np.array_equal(np.abs(e.v_max), [0.0, 1.0, 0.0])
    assert np.array_equal(np.abs(e.u_min), [0.0, 1.0]) and np.array_equal(np.abs(e.v_min), [1.0, 0.0, 0.0])
    assert float(e.s_km1) == 3.0 and float(e.threshold) == 3 * EPS * 3.0
    with pytest.raises(ValueError, match=r"^S has rank zero"):
        spectral.svd_extremes(np.zeros((2, 3)))
    assert int(spectral.svd_extremes(np.zeros((2, 3)), check=False).rank) == 0
    assert int(spectral.svd_extremes(S, rtol=0.5).rank) == 1  # 1 <= 0.5 * 3


@pytest.mark.parametrize("apply", ["ormqr", "loop"])
def test_householder_reflectors_of_sytrd_tridiagonalize(apply) -> None:
    # LAPACK sytrd(lower=1) stores Q = H_0 ... H_{n-2} with A = Q T Q^T, T tridiagonal with diagonal d and
    # off-diagonal e: applied to I, either implementation must return that Q (orthogonal, Q^T A Q = T)
    from scipy.linalg import lapack

    from kappalab import spectral

    A, _ = _spectral_case(FULL)
    sytrd, sytrd_lwork = lapack.get_lapack_funcs(("sytrd", "sytrd_lwork"), (A,))
    lwork, _ = sytrd_lwork(10, lower=1)
    c, d, e, tau, info = sytrd(A, lower=1, lwork=int(lwork))
    assert info == 0
    f = spectral._apply_householder if apply == "ormqr" else spectral._apply_householder_loop
    Q = f(c, tau, np.eye(10))
    T = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    np.testing.assert_allclose(Q.T @ Q, np.eye(10), atol=1e-14)
    np.testing.assert_allclose(Q.T @ A @ Q, T, atol=1e-13)
    assert not np.array_equal(Q, np.eye(10))  # the reflectors did something


def test_extreme_solvers_keep_float32() -> None:
    from kappalab import spectral

    A, _ = _spectral_case(FULL)
    for solver in ("tridiag", "subset", "eigh"):
        e = spectral.psd_extremes(A.astype(np.float32), solver=solver)
        assert e.s_max.dtype == np.float32 and e.v_max.dtype == np.float32, solver
        assert float(e.s_max) == pytest.approx(10.0, rel=1e-5) and float(e.s_min) == pytest.approx(1.0, rel=1e-4)


@pytest.mark.parametrize("solver", ["eigh", "tridiag", "subset", "lobpcg", "arpack"])
def test_psd_extremes_rank_threshold_is_relative_to_s_max(solver) -> None:
    # rtol = 0.16 on lambda = FULL: threshold 0.16 * 10 = 1.6 (relative to s_1, not s_2 = 7, which would give 1.12
    # and keep 1.5 and 1.2): 10, 7, 5, 4, 3, 2.5, 2 lie above it, so k = 7 and s_min = 2
    from kappalab import spectral

    A, Q = _spectral_case(FULL)
    e = spectral.psd_extremes(A, solver=solver, rtol=0.16)
    assert int(e.rank) == 7 and float(e.threshold) == pytest.approx(1.6, rel=1e-14)
    assert float(e.s_min) == pytest.approx(2.0, rel=1e-12) and float(e.s_km1) == pytest.approx(2.5, rel=1e-12)
    assert abs(float(e.v_min @ Q[:, 6])) == pytest.approx(1.0, abs=1e-12)


def test_householder_reflectors_in_long_double_take_the_loop() -> None:
    # LAPACK has no ormqr for long double: _apply_householder must fall back to the loop, with the same Q
    from scipy.linalg import lapack

    from kappalab import spectral

    A, _ = _spectral_case(FULL)
    sytrd, sytrd_lwork = lapack.get_lapack_funcs(("sytrd", "sytrd_lwork"), (A,))
    lwork, _ = sytrd_lwork(10, lower=1)
    c, d, e, tau, _ = sytrd(A, lower=1, lwork=int(lwork))
    Q = spectral._apply_householder(c.astype(np.longdouble), tau.astype(np.longdouble), np.eye(10, dtype=np.longdouble))
    assert Q.dtype == np.longdouble
    T = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    np.testing.assert_allclose(np.asarray(Q.T @ A @ Q, dtype=float), T, atol=1e-13)


@pytest.mark.parametrize("solver", ["subset", "lobpcg", "arpack"])
def test_extreme_solvers_see_a_single_zero_eigenvalue(solver) -> None:
    # lambda = (10, 7, ..., 1.2, 0): the smallest eigenvalue is a zero (rounding-level in float), the second is 1.2;
    # the ends cannot count the rank, so the solver defers to "eigh": k = 9, s_min = 1.2 (not k = 10, s_min ~ 0)
    from kappalab import spectral

    A, _ = _spectral_case(FULL[:-1] + [0.0])
    e = spectral.psd_extremes(A, solver=solver)
    assert int(e.rank) == 9 and float(e.s_min) == pytest.approx(1.2, rel=1e-12)


@pytest.mark.parametrize("solver", ["eigh", "tridiag", "subset", "lobpcg", "arpack"])
def test_psd_extremes_fro2_of_a_fortran_ordered_matrix(solver) -> None:
    from kappalab import spectral

    A, _ = _spectral_case(FULL)
    e = spectral.psd_extremes(np.asfortranarray(A), solver=solver)
    assert float(e.fro2) == pytest.approx(sum(v * v for v in FULL), rel=1e-14)


def test_svd_extremes_names_a_meta_tensor() -> None:
    from kappalab import spectral

    with pytest.raises(ValueError, match=r"^S is a tensor on the 'meta' device"):
        spectral.svd_extremes(meta())


def test_psd_extremes_defaults_and_fallback_count(monkeypatch) -> None:
    from kappalab import spectral

    with pytest.raises(ValueError, match=r"^A has rank zero"):
        spectral.psd_extremes(np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"^A is a tensor on the 'meta' device"):
        spectral.psd_extremes(meta())
    with pytest.raises(ValueError, match=r"^A must be positive semidefinite: its smallest eigenvalue is -1\.0+e\+00"):
        spectral.psd_extremes(np.diag([2.0, -1.0]))  # scale 0 by default: the matrix's own eigenvalue
    # the fallback counter starts at zero for a solver and counts each deferral; n = 8 is large enough for the
    # extreme-only solvers (no deferral)
    monkeypatch.setattr(spectral, "FALLBACKS", {})
    spectral.psd_extremes(np.diag([3.0, 2.0, 1.0]), solver="subset")
    assert spectral.FALLBACKS == {"subset": 1}
    A8 = _spectral_case(FULL[:8])[0]
    assert float(spectral.psd_extremes(A8, solver="subset").s_min) == pytest.approx(1.5, rel=1e-12)
    assert spectral.FALLBACKS == {"subset": 1}
    # gap_rtol = 0 is allowed (every gap > 0 is unique)
    spectral.require_unique(spectral.psd_extremes(np.diag([2.0, 1.0])), "max", "raise", 0.0, "H")


@pytest.mark.parametrize("apply", ["ormqr", "loop"])
def test_householder_reflector_with_tau_one(apply) -> None:
    # A[1, 0] = 0: the first reflector's alpha is 0, so LAPACK's dlarfg sets tau_0 = 1 exactly (and, as for every
    # real sytrd, the last reflector acts on one entry: tau = 0). Each reflector with tau != 0 must be applied.
    from scipy.linalg import lapack

    from kappalab import spectral

    A = np.array([[4.0, 0.0, 1.0, 2.0], [0.0, 3.0, 1.0, 0.0], [1.0, 1.0, 2.0, 1.0], [2.0, 0.0, 1.0, 5.0]])
    sytrd, sytrd_lwork = lapack.get_lapack_funcs(("sytrd", "sytrd_lwork"), (A,))
    lwork, _ = sytrd_lwork(4, lower=1)
    c, d, e, tau, _ = sytrd(A, lower=1, lwork=int(lwork))
    assert tau[0] == 1.0 and tau[-1] == 0.0
    f = spectral._apply_householder if apply == "ormqr" else spectral._apply_householder_loop
    Q = f(c, tau, np.eye(4))
    np.testing.assert_allclose(Q.T @ A @ Q, np.diag(d) + np.diag(e, 1) + np.diag(e, -1), atol=1e-14)
