"""kappalab.spectral: extreme singular triplets, rank threshold and the degeneracy policy.

References: ``numpy.linalg.svd`` / ``eigvalsh`` and the spectrum each test matrix was built from.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, note
from test_core_matrices import EPS, SpectralCase, from_spectrum, psd_from_spectrum, spectral_cases

from kappalab import DegenerateSpectrumError, DegenerateSpectrumWarning, Extremes, psd_extremes, svd_extremes
from kappalab.spectral import default_gap_rtol, default_rtol, require_unique


def _value_atol(case: SpectralCase) -> float:
    """Backward-stable SVD/eigh move each singular value by ~ c * max(m, n) * eps * s_max (c = 20 for margin)."""
    return 20 * max(case.S.shape) * EPS * case.spectrum[0]


def _check_extremes(e: Extremes, case: SpectralCase, to_numpy=np.asarray) -> None:
    s = case.spectrum
    msg = repr(case)
    atol = _value_atol(case)
    k = case.rank
    assert int(to_numpy(e.rank)) == k, msg
    assert e.p == case.p, msg
    np.testing.assert_allclose(to_numpy(e.s_max), s[0], rtol=0, atol=atol, err_msg=msg)
    np.testing.assert_allclose(to_numpy(e.s_min), s[-1], rtol=0, atol=atol, err_msg=msg)
    np.testing.assert_allclose(to_numpy(e.s_2), s[1] if k > 1 else 0.0, rtol=0, atol=atol, err_msg=msg)
    if k > 1:
        np.testing.assert_allclose(to_numpy(e.s_km1), s[-2], rtol=0, atol=atol, err_msg=msg)
    else:
        assert math.isinf(float(to_numpy(e.s_km1))), msg
    # ||S||_F^2 = sum s_i^2, a sum of squares: relative error ~ m * n * eps
    np.testing.assert_allclose(to_numpy(e.fro2), np.sum(s**2), rtol=10 * case.S.size * EPS, err_msg=msg)
    np.testing.assert_allclose(to_numpy(e.threshold), default_rtol(case.S) * s[0], rtol=1e-12, err_msg=msg)
    # singular triplets: S v = s u (signs of u, v are not unique, their product is); residual ~ n * eps * ||S||
    S = case.S
    for sv, u, v in ((e.s_max, e.u_max, e.v_max), (e.s_min, e.u_min, e.v_min)):
        u, v, sv = to_numpy(u), to_numpy(v), float(to_numpy(sv))
        np.testing.assert_allclose(S @ v, sv * u, rtol=0, atol=atol * 10, err_msg=msg)
        np.testing.assert_allclose(np.linalg.norm(u), 1.0, rtol=10 * case.p * EPS, err_msg=msg)


@given(case=spectral_cases())
def test_svd_extremes_match_chosen_spectrum_numpy(case: SpectralCase) -> None:
    note(repr(case))
    _check_extremes(svd_extremes(case.S), case)


@given(case=spectral_cases(psd=True))
def test_psd_extremes_match_chosen_spectrum_numpy(case: SpectralCase) -> None:
    note(repr(case))
    e = psd_extremes(case.S)
    _check_extremes(e, case)
    # symmetric PSD: the left and right vectors coincide
    np.testing.assert_array_equal(e.u_max, e.v_max)
    np.testing.assert_array_equal(e.u_min, e.v_min)


def test_extremes_on_both_backends_keep_kind_and_agree(xp, rng: np.random.Generator) -> None:
    spectrum = np.array([5.0, 3.0, 2.0, 0.5])
    for case in (SpectralCase(from_spectrum(rng, 6, 5, spectrum), spectrum),
                 SpectralCase(psd_from_spectrum(rng, 5, spectrum), spectrum)):
        psd = case.S.shape[0] == case.S.shape[1]
        e = psd_extremes(xp.asarray(case.S)) if psd else svd_extremes(xp.asarray(case.S))
        for field in ("s_max", "s_2", "s_min", "s_km1", "fro2", "threshold"):
            xp.assert_kind(getattr(e, field), ndim=0)
        for field in ("u_max", "v_max", "u_min", "v_min"):
            xp.assert_kind(getattr(e, field), ndim=1)
        _check_extremes(e, case, xp.numpy)


def test_gap_properties_are_differences_of_neighbours() -> None:
    e = svd_extremes(np.diag([4.0, 3.0, 1.5, 1.0]))
    assert float(e.gap_top) == pytest.approx(1.0, rel=4 * EPS)
    assert float(e.gap_bottom) == pytest.approx(0.5, rel=4 * EPS)
    assert math.isinf(float(svd_extremes(np.array([[2.0, 0.0]])).gap_bottom)), "k = 1 has no s_{k-1}: gap is +inf"


def test_default_tolerances_follow_documented_formulas() -> None:
    a = np.zeros((3, 7))
    assert default_rtol(a) == 7 * EPS
    assert default_gap_rtol(a) == math.sqrt(EPS)
    assert default_rtol(a.astype(np.float32)) == 7 * float(np.finfo(np.float32).eps)


def test_rank_threshold_is_relative_and_rtol_overrides_it() -> None:
    S = np.diag([1.0, 1e-3, 1e-16])
    assert int(svd_extremes(S).rank) == 2, "1e-16 < 3 * eps * s_max counts as zero"
    assert float(svd_extremes(S).s_min) == 1e-3
    e = svd_extremes(S, rtol=1e-2)
    assert int(e.rank) == 1 and float(e.s_min) == 1.0
    assert int(svd_extremes(1e-200 * S).rank) == 2, "the threshold scales with s_max, not absolute"


def test_psd_extremes_treats_rounding_negative_eigenvalues_as_zero(rng: np.random.Generator) -> None:
    X = rng.standard_normal((3, 6))
    K = X.T @ X  # rank 3, eigenvalues 4..6 are O(eps * ||K||) and may be slightly negative
    K = 0.5 * (K + K.T)
    e = psd_extremes(K)
    assert int(e.rank) == 3, repr(K)
    np.testing.assert_allclose(float(e.s_min), np.linalg.svd(X, compute_uv=False)[-1] ** 2, rtol=1e-10,
                               err_msg=repr(K))  # eigenvalue of X^T X vs square of X's singular value


def test_psd_extremes_unknown_solver_is_value_error() -> None:
    with pytest.raises(ValueError, match="solver must be 'auto' or one of"):
        psd_extremes(np.eye(2), solver="lobpcg-typo")


@pytest.mark.parametrize("solver", ["auto", "eigh"])
def test_psd_extremes_solvers_agree(solver: str, rng: np.random.Generator) -> None:
    spectrum = np.array([9.0, 4.0, 1.0])
    A = psd_from_spectrum(rng, 4, spectrum)
    e = psd_extremes(A, solver=solver)
    _check_extremes(e, SpectralCase(A, spectrum))


# ---- degeneracy policy ------------------------------------------------------------------------------------------

def test_require_unique_policies_on_tied_top() -> None:
    e = svd_extremes(np.diag([2.0, 2.0, 1.0]))
    with pytest.raises(DegenerateSpectrumError, match="s_max = s_1 of S is not unique"):
        require_unique(e, "max", "raise", None, "S")
    with pytest.warns(DegenerateSpectrumWarning, match="not unique"):
        require_unique(e, "max", "warn", None, "S")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        require_unique(e, "max", "ignore", None, "S")
        require_unique(e, "min", "raise", None, "S")  # s_min = 1 is simple


def test_require_unique_policies_on_tied_bottom() -> None:
    e = svd_extremes(np.diag([3.0, 1.0, 1.0, 0.0]))
    with pytest.raises(DegenerateSpectrumError, match=r"s_min = s_k \(smallest nonzero\) of S is not unique"):
        require_unique(e, "min", "raise", None, "S")
    require_unique(e, "max", "raise", None, "S")


def test_require_unique_gap_threshold_is_sqrt_eps_relative() -> None:
    # default gap_rtol = sqrt(eps) = 1.49e-8: a relative gap of 1e-9 is a tie, 1e-7 is not
    require_unique(svd_extremes(np.diag([1.0 + 1e-7, 1.0])), "max", "raise", None, "S")
    with pytest.raises(DegenerateSpectrumError):
        require_unique(svd_extremes(np.diag([1.0 + 1e-9, 1.0])), "max", "raise", None, "S")
    # an explicit gap_rtol overrides the default
    with pytest.raises(DegenerateSpectrumError, match=r"gap_rtol = 1.0e-01"):
        require_unique(svd_extremes(np.diag([1.05, 1.0])), "max", "raise", 0.1, "S")


def test_require_unique_rejects_unknown_policy() -> None:
    with pytest.raises(ValueError, match="on_degenerate must be 'raise', 'warn' or 'ignore', got 'rase'"):
        require_unique(svd_extremes(np.diag([2.0, 1.0])), "max", "rase", None, "S")
