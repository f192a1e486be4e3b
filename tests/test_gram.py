"""The Gram route of :mod:`kappalab.gram` equals the covariance route of :mod:`kappalab.linear` (1e-10 relative)."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from kappalab.gram import (feature_extremes, grad_theta_r_ill_from_data, grad_theta_r_well_from_data,
                           r_ill_from_features, r_well_from_features, uses_gram_route)
from kappalab.linear import grad_theta_r_ill, grad_theta_r_well, hessian
from kappalab.regularizers import r_ill, r_well
from kappalab.spectral import psd_extremes

SHAPES = [(8, 30), (20, 50), (64, 300), (60, 40), (120, 40)]  # (N, D): Gram route when N < D


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """OpenBLAS with 2 threads on a loaded 2-core machine can be 10-100x slower; these tests pin 1 thread."""
    with threadpool_limits(1):
        yield


def _data(rng: np.random.Generator, N: int, D: int) -> tuple[np.ndarray, np.ndarray]:
    X = rng.standard_normal((N, D)) * np.geomspace(1.0, 0.2, D)  # distinct spectrum
    theta = np.eye(D) + 0.3 * rng.standard_normal((D, D)) / np.sqrt(D)
    return theta, X


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("N,D", SHAPES)
def test_gradients_from_data_equal_covariance_route(N: int, D: int, rng: np.random.Generator) -> None:
    theta, X = _data(rng, N, D)
    K = X.T @ X
    for from_data, from_K in ((grad_theta_r_well_from_data, grad_theta_r_well),
                              (grad_theta_r_ill_from_data, grad_theta_r_ill)):
        g, g_ref = from_data(theta, X), from_K(theta, K)
        assert _rel(g, g_ref) <= 1e-10, f"{from_data.__name__} N={N} D={D}: rel. diff {_rel(g, g_ref):.2e}"


@pytest.mark.parametrize("N,D", SHAPES)
def test_values_and_extremes_from_features(N: int, D: int, rng: np.random.Generator) -> None:
    theta, X = _data(rng, N, D)
    F = X @ theta
    H = hessian(theta, X.T @ X)
    ref = psd_extremes(H)
    e = feature_extremes(F)
    assert uses_gram_route(F) == (N < D)
    assert int(e.rank) == int(ref.rank) == min(N, D)
    assert e.p == ref.p == D
    for f in ("s_max", "s_min", "s_2", "s_km1", "fro2"):
        np.testing.assert_allclose(getattr(e, f), getattr(ref, f), rtol=1e-10, err_msg=f"{f} N={N} D={D}")
    for f in ("v_max", "v_min"):  # sign-free: 1 - |cos| ~ angle^2 / 2 floors at ~eps (measured <= 1.6e-15 on
        # these shapes); 1e-12 is an angle <= 1.4e-6 rad
        assert 1 - abs(float(getattr(e, f) @ getattr(ref, f))) <= 1e-12, f"{f} N={N} D={D}"
    np.testing.assert_allclose(r_well_from_features(F), r_well(H, psd=True), rtol=1e-10)
    np.testing.assert_allclose(r_ill_from_features(F), r_ill(H, psd=True), rtol=1e-10)


def test_torch_gram_route_matches_numpy(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    theta, X = _data(rng, 16, 40)
    g = grad_theta_r_ill_from_data(torch.as_tensor(theta), torch.as_tensor(X))
    assert isinstance(g, torch.Tensor) and g.dtype == torch.float64
    assert _rel(g.numpy(), grad_theta_r_ill_from_data(theta, X)) <= 1e-10


def test_single_sample_has_rank_one(rng: np.random.Generator) -> None:
    F = rng.standard_normal((1, 10))
    e = feature_extremes(F)
    assert int(e.rank) == 1 and float(e.s_2) == 0.0
    np.testing.assert_allclose(e.s_max, F @ F.T)


def test_covariance_route_equals_linear_module(rng: np.random.Generator) -> None:
    """``regularizers_from_covariance`` (one shared product ``(K theta) H`` for both gradients) equals
    :mod:`kappalab.linear`, with a dense solver and with the warm-started tracker over a few steps."""
    from kappalab.gram import regularizers_from_covariance
    from kappalab.tracker import ExtremeTracker

    theta, X = _data(rng, 90, 40)
    K = X.T @ X
    tr = ExtremeTracker()
    for step in range(3):
        H = hessian(theta, K)
        for kw in ({"solver": "eigh"}, {"solver": "tridiag"}, {"tracker": tr}):
            r = regularizers_from_covariance(theta, K, **kw)
            assert _rel(r.grad_well, grad_theta_r_well(theta, K)) <= 1e-10, (step, kw)
            assert _rel(r.grad_ill, grad_theta_r_ill(theta, K)) <= 1e-10, (step, kw)
            np.testing.assert_allclose(r.r_well, r_well(H, psd=True), rtol=1e-10)
            np.testing.assert_allclose(r.r_ill, r_ill(H, psd=True), rtol=1e-10)
        theta = theta - 1e-3 * rng.standard_normal(theta.shape) / np.sqrt(theta.shape[0])
    assert tr.calls == 3 and tr.dense_solves == 1 and tr.fallbacks == 0


def test_which_limits_the_work(rng: np.random.Generator) -> None:
    from kappalab.gram import regularizers_from_covariance, regularizers_from_data

    theta, X = _data(rng, 20, 50)
    r = regularizers_from_data(theta, X, which=("min",))
    assert r.grad_well is None and r.r_ill is not None
    assert _rel(r.grad_ill, grad_theta_r_ill(theta, X.T @ X)) <= 1e-10
    r = regularizers_from_covariance(theta, X.T @ X, which=("max",))
    assert r.grad_ill is None and r.r_ill is None
    assert _rel(r.grad_well, grad_theta_r_well(theta, X.T @ X)) <= 1e-10


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(7, 30), (30, 7)])
def test_syrk_is_exactly_symmetric_and_equals_the_product(dtype, shape, rng: np.random.Generator) -> None:
    from kappalab.gram import _syrk

    F = rng.standard_normal(shape).astype(dtype)
    for outer, ref in ((True, F @ F.T), (False, F.T @ F)):
        C = _syrk(F, outer=outer)
        assert C.dtype == dtype and C.flags.c_contiguous
        assert np.array_equal(C, C.T)
        np.testing.assert_allclose(C, ref, rtol=1e-5 if dtype == np.float32 else 1e-12,
                                   atol=1e-5 * float(np.abs(ref).max()) if dtype == np.float32 else 1e-12)
    # non-contiguous input (a transposed view) takes the same route
    np.testing.assert_allclose(_syrk(np.asfortranarray(F), outer=True), F @ F.T, rtol=1e-5, atol=1e-4)
