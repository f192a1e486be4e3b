"""Timed benchmarks: ``pytest benchmarks --benchmark-only [--large] [--device cuda] --benchmark-json=out.json``.

Shapes: D in {79, 512, 784} (default) and 2048 (``--large``) x N in {2D, D/4, 64}, all methods that apply; and the
issue's goal shape D = 4096, N = 8192 (``--large -k D4096``) with only the methods marked ``goal`` (baseline, the
naive / auto / warm-tracker steps and the warm solve alone; 3 rounds of about a minute). Only applicable
(method, shape) pairs are generated, so nothing is skipped.

Grouped by shape ``D{D}-N{N}``; each group holds ``baseline_products`` (the matrix products no method avoids),
so ``benchmarks/report.py`` reports every method as a ratio to it within the same run. Every benchmark checks its
answer against the float64 dense reference (the method's documented tolerance) and records the errors, dtype,
device, threads and BLAS vendor in ``extra_info``.
"""

from __future__ import annotations

import os
import platform

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from spectral_methods import METHODS, Method, applicable, make_problem, relative_errors

DS = [79, 512, 784, 2048]
GOAL = (4096, 8192)  #: the issue's full-rank goal shape: its own group, only the methods marked ``goal``


def _cases() -> list:
    """Only applicable (method, shape) pairs: nothing is collected just to be skipped."""
    shapes = [(D, N) for D in DS for N in sorted({2 * D, D // 4, 64}, reverse=True)]
    out = []
    for D, N in shapes + [GOAL]:  # shape-major: each problem is built once (make_problem's cache)
        for m in METHODS:
            if not applicable(m, D, N) or ((D, N) == GOAL and not m.goal):
                continue
            marks = [pytest.mark.large] if D >= 2048 else []
            out.append(pytest.param(m, D, N, marks=marks, id=f"{m.name}-D{D}-N{N}"))
    return out


def _rounds(D: int) -> int:
    return 5 if D <= 512 else 3 if D <= 784 else 2 if D <= 2048 else 3


def _blas() -> str:
    return ";".join(f"{i['internal_api']}:{i.get('version')}:{i['num_threads']}" for i in threadpool_info())


@pytest.mark.parametrize("method,D,N", _cases())
def test_bench(benchmark, method: Method, D: int, N: int, device: str, threads: int) -> None:
    if method.torch:
        torch = pytest.importorskip("torch")
        torch.set_num_threads(threads)
    with threadpool_limits(threads):
        p = make_problem(D, N)
        load0 = os.getloadavg()
        p.device = device if method.torch else "cpu"
        benchmark.group = f"D{D}-N{N}"
        setup = (lambda: ((p, method.setup(p)), {})) if method.setup else (lambda: ((p,), {}))
        out = benchmark.pedantic(method.run, setup=setup, rounds=_rounds(D), iterations=1)
        blas = _blas()
    errs = relative_errors(p, out)
    benchmark.extra_info.update(loadavg_start=load0, loadavg_end=os.getloadavg(),
        method=method.name, kind=method.kind, D=D, N=N, rank=p.rank, dtype="float32" if "f32" in method.name
        else "float64", device=p.device, threads=threads, blas=blas, machine=platform.machine(),
        rel_err_max=errs["max"], rel_err_min=errs["min"], tol_max=method.tol_max, tol_min=method.tol_min,
    )
    for which, tol in (("max", method.tol_max), ("min", method.tol_min)):
        if tol is not None:
            assert errs[which] <= tol, f"{method.name}: rel. error of s_{which} {errs[which]:.2e} > {tol}"
    assert np.isfinite(out[0])
