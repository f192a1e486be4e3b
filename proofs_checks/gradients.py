"""Gradient checks shared by TA.1.3, T4.1.3, T4.2.1, T4.2.2: 80-digit central differences and torch autograd.

Central differences run in 80 digits (mpmath) on the float64 input itself: ``(f(X + hE) - f(X - hE)) / (2h)``
with ``h = 1e-25 ||X||_F`` and a unit direction E, so truncation (``O(h^2 f''')``, ``f'''`` ~ 1/gap^2) and
rounding (``1e-80 f / h``) stay below 1e-40 relative: the reference is exact for float64 purposes, whatever the
scale (1e-6..1e6) or kappa (to 1e6). What remains is the float64 error of the closed form under test, which the
tolerance bounds from first principles: a singular vector pair of a gap ``g = (s_i - s_j)/s_1`` is computed to
``~ eps / g``, so the closed form is good to ``GRAD_C * p * eps / g`` relative to the scale of its terms
(``||S||`` for a matrix gradient, ``||K|| ||theta|| ||grad_H R||`` for the theta gradient of Thm 4.2).
"""

from __future__ import annotations

from typing import Callable

import mpmath as mp
import numpy as np
import torch

from .highprec import mp_extremes, to_mp, workdps
from .paper import ext64, grad_theta, hessian, r_ill, r_well
from .strategies import directions

#: safety factor of the float64 error bound ``p eps / gap`` (an SVD's backward error is a small multiple of eps)
GRAD_C = 64.0
H_MP = mp.mpf("1e-25")


def grad_tolerance(s: np.ndarray, p: int, pair: str) -> float:
    """``GRAD_C p eps / g`` with g the relative gap of the pair the gradient uses: ``"top"``
    ``(s_1 - s_2)/s_1`` (R_well: s_1 u_1 v_1^T) or ``"bottom"`` ``(s_{k-1} - s_k)/s_{k-1}`` (R_ill: s_k u_k v_k^T,
    whose error ``s_k eps s_1/(s_{k-1} - s_k)`` is at most ``eps s_1 / g``)."""
    nz = np.append(np.sort(s[s > 0])[::-1], 0.0)[: max(2, np.count_nonzero(s))]  # rank 1: the gap to 0
    gap = (nz[0] - nz[1]) / nz[0] if pair == "top" else (nz[-2] - nz[-1]) / nz[-2]
    return GRAD_C * p * np.finfo(float).eps / gap


def mp_directional_derivative(f: Callable[[np.ndarray], object], X: np.ndarray, E: np.ndarray) -> float:
    """``d/dt f(X + t E)`` at t = 0 by an 80-digit central difference (f takes an object array of mpf)."""
    with workdps():
        Xm, Em = to_mp(X), to_mp(E)
        h = H_MP * mp.sqrt(sum(x * x for x in Xm.ravel()))
        return float((f(Xm + h * Em) - f(Xm - h * Em)) / (2 * h))


def assert_directional_derivative(claim: str, f: Callable[[np.ndarray], object], G: np.ndarray, X: np.ndarray,
                                  seed: int, rtol: float, scale: float, context: str = "") -> float:
    """``<G, E>`` equals the 80-digit central difference of ``f`` at X along a random unit E, to
    ``rtol * scale`` (scale: the size of the closed form's terms); returns the error over the scale."""
    E = directions(*X.shape, seed)
    fd, an = mp_directional_derivative(f, X, E), float(np.sum(G * E))
    err = abs(fd - an) / scale
    assert err <= rtol, (f"{claim}: 80-digit central difference {fd!r} vs closed form <G, E> = {an!r}, error "
                         f"{err:.3e} x scale {scale:.3e} > {rtol:.3e}\nX = {X!r}\nG = {G!r}\nE = {E!r}\n{context}")
    return err


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
                            rtol: float, scale: float, context: str = "") -> None:
    """The closed form G equals torch's autograd gradient of the definition f at X (float64), to ``rtol * scale``
    (both sides carry the float64 error ``~ eps / gap`` that ``rtol`` bounds)."""
    A = torch_grad(f, X)
    err = np.linalg.norm(G - A) / scale
    assert err <= 2 * rtol, (f"{claim}: closed form vs autograd of the definition, error {err:.3e} x scale "
                             f"{scale:.3e} > 2 x {rtol:.3e}\nclosed form = {G!r}\nautograd = {A!r}\n{context}")


def assert_theta_gradient(claim: str, kind: str, theta: np.ndarray, K: np.ndarray, h: np.ndarray, seed: int,
                          context: str) -> None:
    """Thm 4.2 at one (theta, K) whose H = theta^T K theta has spectrum ``h``: the closed form
    ``2 K theta grad_H R(H)`` (kind ``"well"``: R_well, ``"ill"``: R_ill with the rank held at K's size, i.e.
    full-rank theta and K) against torch autograd through ``R(theta^T K theta)`` and against an 80-digit central
    difference of the paper's R. Scale: ``||K|| ||theta|| ||grad_H R||`` (the float64 products' size)."""
    H = hessian(theta, K)
    e = ext64(H)
    G = grad_theta(kind, theta, K, e, H)
    Kt = torch.tensor(K)
    if kind == "well":
        torch_r, paper_r = torch_r_well, r_well
        gH = np.linalg.norm(e.s_max * np.outer(e.u_max, e.v_max) - H / e.p)
    else:
        torch_r, paper_r = (lambda S: torch_r_ill(S, K.shape[0])), r_ill
        d = e.fro2 / (2 * e.rank) - e.s_min**2 / 2
        gH = np.linalg.norm(e.s_min * np.outer(e.u_min, e.v_min) - H / e.rank) / d**2
    scale = 2 * np.linalg.norm(K, 2) * np.linalg.norm(theta, 2) * gH
    rtol = grad_tolerance(h, theta.shape[0], "top" if kind == "well" else "bottom")
    assert_matches_autograd(claim, G, lambda T: torch_r(T.T @ Kt @ T), theta, rtol, scale, context)
    with workdps():
        Km = to_mp(K)
    assert_directional_derivative(claim, lambda T: paper_r(mp_extremes(hessian(T, Km))), G, theta, seed, rtol,
                                  scale, context)
