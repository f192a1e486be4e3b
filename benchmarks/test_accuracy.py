"""Accuracy of every benchmarked method on small shapes (plain tests: run by CI's ``pytest``, no timing).

Only the (method, shape) pairs that apply are generated (:func:`spectral_methods.applicable`), so nothing is
collected just to be skipped.
"""

from __future__ import annotations

import pytest
from threadpoolctl import threadpool_limits

from spectral_methods import METHODS, Method, applicable, make_problem, relative_errors

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
