"""Accuracy of every benchmarked method on small shapes (plain tests: run by CI's ``pytest``, no timing)."""

from __future__ import annotations

import pytest
from threadpoolctl import threadpool_limits

from spectral_methods import METHODS, Method, make_problem, relative_errors

SMALL = [(79, 158), (79, 19), (120, 64), (200, 400)]


@pytest.mark.parametrize("D,N", SMALL, ids=[f"D{d}-N{n}" for d, n in SMALL])
@pytest.mark.parametrize("method", METHODS, ids=[m.name for m in METHODS])
def test_method_meets_its_tolerance(method: Method, D: int, N: int) -> None:
    if method.torch:
        pytest.importorskip("torch")
    p = make_problem(D, N)
    if not method.applies(p):
        pytest.skip(f"{method.name} does not apply to D={D}, N={N}")
    with threadpool_limits(1):
        out = method.run(p, method.setup(p)) if method.setup else method.run(p)
    errs = relative_errors(p, out)
    for which, tol in (("max", method.tol_max), ("min", method.tol_min)):
        if tol is not None:
            assert errs[which] <= tol, f"{method.name} D={D} N={N}: rel. error of s_{which} {errs[which]:.2e} > {tol}"
