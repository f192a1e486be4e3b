"""Every bad input gets a clear exception that names the argument and the problem, on both backends.

Also the places where the paper's quantities are undefined: R_ill when all nonzero singular values are equal
(UndefinedRegularizerError, a ValueError) and gradients at a tied extreme singular value (DegenerateSpectrumError,
or a DegenerateSpectrumWarning / nothing under on_degenerate="warn" / "ignore").
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from test_core_matrices import EPS, psd_from_spectrum, random_orthogonal

import kappalab as kl
from kappalab import DegenerateSpectrumError, DegenerateSpectrumWarning, UndefinedRegularizerError

MATRIX_FUNCS = [kl.condition_number, kl.r_well, kl.r_ill, kl.grad_r_well, kl.grad_r_ill, kl.step_bound_well,
                kl.step_bound_ill]
GRADS = [kl.grad_r_well, kl.grad_r_ill]
THETA_FUNCS = [kl.hessian, kl.grad_theta_r_well, kl.grad_theta_r_ill, kl.step_bound_theta_well,
               kl.step_bound_theta_ill, kl.eq10_singular_values]
ids = lambda f: f.__name__  # noqa: E731


def _good_theta_K() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return random_orthogonal(rng, 3) * np.array([1.5, 1.0, 0.7]), psd_from_spectrum(rng, 3, np.array([4.0, 2.0, 1.0]))


# ---- shape, finiteness, kind ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("psd", [False, True])
@pytest.mark.parametrize("func", MATRIX_FUNCS, ids=ids)
def test_non_finite_entries_are_counted(xp, func, psd: bool) -> None:
    S = np.diag([3.0, 2.0, 1.0])
    S[0, 0], S[1, 1], S[2, 2] = np.nan, np.inf, -np.inf
    with pytest.raises(ValueError, match=r"S contains non-finite entries \(1 NaN, 2 Inf\)"):
        func(xp.asarray(S), psd=psd)


@pytest.mark.parametrize("shape", [(), (3,), (2, 2, 2)])
@pytest.mark.parametrize("func", MATRIX_FUNCS, ids=ids)
def test_wrong_ndim(xp, func, shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=rf"S must be a 2-D matrix, got an array with ndim={len(shape)}"):
        func(xp.asarray(np.ones(shape)))


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0)])
@pytest.mark.parametrize("func", MATRIX_FUNCS, ids=ids)
def test_empty(xp, func, shape: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match=r"S must be non-empty, got shape"):
        func(xp.asarray(np.ones(shape)))


@pytest.mark.parametrize("func", MATRIX_FUNCS, ids=ids)
def test_zero_matrix_has_rank_zero(xp, func) -> None:
    with pytest.raises(ValueError, match="rank zero"):
        func(xp.asarray(np.zeros((3, 2))))


@pytest.mark.parametrize("func", MATRIX_FUNCS, ids=ids)
def test_zero_matrix_has_rank_zero_psd_route(xp, func) -> None:
    with pytest.raises(ValueError, match="rank zero"):
        func(xp.asarray(np.zeros((3, 3))), psd=True)


@pytest.mark.parametrize("func", MATRIX_FUNCS, ids=ids)
def test_complex_input_is_type_error(xp, func) -> None:
    S = np.diag([2.0, 1.0]).astype(np.complex128)
    if xp.name == "numpy":
        x = S
    else:
        import torch

        x = torch.as_tensor(S, device=xp.device)
    with pytest.raises(TypeError, match="S must be real, got complex dtype"):
        func(x)


@pytest.mark.parametrize("value", [{"a": 1}, None, object()])
def test_non_array_input_is_type_error(value) -> None:
    with pytest.raises(TypeError, match="S must be a NumPy array or a torch tensor"):
        kl.r_well(value)


def test_string_input_is_type_error_naming_the_argument() -> None:
    # regression: strings passed np.isscalar and failed inside NumPy ("could not convert string to float")
    with pytest.raises(TypeError, match="S must be"):
        kl.r_well("abc")


# ---- PSD route: square, symmetric, positive semidefinite ------------------------------------------------------------

@pytest.mark.parametrize("func", MATRIX_FUNCS, ids=ids)
def test_psd_route_requires_square(xp, func) -> None:
    with pytest.raises(ValueError, match=r"S must be square, got shape \(3, 2\)"):
        func(xp.asarray(np.ones((3, 2))), psd=True)


@pytest.mark.parametrize("func", MATRIX_FUNCS, ids=ids)
def test_psd_route_rejects_asymmetric_input(xp, func) -> None:
    A = np.diag([3.0, 2.0, 1.0])
    A[0, 1] = 1e-6  # far above 100 * n * eps * max|A| = 2e-13
    with pytest.raises(ValueError, match=r"S must be symmetric: max \|S - S\^T\| = 1.000e-06"):
        func(xp.asarray(A), psd=True)


def test_psd_route_accepts_symmetry_up_to_rounding(xp) -> None:
    """X^T X formed in floating point need not be bit-symmetric; an asymmetry of a few eps * max|A| is accepted."""
    A = np.diag([3.0, 2.0, 1.0]) + 0.5
    A[0, 1] += 10 * EPS * 3.5  # < 100 * n * eps * max|A|
    assert np.any(A != A.T)
    for func in (kl.condition_number, kl.r_well, kl.r_ill):
        out = func(xp.asarray(A), psd=True)
        np.testing.assert_allclose(xp.numpy(out), func(0.5 * (A + A.T), psd=True), rtol=1e-12)


@pytest.mark.parametrize("func", MATRIX_FUNCS, ids=ids)
def test_psd_route_rejects_indefinite(xp, func) -> None:
    with pytest.raises(ValueError, match="S must be positive semidefinite: its smallest eigenvalue is -1.0"):
        func(xp.asarray(np.diag([3.0, 2.0, -1.0])), psd=True)


@pytest.mark.parametrize("A", [np.diag([0.0, -1.0]), -np.eye(2)], ids=["diag(0,-1)", "-I"])
def test_psd_route_rejects_negative_semidefinite(xp, A: np.ndarray) -> None:
    with pytest.raises(ValueError, match="S must be positive semidefinite"):
        kl.r_well(xp.asarray(A), psd=True)


def test_psd_route_accepts_rounding_negative_eigenvalues(rng: np.random.Generator) -> None:
    X = rng.standard_normal((2, 5))
    A = X.T @ X  # rank 2; three eigenvalues at the rounding level, possibly slightly negative
    A = 0.5 * (A + A.T)
    assert int(kl.psd_extremes(A).rank) == 2
    kl.r_ill(A, psd=True)


@pytest.mark.parametrize("psd", [False, True])
@pytest.mark.parametrize("kwargs", [{"rtol": -1.0}, {"rtol": 1.0}, {"rtol": float("nan")}, {"gap_rtol": -1.0}],
                         ids=["rtol=-1", "rtol=1", "rtol=nan", "gap_rtol=-1"])
def test_tolerance_arguments_are_validated(xp, kwargs: dict, psd: bool) -> None:
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=rf"\b{name} must"):  # like "eta must be ...", "ridge must be ..."
        kl.grad_r_ill(xp.asarray(np.diag([3.0, 2.0, 2.0, 0.0])), psd=psd, **kwargs)


def test_unknown_solver_name(xp) -> None:
    with pytest.raises(ValueError, match="solver must be 'auto' or one of"):
        kl.r_well(xp.asarray(np.diag([2.0, 1.0])), psd=True, solver="no-such-solver")


# ---- R_ill undefined -------------------------------------------------------------------------------------------

def _equal_singular_values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        "identity": np.eye(3),
        "scaled identity": 7.5 * np.eye(4),
        "rank one square": np.outer([1.0, 2.0, 3.0], [0.5, -1.0, 2.0]),
        "rank one rectangular": np.outer([1.0, 2.0], [3.0, 4.0, 5.0]),
        "rectangular, equal singular values": 2.0 * random_orthogonal(rng, 5)[:, :3],
        "rank two, equal nonzero values": np.diag([3.0, 3.0, 0.0]),
        "1 x 1": np.array([[2.0]]),
    }


@pytest.mark.parametrize("name", list(_equal_singular_values()))
@pytest.mark.parametrize("func", [kl.r_ill, kl.step_bound_ill], ids=ids)
def test_r_ill_undefined_when_all_nonzero_singular_values_equal(xp, func, name: str) -> None:
    S = _equal_singular_values()[name]
    with pytest.raises(UndefinedRegularizerError, match=r"R_ill\(S\) is undefined") as info:
        func(xp.asarray(S))
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("name", list(_equal_singular_values()))
def test_grad_r_ill_undefined_when_all_nonzero_singular_values_equal(xp, name: str) -> None:
    """With the uniqueness check switched off, the gradient path still refuses the undefined R_ill."""
    with pytest.raises(UndefinedRegularizerError, match=r"R_ill\(S\) is undefined"):
        kl.grad_r_ill(xp.asarray(_equal_singular_values()[name]), on_degenerate="ignore")


def test_r_ill_undefined_on_psd_route(xp) -> None:
    with pytest.raises(UndefinedRegularizerError):
        kl.r_ill(xp.asarray(2.0 * np.eye(3)), psd=True)


def _undefined_r_ill_gradient_calls() -> list:
    def autograd_r_ill():
        torch = pytest.importorskip("torch")
        kl.r_ill(torch.eye(3, dtype=torch.float64, requires_grad=True))

    def theta_level():
        kl.grad_theta_r_ill(random_orthogonal(np.random.default_rng(2), 3), 2.0 * np.eye(3))

    return [pytest.param(lambda: kl.grad_r_ill(np.eye(3)), id="grad_r_ill"),
            pytest.param(autograd_r_ill, id="r_ill-autograd", marks=pytest.mark.needs_torch),
            pytest.param(theta_level, id="grad_theta_r_ill")]


@pytest.mark.parametrize("call", _undefined_r_ill_gradient_calls())
def test_undefined_r_ill_is_reported_as_undefined_by_gradient_paths(call) -> None:
    """k >= 2 equal values are also a tie at s_min, but the right diagnosis is that R_ill itself is undefined.
    Regression: the gradient paths used to check uniqueness first and raise DegenerateSpectrumError ("only a
    subdifferential exists"), so r_ill on a torch tensor with requires_grad raised another error than on NumPy."""
    with pytest.raises(UndefinedRegularizerError):
        call()


def test_r_ill_defined_just_above_rounding(xp) -> None:
    """The undefined-test is a rounding bound, not a wide band: a relative spread of 1e-6 is still defined."""
    S = np.diag([1.0 + 1e-6, 1.0, 1.0])
    d = (np.sum(np.diag(S) ** 2) / 6 - 0.5)
    np.testing.assert_allclose(xp.numpy(kl.r_ill(xp.asarray(S))), 1 / d, rtol=1e-8)  # d ~ 3e-7: cancellation 1e-9


# ---- degenerate extremes -----------------------------------------------------------------------------------------

DEGENERATE = {
    kl.grad_r_well: np.diag([2.0, 2.0, 1.0]),  # s_max tied
    kl.grad_r_ill: np.diag([3.0, 1.0, 1.0]),  # s_min tied
}


@pytest.mark.parametrize("func", GRADS, ids=ids)
def test_degenerate_extreme_policies(xp, func) -> None:
    S = xp.asarray(DEGENERATE[func])
    with pytest.raises(DegenerateSpectrumError, match="is not unique") as info:
        func(S)
    assert isinstance(info.value, ValueError)
    with pytest.warns(DegenerateSpectrumWarning, match="is not unique"):
        out = func(S, on_degenerate="warn")
    xp.assert_kind(out, ndim=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(xp.numpy(func(S, on_degenerate="ignore")), xp.numpy(out))


@pytest.mark.parametrize("func", GRADS, ids=ids)
def test_degenerate_check_ignores_the_other_end(xp, func) -> None:
    """grad_r_well needs only s_max simple, grad_r_ill only s_min: a tie at the other end is fine."""
    other = {kl.grad_r_well: np.diag([3.0, 1.0, 1.0]), kl.grad_r_ill: np.diag([2.0, 2.0, 1.0])}[func]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        func(xp.asarray(other))


@pytest.mark.parametrize("func,K", [(kl.grad_theta_r_well, np.diag([2.0, 2.0, 1.0])),
                                    (kl.grad_theta_r_ill, np.diag([3.0, 1.0, 1.0]))], ids=["well", "ill"])
def test_degenerate_hessian_policies(xp, func, K: np.ndarray) -> None:
    theta = xp.asarray(np.eye(3))
    with pytest.raises(DegenerateSpectrumError, match=r"of H\(theta\) is not unique"):
        func(theta, xp.asarray(K))
    with pytest.warns(DegenerateSpectrumWarning):
        func(theta, xp.asarray(K), on_degenerate="warn")


@pytest.mark.parametrize("func", GRADS + [kl.grad_theta_r_well, kl.grad_theta_r_ill], ids=ids)
def test_unknown_degeneracy_policy(func) -> None:
    args = (np.eye(3), np.diag([3.0, 2.0, 1.0])) if "theta" in func.__name__ else (np.diag([3.0, 2.0, 1.0]),)
    with pytest.raises(ValueError, match="on_degenerate must be 'raise', 'warn' or 'ignore', got 'rase'"):
        func(*args, on_degenerate="rase")


@pytest.mark.parametrize("func", [kl.r_well, kl.r_ill], ids=ids)
def test_unknown_degeneracy_policy_in_values(xp, func) -> None:
    # regression: the policy was validated only on the autograd path; elsewhere a misspelling was ignored
    with pytest.raises(ValueError, match="on_degenerate must be"):
        func(xp.asarray(np.diag([3.0, 2.0, 1.0])), on_degenerate="rase")


# ---- theta / K arguments ---------------------------------------------------------------------------------------

def _theta_args(func, theta, K):
    return (theta, K, np.zeros_like(theta), 0.1) if func is kl.preconditioned_step else (theta, K)


def _call_theta_func(xp, func, theta: np.ndarray, K: np.ndarray):
    """Call a theta-level function with backend arrays (preconditioned_step gets a zero gradient and eta = 0.1)."""
    args = [xp.asarray(theta), xp.asarray(K)]
    if func is kl.preconditioned_step:
        args += [xp.asarray(np.zeros_like(theta)), 0.1]
    return func(*args)


@pytest.mark.parametrize("func", THETA_FUNCS + [kl.preconditioned_step], ids=ids)
def test_theta_K_non_finite(xp, func) -> None:
    theta, K = _good_theta_K()
    bad_theta, bad_K = theta.copy(), K.copy()
    bad_theta[0, 0] = np.nan
    bad_K[1, 1] = np.inf
    with pytest.raises(ValueError, match=r"theta contains non-finite entries \(1 NaN, 0 Inf\)"):
        _call_theta_func(xp, func, bad_theta, K)
    with pytest.raises(ValueError, match=r"K contains non-finite entries \(0 NaN, 1 Inf\)"):
        _call_theta_func(xp, func, theta, bad_K)


@pytest.mark.parametrize("func", THETA_FUNCS + [kl.preconditioned_step], ids=ids)
def test_K_must_be_square_and_match_theta(xp, func) -> None:
    theta, K = _good_theta_K()
    with pytest.raises(ValueError, match=r"K must be square, got shape \(3, 2\)"):
        _call_theta_func(xp, func, theta, K[:, :2])
    with pytest.raises(ValueError, match=r"K must .*4, 4\)"):
        _call_theta_func(xp, func, theta, np.eye(4))


@pytest.mark.parametrize("func", THETA_FUNCS + [kl.preconditioned_step], ids=ids)
def test_K_must_be_symmetric(xp, func) -> None:
    theta, K = _good_theta_K()
    K = K.copy()
    K[0, 2] += 1e-3
    with pytest.raises(ValueError, match=r"K must be symmetric"):
        _call_theta_func(xp, func, theta, K)


@pytest.mark.parametrize("func", THETA_FUNCS, ids=ids)
def test_K_symmetric_up_to_rounding_is_accepted(xp, func) -> None:
    theta, K = _good_theta_K()
    K2 = K.copy()
    K2[0, 2] += 10 * EPS * np.abs(K).max()  # below 100 * n * eps * max|K|
    out, ref = _call_theta_func(xp, func, theta, K2), func(theta, K)
    np.testing.assert_allclose(xp.numpy(out), ref, rtol=1e-10, atol=1e-12)  # a perturbation of 10 eps


@pytest.mark.parametrize("func", THETA_FUNCS + [kl.preconditioned_step], ids=ids)
def test_mixed_numpy_and_torch_is_type_error(func) -> None:
    torch = pytest.importorskip("torch")
    theta, K = _good_theta_K()
    extra = [np.zeros_like(theta), 0.1] if func is kl.preconditioned_step else []
    with pytest.raises(TypeError, match="mixed NumPy arrays and torch tensors"):
        func(theta, torch.as_tensor(K), *extra)


@pytest.mark.parametrize("func", THETA_FUNCS + [kl.preconditioned_step], ids=ids)
def test_mixed_dtypes_is_type_error(xp, func) -> None:
    theta, K = _good_theta_K()
    extra = [xp.asarray(np.zeros_like(theta)), 0.1] if func is kl.preconditioned_step else []
    with pytest.raises(TypeError, match="different dtypes"):
        func(xp.asarray(theta, dtype="float32"), xp.asarray(K), *extra)


def test_tensors_on_different_devices() -> None:
    """A second device without an accelerator: torch's ``meta`` device (shapes and dtypes, no data). Its tensors
    have no values, so the value checks are off (``check=False``); the device check runs regardless of ``check``
    (it is what a CUDA hot loop with ``check=False`` still needs)."""
    torch = pytest.importorskip("torch")
    theta, K = _good_theta_K()
    on_meta = torch.as_tensor(theta, device="meta")
    with pytest.raises(ValueError, match="tensors are on different devices"):
        kl.hessian(on_meta, torch.as_tensor(K), check=False)
    with pytest.raises(ValueError, match="tensors are on different devices"):
        kl.preconditioned_step(torch.as_tensor(theta), torch.as_tensor(K), on_meta, 0.1, check=False)


# ---- preconditioned_step ---------------------------------------------------------------------------------------

def test_singular_K_needs_ridge(xp) -> None:
    theta, _ = _good_theta_K()
    K = np.diag([2.0, 1.0, 0.0])
    G = xp.asarray(np.ones((3, 3)))
    with pytest.raises(ValueError, match="ridge > 0"):
        kl.preconditioned_step(xp.asarray(theta), xp.asarray(K), G, 0.1)
    out = kl.preconditioned_step(xp.asarray(theta), xp.asarray(K), G, 0.1, ridge=1e-2)
    xp.assert_kind(out, ndim=2)
    np.testing.assert_allclose(xp.numpy(out), theta - 0.1 * np.linalg.solve(K + 1e-2 * np.eye(3), np.ones((3, 3))),
                               rtol=1e-12)  # diagonal system: each entry is one division


def test_numerically_singular_K_needs_ridge(xp) -> None:
    """A Cholesky factor exists, but (min L_ii / max L_ii)^2 = 1e-17 <= D * eps: singular to working precision."""
    with pytest.raises(ValueError, match=r"K is singular to working precision.*pass ridge > 0"):
        kl.preconditioned_step(xp.asarray(np.eye(2)), xp.asarray(np.diag([1.0, 1e-17])), xp.asarray(np.ones((2, 2))),
                               0.1)


def test_indefinite_K_plus_ridge(xp) -> None:
    with pytest.raises(ValueError, match=r"K \+ ridge \* I is not positive definite"):
        kl.preconditioned_step(xp.asarray(np.eye(2)), xp.asarray(np.diag([1.0, -5.0])), xp.asarray(np.ones((2, 2))),
                               0.1, ridge=1.0)


@pytest.mark.parametrize("eta", [0.0, -0.1, np.nan, np.inf])
def test_step_size_must_be_positive_finite(eta: float) -> None:
    with pytest.raises(ValueError, match="eta must be"):
        kl.preconditioned_step(np.eye(2), np.eye(2), np.ones((2, 2)), eta)


@pytest.mark.parametrize("ridge", [-1e-3, np.nan, np.inf])
def test_ridge_must_be_nonnegative_finite(ridge: float) -> None:
    with pytest.raises(ValueError, match="ridge must be"):
        kl.preconditioned_step(np.eye(2), np.eye(2), np.ones((2, 2)), 0.1, ridge=ridge)


def test_grad_shape_must_match_theta(xp) -> None:
    with pytest.raises(ValueError, match=r"grad must have theta's shape \(2, 2\), got \(2, 3\)"):
        kl.preconditioned_step(xp.asarray(np.eye(2)), xp.asarray(np.eye(2)), xp.asarray(np.ones((2, 3))), 0.1)


# ---- eq10 and rir ------------------------------------------------------------------------------------------------

def test_eq10_bad_reading(xp) -> None:
    theta, K = _good_theta_K()
    with pytest.raises(ValueError, match="reading must be 'proof' or 'main_text', got 'appendix'"):
        kl.eq10_singular_values(xp.asarray(theta), xp.asarray(K), reading="appendix")


def test_eq10_needs_square_theta_and_psd_K(xp) -> None:
    theta, K = _good_theta_K()
    with pytest.raises(ValueError, match=r"theta must be square"):
        kl.eq10_singular_values(xp.asarray(theta[:, :2]), xp.asarray(K))
    with pytest.raises(ValueError, match="K must be positive semidefinite"):
        kl.eq10_singular_values(xp.asarray(theta), xp.asarray(np.diag([1.0, 1.0, -1.0])))


def test_rir_propagates_input_errors(xp) -> None:
    theta, K = _good_theta_K()
    bad = K.copy()
    bad[0, 1] += 1e-3
    with pytest.raises(ValueError, match="K must be symmetric"):
        kl.rir(xp.asarray(theta), xp.asarray(K), xp.asarray(bad))
    other = "torch" if xp.name == "numpy" else "numpy"
    with pytest.raises(TypeError, match="mixed"):
        kl.rir(xp.asarray(theta), type(xp)(other).asarray(K), xp.asarray(K))
