"""kappalab.kappa's rules: the unit-scaled spectrum and its PSD checks, kappa of features (rank arguments,
scale-free), the shifted kappa, the eigenvalue route, condition_number's argument checks, and RIR passing
rtol to every kappa.

Each test checks a documented behaviour against an independent reference: a closed form on a diagonal (or
exactly representable) matrix, worked out by hand in the comment, or the documented error message.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import kappalab as kl
from kappalab import kappa as K
from core_inputs import EPS, NAN_2x2, backends, meta
from test_kappa import built


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
    with pytest.raises(ValueError, match=r"^F has rank zero \(it is the zero matrix\)") as raised:
        K.kappa_of_features(to(np.zeros((2, 3))))
    assert isinstance(raised.value, kl.RankZeroError)  # a ValueError a caller can catch apart from the others


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
