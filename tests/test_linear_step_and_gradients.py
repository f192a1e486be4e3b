"""Alg. 1's preconditioned step (autograd, Cholesky errors, the singularity test, check=False) and the linear
model's theta gradients and Hessians: each passes its arguments (rtol, solver, check) on and names its inputs.

Each test checks a documented behaviour against an independent reference: a closed form on a diagonal (or
exactly representable) matrix, worked out by hand in the comment, or the documented error message.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kappalab as kl
from kappalab.errors import DegenerateSpectrumError, UndefinedRegularizerError
from core_inputs import EPS, NAN_2x2, backends


def test_preconditioned_step_is_differentiable_in_torch() -> None:
    # Alg. 1's step theta - eta K^-1 G stays in torch (no host round trip), so autograd flows through it:
    # d/dG <1, theta - eta K^-1 G> = -eta K^-1 1 1^T (K symmetric); here K = diag(2, 4), eta = 1/2.
    theta = torch.eye(2, dtype=torch.float64)
    K = torch.diag(torch.tensor([2.0, 4.0], dtype=torch.float64)).requires_grad_(True)
    G = torch.ones(2, 2, dtype=torch.float64, requires_grad=True)
    kl.preconditioned_step(theta, K, G, 0.5).sum().backward()
    torch.testing.assert_close(G.grad, torch.tensor([[-0.25, -0.25], [-0.125, -0.125]], dtype=torch.float64),
                               rtol=4 * EPS, atol=0)  # Cholesky of diag(2, 4): sqrt(2)^2 is 2 to 1 ulp


@pytest.mark.parametrize("to", backends())
def test_preconditioned_step_cholesky_errors_name_the_matrix(to) -> None:
    theta, G = to(np.eye(2)), to(np.ones((2, 2)))
    # ridge = 0 and K indefinite: the message names K and suggests a ridge
    with pytest.raises(ValueError, match=r"^K is not positive definite \(Cholesky failed[^)]*\) \(K is singular "
                                         r"or indefinite: pass ridge > 0\)$"):
        kl.preconditioned_step(theta, to(np.diag([1.0, -1.0])), G, 0.1)
    # ridge = 1/2 and K + ridge I = diag(3/2, -1/2) still indefinite: the message names K + ridge * I, no hint
    with pytest.raises(ValueError, match=r"^K \+ ridge \* I is not positive definite \(Cholesky failed[^)]*\)$"):
        kl.preconditioned_step(theta, to(np.diag([1.0, -1.0])), G, 0.1, ridge=0.5)


def test_preconditioned_step_without_checks_does_not_scan_for_finiteness() -> None:
    # check=False skips the finiteness scan (documented: it costs a device sync in hot loops): a NaN in grad
    # propagates to the result instead of raising in the solver.
    G = np.array([[np.nan, 0.0], [0.0, 1.0]])
    out = kl.preconditioned_step(np.eye(2), np.diag([2.0, 4.0]), G, 0.5, check=False)
    assert np.isnan(out[0, 0]) and out[1, 1] == 1 - 0.5 / 4


# ---- kappalab.linear ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("to", backends())
def test_grad_theta_r_ill_passes_rtol(to) -> None:
    # theta = I, K = H = diag(4, 2, 1e-3). rtol = 1e-2: k = 2, s_k = 2, v_k = e_2, ||H||_F^2 = 20 + 1e-6 (all of H),
    # d = ||H||_F^2 / (2k) - s_k^2 / 2 = 3 + 2.5e-7. Thm 4.2(2): 2 K theta (s_k v_k v_k^T - H/k) / d^2
    # = 2 diag(4, 2, 1e-3) (diag(0, 2, 0) - diag(2, 1, 5e-4)) / d^2 = diag(-16, 4, -1e-6) / d^2.
    d = (20 + 1e-6) / 4 - 2
    got = np.asarray(kl.grad_theta_r_ill(to(np.eye(3)), to(np.diag([4.0, 2.0, 1e-3])), rtol=1e-2))
    np.testing.assert_allclose(got, np.diag([-16.0, 4.0, -1e-6]) / d**2, rtol=1e-14, atol=1e-14 / d**2)


def test_grad_theta_r_ill_passes_solver_and_check() -> None:
    with pytest.raises(ValueError, match=r"^solver must be 'auto' or one of"):
        kl.grad_theta_r_ill(np.eye(2), np.diag([2.0, 1.0]), solver="nope")
    # check=False skips the checks that cost a host sync: K's symmetry (H is symmetrized anyway) and R_ill's
    # zero-denominator test, so for K = 2 I the degeneracy policy is what raises
    K_asym = np.array([[2.0, 1e-3], [0.0, 1.0]])  # theta = I: H = (K + K^T) / 2, eigenvalues about 2 and 1
    assert np.isfinite(kl.grad_theta_r_ill(np.eye(2), K_asym, check=False)).all()
    with pytest.raises(ValueError, match=r"^K must be symmetric"):
        kl.grad_theta_r_ill(np.eye(2), K_asym)
    with pytest.raises(DegenerateSpectrumError, match=r"^s_min = s_k \(smallest nonzero\) of H\(theta\) is not "
                                                      r"unique"):
        kl.grad_theta_r_ill(np.eye(2), 2 * np.eye(2), check=False)
    with pytest.raises(UndefinedRegularizerError, match=r"^R_ill\(H\(theta\)\) is undefined"):
        kl.grad_theta_r_ill(np.eye(2), 2 * np.eye(2))


@pytest.mark.parametrize("to", backends())
def test_preconditioned_step_singularity_test(to) -> None:
    theta, G = to(np.eye(4)), to(np.ones((4, 4)))
    # K = diag(1, 1, 1, 2^-50): Cholesky pivots (1, 1, 1, 2^-25) exactly, (min / max)^2 = 2^-50 = D eps for D = 4:
    # "<= D eps" is singular, and the message shows D eps = 4 * 2^-52
    with pytest.raises(ValueError, match=r"^K is singular to working precision \(Cholesky pivot ratio\^2 = "
                                         r"8\.882e-16 <= D \* eps = 8\.882e-16\)"):
        kl.preconditioned_step(theta, to(np.diag([1.0, 1.0, 1.0, 2.0**-50])), G, 0.5)
    # K = diag(1/4, 3 eps / 4) (D = 2): pivots (1/2, sqrt(3 eps) / 2), ratio^2 = 3 eps > 2 eps: a valid step,
    # theta - eta K^-1 G with K^-1 G = diag(4, 4 / (3 eps)) @ ones
    K = np.diag([0.25, 0.75 * EPS])
    out = np.asarray(kl.preconditioned_step(to(np.eye(2)), to(K), to(np.ones((2, 2))), 0.5))
    np.testing.assert_allclose(out, np.eye(2) - 0.5 * np.array([[4.0, 4.0], [4 / (3 * EPS)] * 2]), rtol=1e-12)
    # the test is made on K only when ridge = 0 and check is on: a tiny ridge, or check=False, lets the step run
    tiny = to(np.diag([1.0, 0.0]))
    assert np.isfinite(np.asarray(kl.preconditioned_step(to(np.eye(2)), tiny, to(np.ones((2, 2))), 0.5,
                                                         ridge=1e-18))).all()
    out = kl.preconditioned_step(to(np.eye(2)), to(np.diag([1.0, 1e-17])), to(np.ones((2, 2))), 0.5, check=False)
    np.testing.assert_allclose(np.asarray(out)[1], np.array([0.0, 1.0]) - 0.5e17, rtol=1e-12)


@pytest.mark.parametrize("to", backends())
def test_preconditioned_step_names_grad(to) -> None:
    with pytest.raises(ValueError, match=r"^grad contains non-finite entries \(1 NaN, 0 Inf\)"):
        kl.preconditioned_step(to(np.eye(2)), to(np.eye(2)), to(NAN_2x2), 0.5)


@pytest.mark.parametrize("which", ["well", "ill"])
def test_linear_theta_gradients_pass_their_arguments(which) -> None:
    f = kl.grad_theta_r_well if which == "well" else kl.grad_theta_r_ill
    K = np.diag([4.0, 2.0, 1.0])
    with pytest.raises(ValueError, match=r"^rtol must be None or a relative tolerance in \[0, 1\)"):
        f(np.eye(3), K, rtol=1.5)
    with pytest.raises(ValueError, match=r"^solver must be 'auto' or one of"):
        f(np.eye(3), K, solver="nope")
    # check=False skips K's symmetry test (H is symmetrized anyway)
    assert np.isfinite(f(np.eye(2), np.array([[2.0, 1e-3], [0.0, 1.0]]), check=False)).all()
    # a relative gap of 1e-6 at the needed end is degenerate for gap_rtol = 1e-3 only
    near = np.diag([1 + 1e-6, 1.0, 0.5]) if which == "well" else np.diag([2.0, 1 + 1e-6, 1.0])
    assert np.isfinite(f(np.eye(3), near)).all()
    with pytest.raises(DegenerateSpectrumError, match=r"of H\(theta\) is not unique.*\(gap_rtol = 1\.0e-03\)"):
        f(np.eye(3), near, gap_rtol=1e-3)
    # H = 0: the rank-zero test names H(theta); check=False skips it (then R_well's policy refuses the repeated
    # s_1 = s_2 = 0, and R_ill's formula divides 0/0: not finite, no exception)
    with pytest.raises(ValueError, match=r"^H\(theta\) has rank zero"):
        f(np.eye(2), np.zeros((2, 2)))
    if which == "well":
        with pytest.raises(DegenerateSpectrumError):
            f(np.eye(2), np.zeros((2, 2)), check=False)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            assert not np.isfinite(f(np.eye(2), np.zeros((2, 2)), check=False)).all()


def test_linear_r_ill_gradient_unchecked_at_rank_one() -> None:
    # H = diag(1, 0): k = 1, R_ill undefined; s_k = s_1 is unique (no s_{k-1}), so with check=False the formula
    # divides by d = 0 (no exception); with check the error names H(theta)
    with np.errstate(divide="ignore", invalid="ignore"):
        assert not np.isfinite(kl.grad_theta_r_ill(np.eye(2), np.diag([1.0, 0.0]), check=False)).all()
    with pytest.raises(UndefinedRegularizerError, match=r"^R_ill\(H\(theta\)\) is undefined"):
        kl.grad_theta_r_ill(np.eye(2), np.diag([1.0, 0.0]))


def test_hessian_shapes_and_unchecked_finiteness() -> None:
    with pytest.raises(ValueError, match=r"^K must be D_in x D_in with D_in = theta.shape\[0\] = 3, got K of shape "
                                         r"\(2, 2\)$"):
        kl.hessian(np.ones((3, 2)), np.eye(2))
    with pytest.raises(ValueError, match=r"^K contains non-finite entries"):
        kl.hessian(np.eye(2), np.array(NAN_2x2))
    assert np.isnan(kl.hessian(np.eye(2), np.array(NAN_2x2), check=False)).any()  # check=False: no scan
