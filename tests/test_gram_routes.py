"""Feature extremes, regularizers and theta gradients from features, covariances and data on both routes
(H = F^T F when N >= D, the Gram matrix F F^T when N < D): the same rank rule, the same arguments and errors.

Each test checks a documented behaviour against an independent reference: a closed form on a diagonal (or
exactly representable) matrix, worked out by hand in the comment, or the documented error message.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kappalab import gram
from kappalab.errors import DegenerateSpectrumError, UndefinedRegularizerError
from core_inputs import EPS, NAN_2x2, backends


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
