"""E2 (Eq. 2): gradient descent with step 1/s_max on a strongly convex quadratic contracts the error by
``(1 - s_min/s_max)`` per step: ``||w_t - w*|| <= (1 - s_min/s_max)^t ||w_0 - w*||``.

Quadratic ``f(w) = 1/2 (w - w*)^T A (w - w*)`` with ``A`` symmetric positive definite (spectrum in
[s_min, s_max]); checked for t = 1..50. Verdict: holds (the iteration matrix I - A/s_max has spectral norm
exactly 1 - s_min/s_max).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from .evidence import Evidence
from .highprec import MP_LABEL, mp_spectral, to_mp, workdps, fmt
from .profiles import budget
from .strategies import spectral_matrices

EV = Evidence("E2")
T = 50


def _errors(A, e0, s_max, steps: int) -> list:
    """``||w_t - w*||`` for t = 0..steps (works for float and 80-digit object arrays)."""
    out, e = [], e0
    for _ in range(steps + 1):
        out.append(np.sqrt(float(e @ e)) if e.dtype != object else (e @ e) ** 0.5)
        e = e - (A @ e) / s_max
    return out


@budget(40)
@given(sm=spectral_matrices(psd=True, rank="full", max_log_kappa=6), seed=st.integers(0, 2**31))
def test_constant_step_gd_error_contracts_by_one_minus_inverse_kappa(sm, seed):
    A = sm.matrix
    e0 = np.random.default_rng(seed).standard_normal(A.shape[0])
    kappa = float(sm.s[0] / sm.s[-1])  # A is built from this spectrum
    s_max = sm.s[0]
    errs = _errors(A, e0, s_max, T)
    rate = 1 - 1 / kappa
    # float64: each step adds a rounding error of about D * eps * (||e|| + ||A e|| / s_max) <= 2 D eps ||e_0||
    slack = [4 * A.shape[0] * np.finfo(float).eps * (t + 1) * errs[0] for t in range(T + 1)]
    bad = [t for t in range(T + 1) if errs[t] > rate**t * errs[0] + slack[t]]
    if bad:
        with workdps():
            Am, em = mp_spectral(sm), to_mp(e0)
            mp_errs = _errors(Am, em, to_mp(sm.s)[0], T)
            rate_mp = 1 - to_mp(sm.s)[-1] / to_mp(sm.s)[0]
            for t in bad:
                assert mp_errs[t] <= rate_mp**t * mp_errs[0], (
                    f"E2 violated at t={t}: ||w_t - w*|| = {fmt(mp_errs[t])} > (1 - 1/kappa)^t ||w_0 - w*|| = "
                    f"{fmt(rate_mp**t * mp_errs[0])}\n{sm!r}")
        EV.case(sm.family + ",mp-recheck", MP_LABEL)
    else:
        EV.case(sm.family, "float64")
