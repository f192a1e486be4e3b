"""The batched engine: R runs of the same features and loss advance together as one tensor program.

Every tensor of a step gains a leading run dimension: the features ``Phi`` are ``R x N x D`` (one batched matmul),
the Gram matrices ``R x N x N`` (one batched ``eigvalsh`` and one batched Cholesky), the gradients ``R x D x D``
(``baddbmm``), and Adam updates the stacked parameters in one (fused) call. The step itself is the single-run
engine's, unchanged: :func:`kappalab.immunization.methods.step_gradients` with the protocols' batch-agnostic
formulas (a term's value holds one scalar per run and autograd differentiates their sum, which gives each run its
own gradient because the runs share no parameter), inside the shared loop :func:`~kappalab.immunization.methods.train`.

Each run keeps its own seed: its parameters are drawn by the protocol's ``init_params(seed)`` and its minibatch
order by its own generator (seed + 1), exactly as :func:`~kappalab.immunization.immunize` draws them, and it gets
its own :class:`~kappalab.immunization.ImmunizationRun`. The batched kernels compute each run's slice with the
operations of the single-run kernels (batched matmul, Cholesky, ``eigvalsh``, fused Adam), except IMMA's supervised
loss, ``Phi @ w`` for one run (the rounding of Table 1's records) and a product and a sum for a stack; how far the
engines agree is measured in docs/engines.md and tested to 1e-10 relative (``tests/test_batched.py``).

Runs of different row counts (full MNIST's pairs) share a batch (:class:`RunSteps`): every minibatch has
``batch_size`` rows whatever the task's size, the tasks' data are stacked with zero rows padding the smaller ones
(never read), and run r takes its own ``epochs x S_r`` steps (``S_r``: its minibatches per epoch), its k-th at the
stack's step k, so that Adam's step count, shared by the stacked tensors, is each run's own. After its last step a
run's parameters are held (restored after every later step of the stack, on the device: no host read), its epoch
ends are recorded at its own steps, and its whole-task kappa is computed on its own rows.

Scope: the official protocol on the ``features`` route (Table 2's configs) with minibatches of fewer rows than
features (:func:`unsupported`), the four methods. A batch holds one config (one method) and tasks of equal
features, loss and labels; :func:`group_batches` forms such batches from a list of jobs.
"""

from __future__ import annotations

import bisect
import time
import typing
from collections.abc import Hashable, Iterator, Sequence
from typing import Any, Callable, TypeVar

import numpy as np
import torch

from .config import MethodConfig
from .methods import EpochEnd, ImmunizationRun, Schedule, train
from .protocols import Protocol, make_protocol
from .step_types import Batch, Params
from .task import LinearTask

T = TypeVar("T")


def _check(tasks: Sequence[LinearTask], cfg: MethodConfig, seeds: Sequence[int]) -> None:
    if not isinstance(cfg, MethodConfig):
        raise ValueError(f"cfg must be a MethodConfig, got {type(cfg).__name__}")
    if not tasks or len(tasks) != len(seeds):
        raise ValueError(f"tasks and seeds must be non-empty and of equal length, got {len(tasks)} and {len(seeds)}")
    for i, task in enumerate(tasks):
        if not isinstance(task, LinearTask):
            raise ValueError(f"tasks[{i}] must be a LinearTask, got {type(task).__name__}")
        if cfg.method == "imma" and task.y_H is None:
            raise ValueError(f"tasks[{i}].y_H is None: IMMA needs the harmful task's labels")
        if batch_key(task) != batch_key(tasks[0]):
            raise ValueError(f"tasks[{i}] has features/loss/labels {batch_key(task)} but tasks[0] has "
                             f"{batch_key(tasks[0])}: a batch needs runs of equal features, loss and labels (group "
                             "them with group_batches)")
    reason = unsupported(cfg, tasks[0].X_P.shape[1])
    if reason is not None:
        raise ValueError(f"{reason}; use --engine single")


def batch_key(task: LinearTask) -> Hashable:
    """What runs of one batch share: the features D, the loss and whether the harmful labels are given (the row
    counts may differ)."""
    return task.dim, task.loss, task.y_H is None


def unsupported(cfg: MethodConfig, n_features: int | None = None) -> str | None:
    """Why the batched engine cannot run ``cfg`` on tasks of ``n_features`` features (None when it can): it
    implements the official protocol on the ``features`` spectral route, with minibatches of fewer rows than
    features (the Woodbury preconditioning; a batch with at least as many rows as features takes the dense
    ``D x D`` solve, which is not written for stacked runs)."""
    if cfg.protocol != "official" or cfg.extra.spectral_route != "features":
        return (f"the batched engine implements the official protocol on the 'features' spectral route, got "
                f"protocol {cfg.protocol!r}, route {cfg.extra.spectral_route!r}")
    if cfg.batch_size is None:
        return "the batched engine needs minibatches (cfg.batch_size), got None"
    if n_features is not None and cfg.batch_size >= n_features:
        return (f"the batched engine needs minibatches of fewer rows than features, got batch_size "
                f"{cfg.batch_size} >= D = {n_features}")
    return None


def stacked_protocol(tasks: Sequence[LinearTask], cfg: MethodConfig, device: str
                     ) -> tuple[Protocol, list[Protocol]]:
    """The protocol of ``tasks[0]`` holding every task's data stacked along a leading run dimension (a task of
    fewer rows padded with zero rows, which no minibatch reads), and each task's own protocol on its rows of the
    stack (views: its minibatch order and its whole-task kappa)."""
    proto = make_protocol(tasks[0], cfg, device)

    def stack(name: str) -> torch.Tensor | None:
        if getattr(tasks[0], name) is None:
            return None
        arrays = [getattr(t, name) for t in tasks]
        out = np.zeros((len(arrays), max(len(a) for a in arrays), *arrays[0].shape[1:]))
        for r, a in enumerate(arrays):
            out[r, :len(a)] = a
        return torch.as_tensor(out, dtype=torch.float64, device=proto.device)

    names = ("X_P", "y_P", "X_H", "y_H")
    proto.X_P, proto.y_P, proto.X_H, proto.y_H = (stack(n) for n in names)
    runs = []
    for r, task in enumerate(tasks):
        own = make_protocol(task, cfg, device)
        for name in names:
            data = getattr(proto, name)
            setattr(own, name, None if data is None else data[r, :len(getattr(task, name))])
        runs.append(own)
    return proto, runs


def stacked_params(proto: Protocol, seeds: Sequence[int], with_w_H: bool) -> Params:
    """Each run's :meth:`Protocol.init_params` (its own seed), stacked into leaf tensors ``R x ...``."""
    runs = [proto.init_params(s, with_w_H) for s in seeds]
    stack = lambda name: None if getattr(runs[0], name) is None else \
        torch.stack([getattr(r, name).detach() for r in runs]).requires_grad_(True)
    return Params(stack("theta"), stack("bias"), stack("w_P"), stack("w_H"))


class RunSteps(Schedule):
    """The :class:`~kappalab.immunization.methods.Schedule` of a stack of runs, each with its own steps (module
    docstring): run r's minibatches in the order of :meth:`Protocol.epoch_order` with its own generator
    ``gens[r]`` on its own rows (``runs[r]``), gathered into ``R x batch_size x D`` batches (one gather per tensor
    and step); a run past its last step is given its last minibatch again and its parameters are held. When every
    run has the same row counts, the epochs end together and the whole-task kappa is one stacked computation."""

    def __init__(self, proto: Protocol, runs: Sequence[Protocol], epochs: int,
                 gens: Sequence[torch.Generator]) -> None:
        self.proto, self.runs, self.epochs, self.gens = proto, list(runs), epochs, list(gens)
        self.per_epoch = [own.steps_per_epoch() for own in self.runs]
        self.last = [epochs * s for s in self.per_epoch]  #: each run's last step
        self.together = len({(own.X_P.shape, own.X_H.shape) for own in self.runs}) == 1
        self.held: list[torch.Tensor] | None = None  #: the finished runs' parameters (their slices)
        # the runs whose last step is L, and those whose last step is at most L, as index tensors on the device,
        # made before training (no host-to-device copy in a step)
        index_of = lambda keep: torch.tensor([r for r, last in enumerate(self.last) if keep(last)],
                                             device=proto.device)
        self.last_steps = sorted(set(self.last))
        self.finishing = {L: index_of(lambda last: last == L) for L in self.last_steps}
        self.finished = {L: index_of(lambda last: last <= L) for L in self.last_steps}

    def _order(self, r: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for _ in range(self.epochs):
            yield from self.runs[r].epoch_order(self.gens[r])

    def steps(self) -> Iterator[tuple[Batch, tuple[EpochEnd, ...]]]:
        proto, R = self.proto, len(self.runs)
        orders = [self._order(r) for r in range(R)]
        current: list[tuple[torch.Tensor, torch.Tensor]] = [next(o) for o in orders]
        index = torch.arange(R, device=proto.device)[:, None]
        take = lambda A, idx: None if A is None else A[index, idx]
        for k in range(1, max(self.last) + 1):
            if k > 1:
                current = [next(orders[r]) if k <= self.last[r] else current[r] for r in range(R)]
            iP, iH = torch.stack([i for i, _ in current]), torch.stack([j for _, j in current])
            ends = [EpochEnd(k // s, r) for r, s in enumerate(self.per_epoch) if k % s == 0 and k <= self.last[r]]
            if self.together and ends:
                ends = [EpochEnd(ends[0].epoch)]
            yield Batch(take(proto.X_P, iP), take(proto.y_P, iP), take(proto.X_H, iH), take(proto.y_H, iH)), \
                tuple(ends)

    def monitor(self, p: Params, run: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        if run is None:
            return self.proto.monitor(p)
        pick = lambda t: None if t is None else t[run]
        return self.runs[run].monitor(Params(pick(p.theta), pick(p.bias), pick(p.w_P), pick(p.w_H)))

    @torch.no_grad()
    def after_step(self, p: Params, step: int) -> None:
        """Restore the runs that finished before ``step`` to their held values; hold the runs finishing now."""
        before = bisect.bisect_left(self.last_steps, step) - 1  # the last finishing step before this one, if any
        if before >= 0:
            idx = self.finished[self.last_steps[before]]
            for t, h in zip(p.all(), self.held):
                t.index_copy_(0, idx, h.index_select(0, idx))
        if step in self.finishing and step < self.last_steps[-1]:
            if self.held is None:
                self.held = [t.detach().clone() for t in p.all()]
            idx = self.finishing[step]
            for t, h in zip(p.all(), self.held):
                h.index_copy_(0, idx, t.detach().index_select(0, idx))


def immunize_batch(tasks: Sequence[LinearTask], cfg: MethodConfig, seeds: Sequence[int], device: str = "cpu",
                   progress: bool = False) -> list[ImmunizationRun]:
    """:func:`~kappalab.immunization.immunize` of ``(tasks[r], cfg, seeds[r])`` for every r, as one batched run
    (the tasks' row counts may differ: :class:`RunSteps`).

    Returns one :class:`ImmunizationRun` per run, in order; ``wall_time_s`` is the batch's training time divided by
    the number of runs (a note says so)."""
    _check(tasks, cfg, seeds)
    proto, runs = stacked_protocol(tasks, cfg, device)
    p = stacked_params(proto, seeds, with_w_H=cfg.method == "imma")
    gens = [torch.Generator().manual_seed(int(s) + 1) for s in seeds]
    t = train(proto, p, cfg, RunSteps(proto, runs, cfg.epochs, gens), f"{cfg.protocol}/{cfg.method}/batch{len(seeds)}",
              progress)
    host = {name: None if x is None else x.detach().cpu().numpy().astype(np.float64)
            for name, x in (("theta", p.theta), ("bias", p.bias), ("w_P", p.w_P))}
    pick = lambda name, r: None if host[name] is None else host[name][r].copy()
    return [ImmunizationRun(theta_I=pick("theta", r), bias=pick("bias", r), head=pick("w_P", r),
                            history=t.history(r), wall_time_s=t.wall_time_s / len(seeds), n_steps=t.log(r).n_steps,
                            degenerate_count=t.degenerate, method=cfg.method, protocol=cfg.protocol,
                            seed=int(seeds[r]), device=str(device),
                            eigensolver_fallbacks=t.eigensolver_fallbacks(r),
                            notes=[f"batched engine: {len(seeds)} runs in one batch; wall_time_s = batch time / "
                                   f"{len(seeds)}"])
            for r in range(len(seeds))]


def group_batches(items: Sequence[T], key: Callable[[T], Hashable], batch_size: int) -> list[list[int]]:
    """Indices of ``items`` grouped by ``key`` (e.g. config and data shapes), in first-seen order, each group cut
    into batches of at most ``batch_size``: the batches :func:`immunize_batch` can run."""
    if not (isinstance(batch_size, int) and batch_size >= 1):
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    groups: dict[Hashable, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(key(item), []).append(i)
    return [idx[k:k + batch_size] for idx in groups.values() for k in range(0, len(idx), batch_size)]


class Seeded(typing.Protocol):
    """A job :func:`run_batch` can train: it names its seed (the sweep's typed run specs do)."""

    @property
    def seed(self) -> int: ...


J = TypeVar("J", bound=Seeded)


def run_batch(jobs: Sequence[J], device: str = "cpu", batch_size: int = 16, *,
              task_of: Callable[[J], LinearTask], config_of: Callable[[J], MethodConfig],
              finish: Callable[[J, LinearTask, ImmunizationRun, float], dict[str, Any]]
              ) -> Iterator[tuple[int, dict[str, Any]]]:
    """A sweep's jobs through the batched engine: jobs with equal config and data shapes are grouped into batches of
    at most ``batch_size`` runs (:func:`group_batches`; equal features, loss and labels: :func:`batch_key`; the
    row counts may differ), each batch is trained by :func:`immunize_batch` (each run with its job's ``seed``), and
    each run is finished by ``finish(job, task, run, train_s)`` (the single engine's per-run evaluation and record),
    ``train_s`` being its share of the batch's training time.

    Yields ``(index into jobs, result)`` as soon as each run is finished (a store appends it there: a killed sweep
    loses only the batch in flight). Each task is built twice, once for its :func:`batch_key` (then dropped) and
    once for its batch, so a sweep's data is never all in memory at once."""
    cfgs = [config_of(j) for j in jobs]
    keys = [(repr(cfg), batch_key(task_of(job))) for cfg, job in zip(cfgs, jobs)]
    for idx in group_batches(range(len(jobs)), keys.__getitem__, batch_size):
        tasks = [task_of(jobs[i]) for i in idx]
        start = time.perf_counter()
        runs = immunize_batch(tasks, cfgs[idx[0]], [jobs[i].seed for i in idx], device)
        share = (time.perf_counter() - start) / len(idx)
        for i, task, run in zip(idx, tasks, runs):
            yield i, finish(jobs[i], task, run, share)
