"""The 2-process data-parallel emulation of the official protocol against a real torch.distributed (gloo) run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from kappalab.immunization import LinearTask, immunize, table1_config
from kappalab.immunization import data_parallel as dp
from kappalab.immunization.protocols import make_protocol
from kappalab.immunization.step_types import Params


def _task(n: int = 200, d: int = 9, n_H: int | None = None) -> LinearTask:
    rng = np.random.default_rng(3)
    n_H = n if n_H is None else n_H
    X_P, X_H = rng.standard_normal((n, d)), rng.standard_normal((n_H, d)) + 0.3
    return LinearTask(X_P=X_P, y_P=X_P @ rng.standard_normal(d), X_H=X_H, y_H=X_H @ rng.standard_normal(d),
                      loss="mse", name="synthetic", data_label="synthetic")


def test_rank_batches_follow_the_distributed_sampler_rule() -> None:
    for epoch in (0, 1, 7):
        steps = dp.rank_batches(200, 2, 64, epoch, sampler_seed=5)
        assert len(steps) == 1 and [len(b) for b in steps[0]] == [64, 64]
        perm = torch.randperm(200, generator=torch.Generator().manual_seed(5 + epoch))
        for rank in (0, 1):
            torch.testing.assert_close(steps[0][rank], perm[rank::2][:64], rtol=0, atol=0)
        assert not set(steps[0][0].tolist()) & set(steps[0][1].tolist())
    padded = dp.rank_batches(7, 2, 2, 0, shuffle=False)
    assert [[b.tolist() for b in step] for step in padded] == [[[0, 2], [1, 3]], [[4, 6], [5, 0]]]
    with pytest.raises(ValueError, match="batch_size 64 exceeds each rank's shard \\(50 of 100 pairs\\)"):
        dp.rank_batches(100, 2, 64, 0)


def test_float32_inputs_round() -> None:
    task = dp.float32_inputs(_task())
    assert task.X_P.dtype == np.float64
    np.testing.assert_array_equal(task.X_P, _task().X_P.astype(np.float32).astype(np.float64))
    assert np.any(task.X_P != _task().X_P) and task.data_label.endswith("float32")


def test_one_process_emulation_is_the_engine_with_one_shard() -> None:
    """world_size 1, no shuffle, 200 rows, batches of 50: the same 4 steps per epoch as the engine's unshuffled
    run of the same task (the engine pairs its P and H batches in order too)."""
    cfg = table1_config("official", "ours").replace(epochs=2, batch_size=50)
    cfg = cfg.with_extra(shuffle=False)
    engine = immunize(_task(), cfg, seed=1)
    emulated = dp.immunize_data_parallel(_task(), cfg, seed=1, world_size=1, float32=False)
    assert emulated.n_steps == engine.n_steps == 8
    np.testing.assert_allclose(emulated.theta_I, engine.theta_I, rtol=0, atol=1e-12)


def test_the_shared_loop_monitors_and_observes_the_averaged_steps() -> None:
    """Through the engine's loop (methods.train with the averaging hook): the observer sees step 0 and every
    averaged step; the whole-task kappa is read at every monitor_every-th epoch and the last, at the parameters
    after that epoch's step; no term values are logged (each rank's are of its own batch)."""
    cfg = table1_config("official", "ours").replace(epochs=5).with_extra(monitor_every=2)
    task = _task()
    seen: dict[int, Params] = {}
    copy = lambda t: None if t is None else t.detach().clone()
    run = dp.immunize_data_parallel(task, cfg, seed=0, world_size=2, observer=lambda k, p: seen.setdefault(
        k, Params(copy(p.theta), copy(p.bias), copy(p.w_P))))
    assert run.n_steps == 5 and sorted(seen) == list(range(6))  # one 64-row batch per rank and epoch
    assert run.history["kappa_epoch"] == [2.0, 4.0, 5.0]
    assert set(run.history) == {"kappa_P", "kappa_H", "kappa_epoch"}
    np.testing.assert_array_equal(seen[5].theta.numpy(), run.theta_I)
    proto = make_protocol(dp.float32_inputs(task), cfg, "cpu")
    for i, epoch in enumerate((2, 4, 5)):
        kP, kH = proto.monitor(seen[epoch])
        assert (float(kP), float(kH)) == (run.history["kappa_P"][i], run.history["kappa_H"][i]), epoch
        before = proto.monitor(seen[epoch - 1])
        assert float(before[0]) != run.history["kappa_P"][i]  # the step before would read another kappa
    assert run.notes == ["data parallel: 2 processes, sampler seed 0"]


def test_errors() -> None:
    cfg = table1_config("official", "ours").replace(epochs=1)
    with pytest.raises(ValueError, match="needs equal sizes, got 200 and 150"):
        dp.immunize_data_parallel(_task(n_H=150), cfg, seed=0)
    with pytest.raises(ValueError, match="official-protocol config"):
        dp.immunize_data_parallel(_task(), table1_config("paper", "ours"), seed=0)


def test_emulation_equals_a_real_two_process_gloo_run(tmp_path: Path) -> None:
    """Two real processes (gloo all-reduce of each rank's gradient / 2) and the one-process emulation take the
    same steps to the last bit; the 1-process engine on the same task takes 3x as many and ends elsewhere."""
    cfg = table1_config("official", "ours").replace(epochs=4)
    task = _task()
    out = tmp_path / "rank0.npz"
    mp.spawn(dp.distributed_rank, nprocs=2, join=True,
             args=(2, f"file://{tmp_path / 'rendezvous'}", task, cfg, 0, 0, True, str(out)))
    real = np.load(out)
    emulated = dp.immunize_data_parallel(task, cfg, seed=0, world_size=2)
    assert emulated.n_steps == int(real["n_steps"]) == 4  # one 64-row batch per process per epoch
    for name, value in (("theta", emulated.theta_I), ("bias", emulated.bias), ("head", emulated.head)):
        np.testing.assert_array_equal(value, real[name], err_msg=name)
    one_process = immunize(dp.float32_inputs(task), cfg, seed=0)
    assert one_process.n_steps == 12 and np.max(np.abs(one_process.theta_I - emulated.theta_I)) > 1e-3
