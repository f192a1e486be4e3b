"""kappa, R_well (Eq. 3), R_ill (Eq. 12) and their closed-form gradients (Thm A.1(3), Thm 4.1(3)).

References: ``numpy.linalg.cond`` / ``pinv``, the formulas evaluated in the test from the spectrum each matrix
was built from, sympy for tiny exact cases, and fourth-order central finite differences for the gradients.
NumPy only here; the torch path is compared with this one in test_core_parity.py.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy as sp
from hypothesis import example, given, note
from hypothesis import strategies as st
from test_core_matrices import EPS, SpectralCase, from_spectrum, psd_from_spectrum, random_orthogonal, spectral_cases

from kappalab import condition_number, grad_r_ill, grad_r_well, r_ill, r_well


def ref_r_well(s: np.ndarray, p: int) -> float:
    """Eq. 3 from the singular values: s_1^2/2 - sum_i s_i^2 / (2p)."""
    return 0.5 * s[0] ** 2 - np.sum(s**2) / (2 * p)


def ref_r_ill(s: np.ndarray) -> float:
    """Eq. 12 from the nonzero singular values: 1 / (sum_i s_i^2 / (2k) - s_k^2 / 2)."""
    return 1.0 / (np.sum(s**2) / (2 * len(s)) - 0.5 * s[-1] ** 2)


def value_atol(case: SpectralCase) -> float:
    """Absolute error of a quadratic spectral quantity: each s_i^2 carries ~ c * max(m, n) * eps * s_max^2."""
    return 20 * max(case.S.shape) * EPS * case.spectrum[0] ** 2


# ---- kappa -----------------------------------------------------------------------------------------------------

@given(case=spectral_cases(full_rank=True))
def test_condition_number_matches_numpy_cond_on_full_rank(case: SpectralCase) -> None:
    note(repr(case))
    # s_min has absolute error ~ n * eps * s_max, hence relative error ~ n * eps * kappa in both computations
    np.testing.assert_allclose(condition_number(case.S), np.linalg.cond(case.S, 2),
                               rtol=20 * max(case.S.shape) * EPS * case.kappa, err_msg=repr(case))


@given(case=spectral_cases())
def test_condition_number_is_pseudoinverse_kappa_and_chosen_ratio(case: SpectralCase) -> None:
    note(repr(case))
    rtol = 20 * max(case.S.shape) * EPS * case.kappa  # as above
    kappa = condition_number(case.S)
    np.testing.assert_allclose(kappa, case.kappa, rtol=rtol, err_msg=repr(case))
    pinv = np.linalg.pinv(case.S, rcond=max(case.S.shape) * EPS)  # the same relative rank cut-off
    np.testing.assert_allclose(kappa, np.linalg.norm(case.S, 2) * np.linalg.norm(pinv, 2), rtol=rtol,
                               err_msg=repr(case))


@given(case=spectral_cases(psd=True))
def test_condition_number_psd_route_equals_svd_route(case: SpectralCase) -> None:
    note(repr(case))
    np.testing.assert_allclose(condition_number(case.S, psd=True), condition_number(case.S),
                               rtol=20 * case.p * EPS * case.kappa, err_msg=repr(case))


def test_condition_number_rtol_changes_which_value_is_s_min() -> None:
    S = np.diag([10.0, 1.0, 1e-4])
    assert float(condition_number(S)) == pytest.approx(1e5, rel=4 * EPS)
    assert float(condition_number(S, rtol=1e-3)) == pytest.approx(10.0, rel=4 * EPS)


# ---- values against the definitions ----------------------------------------------------------------------------

@given(case=spectral_cases())
def test_r_well_matches_eq3_on_chosen_spectrum(case: SpectralCase) -> None:
    note(repr(case))
    np.testing.assert_allclose(r_well(case.S), ref_r_well(case.spectrum, case.p), rtol=0, atol=value_atol(case),
                               err_msg=repr(case))


@given(case=spectral_cases(min_rank=2))
def test_r_ill_matches_eq12_on_chosen_spectrum(case: SpectralCase) -> None:
    note(repr(case))
    # the denominator d has absolute error value_atol, so R_ill = 1/d has relative error value_atol / d
    ref = ref_r_ill(case.spectrum)
    np.testing.assert_allclose(r_ill(case.S), ref, rtol=value_atol(case) * ref, err_msg=repr(case))


@given(case=spectral_cases(psd=True, min_rank=2))
def test_psd_route_values_equal_svd_route(case: SpectralCase) -> None:
    note(repr(case))
    np.testing.assert_allclose(r_well(case.S, psd=True), r_well(case.S), rtol=0, atol=value_atol(case),
                               err_msg=repr(case))
    ref = ref_r_ill(case.spectrum)
    np.testing.assert_allclose(r_ill(case.S, psd=True), r_ill(case.S), rtol=2 * value_atol(case) * ref,
                               err_msg=repr(case))


def _exact_spectral_quantities(entries: list[list[int]]) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """(kappa, R_well, R_ill) of a small integer matrix, exactly: s_i^2 are the eigenvalues of S^T S or S S^T."""
    S = sp.Matrix(entries)
    G = S.T * S if S.shape[1] <= S.shape[0] else S * S.T  # p x p Gram matrix: eigenvalues s_i^2, i = 1..p
    p = G.shape[0]
    sq = sorted((ev for ev, mult in G.eigenvals().items() for _ in range(mult)), key=lambda v: -float(v))
    nonzero = [v for v in sq if sp.simplify(v) != 0]
    k = len(nonzero)
    fro2 = sum(x**2 for x in S)
    kappa = sp.sqrt(nonzero[0]) / sp.sqrt(nonzero[-1])
    r_well_exact = sp.Rational(1, 2) * nonzero[0] - fro2 / (2 * p)
    r_ill_exact = 1 / (fro2 / (2 * k) - sp.Rational(1, 2) * nonzero[-1])
    return kappa, r_well_exact, r_ill_exact


@pytest.mark.parametrize("entries", [
    [[2, 1], [0, 1]],  # square, full rank, irrational singular values
    [[3, 0, 4], [0, 2, 0]],  # 2 x 3, singular values 5 and 2
    [[1, 2, 0], [2, 4, 0], [0, 0, 3]],  # 3 x 3 of rank 2: s_min is the smallest NONZERO value
    [[1, 1], [1, 0], [0, 1]],  # 3 x 2
])
def test_values_equal_sympy_exact(entries: list[list[int]]) -> None:
    kappa, rw, ri = (float(sp.N(v, 30)) for v in _exact_spectral_quantities(entries))
    S = np.array(entries, dtype=np.float64)
    # a few roundings of O(1) quantities with kappa <= 10: relative 100 * eps is a generous bound
    msg = f"S = {entries}"
    np.testing.assert_allclose(condition_number(S), kappa, rtol=100 * EPS, err_msg=msg)
    np.testing.assert_allclose(r_well(S), rw, rtol=100 * EPS, err_msg=msg)
    np.testing.assert_allclose(r_ill(S), ri, rtol=100 * EPS, err_msg=msg)


def test_r_ill_exact_rational_case() -> None:
    # diag(3, 2, 1): d = (9 + 4 + 1)/6 - 1/2 = 11/6, R_ill = 6/11; R_well = 9/2 - 14/6 = 13/6
    S = np.diag([3.0, 2.0, 1.0])
    assert float(r_ill(S)) == pytest.approx(float(Fraction(6, 11)), rel=4 * EPS)
    assert float(r_well(S)) == pytest.approx(float(Fraction(13, 6)), rel=4 * EPS)


# ---- structural properties --------------------------------------------------------------------------------------

@given(case=spectral_cases())
def test_r_well_is_nonnegative(case: SpectralCase) -> None:
    note(repr(case))
    assert float(r_well(case.S)) >= -value_atol(case), repr(case)


@given(n=st.integers(1, 6), m_extra=st.integers(0, 3), scale=st.floats(1e-3, 1e3), seed=st.integers(0, 2**32 - 1))
def test_r_well_is_zero_on_scaled_orthogonal(n: int, m_extra: int, scale: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    S = scale * random_orthogonal(rng, n + m_extra)[:, :n]  # all p = n singular values equal `scale`
    assert abs(float(r_well(S))) <= 20 * (n + m_extra) * EPS * scale**2, repr(S)
    np.testing.assert_allclose(condition_number(S), 1.0, rtol=20 * (n + m_extra) * EPS, err_msg=repr(S))


@given(case=spectral_cases(min_rank=2), log10_c=st.floats(-3, 3), seed=st.integers(0, 2**32 - 1))
def test_scaling_and_orthogonal_invariance(case: SpectralCase, log10_c: float, seed: int) -> None:
    """kappa(c P S Q) = kappa(S), R_well(cS) = c^2 R_well(S), R_ill(cS) = R_ill(S) / c^2, both invariant under
    orthogonal P, Q and transposition (they depend on the singular values only)."""
    note(repr(case))
    c = 10.0**log10_c
    rng = np.random.default_rng(seed)
    m, n = case.S.shape
    T = c * random_orthogonal(rng, m) @ case.S @ random_orthogonal(rng, n)
    rtol_kappa = 40 * max(m, n) * EPS * case.kappa  # two matrices, each within 20 n eps kappa
    np.testing.assert_allclose(condition_number(T), condition_number(case.S), rtol=rtol_kappa, err_msg=repr(case))
    np.testing.assert_allclose(r_well(T), c**2 * r_well(case.S), rtol=0, atol=2 * c**2 * value_atol(case),
                               err_msg=repr(case))
    ref = float(r_ill(case.S))
    np.testing.assert_allclose(r_ill(T), ref / c**2, rtol=2 * value_atol(case) * ref, err_msg=repr(case))
    np.testing.assert_allclose(r_ill(case.S.T), ref, rtol=2 * value_atol(case) * ref, err_msg=repr(case))


# ---- gradients --------------------------------------------------------------------------------------------------

def r_well_psd(A: np.ndarray) -> np.ndarray:
    return r_well(A, psd=True)


def r_ill_psd(A: np.ndarray) -> np.ndarray:
    return r_ill(A, psd=True)


def directional_fd(f, S: np.ndarray, T: np.ndarray, h: float) -> float:
    """Fourth-order central difference of t -> f(S + t T) at 0 (truncation O(h^4), rounding O(eps |f| / h))."""
    fs = [float(f(S + j * h * T)) for j in (-2, -1, 1, 2)]
    return (fs[0] - 8 * fs[1] + 8 * fs[2] - fs[3]) / (12 * h)


def fd_step(case: SpectralCase) -> float:
    """A step well inside the radius where the spectrum keeps its order and rank: 1e-3 of the smallest gap."""
    s = case.spectrum
    return 1e-3 * float(np.min(np.concatenate([np.abs(np.diff(s)), [s[-1]]])))


#: FD error: truncation ~ (h/gap)^4 = 1e-12 and rounding ~ eps * |f| / h = eps * 1e3 * |f| / gap; relative to the
#: gradient's norm both stay below ~1e-9 for spectra with relative gaps >= 1/6 (min_ratio=1.2), so 1e-7 has margin.
FD_RTOL = 1e-7


def derivative_scale(f, G: np.ndarray, case: SpectralCase) -> float:
    """Natural size of a directional derivative along a unit direction, for a relative tolerance: ``||G||`` plus
    the homogeneity scale (R_well has degree 2, so |f'| ~ s_max; R_ill degree -2, so |f'| ~ R_ill / s_min)."""
    if f in (r_well, r_well_psd):
        return float(np.linalg.norm(G)) + case.spectrum[0]
    return float(np.linalg.norm(G)) + abs(float(f(case.S))) / case.spectrum[-1]


def _check_directional(f, G: np.ndarray, case: SpectralCase, T: np.ndarray) -> None:
    T = T / np.linalg.norm(T)
    fd = directional_fd(f, case.S, T, fd_step(case))
    exact = float(np.sum(G * T))
    scale = derivative_scale(f, G, case)
    assert abs(fd - exact) <= FD_RTOL * scale, (
        f"directional derivative: closed form {exact!r}, finite difference {fd!r}, difference {fd - exact!r}\n"
        f"{case!r}\nG={G!r}\nT={T!r}"
    )


@given(case=spectral_cases(full_rank=True, min_ratio=1.2), seed=st.integers(0, 2**32 - 1))
# Shrunk counterexample to an earlier version of this test: for p = 1, R_well is identically 0 and so is its
# gradient, so a tolerance relative to ||G|| alone was 0 and the FD's rounding noise (1e-13) failed it.
@example(case=SpectralCase(np.array([[0.6, 0.8]]), np.array([1.0])), seed=0)
def test_grad_r_well_matches_finite_differences(case: SpectralCase, seed: int) -> None:
    note(repr(case))
    G = grad_r_well(case.S)
    _check_directional(r_well, G, case, np.random.default_rng(seed).standard_normal(case.S.shape))


@given(case=spectral_cases(full_rank=True, min_rank=2, min_ratio=1.2), seed=st.integers(0, 2**32 - 1))
def test_grad_r_ill_matches_finite_differences(case: SpectralCase, seed: int) -> None:
    note(repr(case))
    G = grad_r_ill(case.S)
    _check_directional(r_ill, G, case, np.random.default_rng(seed).standard_normal(case.S.shape))


@given(case=spectral_cases(psd=True, full_rank=True, min_rank=2, min_ratio=1.2), seed=st.integers(0, 2**32 - 1))
def test_psd_gradients_match_symmetric_finite_differences(case: SpectralCase, seed: int) -> None:
    """PSD route: perturb along symmetric directions only (cf. PyTorch's gradcheck_wrapper_hermitian_input)."""
    note(repr(case))
    B = np.random.default_rng(seed).standard_normal(case.S.shape)
    T = B + B.T
    _check_directional(r_well_psd, grad_r_well(case.S, psd=True), case, T)
    _check_directional(r_ill_psd, grad_r_ill(case.S, psd=True), case, T)


@given(case=spectral_cases(min_rank=2, min_ratio=1.2), seed=st.integers(0, 2**32 - 1))
def test_grad_r_ill_on_rank_deficient_matches_fd_along_fixed_rank_curve(case: SpectralCase, seed: int) -> None:
    """For k < p the rank jumps under generic perturbations; along S(t) = (I + tA) S (I + tB), which keeps the
    rank, d/dt R_ill(S(t)) at 0 must equal <G, A S + S B> (G lies in the tangent space of the rank-k manifold)."""
    note(repr(case))
    rng = np.random.default_rng(seed)
    m, n = case.S.shape
    A, B = rng.standard_normal((m, m)), rng.standard_normal((n, n))
    norm = np.linalg.norm(A @ case.S + case.S @ B)
    A, B = A / norm, B / norm
    G = grad_r_ill(case.S)
    h = fd_step(case)
    f = lambda t: float(r_ill((np.eye(m) + t * A) @ case.S @ (np.eye(n) + t * B)))  # noqa: E731
    fd = (f(-2 * h) - 8 * f(-h) + 8 * f(h) - f(2 * h)) / (12 * h)
    exact = float(np.sum(G * (A @ case.S + case.S @ B)))
    scale = derivative_scale(r_ill, G, case)
    assert abs(fd - exact) <= FD_RTOL * scale, f"closed form {exact!r}, FD {fd!r}\n{case!r}"


@given(case=spectral_cases(min_ratio=1.2))
def test_gradients_equal_formula_from_numpy_svd(case: SpectralCase) -> None:
    """Thm A.1(3) and Thm 4.1(3) written out with numpy.linalg.svd (signs of u, v cancel in u v^T)."""
    note(repr(case))
    U, s, Vt = np.linalg.svd(case.S)
    k, p = case.rank, case.p
    G_well = s[0] * np.outer(U[:, 0], Vt[0]) - case.S / p
    # entries of s u v^T - S/p carry ~ c * max(m, n) * eps * s_max of rounding
    atol = 20 * max(case.S.shape) * EPS * case.spectrum[0]
    np.testing.assert_allclose(grad_r_well(case.S), G_well, rtol=0, atol=atol, err_msg=repr(case))
    if k >= 2:
        d = np.sum(s[:k] ** 2) / (2 * k) - 0.5 * s[k - 1] ** 2
        G_ill = (s[k - 1] * np.outer(U[:, k - 1], Vt[k - 1]) - case.S / k) / d**2
        # plus the relative error of 1/d^2: 2 * value_atol / d
        tol = atol / d**2 + 2 * value_atol(case) / d * np.abs(G_ill).max()
        np.testing.assert_allclose(grad_r_ill(case.S), G_ill, rtol=0, atol=tol, err_msg=repr(case))


def test_gradients_do_not_need_unique_interior_values(rng: np.random.Generator) -> None:
    """Only s_max (R_well) and s_min (R_ill) must be simple: a tie in the middle is fine (FD still agrees)."""
    spectrum = np.array([4.0, 2.0, 2.0, 1.0])
    case = SpectralCase(from_spectrum(rng, 5, 4, spectrum), spectrum)
    T = rng.standard_normal(case.S.shape)
    h_case = SpectralCase(case.S, np.array([4.0, 2.0, 1.0]))  # fd_step from the distinct values
    _check_directional(r_well, grad_r_well(case.S), h_case, T)
    _check_directional(r_ill, grad_r_ill(case.S), h_case, T)
    A = psd_from_spectrum(rng, 4, spectrum)
    _check_directional(r_ill_psd, grad_r_ill(A, psd=True), SpectralCase(A, h_case.spectrum),
                       T[:4] + T[:4].T)
