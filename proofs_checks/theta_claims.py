"""Shared shape of the two Thm 4.3 modules (T4.3.1, T4.3.2): search, exact regression, corrected bound, measure.

Each module supplies its :class:`~proofs_checks.steps.StepProblem` for the stated bound and one for a corrected
bound; the functions here run the same four checks on both.
"""

from __future__ import annotations

import numpy as np
from hypothesis import find, settings, strategies as st

from .evidence import Evidence
from .highprec import MP_LABEL, fmt, workdps
from .profiles import budget
from .steps import StepProblem
from .strategies import near_bound_fractions, thetas_and_covariances

#: small diagonal cases near unit scale (where T4.3.2's bound 1/(1 - 2 s_min/k) blows up)
SEARCH_SPACE = st.tuples(thetas_and_covariances(diagonal=True, theta_kw={"rank": "full", "min_rank": 2,
                                                                         "max_log_kappa": 2,
                                                                         "scale": (-0.5, 0.5)},
                                               K_kw={"max_log_kappa": 2, "scale": (-1.0, 1.0)}),
                         near_bound_fractions())


def violated_in_high_precision(problem: StepProblem, case, f: float) -> tuple | None:
    """``(eta, kappa, kappa')`` if the step ``f * bound`` breaks the claim in float64 AND in 80 digits."""
    bound = problem.float_bound(case)
    if not (bound > 0 and np.isfinite(bound)) or problem.float_ok(case, f * bound):
        return None
    with workdps():
        bound = problem.bound(case, True)
        if not bound > 0:
            return None
        k0, k1 = problem.kappas(case, f * bound, True)
        return None if problem.monotone(k0, k1, mp=True) else (f * bound, k0, k1)


def search_counterexample(problem: StepProblem, ev: Evidence, max_examples: int = 400, space=SEARCH_SPACE) -> None:
    """hypothesis.find a (shrunk) violation inside the stated bound; assert it is real; record it."""
    n = {"tried": 0}

    def condition(x) -> bool:
        n["tried"] += 1
        return violated_in_high_precision(problem, *x) is not None

    case, f = find(space, condition, settings=settings(
        budget(max_examples), max_examples=max_examples, database=None))
    eta, k0, k1 = violated_in_high_precision(problem, case, f)
    ev.case("search (diagonal theta, K)", MP_LABEL)
    ev.measure("search examples executed (incl. shrinking)", n["tried"])
    ev.counterexample("hypothesis.find, shrunk", MP_LABEL, theta_singular_values=case.theta.s,
                      K_eigenvalues=case.K.s, fraction_of_bound=f, eta=eta, kappa_before=k0, kappa_after=k1,
                      claimed=problem.direction)
    assert not problem.monotone(k0, k1, mp=True), f"{fmt(k0)} -> {fmt(k1)}"
