"""kappalab.linear: H(theta) = theta^T K theta, Thm 4.2's theta-gradients, Alg. 1's preconditioned step.

References: the definitions written out in NumPy, fourth-order central finite differences in theta (no
symmetry constraint: theta is a general matrix), and ``numpy.linalg.solve`` for the step.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, note
from hypothesis import strategies as st
from test_core_matrices import EPS, from_spectrum, psd_from_spectrum

from kappalab import grad_theta_r_ill, grad_theta_r_well, hessian, preconditioned_step, r_ill, r_well


@st.composite
def theta_K(draw: st.DrawFn, *, square: bool = True, min_rank: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """theta (D_in x D_hid, singular values in [0.7, 1.5]) and a PSD K of drawn rank (eigenvalues in [0.5, 5])."""
    d_in = draw(st.integers(max(2, min_rank), 5), label="D_in")
    d_hid = d_in if square else draw(st.integers(1, 5), label="D_hid")
    rank = draw(st.integers(min_rank, d_in), label="rank K")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    theta = from_spectrum(rng, d_in, d_hid, rng.uniform(0.7, 1.5, min(d_in, d_hid)))
    K = psd_from_spectrum(rng, d_in, np.sort(rng.uniform(0.5, 5.0, rank))[::-1])
    return theta, K


def _msg(theta: np.ndarray, K: np.ndarray) -> str:
    with np.printoptions(precision=17, linewidth=150):
        return f"theta={theta!r}\nK={K!r}"


@given(case=theta_K(square=False))
def test_hessian_is_symmetric_theta_T_K_theta(case) -> None:
    theta, K = case
    note(_msg(theta, K))
    H = hessian(theta, K)
    np.testing.assert_array_equal(H, H.T, err_msg="hessian must be exactly symmetric\n" + _msg(theta, K))
    # a product of three matrices: entry error ~ c * D * eps * ||theta||^2 ||K||
    atol = 20 * K.shape[0] * EPS * np.linalg.norm(theta, 2) ** 2 * np.linalg.norm(K, 2)
    np.testing.assert_allclose(H, theta.T @ K @ theta, rtol=0, atol=atol, err_msg=_msg(theta, K))
    assert H.shape == (theta.shape[1], theta.shape[1])


def test_hessian_with_identity_theta_is_K(rng: np.random.Generator) -> None:
    K = psd_from_spectrum(rng, 4, np.array([3.0, 2.0, 1.0]))
    np.testing.assert_array_equal(hessian(np.eye(4), K), K)


def _fd_gradient(f, theta: np.ndarray, h: float) -> np.ndarray:
    """Entry-wise fourth-order central differences (theta is unconstrained, so every entry is a direction)."""
    G = np.zeros_like(theta)
    for idx in np.ndindex(theta.shape):
        E = np.zeros_like(theta)
        E[idx] = h
        G[idx] = (f(theta - 2 * E) - 8 * f(theta - E) + 8 * f(theta + E) - f(theta + 2 * E)) / (12 * h)
    return G


#: rank threshold for H = theta^T K theta with singular K: its null eigenvalues are rounding noise
#: ~ c * D * eps * ||H||, which the default D * eps * s_max does not reliably exceed; 1e-10 separates them.
RANK_RTOL = 1e-10

#: FD in theta with h = 1e-4 * (smallest eigenvalue gap of H): truncation ~ (h / gap)^4, rounding ~ eps |f| / h;
#: relative to ||G|| both are below 1e-9 for H with relative extreme gaps >= 0.05, so 1e-6 leaves margin.
FD_RTOL = 1e-6


@given(case=theta_K(square=False))
def test_thm42_r_well_gradient_matches_finite_differences(case) -> None:
    theta, K = case
    H = theta.T @ K @ theta
    lam = np.linalg.eigvalsh(0.5 * (H + H.T))[::-1]
    assume(len(lam) == 1 or lam[0] - lam[1] > 0.05 * lam[0])  # Thm 4.2 needs a simple top eigenvalue
    note(_msg(theta, K))
    G = grad_theta_r_well(theta, K, rtol=RANK_RTOL)
    h = 1e-4 * (lam[0] - lam[1] if len(lam) > 1 else lam[0])
    fd = _fd_gradient(lambda t: float(r_well(hessian(t, K), psd=True, rtol=RANK_RTOL)), theta, h)
    scale = np.linalg.norm(G) + lam[0] * np.linalg.norm(K, 2) * np.linalg.norm(theta, 2)  # |f'| ~ s_1 ||K theta||
    assert np.linalg.norm(G - fd) <= FD_RTOL * scale, f"closed form\n{G!r}\nFD\n{fd!r}\n{_msg(theta, K)}"


@given(case=theta_K(min_rank=2))
def test_thm42_r_ill_gradient_matches_finite_differences(case) -> None:
    """Square invertible theta: rank(H) = rank(K) locally, so the closed form is a true gradient even for singular K."""
    theta, K = case
    k = np.linalg.matrix_rank(K)
    H = theta.T @ K @ theta
    lam = np.linalg.eigvalsh(0.5 * (H + H.T))[::-1][:k]
    assume(lam[-2] - lam[-1] > 0.05 * lam[0])  # Thm 4.2 needs a simple smallest nonzero eigenvalue
    note(_msg(theta, K))
    G = grad_theta_r_ill(theta, K, rtol=RANK_RTOL)
    h = 1e-4 * min(lam[-2] - lam[-1], lam[-1])
    f = lambda t: float(r_ill(hessian(t, K), psd=True, rtol=RANK_RTOL))  # noqa: E731
    fd = _fd_gradient(f, theta, h)
    # |f'| ~ |dR_ill/dH| ||dH/dtheta|| ~ (R_ill^2 s_1) (2 ||K|| ||theta||)
    scale = np.linalg.norm(G) + f(theta) ** 2 * lam[0] * np.linalg.norm(K, 2) * np.linalg.norm(theta, 2)
    assert np.linalg.norm(G - fd) <= FD_RTOL * scale, f"closed form\n{G!r}\nFD\n{fd!r}\n{_msg(theta, K)}"


def test_thm42_formula_written_out(rng: np.random.Generator) -> None:
    """2 K theta (s_1 v_1 v_1^T - H/D) and 2 K theta (s_k v_k v_k^T - H/k) / d^2 evaluated from numpy.linalg.eigh."""
    theta = from_spectrum(rng, 4, 4, np.array([1.4, 1.1, 0.9, 0.7]))
    K = psd_from_spectrum(rng, 4, np.array([5.0, 2.0, 0.6]))
    H = theta.T @ K @ theta
    H = 0.5 * (H + H.T)
    lam, V = np.linalg.eigh(H)
    lam, V = lam[::-1], V[:, ::-1]
    D, k = 4, 3
    well = 2 * K @ theta @ (lam[0] * np.outer(V[:, 0], V[:, 0]) - H / D)
    d = np.sum(H * H) / (2 * k) - 0.5 * lam[k - 1] ** 2
    ill = 2 * K @ theta @ (lam[k - 1] * np.outer(V[:, k - 1], V[:, k - 1]) - H / k) / d**2
    # products of O(1)-conditioned factors (kappa(H) ~ 20, gaps >= 0.2 relative): 1e-12 relative is ~ 100 n eps
    msg = _msg(theta, K)
    np.testing.assert_allclose(grad_theta_r_well(theta, K, rtol=RANK_RTOL), well, rtol=0,
                               atol=1e-12 * np.abs(well).max(), err_msg=msg)
    np.testing.assert_allclose(grad_theta_r_ill(theta, K, rtol=RANK_RTOL), ill, rtol=0,
                               atol=1e-12 * np.abs(ill).max(), err_msg=msg)


# ---- preconditioned step -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ridge", [0.0, 1e-3, 2.0])
def test_preconditioned_step_equals_linear_solve(rng: np.random.Generator, ridge: float) -> None:
    K = psd_from_spectrum(rng, 5, np.array([8.0, 4.0, 2.0, 1.0, 0.5]))
    theta, G = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    out = preconditioned_step(theta, K, G, 0.25, ridge=ridge)
    expected = theta - 0.25 * np.linalg.solve(K + ridge * np.eye(5), G)
    # two backward-stable solves of a system with kappa <= 16: error ~ c * n * eps * kappa * ||solution||
    atol = 20 * 5 * EPS * 16 * np.abs(expected).max()
    np.testing.assert_allclose(out, expected, rtol=0, atol=atol, err_msg=f"K={K!r}\ngrad={G!r}")


def test_preconditioned_step_ridge_makes_singular_K_usable(rng: np.random.Generator) -> None:
    K = psd_from_spectrum(rng, 4, np.array([3.0, 1.0]))  # rank 2: K^-1 does not exist
    theta, G = np.eye(4), rng.standard_normal((4, 4))
    out = preconditioned_step(theta, K, G, 0.1, ridge=0.5)
    np.testing.assert_allclose(out, theta - 0.1 * np.linalg.solve(K + 0.5 * np.eye(4), G), rtol=0,
                               atol=20 * 4 * EPS * 8 * np.abs(G).max() * 2, err_msg=f"K={K!r}")  # kappa(K + I/2) = 7


def test_preconditioned_step_with_zero_gradient_is_identity(rng: np.random.Generator) -> None:
    K = psd_from_spectrum(rng, 3, np.array([2.0, 1.0, 0.5]))
    theta = rng.standard_normal((3, 3))
    np.testing.assert_array_equal(preconditioned_step(theta, K, np.zeros((3, 3)), 0.5), theta)
