"""One mathematics, two backends: every public function, on NumPy input and on torch input, in the caller's kind,
agrees with an independent 80-digit reference.

Each test runs once per backend (``xp`` fixture: NumPy, then torch on ``KAPPALAB_TEST_DEVICE``), computes the
function on the backend's array, asserts the result's kind/dtype/device, and compares it with the paper's formula
evaluated in 80 digits (mpmath) on the same float64 matrix (:mod:`proofs_checks.paper`, written independently of
kappalab, on :func:`proofs_checks.highprec.mp_svd`): neither half compares kappalab with itself.

Tolerance ``PARITY_RTOL = 1e-12`` (norm-wise relative): both backends call backward-stable LAPACK routines (possibly
different builds), so each result is within ~ c * n * eps * kappa / relgap of the exact one; the test matrices
have n <= 6, kappa <= 30 and relative gaps >= 0.2 between consecutive singular values, which gives ~1e-13. The
reference uses kappalab's documented rank rule (singular values above ``rtol * s_1``, ``rtol`` defaulting to
``max(m, n) * eps``); the rank-deficient test matrices have exact zeros, whose rounding residue (~eps s_1) is
below that threshold in either precision.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from test_core_matrices import SpectralCase, from_spectrum, psd_from_spectrum, spectral_cases

import mpmath as mp
from proofs_checks import paper
from proofs_checks.highprec import mp_solve, mp_svd, to_mp, workdps

import kappalab as kl

PARITY_RTOL = 1e-12


# ---- the 80-digit reference -------------------------------------------------------------------------------------

def mp_ext(A, rtol: float | None = None) -> paper.Ext:
    """80-digit compact SVD of a float64 or mpf matrix, rank by kappalab's rule ``s_i > rtol * s_1``."""
    A = np.asarray(A, dtype=object)
    U, s, V = mp_svd(to_mp(A) if not isinstance(A.flat[0], mp.mpf) else A)
    threshold = (max(A.shape) * np.finfo(float).eps if rtol is None else rtol) * s[0]
    return paper.Ext(s, U, V, sum(1 for x in s if x > threshold))


def _step_bound_well(e):
    kap = paper.kappa(e)
    return (kap - 1) / ((1 - mp.mpf(1) / e.p) * kap + mp.mpf(1) / e.p)


def _step_bound_ill(e):
    d = paper.ill_den(e)
    return mp.mpf(e.rank) / (e.rank - 1) * d * d


#: kappalab function name -> the paper's formula on (Ext, S)
MATRIX_REFERENCE = {
    "condition_number": lambda e, S: paper.kappa(e),
    "r_well": lambda e, S: paper.r_well(e),
    "r_ill": lambda e, S: paper.r_ill(e),
    "grad_r_well": paper.grad_r_well,
    "grad_r_ill": paper.grad_r_ill,
    "step_bound_well": lambda e, S: _step_bound_well(e),
    "step_bound_ill": lambda e, S: _step_bound_ill(e),
}


def reference(func, S: np.ndarray, rtol: float | None = None) -> np.ndarray:
    """``func``'s quantity at the float64 matrix S, in 80 digits (PSD input: singular values = eigenvalues)."""
    with workdps():
        Sm = to_mp(S)
        out = MATRIX_REFERENCE[func.__name__](mp_ext(Sm, rtol), Sm)
        return np.asarray(out, dtype=float) if isinstance(out, np.ndarray) else np.float64(out)


def theta_reference(name: str, theta: np.ndarray, K: np.ndarray, rtol: float) -> np.ndarray:
    """Thm 4.2's gradients and Thm 4.3's bounds (as stated) at (theta, K), in 80 digits."""
    with workdps():
        th, Km = to_mp(theta), to_mp(K)
        H = paper.hessian(th, Km)
        e = mp_ext(H, rtol)
        D = H.shape[0]
        if name in ("grad_theta_r_well", "grad_theta_r_ill"):
            out = paper.grad_theta("well" if name.endswith("well") else "ill", th, Km, e, H)
        elif name == "step_bound_theta_well":
            first = 1 / ((1 - mp.mpf(1) / D) * e.s_max)
            out = first if e.rank < 2 else min(first, (e.s_max * e.s_2 - e.s_2**2) / (D * e.s_2**2))
        else:
            out = paper.ill_den(e) ** 2 / (1 - 2 * e.s_min / e.rank)
        return np.asarray(out, dtype=float)


def eq10_reference(theta: np.ndarray, K: np.ndarray, reading: str) -> np.ndarray:
    """Eq. 10 with theta's SVD and K's eigendecomposition in 80 digits (eigenvalues <= D eps lambda_max: 0)."""
    with workdps():
        U, s, _ = mp_svd(to_mp(theta))
        lam, Q = mp.eigsy(mp.matrix(to_mp(K).tolist()))
        lam = [lam[j] for j in range(K.shape[0])]
        top = max(abs(x) for x in lam)
        lam = [x if x > K.shape[0] * np.finfo(float).eps * top else mp.mpf(0) for x in lam]
        gamma = [mp.sqrt(x) if reading == "proof" else x for x in lam]
        Qn = np.array(Q.tolist(), dtype=object)
        return np.array([float(sum((s[i] * (U[:, i] @ Qn[:, j]) * gamma[j]) ** 2 for j in range(len(lam))))
                         for i in range(len(s))])


def mp_kappa_psd(A) -> mp.mpf:
    return paper.kappa(mp_ext(A))

#: (rows, cols, nonzero singular values): square/tall/wide, full rank and rank-deficient.
SHAPES = {
    "square": (4, 4, [6.0, 3.0, 1.5, 0.5]),
    "tall": (6, 3, [5.0, 2.0, 1.0]),
    "wide": (3, 5, [4.0, 2.5, 1.0]),
    "square-rank-deficient": (5, 5, [3.0, 1.5, 0.8]),
    "tall-rank-deficient": (6, 4, [7.0, 2.0, 1.0]),
}


def _matrix(name: str) -> np.ndarray:
    m, n, s = SHAPES[name]
    return from_spectrum(np.random.default_rng(sum(map(ord, name))), m, n, np.array(s))


def _psd(n: int, spectrum: list[float], seed: int) -> np.ndarray:
    return psd_from_spectrum(np.random.default_rng(seed), n, np.array(spectrum))


def assert_parity(out, ref, *, rtol: float = PARITY_RTOL, err_msg: str = "") -> None:
    """``||out - ref|| <= rtol * ||ref||`` (Frobenius; entry-wise relative error is meaningless near zero)."""
    out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, f"shape {out.shape} != {ref.shape}\n{err_msg}"
    diff, size = np.linalg.norm(out - ref), np.linalg.norm(ref)
    assert diff <= rtol * size, (
        f"||out - ref|| = {diff:.3e} > {rtol:.1e} * ||ref|| = {rtol * size:.3e}\nout={out!r}\nref={ref!r}\n{err_msg}"
    )


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("func", [kl.condition_number, kl.r_well, kl.r_ill, kl.grad_r_well, kl.grad_r_ill,
                                  kl.step_bound_well, kl.step_bound_ill], ids=lambda f: f.__name__)
def test_matrix_functions_parity(xp, shape: str, func) -> None:
    # regression (shape "square", k = 4): torch's step_bound_ill computed k / (k - 1) from the int64 rank tensor,
    # and torch's true division of integer tensors is float32 (4/3 off by 2.5e-8 relative)
    S = _matrix(shape)
    out = func(xp.asarray(S))
    xp.assert_kind(out, ndim=0 if func.__name__ not in ("grad_r_well", "grad_r_ill") else 2)
    assert_parity(xp.numpy(out), reference(func, S), err_msg=f"{func.__name__}, S={S!r}")


@pytest.mark.parametrize("func", [kl.condition_number, kl.r_well, kl.r_ill, kl.grad_r_well, kl.grad_r_ill,
                                  kl.step_bound_well, kl.step_bound_ill], ids=lambda f: f.__name__)
@pytest.mark.parametrize("spectrum", [[5.0, 2.0, 1.0, 0.4], [5.0, 2.0, 1.0, 0.0]], ids=["pd", "rank-deficient"])
def test_psd_route_parity(xp, func, spectrum: list[float]) -> None:
    A = _psd(4, spectrum, seed=7)
    out = func(xp.asarray(A), psd=True)
    xp.assert_kind(out)
    assert_parity(xp.numpy(out), reference(func, A), err_msg=f"{func.__name__}(psd=True), A={A!r}")


def _theta_case(rank_deficient_K: bool) -> tuple[np.ndarray, np.ndarray]:
    theta = from_spectrum(np.random.default_rng(11), 4, 4, np.array([2.0, 1.4, 1.0, 0.6]))
    K = _psd(4, [9.0, 4.0, 2.0, 0.0 if rank_deficient_K else 1.0], seed=12)
    return theta, K


#: For singular K the null eigenvalues of H = theta^T K theta are rounding noise of size ~ c * n * eps * ||H||,
#: which can straddle the default threshold n * eps * s_max; rtol = 1e-10 separates them from s_k clearly.
RANK_RTOL = 1e-10


@pytest.mark.parametrize("rank_deficient_K", [False, True], ids=["K-pd", "K-singular"])
@pytest.mark.parametrize("func", [kl.grad_theta_r_well, kl.grad_theta_r_ill, kl.step_bound_theta_well,
                                  kl.step_bound_theta_ill], ids=lambda f: f.__name__)
def test_theta_functions_parity(xp, func, rank_deficient_K: bool) -> None:
    theta, K = _theta_case(rank_deficient_K)
    out = func(xp.asarray(theta), xp.asarray(K), rtol=RANK_RTOL)
    xp.assert_kind(out)
    assert_parity(xp.numpy(out), theta_reference(func.__name__, theta, K, RANK_RTOL),
                  err_msg=f"theta={theta!r}\nK={K!r}")


def test_hessian_and_preconditioned_step_parity(xp) -> None:
    theta, K = _theta_case(False)
    theta_rect = from_spectrum(np.random.default_rng(3), 4, 2, np.array([1.5, 0.5]))
    for th in (theta, theta_rect):
        H = kl.hessian(xp.asarray(th), xp.asarray(K))
        xp.assert_kind(H, ndim=2)
        with workdps():
            ref = np.asarray(paper.hessian(to_mp(th), to_mp(K)), dtype=float)
        assert_parity(xp.numpy(H), ref, err_msg=f"theta={th!r}\nK={K!r}")
    G = np.random.default_rng(4).standard_normal(theta.shape)
    for ridge in (0.0, 0.1):
        step = kl.preconditioned_step(xp.asarray(theta), xp.asarray(K), xp.asarray(G), 0.3, ridge=ridge)
        xp.assert_kind(step, ndim=2)
        with workdps():
            A = to_mp(K + ridge * np.eye(4))
            ref = np.asarray(to_mp(theta) - mp.mpf(0.3) * mp_solve(A, to_mp(G)), dtype=float)
        assert_parity(xp.numpy(step), ref, err_msg=f"ridge={ridge}\ntheta={theta!r}\nK={K!r}\ngrad={G!r}")


@pytest.mark.parametrize("reading", ["proof", "main_text"])
def test_eq10_parity(xp, reading: str) -> None:
    theta, K = _theta_case(True)
    out = kl.eq10_singular_values(xp.asarray(theta), xp.asarray(K), reading=reading)
    xp.assert_kind(out, ndim=1)
    assert_parity(xp.numpy(out), eq10_reference(theta, K, reading), err_msg=f"theta={theta!r}\nK={K!r}")


def test_rir_parity(xp) -> None:
    theta, K_P = _theta_case(False)
    K_H = _psd(4, [8.0, 3.0, 2.5, 0.5], seed=13)
    theta_0 = from_spectrum(np.random.default_rng(14), 4, 4, np.array([1.2, 1.0, 0.8, 0.7]))
    for ref in (None, theta_0):
        out = kl.rir(xp.asarray(theta), xp.asarray(K_P), xp.asarray(K_H),
                     None if ref is None else xp.asarray(ref))
        with workdps():
            def kap(th, K):
                return mp_kappa_psd(to_mp(K) if th is None else paper.hessian(to_mp(th), to_mp(K)))
            kH, kH0, kP, kP0 = kap(theta, K_H), kap(ref, K_H), kap(theta, K_P), kap(ref, K_P)
            expected = {"term_i": kH / kH0, "term_ii": kP / kP0, "rir": (kH / kH0) / (kP / kP0),
                        "kappa_H_immunized": kH, "kappa_H_reference": kH0, "kappa_P_immunized": kP,
                        "kappa_P_reference": kP0}
            expected = {k: float(v) for k, v in expected.items()}
        for field, want in expected.items():
            value = getattr(out, field)
            assert isinstance(value, float), f"RIRResult.{field} must be a Python float, got {type(value)}"
            assert_parity(value, want, err_msg=f"{field}, theta_0={ref!r}")


@pytest.mark.parametrize("func", [kl.condition_number, kl.r_well, kl.r_ill, kl.grad_r_well, kl.grad_r_ill],
                         ids=lambda f: f.__name__)
def test_float32_input_stays_float32(xp, func) -> None:
    # regression: ||S||_F^2 / (2k) divided an np.float32 scalar by the np.int64 rank, which NumPy promotes to
    # float64, so R_ill and its gradient came back as float64 for float32 NumPy input
    S = _matrix("tall")
    out = func(xp.asarray(S, dtype="float32"))
    xp.assert_kind(out, dtype="float32")
    # float32 rounding: relative ~ c * n * eps32 * kappa / relgap with eps32 = 1.2e-7, kappa = 5 -> 1e-4 has margin
    assert_parity(xp.numpy(out), reference(func, S), rtol=1e-4, err_msg=f"{func.__name__}, float32, S={S!r}")


@pytest.mark.parametrize("dtype", ["int64", "bool"])
def test_integer_and_bool_input_become_float64(xp, dtype: str) -> None:
    S = np.diag([3, 1, 1]).astype(dtype) if dtype == "int64" else np.eye(3, dtype=bool)
    if xp.name == "numpy":
        x = S
    else:
        import torch

        x = torch.as_tensor(S, device=xp.device)
    out = kl.condition_number(x)
    xp.assert_kind(out)
    assert float(xp.numpy(out)) == (3.0 if dtype == "int64" else 1.0)


#: ``xp`` is an immutable backend description, safe to share between hypothesis examples.
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=spectral_cases(min_rank=2, min_ratio=1.2, max_ratio=2.0))
def test_random_spectra_parity(xp, case: SpectralCase) -> None:
    """Random shapes and ranks (kappa <= 32, relative gaps >= 1/6, so the module tolerance applies)."""
    note(repr(case))
    S = xp.asarray(case.S)
    for func in (kl.condition_number, kl.r_well, kl.r_ill, kl.grad_r_well, kl.grad_r_ill):
        out = func(S)
        xp.assert_kind(out)
        assert_parity(xp.numpy(out), reference(func, case.S), err_msg=f"{func.__name__}\n{case!r}")


def test_numpy_path_never_imports_torch() -> None:
    """kappalab picks the backend by isinstance among already-imported libraries (like einops), so NumPy users do
    not pay for importing torch. Run in a fresh interpreter: this test session has torch imported already."""
    import subprocess
    import sys

    code = ("import sys, numpy as np, kappalab as kl\n"
            "S = np.diag([3.0, 2.0, 1.0])\n"
            "kl.condition_number(S); kl.r_well(S); kl.r_ill(S); kl.grad_r_well(S); kl.grad_r_ill(S, psd=True)\n"
            "kl.grad_theta_r_ill(np.eye(3), S); kl.preconditioned_step(np.eye(3), S, S, 0.1); kl.rir(np.eye(3), S, S)\n"
            "kl.eq10_singular_values(np.eye(3), S); kl.step_bound_theta_ill(np.eye(3), S)\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
