"""One Adam step of Table 2's official protocol (features route, 64-row batches, D = 784, float64): the single-run
engine vs the batched engine with R runs, per method, and the machine's float64 GEMM rate in the same run
(``pytest benchmarks/test_bench_batched.py --benchmark-only [--device cuda] [--bench-threads N]``).

Groups: ``batched_<method>`` holds ``single`` (one run's step) and ``batched_R`` (one step of R stacked runs), each
with the closed-form step (``closed_form``, :mod:`kappalab.immunization.official_step`, the default) and the autograd
step (``autograd``, the reference it replaced), so pytest-benchmark's table shows their ratios; per run, the
batched step is ``time / R``. Each batched case stores in
``extra_info`` (``--benchmark-json``): the step's unavoidable GEMM work (``gflop``: 2 x 64 x 784^2 per product, 4
products per run for Ours, Opt kappa, IMMA, 2 for R_ill Only), the achieved rate on it (``gflops``), the machine's
float64 GEMM rate measured just before in the same process (``gemm_gflops``: a square GEMM, 1024 on the CPU, 8192 on
CUDA) and their ratio ``fraction_of_gemm`` (the issue's goal: >= 0.75). ``R`` is 16 on the CPU and 64 and 256 on CUDA.

Before timing, each batched case checks that its first step's gradients equal the single engine's, run by run, to
1e-10 relative on the CPU, 1e-8 on CUDA (a fast wrong step cannot pass). On CUDA the timed function synchronizes the device; TF32 is off
(``benchmarks/conftest.py``).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kappalab.immunization import LinearTask, load_config  # noqa: E402
from kappalab.immunization.batched import RunSteps, stacked_params, stacked_protocol  # noqa: E402
from kappalab.immunization.methods import step_gradients  # noqa: E402
from kappalab.immunization.official_step import CLOSED_FORM_METHODS  # noqa: E402
from kappalab.immunization.protocols import make_protocol  # noqa: E402
from spectral_methods import sync  # noqa: E402  (benchmarks/ is on sys.path for its test modules)
from sweep_table2 import gemm_rate  # noqa: E402

D, N_TASK, BATCH = 784, 128, 64
METHODS = ("ours", "rill_only", "opt_kappa", "imma")
PRODUCTS = {"ours": 4, "rill_only": 2, "opt_kappa": 4, "imma": 4}  #: unavoidable 64 x 784 x 784 GEMMs per step


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "runs" in metafunc.fixturenames:
        cuda = str(metafunc.config.getoption("--device")).startswith("cuda")
        metafunc.parametrize("runs", (1, 64, 256) if cuda else (1, 16), ids=lambda r: "single" if r == 1 else
                             f"batched_{r}")


def _task(seed: int) -> LinearTask:
    gen = torch.Generator().manual_seed(seed)
    X_P = torch.randn(N_TASK, D, generator=gen, dtype=torch.float64).numpy()
    X_H = torch.randn(N_TASK, D, generator=gen, dtype=torch.float64).numpy()
    return LinearTask(X_P=X_P, y_P=X_P[:, 0] * 0.0, X_H=X_H, y_H=X_H[:, 0] * 0.0 + 1.0, loss="bce", name="bench",
                      data_label="random")


def _setup(method: str, runs: int, device: str):
    cfg = load_config(f"table2_official_{method}").replace(epochs=1)
    tasks, seeds = [_task(r) for r in range(runs)], list(range(runs))
    if runs == 1:
        proto = make_protocol(tasks[0], cfg, device)
        p = proto.init_params(0, with_w_H=method == "imma")
        batch = next(proto.batches(torch.Generator().manual_seed(1)))
    else:
        proto, own = stacked_protocol(tasks, cfg, device)
        p = stacked_params(proto, seeds, with_w_H=method == "imma")
        batch = next(RunSteps(proto, own, 1, [torch.Generator().manual_seed(s + 1) for s in seeds]).steps())[0]
    return proto, p, batch, cfg, tasks


def _check_against_single(method: str, runs: int, device: str) -> None:
    # CPU: the same kernels per slice (measured bitwise equal); CUDA: batched and single kernels may reduce in
    # another order, and the H task's Woodbury map (ridge 1e-7) amplifies that: the route-parity bound of
    # test_bench_immunization_step.py (1e-8), still far below any wrong step's O(1)
    bound = 1e-10 if device == "cpu" else 1e-8
    proto, p, batch, cfg, tasks = _setup(method, runs, device)
    many, _ = step_gradients(proto, p, batch.for_step(), cfg)
    for r in (0, runs - 1):
        one_proto = make_protocol(tasks[r], cfg, device)
        q = one_proto.init_params(r, with_w_H=method == "imma")
        one_batch = next(one_proto.batches(torch.Generator().manual_seed(r + 1)))
        one, _ = step_gradients(one_proto, q, one_batch.for_step(), cfg)
        for a, b in zip(p.all(), q.all()):
            assert (id(a) in many) == (id(b) in one), (method, r)  # R_ill Only leaves the head without gradient
            if id(b) in one:
                x, y = many[id(a)][r], one[id(b)]
                assert float((x - y).abs().max() / y.abs().max()) <= bound, (method, r, device)


#: (method, step): the closed-form step where it exists, and the autograd step of every method
CASES = [(m, k) for m in METHODS for k in ("closed_form", "autograd") if k == "autograd" or m in CLOSED_FORM_METHODS]


@pytest.mark.parametrize(("method", "step_kind"), CASES)
def test_official_step(benchmark, method: str, step_kind: str, runs: int, device: str, threads: int) -> None:
    closed_form = step_kind == "closed_form"
    torch.set_num_threads(threads)
    benchmark.group = f"batched_{method}"
    if runs > 1:
        _check_against_single(method, min(runs, 4), device)
    proto, p, batch, cfg, _ = _setup(method, runs, device)
    opt = torch.optim.Adam(p.all(), lr=cfg.eta, fused=True)

    def step() -> None:
        grads, _ = step_gradients(proto, p, batch.for_step(), cfg, closed_form=closed_form, theta_out=p.theta.grad)
        for param in p.all():
            param.grad = grads.get(id(param))
        opt.step()
        sync(device)

    step()  # warm-up (allocations, the batch's cached factorizations are per step view)
    rate = gemm_rate(device)
    benchmark.pedantic(step, rounds=5, iterations=1, warmup_rounds=1)
    gflop = runs * PRODUCTS[method] * 2.0 * BATCH * D * D / 1e9
    achieved = gflop / benchmark.stats.stats.min
    benchmark.extra_info.update({"runs": runs, "step": step_kind, "gflop": gflop, "gflops": achieved,
                                 "gemm_gflops": rate, "fraction_of_gemm": achieved / rate,
                                 "per_run_s": benchmark.stats.stats.min / runs})
