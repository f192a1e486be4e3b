"""Relative immunization ratio (Eq. 15, and Eq. 17 with a pre-trained reference theta_0).

``RIR = [kappa(H_H(theta_I)) / kappa(H_H(ref))] / [kappa(H_P(theta_I)) / kappa(H_P(ref))]`` with ``ref = I`` (Eq.
15, so ``H(I) = K``) or ``ref = theta_0`` (Eq. 17). Term (i) is the first ratio (immunization wants it large),
term (ii) the second (want it near or below 1). kappa uses the pseudo-inverse definition of
:func:`~kappalab.kappa.condition_number` with relative rank tolerance ``rtol``; the terms are
:func:`kappalab.kappa.rir_terms`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._backend import to_scalar
from .kappa import condition_number, rir_terms
from .linear import hessian


@dataclass(frozen=True)
class RIRResult:
    """Eq. 15/17 terms and the four condition numbers behind them (Python floats)."""

    term_i: float  #: kappa(H_H(theta_I)) / kappa(H_H(ref))
    term_ii: float  #: kappa(H_P(theta_I)) / kappa(H_P(ref))
    rir: float  #: term_i / term_ii
    kappa_H_immunized: float
    kappa_H_reference: float
    kappa_P_immunized: float
    kappa_P_reference: float


def rir(theta_I: object, K_P: object, K_H: object, theta_0: object | None = None, *,
        rtol: float | None = None) -> RIRResult:
    """Eq. 15 (``theta_0=None``: reference is the identity) or Eq. 17 (reference ``theta_0``)."""

    def kappa(theta: object | None, K: object) -> float:
        H = K if theta is None else hessian(theta, K)
        return to_scalar(condition_number(H, rtol, psd=True))

    kH_I, kH_0 = kappa(theta_I, K_H), kappa(theta_0, K_H)
    kP_I, kP_0 = kappa(theta_I, K_P), kappa(theta_0, K_P)
    return RIRResult(*rir_terms(kH_I, kH_0, kP_I, kP_0), kH_I, kH_0, kP_I, kP_0)
