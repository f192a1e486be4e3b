"""Every registered solver of :mod:`kappalab.spectral` agrees with the dense ``eigh`` reference.

Matrices are built from a chosen spectrum (``Q diag(lambda) Q^T``, as SciPy's ``symrand``) with clear gaps at both
ends, so that the extreme eigenvectors are unique and comparable through ``|v^T v_ref|``. Tolerance: 1e-8
relative on ``s_max`` and ``s_min`` (the benchmark goal), 1e-8 on ``1 - |v^T v_ref|``.
"""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from kappalab.spectral import (AUTO_TRIDIAG_MIN_N, EXTREME_SOLVERS, FALLBACKS, SOLVERS, choose_solver,
                               psd_extremes)

ALL = sorted(SOLVERS) + sorted(EXTREME_SOLVERS)


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """OpenBLAS with 2 threads on a loaded 2-core machine can be 10-100x slower; these tests pin 1 thread."""
    with threadpool_limits(1):
        yield


def psd_from_spectrum(rng: np.random.Generator, n: int, rank: int, kappa: float = 1e3) -> np.ndarray:
    """``Q diag(lam) Q^T`` with ``rank`` nonzero eigenvalues log-spaced in ``[1, kappa]`` (gaps >= 5%)."""
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    lam = np.zeros(n)
    lam[:rank] = np.geomspace(kappa, 1.0, rank)
    lam[0] *= 1.2   # a clear top gap
    lam[rank - 1] /= 1.2 if rank > 1 else 1.0  # and a clear bottom gap
    A = (Q * lam) @ Q.T
    return 0.5 * (A + A.T)


@pytest.mark.parametrize("solver", ALL)
@pytest.mark.parametrize("n,rank", [(40, 40), (40, 13), (300, 300), (300, 75)])
def test_solver_matches_dense_reference(solver: str, n: int, rank: int, rng: np.random.Generator) -> None:
    A = psd_from_spectrum(rng, n, rank)
    ref = psd_extremes(A, solver="eigh")
    e = psd_extremes(A, solver=solver)
    ctx = f"solver={solver} n={n} rank={rank}"
    assert int(e.rank) == int(ref.rank) == rank, ctx
    for f in ("s_max", "s_min", "s_2", "s_km1", "fro2", "threshold"):
        np.testing.assert_allclose(getattr(e, f), getattr(ref, f), rtol=1e-8, err_msg=f"{f}: {ctx}")
    for f in ("v_max", "v_min"):  # sign-free: 1 - |cos| ~ angle^2 / 2 floors at ~eps (measured <= 1.8e-15 for
        # every solver); 1e-12 (angle <= 1.4e-6 rad) leaves ~500x for the iterative solvers' stopping tolerances
        align = abs(float(getattr(e, f) @ getattr(ref, f)))
        assert 1 - align <= 1e-12, f"{f}: 1 - |v^T v_ref| = {1 - align:.2e}; {ctx}"
    assert e.p == ref.p


@pytest.mark.parametrize("solver", sorted(EXTREME_SOLVERS))
def test_extreme_solvers_reject_indefinite(solver: str, rng: np.random.Generator) -> None:
    A = psd_from_spectrum(rng, 30, 30)
    A[0, 0] -= 2e3  # pushes an eigenvalue well below zero
    with pytest.raises(ValueError, match="positive semidefinite"):
        psd_extremes(A, solver=solver)


def test_rank_deficient_input_falls_back_for_extreme_only_solvers(rng: np.random.Generator) -> None:
    """Extreme-only solvers cannot count the rank: a singular A goes to the dense route and is counted."""
    A = psd_from_spectrum(rng, 60, 20)
    before = FALLBACKS.get("subset", 0)
    e = psd_extremes(A, solver="subset")
    assert FALLBACKS["subset"] == before + 1
    assert int(e.rank) == 20


def test_tridiag_counts_rank_without_fallback(rng: np.random.Generator) -> None:
    A = psd_from_spectrum(rng, 60, 20)
    before = FALLBACKS.get("tridiag", 0)
    assert int(psd_extremes(A, solver="tridiag").rank) == 20
    assert FALLBACKS.get("tridiag", 0) == before


def test_auto_choice_per_shape_and_backend(rng: np.random.Generator) -> None:
    small = np.eye(AUTO_TRIDIAG_MIN_N - 1)
    large = np.eye(AUTO_TRIDIAG_MIN_N)
    assert choose_solver(small) == "eigh"
    assert choose_solver(large) == "tridiag"
    torch = pytest.importorskip("torch")
    assert choose_solver(torch.eye(AUTO_TRIDIAG_MIN_N, dtype=torch.float64)) == "eigh"


def test_auto_keeps_dense_results_bitwise_for_small_inputs(rng: np.random.Generator) -> None:
    A = psd_from_spectrum(rng, 50, 50)
    a, b = psd_extremes(A), psd_extremes(A, solver="eigh")
    assert a.s_max == b.s_max and a.s_min == b.s_min and np.array_equal(a.v_min, b.v_min)


def test_extreme_solvers_refuse_torch() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="NumPy arrays"):
        psd_extremes(torch.eye(10, dtype=torch.float64), solver="tridiag")
