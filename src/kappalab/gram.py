"""The regularizers and their theta-gradients from the data ``X`` or the features ``F = X theta``.

Notation (see :mod:`kappalab.linear`): data ``X`` (``N x D_in``), feature extractor ``theta`` (``D_in x D``),
features ``F = X theta`` (``N x D``), ``H(theta) = theta^T X^T X theta = F^T F`` (``D x D``, PSD).

Gram route. The nonzero eigenvalues of ``H = F^T F`` are those of the Gram matrix ``F F^T`` (``N x N``), and an
eigenvector ``u`` of ``F F^T`` with eigenvalue ``s > 0`` gives the eigenvector ``v = F^T u / sqrt(s)`` of H.
When ``N < D`` (a minibatch, or few samples) H has rank ``k <= N < D``; the ``N x N`` spectrum gives every
nonzero eigenvalue, so the rank ``k`` is counted exactly (with H's rank threshold ``D * eps * s_max``, not the
Gram matrix's ``N * eps * s_max``), and H is never formed. ``||H||_F^2 = ||F F^T||_F^2``. When ``N >= D`` H is
formed (``D x D`` is then the smaller matrix) and :func:`kappalab.spectral.psd_extremes` is used.

Gradients. With ``G = grad_H R(H)`` (symmetric), ``grad_theta R(H(theta)) = 2 X^T (F G)``. Both closed forms
``G = s v v^T - H / c`` (``c = p`` for R_well, ``c = k`` and a factor ``1/d^2`` for R_ill) are linear in the
pair ``(v v^T, H)``, so ``F G`` is the same formula with ``u := F v`` and ``S := F H = (F F^T) F``:
``F G = s (F v) v^T - (F F^T) F / c``. We evaluate it with the core's ``grad_*_from_extremes`` functions on
those arguments (one specification), in ``O(N^2 D + N D_in D)`` instead of ``O(D^3)``.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from ._backend import Array, eps, namespace
from .regularizers import (grad_r_ill_from_extremes, grad_r_well_from_extremes, r_ill_from_extremes,
                           r_well_from_extremes)
from .spectral import DegeneratePolicy, Extremes, psd_extremes, require_unique
from .validation import matrix, same_kind


def _sym(A: Array) -> Array:
    return 0.5 * (A + A.T)


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
    rtol = F.shape[1] * eps(F) if rtol is None else rtol
    if not uses_gram_route(F):
        return psd_extremes(_sym(F.T @ F), rtol=rtol, solver=solver, check=check, name=f"{name}^T {name}")
    return _extremes_from_gram(F, _sym(F @ F.T), rtol, solver, check, name)


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


def regularizers_from_data(theta: object, X: object, *, rtol: float | None = None, solver: str = "auto",
                           on_degenerate: DegeneratePolicy = "raise", gap_rtol: float | None = None,
                           check: bool = True, which: tuple[str, ...] = ("max", "min")) -> FromData:
    """R_well, R_ill and both theta-gradients of ``H = theta^T X^T X theta`` from one spectrum (a training step).

    ``which`` limits the work to the gradient of R_well (``"max"``) or R_ill (``"min"``); the other gradient
    is then ``None``. The degeneracy policy applies to s_max for R_well and to s_min for R_ill.
    """
    theta, X = _theta_X(theta, X, check)
    F = X @ theta
    rtol = F.shape[1] * eps(F) if rtol is None else rtol
    if uses_gram_route(F):
        FFt = _sym(F @ F.T)
        e = _extremes_from_gram(F, FFt, rtol, solver, check, "F")
        # F G = formula(u := F v, S := F H), with F H = (F F^T) F
        e_left, S = dataclasses.replace(e, u_max=F @ e.v_max, u_min=F @ e.v_min), FFt @ F
    else:
        S = _sym(F.T @ F)
        e = e_left = psd_extremes(S, rtol=rtol, solver=solver, check=check, name="H(theta)")
    grads = {}
    for w, formula in (("max", grad_r_well_from_extremes), ("min", grad_r_ill_from_extremes)):
        if w not in which:
            grads[w] = None
            continue
        require_unique(e, w, on_degenerate, gap_rtol, "H(theta)")
        kw = {} if w == "max" else {"check": check, "name": "H(theta)"}
        G = formula(e_left, S, **kw)
        grads[w] = 2.0 * (X.T @ (G if e_left is not e else F @ G))
    r_ill_value = r_ill_from_extremes(e, check=check, name="H(theta)") if "min" in which else None
    return FromData(r_well_from_extremes(e), r_ill_value, grads["max"], grads["min"], e)


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
