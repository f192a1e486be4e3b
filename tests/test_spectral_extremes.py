"""kappalab.spectral: every extreme-eigenvalue solver against known eigenpairs, the rank threshold, the
uniqueness policies, rectangular SVD extremes, float32 and long double, and the Householder reflectors of
sytrd.

Each test checks a documented behaviour against an independent reference: a closed form on a diagonal (or
exactly representable) matrix, worked out by hand in the comment, or the documented error message.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from kappalab.errors import DegenerateSpectrumError
from core_inputs import EPS, meta
from test_kappa import _orthogonal, built


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
