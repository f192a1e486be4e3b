"""The extreme eigenpairs of a stack of R Gram matrices (n x n, float64): :func:`kappalab.batched_extremes`' tensor
path (parallel Jacobi, no eigen solver) vs ``torch.linalg.eigvalsh`` vs ``torch.linalg.eigh`` on the same stack, in
one run (``pytest benchmarks/test_bench_extremes.py --benchmark-only [--device cuda] [--bench-threads N]``).

Groups ``extremes_n<n>_R<R>`` (n = 64, 100; R = 1, 16, 256, 1024) hold the three solvers, so pytest-benchmark's table
shows their ratios. On the CPU the tensor path runs only at (n, R) = (64, 1), (64, 16) and (100, 1): it does ~n
times LAPACK's arithmetic (measured 0.5 s for one 64 x 64 matrix on this machine's loaded core), so larger stacks
would take minutes; ``method="auto"`` takes LAPACK on the CPU for that reason. With ``--device cuda`` every case
runs. Each case first checks its answer: the largest eigenvalue equals eigvalsh's to 1e-12 relative (tensor path:
and converged). The timed function synchronizes the device on CUDA; TF32 is off (``benchmarks/conftest.py``).

Groups ``graded_n<n>_kappa<k>``: one matrix ``Q diag(logspace(-log10 k, 0, n)) Q^T`` (the spectra immunization
produces), the tensor path vs ``eigvalsh``, per matrix; the tensor case stores the sweeps it took (``sweeps``, beside
``sweep_count``, the sweeps before its first convergence test) in ``extra_info``: the sweeps-per-kappa table. n = 64
at kappa 1e2 .. 1e14, n = 100 at 1e9, n = 784 at 1e9 with ``--large`` only.
"""

from __future__ import annotations

import pytest
from threadpoolctl import threadpool_limits

torch = pytest.importorskip("torch")

from kappalab.extremes import batched_extremes, sweep_count  # noqa: E402
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


# ---- ill-conditioned matrices: the spectra immunization produces (tests/test_extremes_hard.py) --------------------

KAPPAS = (1e2, 1e6, 1e9, 1e12, 1e14)


def _graded(n: int, kappa: float, R: int = 1) -> torch.Tensor:
    """``Q diag(logspace(-log10 kappa, 0, n)) Q^T``, Q random orthogonal (R of them)."""
    gen = torch.Generator().manual_seed(n + int(round(torch.log10(torch.tensor(kappa)).item())))
    Q, _ = torch.linalg.qr(torch.randn(R, n, n, generator=gen, dtype=torch.float64))
    lam = torch.logspace(-torch.log10(torch.tensor(kappa)).item(), 0, n, dtype=torch.float64)
    S = (Q * lam) @ Q.mT
    return 0.5 * (S + S.mT)


def _sweeps_taken(S: torch.Tensor) -> int:
    """The sweeps the tensor path took on S (one matrix): its first test's sweeps plus one per further test."""
    from kappalab import extremes

    reads, real = [], extremes.read_unconverged

    def counted(converged):
        reads.append(1)
        return real(converged)

    extremes.read_unconverged = counted
    try:
        e = batched_extremes(S, method="tensor")
    finally:
        extremes.read_unconverged = real
    assert bool(e.converged.all())
    return extremes.sweep_plan(S.shape[-1], 2.0 ** -52, None)[0] + len(reads) - 1


@pytest.mark.parametrize("solver", ("tensor", "eigvalsh"))
@pytest.mark.parametrize("kappa", KAPPAS, ids=lambda k: f"kappa{k:.0e}")
def test_graded_n64(benchmark, device: str, threads: int, kappa: float, solver: str) -> None:
    """One 64 x 64 matrix of the given kappa: the tensor path's time and sweeps per kappa beside LAPACK's."""
    _graded_case(benchmark, device, threads, 64, kappa, solver)


@pytest.mark.parametrize("solver", ("tensor", "eigvalsh"))
def test_graded_n100_kappa1e9(benchmark, device: str, threads: int, solver: str) -> None:
    _graded_case(benchmark, device, threads, 100, 1e9, solver)


@pytest.mark.large
@pytest.mark.parametrize("solver", ("tensor", "eigvalsh"))
def test_graded_n784_kappa1e9(benchmark, device: str, threads: int, solver: str) -> None:
    """n = 784 (H_H of Table 2): ~2e12 flops a sweep on the CPU; with --large only."""
    _graded_case(benchmark, device, threads, 784, 1e9, solver)


def _graded_case(benchmark, device: str, threads: int, n: int, kappa: float, solver: str) -> None:
    benchmark.group = f"graded_n{n}_kappa{kappa:.0e}"
    S = _graded(n, kappa).to(device)
    reference = torch.linalg.eigvalsh(S)[..., -1]
    with threadpool_limits(threads):
        torch.set_num_threads(threads)
        got = _solve(solver, S)
        assert float(((got - reference).abs() / reference).max()) <= 1e-12
        info = {"n": n, "kappa": kappa, "solver": solver, "device": device}
        if solver == "tensor":
            info["sweeps"] = _sweeps_taken(S)
            info["sweep_count"] = sweep_count(n, 2.0 ** -52)
        benchmark.extra_info.update(info)

        def run() -> torch.Tensor:
            out = _solve(solver, S)
            sync(device)
            return out

        slow = solver == "tensor" and not device.startswith("cuda")
        benchmark.pedantic(run, rounds=2 if slow else 10, iterations=1, warmup_rounds=0 if slow else 1)
