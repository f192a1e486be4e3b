"""Gradient checks shared by TA.1.3, T4.1.3, T4.2.1, T4.2.2: central differences and torch gradcheck.

Central differences: ``(f(X + hE) - f(X - hE)) / (2h)`` against ``<G, E>`` with ``h = H_REL * ||X||_F`` and a
unit direction E. Truncation error is ``O(h^2 f''')`` with ``f'''`` growing like ``1/gap^2`` and rounding
``O(eps f / h)``; with relative gaps >= 1e-2, kappa <= 1e4 and ``H_REL = 1e-5`` both stay below ``FD_RTOL`` of
``||G||_F ||E||_F`` (scale-free, so spectra from 1e-6 to 1e6 use the same tolerance).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .paper import ext64, grad_theta, hessian, r_ill, r_well
from .strategies import directions

H_REL = 1e-5
FD_RTOL = 1e-5


def central_difference(f: Callable[[np.ndarray], float], X: np.ndarray, E: np.ndarray) -> float:
    h = H_REL * np.linalg.norm(X)
    return (float(f(X + h * E)) - float(f(X - h * E))) / (2 * h)


def assert_directional_derivative(claim: str, f: Callable[[np.ndarray], float], G: np.ndarray, X: np.ndarray,
                                  seed: int, context: str = "") -> float:
    """Assert the central difference of ``f`` at ``X`` along a random unit E equals ``<G, E>``; returns the
    relative error."""
    E = directions(*X.shape, seed)
    fd, an = central_difference(f, X, E), float(np.sum(G * E))
    rel = abs(fd - an) / (np.linalg.norm(G) + np.finfo(float).tiny)
    assert rel <= FD_RTOL, (f"{claim}: central difference {fd!r} vs closed form <G, E> = {an!r}, relative error "
                            f"{rel:.3e} > {FD_RTOL:.0e}\nX = {X!r}\nG = {G!r}\nE = {E!r}\n{context}")
    return rel


def torch_gradcheck(f: Callable[[torch.Tensor], torch.Tensor], X: np.ndarray) -> bool:
    """``torch.autograd.gradcheck`` in float64 on ``X`` (raises with torch's report on a mismatch)."""
    Xt = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    return torch.autograd.gradcheck(f, (Xt,), eps=1e-6 * max(1.0, float(np.linalg.norm(X))), atol=1e-6,
                                    rtol=1e-4)


def torch_grad(f: Callable[[torch.Tensor], torch.Tensor], X: np.ndarray) -> np.ndarray:
    """Autograd gradient of a scalar function at X."""
    Xt = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(f(Xt), Xt)
    return g.numpy()


# ---- the definitions in torch, for autograd (independent of the closed forms being checked) -------------------

def torch_r_well(X: torch.Tensor) -> torch.Tensor:
    """Eq. 3 through ``torch.linalg.svdvals`` (autograd is exact where the singular values are distinct)."""
    s = torch.linalg.svdvals(X)
    return s[0] ** 2 / 2 - (s**2).sum() / (2 * s.shape[0])


def torch_r_ill(X: torch.Tensor, k: int) -> torch.Tensor:
    """Eq. 12 with the rank k held fixed (valid where the rank is locally constant, e.g. full rank)."""
    s = torch.linalg.svdvals(X)[:k]
    return 1 / ((s**2).sum() / (2 * k) - s[-1] ** 2 / 2)


def assert_matches_autograd(claim: str, G: np.ndarray, f: Callable[[torch.Tensor], torch.Tensor], X: np.ndarray,
                            context: str = "") -> None:
    """The closed form G equals torch's autograd gradient of the definition f at X (float64)."""
    A = torch_grad(f, X)
    err = np.linalg.norm(G - A) / np.linalg.norm(A)
    assert err <= 1e-8, f"{claim}: closed form vs autograd of the definition, relative error {err:.3e}\n" \
                        f"closed form = {G!r}\nautograd = {A!r}\n{context}"


def assert_theta_gradient(claim: str, kind: str, theta: np.ndarray, K: np.ndarray, seed: int, context: str) -> None:
    """Thm 4.2 at one (theta, K): the closed form ``2 K theta grad_H R(H)`` (kind ``"well"``: R_well, ``"ill"``:
    R_ill with the rank held at K's size, i.e. full-rank theta and K) against torch autograd through
    ``R(theta^T K theta)`` and against a central difference of the paper's R."""
    H = hessian(theta, K)
    G = grad_theta(kind, theta, K, ext64(H), H)
    Kt = torch.tensor(K)
    if kind == "well":
        torch_r, paper_r = torch_r_well, r_well
    else:
        torch_r, paper_r = (lambda S: torch_r_ill(S, K.shape[0])), r_ill
    assert_matches_autograd(claim, G, lambda T: torch_r(T.T @ Kt @ T), theta, context)
    assert_directional_derivative(claim, lambda T: paper_r(ext64(hessian(T, K))), G, theta, seed, context)
