"""Step-size claims (TA.1.4, T4.1.4, T4.3.1, T4.3.2): check a drawn step, and measure the bound's tightness.

A :class:`StepProblem` says, for one claim, how to take the step and compute ``(kappa before, kappa after)``
and the stated bound, in float64 (``mp=False``) or in 80 digits (``mp=True``), all with the formulas of
:mod:`proofs_checks.paper`. ``check_step_claim`` draws ``eta = f * bound``; a float64 violation (or a step that
float64 cannot evaluate) is re-decided in 80 digits, and only an 80-digit violation fails the test.

``measure_bound`` estimates ``eta_max = sup{eta : every step in (0, eta) keeps the claimed monotonicity}``:

* a float64 scan of ``bound * 10^[-6, 3]`` on a geometric grid for the first failing step, refined by bisection;
* plus the isolated *critical* steps where, by the closed-form spectral dynamics of the step, one singular value
  of the new matrix is exactly 0 (the rank drops there, and with it the pseudo-inverse kappa): a grid never
  lands on such a point, so each is evaluated in 80 digits.

``eta_max / bound >= 1`` means the stated bound is sufficient (``= 1``: tight, ``> 1``: conservative by that
factor); ``< 1`` means the bound admits steps that break the claim (re-confirmed in 80 digits before it counts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Literal

import numpy as np

from .checks import mp_ok
from .evidence import Evidence
from .highprec import MP_LABEL, fmt, mp_extremes, mp_spectral, workdps
from .paper import Undefined, ext64, hessian, kappa, theta_step

GRID = 10.0 ** np.linspace(-6, 3, 73)
#: what float64 cannot evaluate (singular solves, 0/0, an undefined R_ill): re-decided in 80 digits
FLOAT_TROUBLE = (Undefined, ZeroDivisionError, FloatingPointError, ValueError, OverflowError,
                 np.linalg.LinAlgError)


@dataclass(frozen=True)
class StepProblem:
    """One monotonicity claim. ``case`` is whatever the strategy draws (a SpectralMatrix, or theta and K)."""

    claim: str
    direction: Literal["increase", "decrease"]
    kappas: Callable[[Any, Any, bool], tuple[Any, Any]]  #: (case, eta, mp) -> (kappa, kappa after the step)
    bound: Callable[[Any, bool], Any]  #: (case, mp) -> the stated bound
    critical: Callable[[Any, bool], list]  #: (case, mp) -> steps at which a singular value becomes exactly 0

    def monotone(self, k0, k1, *, mp: bool = False) -> bool:
        if mp:
            return mp_ok(k1, k0, strict=True) if self.direction == "decrease" else mp_ok(k0, k1, strict=True)
        return bool(k1 < k0) if self.direction == "decrease" else bool(k1 > k0)

    def float_ok(self, case, eta: float) -> bool:
        try:
            with np.errstate(all="ignore"):
                k0, k1 = self.kappas(case, eta, False)
                return bool(np.isfinite(float(k1))) and self.monotone(k0, k1)
        except FLOAT_TROUBLE:
            return False

    def float_bound(self, case) -> float:
        try:
            with np.errstate(all="ignore"):
                return float(self.bound(case, False))
        except FLOAT_TROUBLE:
            return math.nan


def family_of(case: Any) -> str:
    return getattr(case, "family", "case")


def check_step_claim(problem: StepProblem, case: Any, f: float, ev: Evidence) -> None:
    """Assert the claim for ``eta = f * bound``; a vacuous bound (<= 0 in 80 digits) is counted, not checked."""
    bound = problem.float_bound(case)
    if bound > 0 and np.isfinite(bound) and problem.float_ok(case, f * bound):
        ev.case(family_of(case))
        return
    with workdps():
        bound = problem.bound(case, True)
        if not bound > 0:
            ev.case(family_of(case) + ",vacuous-bound", MP_LABEL)
            return
        eta = f * bound
        k0, k1 = problem.kappas(case, eta, True)
        assert problem.monotone(k0, k1, mp=True), (
            f"{problem.claim} violated in {MP_LABEL}: eta = {fmt(eta)} = {f!r} * bound ({fmt(bound)}); "
            f"kappa before = {fmt(k0)}, after = {fmt(k1)} (claimed to {problem.direction})\n{case!r}")
    ev.case(family_of(case) + ",mp-recheck", MP_LABEL)


def first_float_failure(problem: StepProblem, case: Any, bound: float) -> float:
    """Smallest failing step on the float64 grid, refined by bisection (``inf`` if none up to ``1000 bound``)."""
    good, bad = 0.0, None
    for eta in bound * GRID:
        if problem.float_ok(case, eta):
            good = eta
        else:
            bad = eta
            break
    if bad is None:
        return math.inf
    for _ in range(40):
        mid = 0.5 * (good + bad)
        good, bad = (mid, bad) if problem.float_ok(case, mid) else (good, mid)
    return bad


def measure_bound(problem: StepProblem, case: Any, ev: Evidence, keys: tuple[str, ...] = (),
                  expect_sufficient: bool = False) -> float | None:
    """Record ``eta_max / bound`` for ``case`` under ``eta_max/bound[<key>]`` for each key (default: the first
    three fields of the family). Returns the ratio; None when the bound is vacuous (<= 0 in 80 digits); nan when
    the only failure inside the bound was a float64 artifact (refuted in 80 digits).

    With ``expect_sufficient`` (claims whose verdict is "holds"), a failing step inside the bound that survives
    the 80-digit re-check fails the test: the measurement doubles as a search for counterexamples.
    """
    keys = keys or (",".join(family_of(case).split(",")[:3]),)
    bound = problem.float_bound(case)
    if not (bound > 0 and np.isfinite(bound)):
        with workdps():
            if not problem.bound(case, True) > 0:
                ev.sample(f"vacuous bound [{keys[0]}]", 1.0)
                ev.case(family_of(case) + ",measure,vacuous-bound", MP_LABEL)
                return None
        raise AssertionError(f"{problem.claim}: float64 bound {bound!r} unusable but 80-digit bound positive\n"
                             f"{case!r}")
    ev.sample(f"vacuous bound [{keys[0]}]", 0.0)
    first = first_float_failure(problem, case, bound)
    ratio, where = first / bound, "grid"
    with workdps():
        mp_bound = problem.bound(case, True)
        for eta_c in sorted(x for x in problem.critical(case, True) if x > 0):
            if float(eta_c) > first * (1 + 1e-6):
                break
            k0, k1 = problem.kappas(case, eta_c, True)
            if not problem.monotone(k0, k1, mp=True):
                ratio, where = float(eta_c / mp_bound), "critical"
                break
        if ratio < 1 and where == "grid":  # re-decide just past the float64 failure point in 80 digits
            k0, k1 = problem.kappas(case, mp_bound * min(ratio * (1 + 1e-6), 1 - 1e-9), True)
            if problem.monotone(k0, k1, mp=True):  # float64 lost a singular value to rounding: not real
                ev.note(f"{problem.claim}: a float64-only failure inside the bound was refuted in {MP_LABEL}")
                ev.case(family_of(case) + ",measure,float64-artifact", MP_LABEL)
                return math.nan
        if expect_sufficient:
            assert ratio >= 1 - 1e-12, (
                f"{problem.claim} violated in {MP_LABEL} inside the stated bound: eta = {ratio!r} * bound "
                f"({fmt(mp_bound)}), found on the {where}\n{case!r}")
    for key in keys:
        ev.sample(f"eta_max/bound [{key}]", ratio)
    ev.case(family_of(case) + f",measure,{where}", MP_LABEL if where == "critical" else "float64")
    return ratio


def assert_bound_ratio_scale_invariant(problem: StepProblem, sm: Any, ev: Evidence, scales: tuple[int, ...]) -> None:
    """Measure eta_max / stated bound on ``sm`` scaled by 10^c for each c, and assert the ratio does not depend on
    the scale (the matrix-level bounds of Thm 4.1(4) and A.1(4) are scale-consistent by construction)."""
    fam = ",".join(sm.family.split(",")[:3])
    ratios = [measure_bound(problem, scaled(sm, 10.0**c), ev, keys=(f"S x1e{c}", fam), expect_sufficient=True)
              for c in scales]
    # float64 locates a grid failure (a root of kappa(eta) - kappa, often near-double where two eigenvalues
    # cross) to ~sqrt(eps) relative, so scale invariance is asserted to 1e-4 (rank-drop steps are exact).
    real = [r for r in ratios if r is not None and r == r]
    if len(real) == len(ratios):
        assert max(real) <= min(real) * (1 + 1e-4), f"eta_max/bound not scale-invariant: {ratios}\n{sm!r}"


def scaled(sm, c: float):
    """The SpectralMatrix ``c * sm`` (same factors, spectrum times c)."""
    return type(sm)(sm.s * c, sm.U, sm.V, sm.family)


def matrix_step_problem(claim: str, direction: Literal["increase", "decrease"], grad: Callable,
                        bound: Callable, critical: Callable) -> StepProblem:
    """A claim about ``S' = S - eta grad R(S)`` (TA.1.4, T4.1.4); ``case`` is a SpectralMatrix.
    ``grad(e, S)``, ``bound(e)`` and ``critical(e)`` take the :class:`~proofs_checks.paper.Ext` of S."""

    def at(sm, mp):
        S = mp_spectral(sm) if mp else sm.matrix
        return S, (mp_extremes if mp else ext64)(S)

    def kappas(sm, eta, mp):
        S, e = at(sm, mp)
        return kappa(e), kappa((mp_extremes if mp else ext64)(S - eta * grad(e, S)))

    return StepProblem(claim, direction, kappas, lambda sm, mp: bound(at(sm, mp)[1]),
                       lambda sm, mp: critical(at(sm, mp)[1]))


def theta_step_problem(claim: str, direction: Literal["increase", "decrease"], kind: str, bound: Callable,
                       critical: Callable) -> StepProblem:
    """A claim about ``theta' = theta - eta K^-1 grad_theta R(H(theta))`` (T4.3.1, T4.3.2); case: ThetaK.
    ``bound(e, D)`` and ``critical(e, D)`` take the Ext of H and D = D_in."""

    def mats(c, mp):
        return (mp_spectral(c.theta), mp_spectral(c.K)) if mp else (c.theta.matrix, c.K.matrix)

    def kappas(c, eta, mp):
        theta, K = mats(c, mp)
        e, e1 = theta_step(kind, theta, K, eta, mp_extremes if mp else ext64)
        return kappa(e), kappa(e1)

    def on_h(fn):
        def run(c, mp):
            theta, K = mats(c, mp)
            return fn((mp_extremes if mp else ext64)(hessian(theta, K)), theta.shape[0])
        return run

    return StepProblem(claim, direction, kappas, on_h(bound), on_h(critical))


def scaled_k(case, c: float):
    """The ThetaK with K replaced by ``c K``."""
    return type(case)(case.theta, scaled(case.K, c))
