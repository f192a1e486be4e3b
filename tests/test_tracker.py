"""The warm-start tracker agrees with the dense reference, and its fallbacks are counted."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from kappalab.spectral import psd_extremes
from kappalab.tracker import ExtremeTracker


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """OpenBLAS with 2 threads on a loaded 2-core machine can be 10-100x slower; these tests pin 1 thread."""
    with threadpool_limits(1):
        yield


def _steps(rng: np.random.Generator, n: int, steps: int, rank: int | None = None):
    """H(theta_t) along a small random walk of theta (an optimizer-like perturbation of 1e-3)."""
    X = rng.standard_normal((2 * n if rank is None else rank, n))
    K = X.T @ X
    theta = np.eye(n) + 0.3 * rng.standard_normal((n, n)) / np.sqrt(n)
    for _ in range(steps):
        H = theta.T @ K @ theta
        yield 0.5 * (H + H.T)
        theta = theta - 1e-3 * rng.standard_normal((n, n)) / np.sqrt(n)


@pytest.mark.parametrize("method", ["shift", "lobpcg", "arpack"])
def test_tracker_matches_dense_reference(method: str, rng: np.random.Generator) -> None:
    tr = ExtremeTracker(method=method, maxiter=200)
    for H in _steps(rng, 120, 4):
        e, ref = tr(H), psd_extremes(H, solver="eigh")
        for f in ("s_max", "s_min"):
            np.testing.assert_allclose(getattr(e, f), getattr(ref, f), rtol=1e-8, err_msg=f"{method} {f}")
        for f in ("v_max", "v_min"):  # sign-free: 1 - |cos| ~ angle^2 / 2 floors at ~eps (measured <= 5.6e-16 for
            # all three methods); 1e-12 (angle <= 1.4e-6 rad) leaves ~1000x for the iterative stopping tolerances
            assert 1 - abs(float(getattr(e, f) @ getattr(ref, f))) <= 1e-12, f"{method} {f}"
        assert int(e.rank) == int(ref.rank)
    assert tr.calls == 4


@pytest.mark.parametrize("method", ["shift", "lobpcg"])
def test_forced_failure_is_counted_and_falls_back(method: str, rng: np.random.Generator) -> None:
    tr = ExtremeTracker(method=method, maxiter=1, tol_vec=1e-15)
    for H in _steps(rng, 80, 3):
        e = tr(H)
        np.testing.assert_allclose(e.s_min, psd_extremes(H, solver="eigh").s_min, rtol=1e-12)
    assert tr.fallbacks == 2  # the first call is the dense seed, not a fallback
    assert "not converged" in tr.last_fallback


def test_rank_deficient_matrix_uses_dense_route(rng: np.random.Generator) -> None:
    tr = ExtremeTracker()
    for H in _steps(rng, 60, 3, rank=20):
        assert int(tr(H).rank) == 20
    assert tr.dense_solves == 3  # no warm start is kept for a singular matrix: every call is dense


def test_tracker_accepts_torch(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    tr = ExtremeTracker()
    for H in _steps(rng, 50, 2):
        e = tr(torch.as_tensor(H))
        assert isinstance(e.s_min, torch.Tensor)
        np.testing.assert_allclose(e.s_min.numpy(), psd_extremes(H).s_min, rtol=1e-8)


def test_shift_inside_the_spectrum_is_moved_out(rng: np.random.Generator) -> None:
    """A shift that lands inside the spectrum makes the Cholesky factorization fail; the margin grows tenfold
    until the shifted matrix is positive definite (sigma beyond the extreme eigenvalue)."""
    from kappalab.iterative import _shifted_cholesky

    H = next(_steps(rng, 40, 1))
    lam = np.linalg.eigvalsh(H)
    gap = lam[-1] - lam[-2]
    cf, sigma = _shifted_cholesky(H, lam[-1] - 0.5 * gap, 0.2 * gap, top=True)  # first try: inside
    assert sigma > lam[-1]
    cf, sigma = _shifted_cholesky(H, lam[0] + 0.5 * (lam[1] - lam[0]), 0.2 * (lam[1] - lam[0]), top=False)
    assert sigma < lam[0]


def test_many_warm_steps_keep_converging(rng: np.random.Generator) -> None:
    """Along a longer walk every step after the seed is warm (no fallback) and matches the reference."""
    tr = ExtremeTracker()
    for H in _steps(rng, 150, 6):
        e, ref = tr(H), psd_extremes(H, solver="eigh")
        np.testing.assert_allclose([e.s_max, e.s_min], [ref.s_max, ref.s_min], rtol=1e-8)
        np.testing.assert_allclose([e.s_2, e.s_km1], [ref.s_2, ref.s_km1], rtol=1e-6)  # second pairs: gap tests
    assert tr.dense_solves == 1 and tr.fallbacks == 0
