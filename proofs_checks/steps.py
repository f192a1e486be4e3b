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
from dataclasses import dataclass, replace
from typing import Any, Callable, Literal

import mpmath as mp
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


def scan_grid(bound: float, critical: list[float]) -> list[float]:
    """The steps a measurement tries, as multiples of the bound: ``GRID`` plus ``eta_c (1 +- 1e-6)`` around each
    critical step (next to a rank drop one singular value is tiny, and the failure window it opens, kappa -> inf
    for a "decrease" claim, can be narrower than a grid cell)."""
    near = [c / bound * (1 + t) for c in critical if 0 < c < 1e3 * bound for t in (-1e-6, 1e-6)]
    return sorted([*GRID, *near])


def first_failure(ok: Callable[[Any], bool], etas: list, start: Any = 0.0) -> Any:
    """Smallest step of ``etas`` above ``start`` where ``ok`` is False, refined by 40 bisections (``inf`` if
    none)."""
    good, bad = start, None
    for eta in (x for x in etas if x > start):
        if ok(eta):
            good = eta
        else:
            bad = eta
            break
    if bad is None:
        return math.inf
    for _ in range(40):
        mid = (good + bad) / 2
        good, bad = (mid, bad) if ok(mid) else (good, mid)
    return bad


def measure_bound(problem: StepProblem, case: Any, ev: Evidence, keys: tuple[str, ...] = (),
                  expect_sufficient: bool = False) -> float | None:
    """Record ``eta_max / bound`` for ``case`` under ``eta_max/bound[<key>]`` for each key (default: the first
    three fields of the family). Returns the ratio (``inf``: no failure up to 1000 bound); None when the bound is
    vacuous (<= 0 in 80 digits). A float64 failure inside the bound that 80 digits refute (a singular value lost
    to rounding) is not a result: the rest of the bound is scanned in 80 digits, the steps beyond it in float64.
    Critical steps below the first failure are evaluated in 80 digits.

    With ``expect_sufficient`` (claims whose verdict is "holds"), a failing step inside the bound that survives
    the 80-digit re-check fails the test: the measurement doubles as a search for counterexamples.
    """
    keys = keys or (",".join(family_of(case).split(",")[:3]),)
    bound = problem.float_bound(case)
    if not (bound > 0 and np.isfinite(bound)):
        with workdps():
            exact_bound = problem.bound(case, True)
            if not exact_bound > 0:
                ev.sample(f"vacuous bound [{keys[0]}]", 1.0)
                ev.case(family_of(case) + ",measure,vacuous-bound", MP_LABEL)
                return None
        # float64 lost the bound to rounding (e.g. a difference of nearly equal terms) but 80 digits give a positive
        # one: measure against the 80-digit value, if float64 can hold it
        bound = float(exact_bound)
        if not (bound > 0 and np.isfinite(bound)):
            ev.case(family_of(case) + ",measure,bound-outside-float64", MP_LABEL)
            return None
        ev.case(family_of(case) + ",measure,bound-from-80-digits", MP_LABEL)
    ev.sample(f"vacuous bound [{keys[0]}]", 0.0)
    with np.errstate(all="ignore"):
        try:
            critical = [float(x) for x in problem.critical(case, False)]
        except FLOAT_TROUBLE:
            critical = []
    grid = scan_grid(bound, critical)
    etas = [bound * g for g in grid]
    first, where = first_failure(lambda eta: problem.float_ok(case, eta), etas), "grid"
    with workdps():
        mp_bound = problem.bound(case, True)
        while first < bound:  # a failure inside the bound: re-decide just past it in 80 digits
            k0, k1 = problem.kappas(case, mp_bound * min(first / bound * (1 + 1e-6), 1 - 1e-9), True)
            if not problem.monotone(k0, k1, mp=True):
                break
            # float64 lost a singular value to rounding: not real. The rest of the bound is scanned in 80 digits
            # (a float64 artifact region is contiguous: resuming in float64 would crawl through it), the steps
            # beyond it in float64 again.
            ev.note(f"{problem.claim}: a float64-only failure inside the bound was refuted in {MP_LABEL}")
            inside = [mp_bound * g for g in grid if first / bound < g < 1]
            first = first_failure(lambda eta: problem.monotone(*problem.kappas(case, eta, True), mp=True), inside,
                                  start=mp_bound * first / bound)
            if first < mp_bound:
                where = "80-digit scan"
                break
            first = first_failure(lambda eta: problem.float_ok(case, eta), etas, start=bound)
            where = "grid, past a float64 artifact"
        # each critical step, and 1e-20 before it: next to a rank drop the failure window (kappa -> inf as a
        # singular value -> 0) has relative width ~ 1/kappa, narrower than the float64 scan resolves when
        # kappa > 1e6; the window's start is then located to that relative width
        steps = sorted(eta for x in problem.critical(case, True) if x > 0 for eta in (x * (1 - mp.mpf(10) ** -20), x))
        for eta_c in steps:
            if float(eta_c) > first * (1 + 1e-6):
                break
            k0, k1 = problem.kappas(case, eta_c, True)
            if not problem.monotone(k0, k1, mp=True):
                first, where = eta_c, "critical"
                break
        ratio = first / bound if where.startswith("grid") else float(first / mp_bound)
        if expect_sufficient:
            assert ratio >= 1 - 1e-12, (
                f"{problem.claim} violated in {MP_LABEL} inside the stated bound: eta = {ratio!r} * bound "
                f"({fmt(mp_bound)}), found on the {where}\n{case!r}")
    for key in keys:
        ev.sample(f"eta_max/bound [{key}]", ratio)
    ev.case(family_of(case) + f",measure,{where}", "float64" if where.startswith("grid") else MP_LABEL)
    return ratio


def assert_bound_ratio_scale_invariant(problem: StepProblem, sm: Any, ev: Evidence, scales: tuple[int, ...],
                                       expected: float | None = None) -> None:
    """Measure eta_max / stated bound on ``sm`` scaled by 10^c for each c, and assert the ratio does not depend on
    the scale (the matrix-level bounds of Thm 4.1(4) and A.1(4) are scale-consistent by construction) and, if
    given, equals ``expected`` (1 for a bound that is tight on every matrix)."""
    fam = ",".join(sm.family.split(",")[:3])
    ratios = [measure_bound(problem, scaled(sm, 10.0**c), ev, keys=(f"S x1e{c}", fam), expect_sufficient=True)
              for c in scales]
    assert None not in ratios, f"{problem.claim}: vacuous bound {ratios}\n{sm!r}"
    assert_same_ratio(problem.claim, ratios, sm)
    if expected is not None:
        assert all(abs(r - expected) <= 1e-9 * expected for r in ratios), (
            f"{problem.claim}: eta_max/bound = {ratios}, expected {expected} at every scale\n{sm!r}")


def assert_same_ratio(claim: str, ratios: list[float], case: Any) -> None:
    """eta_max/bound agrees across scales (``inf``, no failure up to 1000 bound, must then be ``inf`` at every
    scale). float64 locates a grid failure (a root of kappa(eta) - kappa, often near-double where two eigenvalues
    cross) to ~sqrt(eps) relative, so the agreement is asserted to 1e-4 (rank-drop steps are exact)."""
    assert max(ratios) <= min(ratios) * (1 + 1e-4), f"{claim}: eta_max/bound not scale-invariant: {ratios}\n{case!r}"


def scaled_bound(problem: StepProblem, c: float) -> StepProblem:
    """A built-in mutant of the claim: the same step and critical steps, the bound multiplied by ``c``."""
    return replace(problem, claim=f"{problem.claim} (bound x{c:.4g})",
                   bound=lambda case, mp: c * problem.bound(case, mp))


def assert_bound_location(problem: StepProblem, case: Any, expected: float, ev: Evidence, *,
                          rtol: float = 1e-6, expect_sufficient: bool = True) -> None:
    """On a witness ``case``, the measured ``eta_max / bound`` equals ``expected`` (a closed form, or 1 for a
    tight bound) to ``rtol``: the bound is where the module says it is, so a bound off by a factor turns this red
    (a larger sufficient bound first through the violation that ``measure_bound`` finds inside it)."""
    ratio = measure_bound(problem, case, ev, keys=("witness",), expect_sufficient=expect_sufficient)
    close = ratio == expected if math.isinf(expected) else abs(ratio - expected) <= rtol * expected
    assert ratio is not None and close, (
        f"{problem.claim}: the bound is not where stated: eta_max/bound = {ratio!r}, expected {expected!r} "
        f"(rtol {rtol})\n{case!r}")


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


def dynamics_eta_max(after: Callable[[Any], list], kappa0: Any, direction: Literal["increase", "decrease"],
                     hi: Any) -> Any:
    """An independent ``eta_max`` for a witness: the first step in ``(0, hi]`` where the CLOSED-FORM spectrum
    after the step, ``after(eta)`` (the derivation in the module docstring, no matrices), breaks the claimed
    monotonicity of ``kappa = max/min`` of its nonzero entries; 4000-point geometric scan plus 200 bisections,
    80 digits. Rank-drop points are exact roots of ``after``; they are added by the caller through ``hi``."""

    def ok(eta) -> bool:
        s = [abs(x) for x in after(eta)]
        nz = [x for x in s if x > mp.mpf(10) ** -60 * max(s)]
        k1 = max(nz) / min(nz)
        return mp_ok(k1, kappa0, strict=True) if direction == "decrease" else mp_ok(kappa0, k1, strict=True)

    with workdps():
        hi = mp.mpf(hi)
        if not ok(hi):
            grid = [hi * mp.mpf(10) ** (-9 + 9 * mp.mpf(i) / 4000) for i in range(4001)]
            return first_failure(ok, grid)
        return mp.inf
