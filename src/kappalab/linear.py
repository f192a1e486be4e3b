"""The linear feature extractor of Sec. 3-4: Hessian, theta-gradients (Thm 4.2) and the preconditioned step.

Notation: data ``X`` (``N x D_in``), covariance ``K = X^T X`` (``D_in x D_in``, symmetric PSD), feature extractor
``theta`` (``D_in x D_hid``; the paper takes ``D_hid = D_in``), linear-probing Hessian
``H(theta) = theta^T K theta`` (the exact Hessian of ``||X theta w - y||^2`` is ``2 H``; the factor does not
change kappa).

Thm 4.2: with ``s_1 v_1`` the top eigenpair and ``s_k v_k`` the smallest nonzero eigenpair of H,

* ``grad_theta R_well(H(theta)) = 2 K theta (s_1 v_1 v_1^T - H / D)`` with ``D = D_hid`` (= D_in in the paper),
* ``grad_theta R_ill(H(theta)) = 2 K theta (s_k v_k v_k^T - H / k) / (||H||_F^2/(2k) - s_k^2/2)^2``, k = rank(H).

Both follow from the chain rule ``d f(theta^T K theta) = 2 K theta grad f(H)`` for symmetric ``grad f``. Because
``rank(H(theta)) = rank(K)`` for every invertible theta, the rank is locally constant in theta and the R_ill
gradient is a true gradient there even when K is singular.
"""

from __future__ import annotations

from types import ModuleType

from ._backend import Array, eps, eye_like, is_torch, namespace, to_scalar
from .kappa import default_rtol, rank_rule
from .regularizers import grad_r_ill_from_extremes, grad_r_well_from_extremes, ill_denominator
from .spectral import DegeneratePolicy, Extremes, psd_extremes, require_unique
from .validation import finite, matrix, positive_scalar, require_values, same_kind, symmetric


def checked_theta_and_K(theta: object, K: object, check: bool,
                        xp: ModuleType | None = None) -> tuple[Array, Array]:
    """``theta`` (``D_in x D_hid``) and ``K`` (``D_in x D_in``, symmetric when ``check``) as arrays of one kind;
    a ValueError naming the argument otherwise."""
    theta = matrix(theta, "theta", check=check, xp=xp)
    K = matrix(K, "K", square=True, check=check, xp=xp)
    same_kind(theta, K, xp=xp)
    if K.shape[0] != theta.shape[0]:
        raise ValueError(f"K must be D_in x D_in with D_in = theta.shape[0] = {theta.shape[0]}, got K of shape "
                         f"{tuple(K.shape)}")
    if check:
        symmetric(K, "K", xp)
    return theta, K


def hessian(theta: object, K: object, *, check: bool = True) -> Array:
    """``H(theta) = theta^T K theta``, symmetrized as ``(H + H^T) / 2`` so rounding cannot make it asymmetric."""
    return _symmetric_hessian(*checked_theta_and_K(theta, K, check, namespace(theta, K)))


def _symmetric_hessian(theta: Array, K: Array) -> Array:
    H = theta.T @ (K @ theta)
    return 0.5 * (H + H.T)


def hessian_extremes(theta: object, K: object, *, rtol: float | None = None, solver: str = "auto",
                     check: bool = True, xp: ModuleType | None = None) -> tuple[Array, Array, Array, Extremes]:
    """``(theta, K, H, extremes of H)``: the shared first half of both theta-gradients. theta and K are checked once
    each; H, symmetric by construction, only for finiteness (finite theta and K can still overflow it)."""
    xp = namespace(theta, K) if xp is None else xp
    theta, K = checked_theta_and_K(theta, K, check, xp)
    H = _symmetric_hessian(theta, K)
    require_values(H, "H(theta)")  # free; theta or K on the meta device (check=False) makes H a meta tensor
    if check:
        finite(H, "H(theta)", xp)
    return theta, K, H, psd_extremes(H, rtol=rtol, solver=solver, check=check, name="H(theta)", xp=xp, checked=True)


def grad_theta_r_well(theta: object, K: object, *, rtol: float | None = None, solver: str = "auto",
                      on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None,
                      check: bool = True) -> Array:
    """Thm 4.2(1): ``2 K theta (s_1 v_1 v_1^T - H/D)`` (requires a unique top eigenvalue of H)."""
    xp = namespace(theta, K)
    theta, K, H, e = hessian_extremes(theta, K, rtol=rtol, solver=solver, check=check, xp=xp)
    require_unique(e, "max", on_degenerate, gap_rtol, "H(theta)")
    return 2.0 * (K @ (theta @ grad_r_well_from_extremes(e, H, xp)))


def grad_theta_r_ill(theta: object, K: object, *, rtol: float | None = None, solver: str = "auto",
                     on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None,
                     check: bool = True) -> Array:
    """Thm 4.2(2): ``2 K theta (s_k v_k v_k^T - H/k) / d^2`` (requires a unique smallest nonzero eigenvalue)."""
    xp = namespace(theta, K)
    theta, K, H, e = hessian_extremes(theta, K, rtol=rtol, solver=solver, check=check, xp=xp)
    ill_denominator(e, check=check, name="H(theta)")  # undefined before non-unique
    require_unique(e, "min", on_degenerate, gap_rtol, "H(theta)")
    # the denominator is checked (once, above): the formula recomputes it on the device and reads nothing
    return 2.0 * (K @ (theta @ grad_r_ill_from_extremes(e, H, check=False, xp=xp)))


def preconditioned_step(theta: object, K: object, grad: object, eta: float, ridge: float = 0.0, *,
                        check: bool = True) -> Array:
    """Alg. 1's update ``theta - eta (K + ridge I)^{-1} grad`` by a Cholesky solve (never an explicit inverse).

    Singular K: with ``ridge = 0`` the Cholesky factor ``L`` of K must exist and have
    ``(min_i L_ii / max_i L_ii)^2 > D * eps`` (a cheap lower-bound proxy for ``1/kappa(K)``); otherwise K is
    singular to working precision and a ``ValueError`` asks for ``ridge > 0``. With ``ridge > 0``,
    ``K + ridge I`` must be positive definite.
    """
    theta, K = checked_theta_and_K(theta, K, check)
    grad = matrix(grad, "grad", check=check)
    same_kind(theta, grad)
    if grad.shape != theta.shape:
        raise ValueError(f"grad must have theta's shape {tuple(theta.shape)}, got {tuple(grad.shape)}")
    eta = positive_scalar(eta, "eta")
    ridge = positive_scalar(ridge, "ridge", allow_zero=True)
    A = K + ridge * eye_like(K, K.shape[0]) if ridge > 0 else K
    L = _cholesky(A, ridge, check)
    if check and ridge == 0:
        diag = L.diagonal()
        ratio = to_scalar((diag.min() / diag.max()) ** 2)
        if ratio <= K.shape[0] * eps(K):
            raise ValueError(
                f"K is singular to working precision (Cholesky pivot ratio^2 = {ratio:.3e} <= D * eps = "
                f"{K.shape[0] * eps(K):.3e}); K^-1 does not exist: pass ridge > 0 to use (K + ridge I)^-1"
            )
    return theta - eta * _cho_solve(L, grad)


def covariance_factor(X: object, *, check: bool = True) -> tuple[Array, Array]:
    """``(s, Wt)`` with ``K = X^T X = Wt^T diag(s^2) Wt``: the singular values ``s`` of X above X's rank rule
    (:mod:`kappalab.kappa`: ``s_i > max(N, D_in) eps s_1``) and their right singular vectors (rows of ``Wt``,
    ``r x D_in``), from one SVD (of X's triangular QR factor when ``N > D_in``: the same ``s`` and ``Wt``, a smaller
    SVD). The dropped values change K by at most ``(max(N, D_in) eps s_1)^2``, far below the ``eps s_1^2`` that
    rounding puts into ``X^T X`` itself. ``r`` = rank(X) is at least the rank K's own rule gives (full MNIST: 521-598 of 784;
    one more than K's on 2 of 10 tasks checked, a value ``s_r^2`` below K's threshold)."""
    X = matrix(X, "X", check=check)
    xp = namespace(X)
    rtol = default_rtol(X)
    if X.shape[0] > X.shape[1]:
        X = xp.linalg.qr(X, mode="r")[1] if is_torch(X) else xp.linalg.qr(X, mode="r")
    _, s, Wt = xp.linalg.svd(X, full_matrices=False)
    r = int(to_scalar(rank_rule(s, s[0], rtol).rank))
    return s[:r], Wt[:r]


def ridge_weights(s: Array, ridge: float) -> Array:
    """``1 / (s_i^2 + ridge)``: with ``X_f = diag(s) Wt`` the factor of K (:func:`covariance_factor`),
    ``X_f^T diag(ridge_weights) X_f = Wt^T diag(s_i^2 / (s_i^2 + ridge)) Wt = (K + ridge I)^{-1} K``.

    Alg. 1 preconditions theta-gradients of the form ``2 K theta G`` (both of Thm 4.2): with these weights,
    ``(K + ridge I)^{-1} 2 K theta G = 2 X_f^T diag(ridge_weights) X_f theta G`` costs products, no solve
    (:func:`kappalab.gram.regularizers_from_data`'s ``row_weights``). Accuracy: the SVD gives each ``s_i`` to
    about ``eps s_1``, so each eigenvalue ``s_i^2 / (s_i^2 + ridge)`` to about ``2 eps s_1 / sqrt(ridge)`` at worst
    (``s_i^2 = ridge``); a Cholesky solve with ``K + ridge I`` (condition number ``s_1^2 / ridge``) is accurate to
    about ``eps s_1^2 / ridge``, and K itself, formed as ``X^T X``, carries ``eps s_1^2`` of rounding. ``ridge``
    must be > 0 (``ridge = 0`` would make the product a projector onto range(K), whose rank is a tolerance
    decision)."""
    ridge = positive_scalar(ridge, "ridge")
    return 1.0 / (s * s + ridge)


def _cholesky(A: Array, ridge: float, check: bool) -> Array:
    what = "K + ridge * I" if ridge > 0 else "K"
    hint = "" if ridge > 0 else " (K is singular or indefinite: pass ridge > 0)"
    if is_torch(A):
        import torch

        L, info = torch.linalg.cholesky_ex(A)
        if check and int(info) != 0:
            raise ValueError(f"{what} is not positive definite (Cholesky failed at pivot {int(info)}){hint}")
        return L
    import numpy as np

    try:
        return np.linalg.cholesky(A)
    except np.linalg.LinAlgError as exc:
        raise ValueError(f"{what} is not positive definite (Cholesky failed: {exc}){hint}") from None


def _cho_solve(L: Array, B: Array) -> Array:
    if is_torch(L):
        import torch

        return torch.cholesky_solve(B, L)
    from scipy.linalg import cho_solve

    return cho_solve((L, True), B, check_finite=False)
