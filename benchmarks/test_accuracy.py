"""Accuracy of every benchmarked method on small shapes (plain tests: run by CI's ``pytest``, no timing).

Only the (method, shape) pairs that apply are generated (:func:`spectral_methods.applicable`), so nothing is
collected just to be skipped.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from spectral_methods import METHODS, Method, applicable, make_problem, reference_extremes, relative_errors

SMALL = [(79, 158), (79, 19), (120, 64), (200, 400)]

CASES = [pytest.param(m, D, N, id=f"{m.name}-D{D}-N{N}") for m in METHODS for D, N in SMALL if applicable(m, D, N)]


@pytest.mark.parametrize("method,D,N", CASES)
def test_method_meets_its_tolerance(method: Method, D: int, N: int) -> None:
    if method.torch:
        pytest.importorskip("torch")
    p = make_problem(D, N)
    assert p.full_rank == (N >= D), "the shape-level applicability rule (full rank iff N >= D) must hold"
    with threadpool_limits(1):
        out = method.run(p, method.setup(p)) if method.setup else method.run(p)
    errs = relative_errors(p, out)
    for which, tol in (("max", method.tol_max), ("min", method.tol_min)):
        if tol is not None:
            assert errs[which] <= tol, f"{method.name} D={D} N={N}: rel. error of s_{which} {errs[which]:.2e} > {tol}"


@pytest.mark.parametrize("D,N", [(12, 24), (12, 5)], ids=["full-rank", "rank-deficient"])
def test_reference_agrees_with_mpmath(D: int, N: int) -> None:
    """The bisection reference against mpmath's Jacobi eigenvalues (40 digits) of the same float64 H: each
    extreme eigenvalue of a backward-stable solver is within ~ D eps lambda_max of the exact one, i.e.
    ``64 D eps lambda_max / lambda`` relative."""
    p = make_problem(D, N)
    with mp.workdps(40):
        lam = sorted((float(x) for x in mp.eigsy(mp.matrix(p.H.tolist()), eigvals_only=True)), reverse=True)
    nonzero = [x for x in lam if x > D * np.finfo(float).eps * lam[0]]
    ref_max, ref_min, rank = reference_extremes(p.H)
    assert rank == len(nonzero) == min(D, N), (rank, len(nonzero))
    tol = 64 * D * np.finfo(float).eps * lam[0]
    assert abs(ref_max - lam[0]) <= tol and abs(ref_min - nonzero[-1]) <= tol, (ref_max, ref_min, lam)
