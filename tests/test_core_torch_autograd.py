"""torch autograd through the closed forms: gradcheck, agreement with generic eigh/svd backward, Thm 4.2.

``r_well``/``r_ill`` on a tensor that requires grad run custom ``autograd.Function``s whose backward is the paper's
closed-form gradient. Checked here against ``torch.autograd.gradcheck`` (float64 finite differences), against
autograd through ``torch.linalg.svdvals``/``eigvalsh`` (generic backward, defined for simple singular values), and
at the theta level (Thm 4.2) against autograd through ``hessian``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import assume, given, note
from hypothesis import strategies as st
from test_core_matrices import SpectralCase, from_spectrum, psd_from_spectrum, spectral_cases

import kappalab as kl

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.needs_torch

#: hypothesis tests cannot take function-scoped fixtures, so they read the device the way conftest does
TEST_DEVICE = os.environ.get("KAPPALAB_TEST_DEVICE", "cpu")

#: Closed form vs generic autograd: both are backward-stable evaluations of the same derivative; for the
#: matrices here (n <= 6, kappa <= 1e3, relative gaps >= 1/6) they agree to ~ n * eps * kappa / relgap ~ 1e-11.
AUTOGRAD_RTOL = 1e-9


def _t(a: np.ndarray, device: torch.device, requires_grad: bool = True) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64, device=device, requires_grad=requires_grad)


def _grad(f, x: torch.Tensor) -> torch.Tensor:
    x = x.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x), x)
    return g


def _assert_close(out: torch.Tensor, ref: torch.Tensor, rtol: float, msg: str) -> None:
    diff, size = float(torch.linalg.norm(out - ref)), float(torch.linalg.norm(ref))
    assert diff <= rtol * size, f"||out - ref|| = {diff:.3e} > {rtol:.0e} * {size:.3e}\nout={out}\nref={ref}\n{msg}"


# ---- gradcheck --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,spectrum", [((4, 4), [4.0, 2.0, 1.0, 0.5]), ((5, 3), [3.0, 1.5, 1.0]),
                                            ((3, 5), [2.0, 1.2, 0.7])])
def test_gradcheck_r_well_r_ill(torch_device, shape, spectrum) -> None:
    S = _t(from_spectrum(np.random.default_rng(0), *shape, np.array(spectrum)), torch_device)
    assert torch.autograd.gradcheck(lambda X: kl.r_well(X), (S,))
    assert torch.autograd.gradcheck(lambda X: kl.r_ill(X), (S,))


def test_gradcheck_psd_route_with_symmetric_wrapper(torch_device) -> None:
    """psd=True needs a symmetric input: feed (A + A^T)/2, as PyTorch's gradcheck_wrapper_hermitian_input does."""
    A = _t(psd_from_spectrum(np.random.default_rng(1), 4, np.array([5.0, 3.0, 2.0, 1.0])), torch_device)
    assert torch.autograd.gradcheck(lambda X: kl.r_well(0.5 * (X + X.T), psd=True), (A,))
    assert torch.autograd.gradcheck(lambda X: kl.r_ill(0.5 * (X + X.T), psd=True), (A,))


@pytest.mark.parametrize("singular_K", [False, True], ids=["K-pd", "K-singular"])
def test_gradcheck_theta_through_hessian(torch_device, singular_K: bool) -> None:
    """theta -> R(H(theta)): rank(H) = rank(K) for invertible theta, so R_ill is differentiable even for singular K
    (rtol = 1e-10 keeps H's rounding-level null eigenvalues clearly below the rank threshold)."""
    rng = np.random.default_rng(2)
    theta = _t(from_spectrum(rng, 4, 4, np.array([1.5, 1.2, 1.0, 0.8])), torch_device)
    K = _t(psd_from_spectrum(rng, 4, np.array([4.0, 2.0, 1.0] + ([] if singular_K else [0.5]))), torch_device,
           requires_grad=False)
    assert torch.autograd.gradcheck(lambda th: kl.r_well(kl.hessian(th, K), psd=True, rtol=1e-10), (theta,))
    assert torch.autograd.gradcheck(lambda th: kl.r_ill(kl.hessian(th, K), psd=True, rtol=1e-10), (theta,))


def test_backward_scales_by_incoming_gradient(torch_device) -> None:
    S = _t(from_spectrum(np.random.default_rng(3), 3, 4, np.array([3.0, 2.0, 1.0])), torch_device)
    g_well, g_ill = _grad(kl.r_well, S), _grad(kl.r_ill, S)
    _assert_close(_grad(lambda X: -2.5 * kl.r_well(X) + 7.0 * kl.r_ill(X), S), -2.5 * g_well + 7.0 * g_ill, 1e-14,
                  "linearity of the VJP")  # only two roundings
    _assert_close(g_well, kl.grad_r_well(S.detach()), 0.0, "autograd and grad_r_well share one formula")
    _assert_close(g_ill, kl.grad_r_ill(S.detach()), 0.0, "autograd and grad_r_ill share one formula")


def test_value_does_not_depend_on_requires_grad(torch_device) -> None:
    S = from_spectrum(np.random.default_rng(4), 4, 3, np.array([3.0, 2.0, 1.0]))
    for f in (kl.r_well, kl.r_ill):
        with_grad, without = f(_t(S, torch_device)), f(_t(S, torch_device, requires_grad=False))
        assert with_grad.requires_grad and not without.requires_grad
        assert float(with_grad.detach()) == float(without), f.__name__


# ---- vs generic autograd through svdvals / eigvalsh --------------------------------------------------------------

def _r_well_svdvals(X: torch.Tensor) -> torch.Tensor:
    s = torch.linalg.svdvals(X)
    return 0.5 * s[0] ** 2 - (X * X).sum() / (2 * min(X.shape))


def _r_ill_svdvals(k: int):
    def f(X: torch.Tensor) -> torch.Tensor:
        s = torch.linalg.svdvals(X)[:k]
        return 1.0 / ((X * X).sum() / (2 * k) - 0.5 * s[-1] ** 2)

    return f


@given(case=spectral_cases(full_rank=True, min_ratio=1.2))
def test_closed_forms_match_autograd_through_svdvals(case: SpectralCase) -> None:
    note(repr(case))
    device = torch.device(TEST_DEVICE)
    S = _t(case.S, device)
    _assert_close(_grad(kl.r_well, S), _grad(_r_well_svdvals, S), AUTOGRAD_RTOL, repr(case))
    if case.rank >= 2:
        _assert_close(_grad(kl.r_ill, S), _grad(_r_ill_svdvals(case.rank), S), AUTOGRAD_RTOL, repr(case))


@given(case=spectral_cases(psd=True, full_rank=True, min_rank=2, min_ratio=1.2))
def test_psd_closed_forms_match_autograd_through_eigvalsh(case: SpectralCase) -> None:
    note(repr(case))
    device = torch.device(TEST_DEVICE)
    A = _t(case.S, device)
    n = case.p

    def r_well_eig(X):
        lam = torch.linalg.eigvalsh(0.5 * (X + X.T))
        return 0.5 * lam[-1] ** 2 - (X * X).sum() / (2 * n)

    def r_ill_eig(X):
        lam = torch.linalg.eigvalsh(0.5 * (X + X.T))
        return 1.0 / ((X * X).sum() / (2 * n) - 0.5 * lam[0] ** 2)

    # eigvalsh's backward returns the symmetric gradient; so does the closed form on symmetric input
    _assert_close(_grad(lambda X: kl.r_well(X, psd=True), A), _grad(r_well_eig, A), AUTOGRAD_RTOL, repr(case))
    _assert_close(_grad(lambda X: kl.r_ill(X, psd=True), A), _grad(r_ill_eig, A), AUTOGRAD_RTOL, repr(case))


def test_closed_forms_ignore_interior_ties(torch_device) -> None:
    """An interior tie (eigenvalue 2 twice) does not matter: only the simple extremes enter the closed forms, and
    eigvalsh's backward (which uses only the eigenvectors of the eigenvalues that receive a gradient) agrees."""
    A = _t(psd_from_spectrum(np.random.default_rng(5), 4, np.array([4.0, 2.0, 2.0, 1.0])), torch_device)

    def r_well_eig(X):
        lam = torch.linalg.eigvalsh(X)
        return 0.5 * lam[-1] ** 2 - (X * X).sum() / 8

    def r_ill_eig(X):
        lam = torch.linalg.eigvalsh(X)
        return 1.0 / ((X * X).sum() / 8 - 0.5 * lam[0] ** 2)

    _assert_close(_grad(lambda X: kl.r_well(X, psd=True), A), _grad(r_well_eig, A), AUTOGRAD_RTOL, f"A={A}")
    _assert_close(_grad(lambda X: kl.r_ill(X, psd=True), A), _grad(r_ill_eig, A), AUTOGRAD_RTOL, f"A={A}")


# ---- Thm 4.2 at the theta level -----------------------------------------------------------------------------------

@st.composite
def theta_K_cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int]:
    """A well-conditioned square theta and a PSD K (rank drawn), with H's extreme eigenvalues simple."""
    n = draw(st.integers(2, 5), label="D")
    rank = draw(st.integers(2, n), label="rank K")
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    theta = from_spectrum(rng, n, n, rng.uniform(0.7, 1.5, n))
    K = psd_from_spectrum(rng, n, np.sort(rng.uniform(0.5, 5.0, rank))[::-1])
    lam = np.linalg.eigvalsh(theta.T @ K @ theta)[::-1][:rank]
    gaps = np.abs(np.diff(lam)) / lam[0]
    assume(gaps[0] > 0.05 and gaps[-1] > 0.05)  # the extremes of H must be simple for Thm 4.2
    return theta, K, rank


@given(case=theta_K_cases())
def test_thm42_closed_forms_match_autograd_through_hessian(case) -> None:
    theta, K, rank = case
    note(f"theta={theta!r}\nK={K!r}")
    device = torch.device(TEST_DEVICE)
    th, Kt = _t(theta, device), _t(K, device, requires_grad=False)
    rtol_rank = 1e-10  # see test_gradcheck_theta_through_hessian
    g_well = _grad(lambda x: kl.r_well(kl.hessian(x, Kt), psd=True, rtol=rtol_rank), th)
    g_ill = _grad(lambda x: kl.r_ill(kl.hessian(x, Kt), psd=True, rtol=rtol_rank), th)
    msg = f"theta={theta!r}\nK={K!r}"
    _assert_close(kl.grad_theta_r_well(th.detach(), Kt, rtol=rtol_rank), g_well, AUTOGRAD_RTOL, msg)
    _assert_close(kl.grad_theta_r_ill(th.detach(), Kt, rtol=rtol_rank), g_ill, AUTOGRAD_RTOL, msg)

    # and against a fully generic route: eigvalsh of theta^T K theta, k = rank(K) smallest nonzero eigenvalues
    def r_ill_generic(x):
        H = x.T @ Kt @ x
        lam = torch.linalg.eigvalsh(0.5 * (H + H.T))[-rank:]
        return 1.0 / ((H * H).sum() / (2 * rank) - 0.5 * lam[0] ** 2)

    def r_well_generic(x):
        H = x.T @ Kt @ x
        lam = torch.linalg.eigvalsh(0.5 * (H + H.T))
        return 0.5 * lam[-1] ** 2 - (H * H).sum() / (2 * H.shape[0])

    if rank == theta.shape[0]:  # generic eigh backward needs ALL eigenvalues simple; zeros repeat when rank < D
        _assert_close(kl.grad_theta_r_ill(th.detach(), Kt, rtol=rtol_rank), _grad(r_ill_generic, th), AUTOGRAD_RTOL,
                      msg)
        _assert_close(kl.grad_theta_r_well(th.detach(), Kt, rtol=rtol_rank), _grad(r_well_generic, th),
                      AUTOGRAD_RTOL, msg)


# ---- degeneracy in the autograd path ------------------------------------------------------------------------------

def test_autograd_path_applies_degeneracy_policy(torch_device) -> None:
    S = _t(np.diag([2.0, 2.0, 1.0]), torch_device)
    with pytest.raises(kl.DegenerateSpectrumError):
        kl.r_well(S)
    with pytest.warns(kl.DegenerateSpectrumWarning):
        kl.r_well(S, on_degenerate="warn").backward()
    assert torch.isfinite(S.grad).all()
    S_bottom = _t(np.diag([3.0, 1.0, 1.0]), torch_device)
    with pytest.raises(kl.DegenerateSpectrumError):
        kl.r_ill(S_bottom)
