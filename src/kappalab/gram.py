"""The regularizers and their theta-gradients from the data ``X`` or the features ``F = X theta``.

Notation (see :mod:`kappalab.linear`): data ``X`` (``N x D_in``), feature extractor ``theta`` (``D_in x D``),
features ``F = X theta`` (``N x D``), ``H(theta) = theta^T X^T X theta = F^T F`` (``D x D``, PSD).

Gram route. The nonzero eigenvalues of ``H = F^T F`` are those of the Gram matrix ``F F^T`` (``N x N``), and an
eigenvector ``u`` of ``F F^T`` with eigenvalue ``s > 0`` gives the eigenvector ``v = F^T u / sqrt(s)`` of H.
When ``N < D`` (a minibatch, or few samples) H has rank ``k <= N < D``; the ``N x N`` spectrum gives every
nonzero eigenvalue, so the rank ``k`` is counted exactly (with H's rank threshold ``D * eps * s_max``, not the
Gram matrix's ``N * eps * s_max``), and H is never formed. ``||H||_F^2 = ||F F^T||_F^2``. When ``N >= D`` H is
formed (``D x D`` is then the smaller matrix) and :func:`kappalab.spectral.psd_extremes` is used.

Gradients. With ``G = grad_H R(H)`` (symmetric), ``grad_theta R(H(theta)) = 2 X^T (F G) = 2 K theta G``. Both
closed forms ``G = s v v^T - H / c`` (``c = p`` for R_well, ``c = k`` and a factor ``1/d^2`` for R_ill) are
linear in the pair ``(v v^T, H)``, so for any matrix ``B``, ``B G`` is the same formula with ``u := B v`` and
``S := B H``. We evaluate it with the core's ``grad_*_from_extremes`` functions on those arguments (one
specification), with ``B = X^T F = K theta``:

* ``N < D`` (Gram route): ``u := X^T (F v)`` (matrix-vector products) and ``S := X^T ((F F^T) F)``, so no
  ``D x D`` matrix other than the two gradients is formed; ``O(N D_in D + N^2 D)``.
* ``N >= D``: ``S := (X^T F) H`` with ``H = F^T F``.
* from the covariance (:func:`regularizers_from_covariance`): ``M = K theta``, ``H = theta^T M``,
  ``S := M H``.

``S`` is the only large product and it is shared by both gradients: value and gradient of R_well AND R_ill
cost one product more than ``H`` itself (not two). ``F F^T`` and ``F^T F`` are formed by the symmetric
rank-k update (BLAS ``syrk``: half the flops of a general product) for NumPy input.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from ._backend import Array, is_torch, namespace
from .kappa import resolve_rtol
from .regularizers import (grad_r_ill_from_extremes, grad_r_well_from_extremes, r_ill_from_extremes,
                           r_well_from_extremes)
from .spectral import DegeneratePolicy, Extremes, psd_extremes, require_unique
from .validation import matrix, same_kind


def _sym(A: Array) -> Array:
    return 0.5 * (A + A.T)


def _syrk(F: Array, outer: bool) -> Array:
    """``F F^T`` (``outer=True``) or ``F^T F``, exactly symmetric. NumPy float32/float64: one BLAS ``syrk``
    (the upper triangle only, half the flops of a general product), mirrored; otherwise ``_sym(F @ F^T)``."""
    if is_torch(F) or F.dtype.char not in "fd":
        return _sym(F @ F.T) if outer else _sym(F.T @ F)
    import numpy as np
    from scipy.linalg.blas import get_blas_funcs

    syrk = get_blas_funcs("syrk", (F,))
    Ft = np.ascontiguousarray(F).T  # Fortran-ordered view: no copy inside the wrapper
    C = syrk(1.0, Ft, trans=1 if outer else 0, lower=0)  # Ft^T Ft = F F^T, resp. Ft Ft^T = F^T F
    upper = np.triu(C)
    upper += np.triu(C, 1).T
    return upper


def uses_gram_route(F: Array) -> bool:
    """True when the spectrum of ``F^T F`` is computed from the ``N x N`` matrix ``F F^T`` (``N < D``)."""
    return F.shape[0] < F.shape[1]


def feature_extremes(F: object, *, rtol: float | None = None, solver: str = "auto", check: bool = True,
                     name: str = "F") -> Extremes:
    """:class:`~kappalab.spectral.Extremes` of ``H = F^T F`` (``D x D``, ``p = D``) from the features ``F``.

    ``rtol`` is relative to ``s_max`` as for H (default ``D * eps``). ``N < D``: computed from ``F F^T``
    (``solver`` applies to that ``N x N`` matrix) with the vectors mapped back; otherwise from H itself.
    """
    F = matrix(F, name, check=check)
    rtol = resolve_rtol(rtol, F, dim=F.shape[1])  # the rule for the D x D matrix H
    if not uses_gram_route(F):
        return psd_extremes(_syrk(F, outer=False), rtol=rtol, solver=solver, check=check, name=f"{name}^T {name}")
    return _extremes_from_gram(F, _syrk(F, outer=True), rtol, solver, check, name)


def _extremes_from_gram(F: Array, FFt: Array, rtol: float, solver: str, check: bool, name: str) -> Extremes:
    xp = namespace(F)
    e = psd_extremes(FFt, rtol=rtol, solver=solver, check=check, name=f"{name} {name}^T")

    def back(u: Array) -> Array:
        v = F.T @ u
        return v / xp.linalg.norm(v)  # = F^T u / sqrt(s) up to rounding; normalized for accuracy

    v_max, v_min = back(e.u_max), back(e.u_min)
    return dataclasses.replace(e, u_max=v_max, v_max=v_max, u_min=v_min, v_min=v_min, p=F.shape[1])


def r_well_from_features(F: object, *, rtol: float | None = None, solver: str = "auto",
                         check: bool = True) -> Array:
    """R_well(F^T F) (Eq. 3, ``p = D``) without forming ``F^T F`` when ``N < D``."""
    return r_well_from_extremes(feature_extremes(F, rtol=rtol, solver=solver, check=check))


def r_ill_from_features(F: object, *, rtol: float | None = None, solver: str = "auto",
                        check: bool = True) -> Array:
    """R_ill(F^T F) (Eq. 12, ``k`` counted from the ``N x N`` spectrum when ``N < D``)."""
    return r_ill_from_extremes(feature_extremes(F, rtol=rtol, solver=solver, check=check), check=check,
                               name="F^T F")


def _theta_X(theta: object, X: object, check: bool) -> tuple[Array, Array]:
    theta = matrix(theta, "theta", check=check)
    X = matrix(X, "X", check=check)
    same_kind(theta, X)
    if X.shape[1] != theta.shape[0]:
        raise ValueError(f"X must be N x D_in with D_in = theta.shape[0] = {theta.shape[0]}, got X of shape "
                         f"{tuple(X.shape)}")
    return theta, X


class FromData(NamedTuple):
    """Values and theta-gradients of both regularizers of ``H(theta) = F^T F`` from one spectrum."""

    r_well: Array
    r_ill: Array
    grad_well: Array  #: Thm 4.2(1)
    grad_ill: Array  #: Thm 4.2(2)
    extremes: Extremes


def _from_extremes(e: Extremes, B: Array, S: Array, which: tuple[str, ...], on_degenerate: DegeneratePolicy,
                   gap_rtol: float | None, check: bool) -> FromData:
    """Values and ``2 B G`` for both regularizers, from ``B`` applied to the extreme vectors and ``S = B H``
    (``B`` is either a matrix or a function applying it to a ``D x 2`` block; see the module docstring)."""
    xp = namespace(S)
    need = [w for w in ("max", "min") if w in which]
    if need:
        BV = B(xp.stack([e.v_max, e.v_min], 1)) if callable(B) else B @ xp.stack([e.v_max, e.v_min], 1)
        e_left = dataclasses.replace(e, u_max=BV[:, 0], u_min=BV[:, 1])
    grads = {"max": None, "min": None}
    for w, formula in (("max", grad_r_well_from_extremes), ("min", grad_r_ill_from_extremes)):
        if w in which:
            require_unique(e, w, on_degenerate, gap_rtol, "H(theta)")
            kw = {} if w == "max" else {"check": check, "name": "H(theta)"}
            grads[w] = _twice_formula(formula, e_left, w, S, kw)
    r_ill_value = r_ill_from_extremes(e, check=check, name="H(theta)") if "min" in which else None
    return FromData(r_well_from_extremes(e), r_ill_value, grads["max"], grads["min"], e)


def _twice_formula(formula, e_left: Extremes, which: str, S: Array, kw: dict) -> Array:
    """``2 * formula(e_left, S)``. NumPy float64/float32: the closed form is ``alpha u v^T + beta S``; its two
    coefficients are read off ``formula`` itself on 1 x 1 arguments (one specification), and the ``D x D``
    result is assembled in two passes (``beta S`` and an in-place BLAS rank-1 update ``ger``) instead of the
    four temporaries of the generic expression. Other input: the generic expression."""
    if is_torch(S) or S.dtype.char not in "fd" or S.ndim != 2:
        return 2.0 * formula(e_left, S, **kw)
    import numpy as np
    from scipy.linalg.blas import get_blas_funcs

    one, zero = np.ones(1, S.dtype), np.zeros(1, S.dtype)
    uv = ("u_max", "v_max") if which == "max" else ("u_min", "v_min")
    unit = dataclasses.replace(e_left, **{uv[0]: one, uv[1]: one})
    alpha = 2.0 * float(formula(unit, zero[:, None], **kw)[0, 0])
    null = dataclasses.replace(e_left, **{uv[0]: zero, uv[1]: zero})
    beta = 2.0 * float(formula(null, one[:, None], **kw)[0, 0])
    G = np.multiply(S, beta, dtype=S.dtype, order="C")  # C-ordered; G.T is its Fortran-ordered view
    ger = get_blas_funcs("ger", (G,))
    out = ger(alpha, getattr(e_left, uv[1]), getattr(e_left, uv[0]), a=G.T, overwrite_a=1)  # G^T += a v u^T
    return out.T


def regularizers_from_data(theta: object, X: object, *, rtol: float | None = None, solver: str = "auto",
                           on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None,
                           check: bool = True, which: tuple[str, ...] = ("max", "min"),
                           row_weights: object | None = None) -> FromData:
    """R_well, R_ill and both theta-gradients of ``H = theta^T X^T X theta`` from one spectrum (a training step).

    ``which`` limits the work to the gradient of R_well (``"max"``) or R_ill (``"min"``); the other gradient
    is then ``None``. The degeneracy policy applies to s_max for R_well and to s_min for R_ill.

    ``row_weights`` (``w``, one per row of X): the gradients are returned as ``2 X^T diag(w) X theta G`` instead of
    ``2 X^T X theta G`` (``B = X^T diag(w) F``; one scaling of ``F``'s rows, no product more). With X the factor
    ``diag(s) Wt`` of K (:func:`kappalab.linear.covariance_factor`) and ``w = 1 / (s^2 + ridge)``
    (:func:`kappalab.linear.ridge_weights`), ``X^T diag(w) X = (K + ridge I)^{-1} K``: Alg. 1's preconditioned
    gradients ``(K + ridge I)^{-1} grad_theta R`` without a solve.
    """
    theta, X = _theta_X(theta, X, check)
    F = X @ theta
    if row_weights is not None and tuple(row_weights.shape) != (X.shape[0],):
        raise ValueError(f"row_weights must hold one weight per row of X ({X.shape[0]}), got shape "
                         f"{tuple(row_weights.shape)}")
    weigh = (lambda A: A) if row_weights is None else (lambda A: row_weights[:, None] * A)
    rtol = resolve_rtol(rtol, F, dim=F.shape[1])  # the rule for the D x D matrix H
    if uses_gram_route(F):
        FFt = _syrk(F, outer=True)
        e = _extremes_from_gram(F, FFt, rtol, solver, check, "F")
        # B = X^T F: B v = X^T (F v) and S = B H = X^T ((F F^T) F), never forming a D x D matrix
        S = X.T @ weigh(FFt @ F) if which else None
        return _from_extremes(e, lambda V: X.T @ weigh(F @ V), S, which, on_degenerate, gap_rtol, check)
    H = _syrk(F, outer=False)
    e = psd_extremes(H, rtol=rtol, solver=solver, check=check, name="H(theta)")
    M = X.T @ weigh(F) if which else None  # = K theta (X^T diag(w) X theta with row weights)
    return _from_extremes(e, M, M @ H if which else None, which, on_degenerate, gap_rtol, check)


def regularizers_from_covariance(theta: object, K: object, *, rtol: float | None = None, solver: str = "auto",
                                 tracker: object | None = None, on_degenerate: DegeneratePolicy = "raise",
                                 gap_rtol: float | None = None, check: bool = True,
                                 which: tuple[str, ...] = ("max", "min")) -> FromData:
    """As :func:`regularizers_from_data`, from the covariance ``K = X^T X`` (``D_in x D_in``).

    Products: ``M = K theta``, ``H = theta^T M`` and ``S = M H`` (shared by both gradients: Thm 4.2 gives
    ``2 M G = 2 formula(u := M v, S := M H)``). The spectrum comes from ``psd_extremes(H, solver=solver)``, or
    from ``tracker`` (a :class:`kappalab.tracker.ExtremeTracker`, warm-started across calls; its own ``rtol``
    applies) when given. Equal to :func:`kappalab.linear.grad_theta_r_well` / ``grad_theta_r_ill``.
    """
    from .linear import checked_theta_and_K

    theta, K = checked_theta_and_K(theta, K, check)
    M = K @ theta
    H = _sym(theta.T @ M)
    if tracker is not None:
        e = tracker(H, check=check, name="H(theta)")
    else:
        e = psd_extremes(H, rtol=rtol, solver=solver, check=check, name="H(theta)")
    return _from_extremes(e, M, M @ H if which else None, which, on_degenerate, gap_rtol, check)


def regularizers_from_features(F: object, *, rtol: float | None = None, solver: str = "auto",
                               on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None,
                               check: bool = True, which: tuple[str, ...] = ("max", "min")) -> FromData:
    """R_well, R_ill of ``H = F^T F`` and their gradients with respect to the features ``F`` (``N x D``), ``2 F G``
    with ``G = grad_H R``: :func:`regularizers_from_data` with ``X = I`` (``B = F``). ``N < D``: from the Gram
    matrix (``F v`` and ``S = (F F^T) F``, ``O(N^2 D)``, no ``D x D`` matrix); otherwise ``S = F H``. The deep nets'
    step (:mod:`kappalab.deep.methods`, ``spectral_route="gram"``) takes its regularizers here."""
    F = matrix(F, "F", check=check)
    rtol = resolve_rtol(rtol, F, dim=F.shape[1])  # the rule for the D x D matrix H
    if uses_gram_route(F):
        FFt = _syrk(F, outer=True)
        e = _extremes_from_gram(F, FFt, rtol, solver, check, "F")
        return _from_extremes(e, lambda V: F @ V, FFt @ F if which else None, which, on_degenerate, gap_rtol, check)
    H = _syrk(F, outer=False)
    e = psd_extremes(H, rtol=rtol, solver=solver, check=check, name="F^T F")
    return _from_extremes(e, F, F @ H if which else None, which, on_degenerate, gap_rtol, check)


def r_well_of_features(F: object, **options: object) -> Array:
    """R_well(F^T F) (Eq. 3, ``p = D``); torch input that requires grad backpropagates the closed form ``2 F G``
    (:func:`regularizers_from_features`, whose keyword options these take)."""
    return _differentiable(F, "max", options)


def r_ill_of_features(F: object, **options: object) -> Array:
    """R_ill(F^T F) (Eq. 12, ``k`` the rank of H); differentiable as :func:`r_well_of_features`."""
    return _differentiable(F, "min", options)


def _differentiable(F: object, which: str, options: dict) -> Array:
    def value_and_gradient(Fd: Array) -> tuple[Array, Array]:
        r = regularizers_from_features(Fd, which=(which,), **options)
        return (r.r_well, r.grad_well) if which == "max" else (r.r_ill, r.grad_ill)

    if is_torch(F) and F.requires_grad:
        from ._torch_functions import ClosedFormGradient

        return ClosedFormGradient.apply(F, value_and_gradient)
    return value_and_gradient(F)[0]


def grad_theta_r_well_from_data(theta: object, X: object, *, rtol: float | None = None, solver: str = "auto",
                                on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None,
                                check: bool = True) -> Array:
    """Thm 4.2(1) from the data: ``2 X^T X theta (s_1 v_1 v_1^T - H/D)``, equal to
    :func:`kappalab.linear.grad_theta_r_well` with ``K = X^T X``; Gram route when ``N < D``."""
    return regularizers_from_data(theta, X, rtol=rtol, solver=solver, on_degenerate=on_degenerate,
                                  gap_rtol=gap_rtol, check=check, which=("max",)).grad_well


def grad_theta_r_ill_from_data(theta: object, X: object, *, rtol: float | None = None, solver: str = "auto",
                               on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None,
                               check: bool = True) -> Array:
    """Thm 4.2(2) from the data: ``2 X^T X theta (s_k v_k v_k^T - H/k) / d^2``, equal to
    :func:`kappalab.linear.grad_theta_r_ill` with ``K = X^T X``; Gram route when ``N < D``."""
    return regularizers_from_data(theta, X, rtol=rtol, solver=solver, on_degenerate=on_degenerate,
                                  gap_rtol=gap_rtol, check=check, which=("min",)).grad_ill
