"""The extreme eigenpairs of a stack of R Gram matrices (n x n, float64): :func:`kappalab.batched_extremes`' tensor
path (parallel Jacobi, no eigen solver) vs ``torch.linalg.eigvalsh`` vs ``torch.linalg.eigh`` on the same stack, in
one run (``pytest benchmarks/test_bench_extremes.py --benchmark-only [--device cuda] [--bench-threads N]``).

Groups ``extremes_n<n>_R<R>`` (n = 64, 100; R = 1, 16, 256, 1024) hold the three solvers, so pytest-benchmark's table
shows their ratios. On the CPU the tensor path runs only at (n, R) = (64, 1), (64, 16) and (100, 1): it does ~n
times LAPACK's arithmetic (measured 0.5 s for one 64 x 64 matrix on this machine's loaded core), so larger stacks
would take minutes; ``method="auto"`` takes LAPACK on the CPU for that reason. With ``--device cuda`` every case
runs. Each case first checks its answer: the largest eigenvalue equals eigvalsh's to 1e-12 relative (tensor path:
and converged). The timed function synchronizes the device on CUDA; TF32 is off (``benchmarks/conftest.py``).
"""

from __future__ import annotations

import pytest
from threadpoolctl import threadpool_limits

torch = pytest.importorskip("torch")

from kappalab.extremes import batched_extremes  # noqa: E402
from spectral_methods import sync  # noqa: E402  (benchmarks/ is on sys.path for its test modules)

SIZES, STACKS = (64, 100), (1, 16, 256, 1024)
SOLVERS = ("tensor", "eigvalsh", "eigh")
CPU_TENSOR = {(64, 1), (64, 16), (100, 1)}  #: the (n, R) the tensor path runs on the CPU (module docstring)


def _stack(n: int, R: int, device: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(n * 10_000 + R)
    X = torch.randn(R, 2 * n, n, generator=gen, dtype=torch.float64)
    return (X.mT @ X).to(device)


def _solve(name: str, S: torch.Tensor) -> torch.Tensor:
    if name == "tensor":
        e = batched_extremes(S, method="tensor")
        return torch.where(e.converged, e.largest, torch.nan)
    if name == "eigvalsh":
        return torch.linalg.eigvalsh(S)[..., -1]
    return torch.linalg.eigh(S)[0][..., -1]


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("R", STACKS)
@pytest.mark.parametrize("n", SIZES)
def test_extremes(benchmark, device: str, threads: int, n: int, R: int, solver: str) -> None:
    if solver == "tensor" and not device.startswith("cuda") and (n, R) not in CPU_TENSOR:
        pytest.skip(f"tensor path at n = {n}, R = {R} on the CPU: minutes (module docstring); runs with --device cuda")
    benchmark.group = f"extremes_n{n}_R{R}"
    benchmark.extra_info.update(n=n, R=R, solver=solver, device=device, dtype="float64")
    S = _stack(n, R, device)
    reference = torch.linalg.eigvalsh(S)[..., -1]
    with threadpool_limits(threads):
        got = _solve(solver, S)
        rel = float(((got - reference).abs() / reference).max())
        assert rel <= 1e-12, rel
        benchmark.extra_info["max_rel_err_vs_eigvalsh"] = rel

        def run() -> torch.Tensor:
            out = _solve(solver, S)
            sync(device)
            return out

        slow = solver == "tensor" and not device.startswith("cuda")  # seconds a call: the answer check warmed it up
        benchmark.pedantic(run, rounds=2 if slow else 3 if R >= 256 else 10, iterations=1,
                           warmup_rounds=0 if slow else 1)
