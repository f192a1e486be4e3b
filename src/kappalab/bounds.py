"""Step-size bounds of the monotonicity theorems, exactly as the paper states them.

These functions only evaluate the paper's right-hand sides; whether the theorems hold is decided in
``proofs_checks/``. Notation as in :mod:`kappalab.regularizers` (``kappa``, ``p``, ``k``,
``d = ||S||_F^2/(2k) - s_min^2/2``) and :mod:`kappalab.linear` (``H = theta^T K theta``, ``D = D_in``).

* Thm A.1(4): ``eta < (kappa - 1) / ((1 - 1/p) kappa + 1/p)`` for ``S - eta grad R_well(S)``.
* Thm 4.1(4): ``eta < k/(k-1) * d^2`` for ``S - eta grad R_ill(S)``.
* Thm 4.3(1): ``eta_P < min{ 1/((1 - 1/D) s_1), (s_1 s_2 - s_2^2) / (D s_2^2) }`` for
  ``theta - eta_P K_P^{-1} grad_theta R_well(H_P)`` (s_i the eigenvalues of H_P; the second term is +inf when
  s_2 = 0, where the paper's expression is 0/0 and the constraint it encodes is void).
* Thm 4.3(2): ``eta_H < d^2 / (1 - 2 s_min / k)`` for ``theta - eta_H K_H^{-1} grad_theta R_ill(H_H)``. The
  denominator mixes a pure number with ``s_min`` (which scales with K), so the bound is not scale-invariant;
  when ``1 - 2 s_min / k <= 0`` the paper's condition admits no positive step and the statement is vacuous.
  The value is returned as written (possibly negative or +inf); the caller decides what that means.
"""

from __future__ import annotations

import math

from ._backend import Array, as_dtype_of, scalar_like, to_scalar
from .linear import hessian_extremes
from .regularizers import extremes, ill_denominator


def step_bound_well(S: object, *, rtol: float | None = None, psd: bool = False) -> Array:
    """Thm A.1(4): ``(kappa - 1) / ((1 - 1/p) kappa + 1/p)``."""
    e = extremes(S, rtol=rtol, psd=psd)
    kappa = e.s_max / e.s_min
    return (kappa - 1) / ((1 - 1 / e.p) * kappa + 1 / e.p)


def step_bound_ill(S: object, *, rtol: float | None = None, psd: bool = False) -> Array:
    """Thm 4.1(4): ``k/(k-1) * (||S||_F^2/(2k) - s_min^2/2)^2`` (undefined, and an error, when k < 2)."""
    e = extremes(S, rtol=rtol, psd=psd)
    d = ill_denominator(e)
    k = as_dtype_of(e.rank, d)
    return k / (k - 1) * d * d


def step_bound_theta_well(theta: object, K: object, *, rtol: float | None = None) -> Array:
    """Thm 4.3(1): ``min{ 1/((1 - 1/D) s_1), (s_1 s_2 - s_2^2)/(D s_2^2) }`` on the eigenvalues of H_P."""
    _, _, H, e = hessian_extremes(theta, K, rtol=rtol)
    D = H.shape[0]
    if D == 1:  # both terms are 1/0: no constraint on the step
        return scalar_like(e.s_max, math.inf)
    first = 1.0 / ((1 - 1 / D) * e.s_max)
    if to_scalar(e.s_2) <= to_scalar(e.threshold):
        return first
    second = (e.s_max * e.s_2 - e.s_2 * e.s_2) / (D * e.s_2 * e.s_2)
    return first if to_scalar(first) <= to_scalar(second) else second


def step_bound_theta_ill(theta: object, K: object, *, rtol: float | None = None) -> Array:
    """Thm 4.3(2): ``d^2 / (1 - 2 s_min / k)`` on H_H, as written (negative or +inf: see module docstring)."""
    _, _, _, e = hessian_extremes(theta, K, rtol=rtol)
    d = ill_denominator(e, name="H(theta)")
    denom = 1 - 2 * e.s_min / as_dtype_of(e.rank, e.s_min)
    if to_scalar(denom) == 0:
        return scalar_like(e.s_max, math.inf)
    return d * d / denom
