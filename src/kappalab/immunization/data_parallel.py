"""The shipped config's data-parallel training (``gpus: 2``, Lightning DDP), emulated exactly in one process.

What a ``world_size``-process run of the official protocol does (from the authors' public code and PyTorch's
documented DDP semantics; no code copied):

* the dataset pairs row i of D_P with row i of D_H: one shared index selects both tasks' rows;
* DDP's ``DistributedSampler`` (torch's own class is used here): in epoch e (counted from 0) a permutation of the
  N pairs drawn from ``sampler_seed + e``, padded to a multiple of ``world_size``; rank r takes every
  ``world_size``-th index from position r (with Table 1's 200 rows and 2 ranks: two shards of 100). Lightning
  builds this sampler for a shuffled loader with seed ``PL_GLOBAL_SEED`` (0 when unset); some Lightning versions
  wrap the loader's own RandomSampler instead, which shards another permutation of the same kind: which rows
  fall in which step then differs, the structure (disjoint shards, one batch per process) does not;
* each rank's loader takes consecutive ``batch_size`` rows of its shard, drop_last (Table 1: one 64-row batch per
  rank and epoch, so 10 steps in 10 epochs instead of the 1-process run's 30);
* each rank computes the step's gradients on its own batch (:func:`~kappalab.immunization.methods.step_gradients`:
  that batch's regularizers and preconditioner), DDP averages them over the ranks (all-reduce, mean), and every
  rank takes the same Adam step;
* ``float32_inputs``: the dataset holds float32 tensors and the model float64, so X is rounded to float32 and cast
  back (the labels too).

:func:`immunize_data_parallel` is the emulation (all ranks in one process, gradients averaged locally);
:func:`distributed_rank` is one process of a real ``torch.distributed`` run (gloo backend), the same loop
(:func:`train`) with an all-reduce in place of the local average; ``tests/test_immunization_data_parallel.py``
checks that the two give the same extractor. Both train with the engine's loop,
:func:`kappalab.immunization.methods.train`: a :class:`~kappalab.immunization.methods.Schedule` of the ranks' row
indices and a gradient hook (:func:`averaged_gradients`) in place of the one-process step.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch.utils.data import DistributedSampler

from ..atomic_io import save_npz
from .config import MethodConfig
from .methods import Gradients, ImmunizationRun, Schedule, run_of, step_gradients
from .methods import train as train_loop
from .protocols import Protocol, make_protocol
from .step_types import Batch, Params, Term
from .task import LinearTask


def float32_inputs(task: LinearTask) -> LinearTask:
    """The task with X and y rounded to float32 and cast back to float64 (the official dataset's tensors)."""
    r = lambda a: None if a is None else np.asarray(a, dtype=np.float32).astype(np.float64)
    return LinearTask(X_P=r(task.X_P), y_P=r(task.y_P), X_H=r(task.X_H), y_H=r(task.y_H), loss=task.loss,
                      name=task.name, data_label=task.data_label + ", inputs rounded to float32")


def rank_batches(n_pairs: int, world_size: int | None, batch_size: int, epoch: int, sampler_seed: int = 0,
                 shuffle: bool = True) -> list[list[torch.Tensor]]:
    """Pair indices of one epoch: ``result[step][r]`` is rank r's batch at that step.

    Each rank's indices come from torch's ``DistributedSampler`` (``set_epoch(epoch)``); its loader cuts them into
    consecutive batches of ``batch_size`` and drops the last incomplete one. ``world_size=None``: only this
    process's rank, the sampler taking the number of processes and the rank from the initialized process group
    (``result[step][0]``).
    """
    if batch_size < 1 or (world_size is not None and world_size < 1):
        raise ValueError(f"world_size and batch_size must be >= 1, got {world_size} and {batch_size}")
    kwargs = [{}] if world_size is None else [{"num_replicas": world_size, "rank": r} for r in range(world_size)]
    shards = []
    for kw in kwargs:
        sampler = DistributedSampler(range(n_pairs), shuffle=shuffle, seed=sampler_seed, **kw)
        sampler.set_epoch(epoch)
        shards.append(torch.tensor(list(sampler), dtype=torch.long))
    steps = len(shards[0]) // batch_size
    if steps == 0:
        raise ValueError(f"batch_size {batch_size} exceeds each rank's shard ({len(shards[0])} of {n_pairs} pairs) "
                         "with drop_last: no step would be taken")
    return [[shard[i * batch_size:(i + 1) * batch_size] for shard in shards] for i in range(steps)]


def rank_gradients(proto: Protocol, p: Params, index: torch.Tensor, cfg: MethodConfig) -> dict[int, torch.Tensor]:
    """One rank's gradients (keyed by ``id`` of the tensor) on the pairs ``index`` at the current parameters."""
    index = index.to(proto.X_P.device)
    y_H = None if proto.y_H is None else proto.y_H[index]
    batch = Batch(proto.X_P[index], proto.y_P[index], proto.X_H[index], y_H)
    grads, _ = step_gradients(proto, p, batch.for_step(), cfg)
    return grads


def paired_rows(task: LinearTask) -> int:
    """N, the number of (D_P, D_H) pairs; the official dataset pairs rows, so both tasks need N rows."""
    if len(task.X_P) != len(task.X_H):
        raise ValueError(f"task: the data-parallel run pairs row i of D_P with row i of D_H and needs equal sizes, "
                         f"got {len(task.X_P)} and {len(task.X_H)}")
    return len(task.X_P)


Average = Callable[[list[torch.Tensor | None], torch.Tensor], torch.Tensor | None]


def local_average(world_size: int) -> Average:
    """The emulation's reducer: every rank's gradient is here; ``sum(g / world_size)`` (DDP divides, then sums)."""
    def average(grads: list[torch.Tensor | None], param: torch.Tensor) -> torch.Tensor | None:
        present = [g / world_size for g in grads if g is not None]
        return sum(present[1:], present[0]) if present else None
    return average


def allreduce_average(world_size: int) -> Average:
    """The real run's reducer: this rank's gradient (zeros if unused) / world_size, all-reduced (sum)."""
    import torch.distributed as dist

    def average(grads: list[torch.Tensor | None], param: torch.Tensor) -> torch.Tensor:
        (g,) = grads
        g = (torch.zeros_like(param) if g is None else g) / world_size
        dist.all_reduce(g, op=dist.ReduceOp.SUM)
        return g
    return average


def averaged_gradients(proto: Protocol, cfg: MethodConfig, average: Average) -> Gradients:
    """The data-parallel step, as :func:`kappalab.immunization.methods.train`'s gradient hook: each rank's
    gradients on its own rows (:func:`rank_gradients`; the step's batch is the ranks' index tensors), averaged per
    tensor by ``average``. It returns no terms (each rank's are of its own batch), so the history holds the
    whole-task kappas only."""
    def gradients(p: Params, indices: list[torch.Tensor]) -> list[Term]:
        per_rank = [rank_gradients(proto, p, index, cfg) for index in indices]
        for param in p.all():
            param.grad = average([g.get(id(param)) for g in per_rank], param)
        return []
    return gradients


def train(task: LinearTask, cfg: MethodConfig, seed: int, world_size: int | None, average: Average,
          sampler_seed: int = 0, device: str = "cpu",
          observer: Callable[[int, Params], None] | None = None) -> ImmunizationRun:
    """The data-parallel training. ``world_size``: emulate that many ranks in this process; None: this process is
    one rank of an initialized process group. ``average`` turns the gradients of one tensor computed here (one per
    emulated rank, or this rank's) into the averaged gradient. ``observer(step, params)``: as in
    :func:`kappalab.immunization.methods.train` (before the first step, then after every averaged step)."""
    if cfg.protocol != "official" or cfg.batch_size is None:
        raise ValueError(f"cfg must be an official-protocol config with a batch_size, got protocol "
                         f"{cfg.protocol!r} and batch_size {cfg.batch_size!r}")
    n_pairs, batch_size = paired_rows(task), cfg.batch_size
    proto = make_protocol(task, cfg, device)
    p = proto.init_params(seed, with_w_H=cfg.method == "imma")
    schedule = Schedule(proto, cfg.epochs, lambda epoch: rank_batches(n_pairs, world_size, batch_size, epoch - 1,
                                                                      sampler_seed, cfg.extra.shuffle))
    t = train_loop(proto, p, cfg, schedule, f"{cfg.protocol}/{cfg.method}/seed{seed}/data-parallel",
                   observer=observer, gradients=averaged_gradients(proto, cfg, average))
    return run_of(p, t, cfg, seed, device, [f"data parallel: {world_size or 'process group'} processes, sampler "
                                            f"seed {sampler_seed}"])


def immunize_data_parallel(task: LinearTask, cfg: MethodConfig, seed: int, world_size: int = 2,
                           sampler_seed: int = 0, float32: bool = True, device: str = "cpu",
                           observer: Callable[[int, Params], None] | None = None) -> ImmunizationRun:
    """Emulate a ``world_size``-process DDP run of the official protocol (module docstring) in one process.

    Args:
        task: the task; D_P and D_H must have the same number of rows (they are paired).
        cfg: an official-protocol config with a ``batch_size``.
        seed: initialization seed (every rank starts from the same parameters, as DDP broadcasts rank 0's).
        world_size: number of processes.
        sampler_seed: the DistributedSampler's seed (Lightning: ``PL_GLOBAL_SEED``, 0 when unset).
        float32: round the inputs to float32 first (:func:`float32_inputs`).
        device: torch device.
        observer: called with ``(step, params)`` before the first step and after every step (:func:`train`).
    """
    task = float32_inputs(task) if float32 else task
    return train(task, cfg, seed, world_size, local_average(world_size), sampler_seed, device, observer)


def steps_per_epoch(task: LinearTask, cfg: MethodConfig, world_size: int, sampler_seed: int = 0) -> int:
    """Optimizer steps per epoch of :func:`immunize_data_parallel` (every rank takes the same number; Table 1 with
    2 ranks: 1). Raises ValueError when a rank's shard is smaller than one batch."""
    if cfg.batch_size is None:
        raise ValueError("cfg.batch_size is None: the data-parallel run is minibatched (official protocol)")
    return len(rank_batches(paired_rows(task), world_size, cfg.batch_size, 0, sampler_seed))


def distributed_rank(rank: int, world_size: int, init_method: str, task: LinearTask, cfg: MethodConfig, seed: int,
                     sampler_seed: int, float32: bool, out: str) -> None:
    """One process of a real ``torch.distributed`` run (gloo backend, CPU); rank 0 saves theta, bias and head to
    ``out`` (``.npz``). Start it with ``torch.multiprocessing.spawn(distributed_rank, args=(world_size, ...))``."""
    from ..distributed import process_group

    with process_group("gloo", init_method, rank, world_size):
        task = float32_inputs(task) if float32 else task
        run = train(task, cfg, seed, None, allreduce_average(world_size), sampler_seed)
        if rank == 0:
            arrays = {"theta": run.theta_I, "head": run.head, "n_steps": np.array(run.n_steps)}
            save_npz(out, **arrays, **({} if run.bias is None else {"bias": run.bias}))
