"""The training steps take their eigenproblems from :func:`kappalab.extremes.batched_eigh`: with the tensor path forced
on the CPU (``forced_method("tensor")``, what ``method="auto"`` does on CUDA) whole runs equal today's engines, and
the step reads nothing back from the device.

Data: the embedded MNIST subset, pair 0-1, seed 0, the first 128 rows per digit, Table 2's official configs (features
route, batches of 64, D = 784), 2 epochs (4 Adam steps). Compared per method: theta_I, bias, head, every history entry
(each term's value per epoch, the whole-task kappa(H_P), kappa(H_H)) and Eq. 15's (i), (ii), RIR, to 1e-10 relative:
the Jacobi eigenpairs differ from LAPACK's by ~1e-14 relative (tests/test_extremes.py); measured here (2026-12-01):
largest difference 3.0e-14 for Ours and 3.3e-14 for Opt kappa (single and batched engines alike), 0 for R_ill Only
(on the features route its r2 reads ``||G||_F`` only: no eigenproblem in its step) and IMMA (none at all): their rows
check that forcing the method leaves them alone.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch
from test_batched import _reported, _task
from test_extremes import forbid_host_reads

from kappalab import extremes
from kappalab.extremes import forced_method
from kappalab.immunization import immunize, load_config
from kappalab.immunization import methods as training
from kappalab.immunization.batched import immunize_batch

METHODS = ("ours", "rill_only", "opt_kappa", "imma")
RTOL = 1e-10


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    diff = float(np.max(np.abs(a - b)))
    return 0.0 if diff == 0 else diff / float(np.max(np.abs(b)))


@functools.lru_cache(maxsize=None)
def _runs(method: str, engine: str):
    cfg = load_config(f"table2_official_{method}").replace(epochs=2)
    task = _task(0, 1, 0)
    run = (lambda: immunize(task, cfg, 0)) if engine == "single" else \
        (lambda: immunize_batch([task, _task(7, 3, 1)], cfg, [0, 1])[0])
    lapack = run()
    with forced_method("tensor"):
        tensor = run()
    return task, lapack, tensor


#: every method on the single engine; the batched engine (which runs the same step on a stack, tests/test_batched.py)
#: for the two methods whose steps solve eigenproblems on both tasks' features
CASES = [(m, "single") for m in METHODS] + [("ours", "batched"), ("opt_kappa", "batched")]


@pytest.mark.parametrize(("method", "engine"), CASES)
def test_tensor_path_runs_equal_lapack_runs(method: str, engine: str) -> None:
    task, lapack, tensor = _runs(method, engine)
    assert tensor.n_steps == lapack.n_steps == 4
    for name in ("theta_I", "bias", "head"):
        assert _rel(getattr(tensor, name), getattr(lapack, name)) <= RTOL, name
    assert tensor.history.keys() == lapack.history.keys()
    for key, values in lapack.history.items():
        assert _rel(tensor.history[key], values) <= RTOL, key
    assert _rel(_reported(task, tensor.theta_I, tensor.bias), _reported(task, lapack.theta_I, lapack.bias)) <= RTOL


def _counting_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the tensor path's calls (each appends 1 to the returned list)."""
    calls, real = [], extremes._jacobi_eigh

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(extremes, "_jacobi_eigh", counted)
    return calls


@pytest.mark.parametrize("method", METHODS)
def test_linear_official_step_reads_only_the_convergence_tests(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside the step (:func:`~kappalab.immunization.methods.step_gradients`), with the tensor path forced: no torch
    eigen solver, and no ``item``, ``cpu``, ``tolist``, ``numpy`` or ``bool`` of a tensor but the tensor path's
    convergence test, once per eigenproblem (every matrix here converges by the first test)."""
    cfg = load_config(f"table2_official_{method}").replace(epochs=1)
    real_step = training.step_gradients
    steps, reads = [], []

    def guarded_step(*args, **kwargs):
        with monkeypatch.context() as m:
            forbid_host_reads(m, reads)
            calls = _counting_calls(m)
            out = real_step(*args, **kwargs)
        steps.append(len(calls))
        return out

    monkeypatch.setattr(training, "step_gradients", guarded_step)
    with forced_method("tensor"):
        run = immunize(_task(0, 1, 0), cfg, 0)
    assert len(steps) == run.n_steps == 2 and np.isfinite(run.theta_I).all()
    assert len(reads) == sum(steps), (reads, steps)


# ---- the deep step (kappalab.deep): the regularizers (core R_well / R_ill, the official r1 / r2) and the kappas ------

def _deep_run(method: str, protocol: str, guard: pytest.MonkeyPatch | None = None,
              reads: list[str] | None = None, calls: list[int] | None = None):
    """Two epochs of two (D_P, D_H) batch pairs of a tiny SmallCNN (tests/test_deep_device.py's set-up), with every
    host check off; ``guard``: make each training step raise on an eigen solver or a host read other than the
    tensor path's convergence test (appended to ``reads``; the tensor path's calls to ``calls``). ``reg_rtol = 1e-4``
    (the rank rule of R_well, R_ill and Opt kappa's kappa on the 8 x 8 H~): the kept spectrum has kappa <= 1e4, so
    LAPACK's own relative error on the smallest kept eigenvalue (``n eps kappa`` <= 2e-11) stays below the 1e-10 bound
    (at the default 1e-10 these batches keep eigenvalues with kappa ~2e6, where LAPACK is only good to ~4e-9 and the
    measured difference to the tensor path was 6.6e-10). The initial weights are drawn under torch's float32 default
    and cast to float64, whatever the session's default: drawn in float64 they differ, the paper protocol's R_ill
    starts at ~1e5 and its first steps diverge (measured 2026-12-02: task loss 3e12 in epoch 2 for LAPACK and tensor
    path alike)."""
    from test_deep_device import _loaders, _objective

    from kappalab.deep import CombinedLoader, SmallCNN, TrainConfig
    from kappalab.deep import immunize as deep_immunize
    from kappalab.deep import train as deep_train

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)  # the initial weights drawn as measured, whatever the session's default
    try:
        torch.manual_seed(0)
        model = SmallCNN(3, width=2).split(dummy=protocol == "paper")
    finally:
        torch.set_default_dtype(previous)
    if model.dummy is not None:
        model.dummy.check = False
    obj = dataclasses.replace(_objective(False), protocol=protocol, reg_rtol=1e-4)
    if guard is not None:
        real_step = deep_train.train_step

        def guarded_step(*args, **kwargs):
            with guard.context() as m:
                forbid_host_reads(m, reads)
                counted = _counting_calls(m)
                out = real_step(*args, **kwargs)
            calls.extend(counted)
            return out

        guard.setattr(deep_train, "train_step", guarded_step)
    history = deep_immunize(model, method, CombinedLoader(*_loaders(2, (1, 12, 12), (3, 2))), obj,
                            TrainConfig(lr=1e-3, epochs=2), progress=False)
    return model, history


@pytest.mark.parametrize("protocol", ("paper", "official"))
@pytest.mark.parametrize("method", METHODS)
def test_deep_step_with_tensor_path_equals_lapack_and_reads_only_convergence_tests(
        method: str, protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lapack_model, lapack_history = _deep_run(method, protocol)
    # the scenario trains (task loss ~1.1 in both epochs): a diverging run would amplify rounding and compare nothing
    assert all(epoch["task"] < 10 for epoch in lapack_history), lapack_history
    with forced_method("tensor"):
        reads, calls = [], []
        model, history = _deep_run(method, protocol, guard=monkeypatch, reads=reads, calls=calls)
    assert len(reads) == len(calls), (reads, calls)  # one convergence test per eigenproblem, none else
    for (name, want), (_, got) in zip(lapack_model.state_dict().items(), model.state_dict().items()):
        if want.is_floating_point():
            assert _rel(got.numpy(), want.numpy()) <= RTOL, name
    for want, got in zip(lapack_history, history):
        assert got.keys() == want.keys()
        for key in want:
            assert _rel(got[key], want[key]) <= RTOL, key


# ---- the fallback: a matrix the tensor path does not converge on is LAPACK's, counted ------------------------------

@pytest.mark.parametrize("engine", ("single", "batched"))
def test_unconverged_matrices_fall_back_to_lapack_inside_a_run(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no sweep allowed (``forced_method("tensor", sweeps=0)``) no dense matrix converges: every eigenproblem the
    run sends to the tensor path is recomputed by LAPACK, so the run equals the LAPACK run (to the lab's 1e-10 for
    one run computed two ways: a step's stack goes through ``eigh`` of the gathered rows instead of the whole
    stack), and its record counts every such matrix (the batched engine: each run its own)."""
    task, lapack, _ = _runs("ours", engine)
    cfg = load_config("table2_official_ours").replace(epochs=2)
    sent, real = [], extremes._jacobi_eigh

    def counted(S, *args, **kwargs):
        sent.append(S.shape[:-2])
        return real(S, *args, **kwargs)

    monkeypatch.setattr(extremes, "_jacobi_eigh", counted)
    with forced_method("tensor", sweeps=0):
        runs = [immunize(task, cfg, 0)] if engine == "single" else immunize_batch([task, _task(7, 3, 1)], cfg, [0, 1])
    forced = runs[0]
    assert forced.n_steps == lapack.n_steps == 4 and lapack.eigensolver_fallbacks == 0
    for name in ("theta_I", "bias", "head"):
        assert _rel(getattr(forced, name), getattr(lapack, name)) <= RTOL, name
    for key, values in lapack.history.items():
        assert _rel(forced.history[key], values) <= RTOL, key
    per_run = [int(np.prod(shape[1:])) if shape else 1 for shape in sent]  # each stack's matrices of one run
    assert sent and all(not shape or shape[0] == len(runs) for shape in sent), sent
    assert [r.eigensolver_fallbacks for r in runs] == [sum(per_run)] * len(runs), (sent, runs)
