"""S3.1 (Sec. 3.1): if the eigenvectors of K_P and K_H are perfectly aligned (same order), no theta can both
maximize kappa(H_H) and minimize kappa(H_P).

Interpretation: K_P = Q diag(a) Q^T, K_H = Q diag(b) Q^T, a and b sorted the same way; the claim is read as
"no theta achieves immunization in the sense of Def. 3.1: kappa(H_P(theta)) < kappa(K_P) and
kappa(H_H(theta)) > kappa(K_H) (RIR > 1)". Verdict: fails: theta = Q diag(c) Q^T suffices when the two spectra
differ in shape. Exact counterexample: K_P = diag(4, 1), K_H = diag(2, 1), theta = diag(1/3, 1):
kappa(H_P) = 9/4 < 4, kappa(H_H) = 9/2 > 2, RIR = 4. It holds when K_H is proportional to K_P (RIR = 1).
"""

from __future__ import annotations

import numpy as np
import sympy as sp
from hypothesis import given, strategies as st

from .evidence import Evidence
from .paper import ext64, hessian, kappa, rir
from .profiles import budget
from .strategies import DIMS, haar_orthogonal

EV = Evidence("S3.1")


def test_aligned_covariances_admit_immunizing_theta_exactly():
    KP, KH, theta = sp.diag(4, 1), sp.diag(2, 1), sp.diag(sp.Rational(1, 3), 1)
    kappa = lambda A: max(A.diagonal()) / min(A.diagonal())  # noqa: E731  (diagonal PD matrices)
    kP, kH = kappa(theta.T * KP * theta), kappa(theta.T * KH * theta)
    assert kP < kappa(KP) and kH > kappa(KH)
    ratio = (kH / kappa(KH)) / (kP / kappa(KP))
    assert ratio == 4
    EV.counterexample("K_P = diag(4,1), K_H = diag(2,1), theta = diag(1/3, 1)", "exact (sympy)",
                      kappa_HP=kP, kappa_KP=kappa(KP), kappa_HH=kH, kappa_KH=kappa(KH), RIR=ratio)


@budget(30)
@given(D=st.integers(*DIMS), seed=st.integers(0, 2**31), log_a=st.floats(0.5, 3), shrink=st.floats(0.05, 0.5))
def test_aligned_random_spectra_with_different_shapes_give_rir_above_one(D, seed, log_a, shrink):
    """a = geometric spectrum with ratio 10^log_a; b = same directions, ratio shrunk; theta = Q diag(c) Q^T with
    c^2 = 1/a' overshooting so the top direction of H_H flips: kappa(H_P) drops, kappa(H_H) grows."""
    Q = haar_orthogonal(D, seed)
    a = 10.0 ** (log_a * np.arange(D)[::-1])
    b = 10.0 ** (shrink * log_a * np.arange(D)[::-1])
    c2 = 1 / (a * b) ** 0.5  # geometric mean: compresses a, reverses b
    KP, KH, theta = (Q * a) @ Q.T, (Q * b) @ Q.T, (Q * np.sqrt(c2)) @ Q.T
    kP, kP0 = kappa(ext64(hessian(theta, KP))), kappa(ext64(KP))
    r = rir(theta, KP, KH)
    assert kP < kP0 and r > 1, (kP, kP0, r)
    EV.case(f"aligned D={D}")


@budget(15)
@given(D=st.integers(*DIMS), seed=st.integers(0, 2**31), scale=st.floats(0.01, 100), tseed=st.integers(0, 2**31))
def test_proportional_covariances_cannot_be_separated(D, seed, scale, tseed):
    Q = haar_orthogonal(D, seed)
    a = 10.0 ** np.linspace(2, 0, D)
    theta = np.random.default_rng(tseed).standard_normal((D, D))
    r = rir(theta, (Q * a) @ Q.T, (Q * (scale * a)) @ Q.T)
    assert abs(r - 1) < 1e-6, r
    EV.case(f"proportional D={D}")


def test_global_minimizer_of_kappa_hp_raises_kappa_hh_exactly():
    # theta = K_P^{-1/2} attains the global minimum kappa(H_P) = 1; with aligned K_H = diag(3/2, 1) it raises
    # kappa(H_H) from 3/2 to 8/3 (H_H = diag(3/8, 1)). Exact.
    KP, KH, theta = sp.diag(4, 1), sp.diag(sp.Rational(3, 2), 1), sp.diag(sp.Rational(1, 2), 1)
    kappa = lambda A: max(A.diagonal()) / min(A.diagonal())  # noqa: E731  (diagonal PD matrices)
    kP, kH = kappa(theta.T * KP * theta), kappa(theta.T * KH * theta)
    assert kP == 1 and kH == sp.Rational(8, 3) and kH > kappa(KH)
    EV.counterexample("global min of kappa(H_P): K_P = diag(4,1), K_H = diag(3/2,1), theta = K_P^(-1/2)",
                      "exact (sympy)", kappa_HP=kP, kappa_HH=kH, kappa_KH=kappa(KH), RIR=(kH / kappa(KH)) / (kP / 4))
