"""The four immunization methods of Table 1 behind one function, :func:`immunize`.

Each method turns one step's data into a list of :class:`Term` s (a scalar, the tensors it updates, and whether
theta's gradient of it is preconditioned). The engine adds the gradients and takes an Adam step
(Appendix C.2: Adam with betas (0.9, 0.999), eps 1e-8, in place of Alg. 1's plain gradient step).

* ``ours`` (Eq. 11 / Alg. 1): ``L(D_P) + lambda_P R_well(H_P) + lambda_H R_ill(H_H)``; regularizer gradients
  preconditioned by the protocol's dummy layer; ``supervised_loss`` and ``precondition`` are config values.
* ``rill_only`` ("minimizes only the regularizer R_ill(H_H)"): the same objective with ``lambda_P = 0`` and
  ``supervised_loss = false`` in its config, so there is one implementation of Eq. 11.
* ``opt_kappa``: ``[L(D_P)] + kappa_weight_P kappa(H_P) - kappa_weight_H kappa(H_H)`` with autograd through
  ``eigvalsh``; no preconditioning (the paper: "via gradient descent").
* ``opt_kappa_log``: ``[L(D_P)] + 1 / log kappa(H_H) + kappa_weight_P log kappa(H_P)``, the objective of the
  authors' unused ``kappa_loss`` (their ``lambda_cond`` = ``kappa_weight_P``), same optimizer as ``opt_kappa``.
* ``imma`` (bi-level): ``inner_steps`` differentiable gradient steps of size ``inner_lr`` on ``L(D_H, w_H, .)`` in
  (theta, bias) give theta*; the extractor then descends ``L(D_P, w_P, theta*) - L(D_H, w_H, theta*)`` (i.e.
  maximizes the harmful loss after the attacker's steps), backpropagating through the inner steps; the
  heads descend their own task's loss at theta* (w_H is the attacker's head).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch
from tqdm.auto import tqdm

from kappalab.errors import DegenerateSpectrumWarning
from kappalab.extremes import FallbackCount, count_fallbacks
from kappalab.methods import SPECS

from . import official_step
from .config import METHODS, MethodConfig
from .features_route import theta_gradient
from .paper_step import closed_form_gradients
from .protocols import Protocol, make_protocol
from .step_types import Batch, Params, Term
from .task import LinearTask


@dataclass
class ImmunizationRun:
    """Result of :func:`immunize`.

    Attributes:
        theta_I: immunized extractor, float64 ``D x D`` numpy array, paper orientation ``f(x) = x^T theta``.
        bias: the feature bias (official protocol) or None.
        head: the pre-training head w_P.
        history: "kappa_P", "kappa_H" (whole task, protocol's kappa) at the epochs listed in "kappa_epoch"
            (every ``monitor_every``-th and the last), and per epoch each term's last value.
        wall_time_s: training time.
        n_steps: optimizer steps taken.
        eigensolver_fallbacks: matrices the tensor-op eigensolver did not converge on, recomputed by LAPACK
            (:mod:`kappalab.extremes`; 0 wherever LAPACK runs anyway: the CPU).
        degenerate_count: steps on which the core flagged a non-unique extreme eigenvalue (gradient taken with
            whichever eigenvector the solver returned; paper protocol only).
        method, protocol, seed: what was run.
    """

    theta_I: np.ndarray
    bias: np.ndarray | None
    head: np.ndarray
    history: dict[str, list[float]]
    wall_time_s: float
    n_steps: int
    degenerate_count: int
    method: str
    protocol: str
    seed: int
    device: str = "cpu"
    notes: list[str] = field(default_factory=list)
    eigensolver_fallbacks: int = 0


def _eq11_terms(proto: Protocol, p: Params, b: Batch, cfg: MethodConfig) -> list[Term]:
    pre = cfg.extra.precondition
    terms = []
    if cfg.extra.supervised_loss:
        terms.append(Term("loss_P", proto.task_loss(p, b), p.extractor() + [p.w_P]))
    if cfg.lambda_P > 0:
        terms.append(Term("R_well", cfg.lambda_P * proto.reg_well(proto.gram(p, b, "P")), p.extractor(),
                          "P" if pre else None))
    if cfg.lambda_H > 0:
        terms.append(Term("R_ill", cfg.lambda_H * proto.reg_ill(proto.gram(p, b, "H")), p.extractor(),
                          "H" if pre else None))
    return terms


def _opt_kappa_terms(proto: Protocol, p: Params, b: Batch, cfg: MethodConfig) -> list[Term]:
    terms = []
    if cfg.extra.supervised_loss:
        terms.append(Term("loss_P", proto.task_loss(p, b), p.extractor() + [p.w_P]))
    kP, kH = proto.kappa(proto.gram(p, b, "P")), proto.kappa(proto.gram(p, b, "H"))
    if cfg.method == "opt_kappa_log":
        value = 1.0 / torch.log(kH) + cfg.extra.kappa_weight_P * torch.log(kP)
        terms.append(Term("1/log kappa_H + w log kappa_P", value, p.extractor()))
        return terms
    value = cfg.extra.kappa_weight_P * kP - cfg.extra.kappa_weight_H * kH
    terms.append(Term("kappa_P-kappa_H", value, p.extractor()))
    return terms


def _imma_terms(proto: Protocol, p: Params, b: Batch, cfg: MethodConfig) -> list[Term]:
    steps, lr = cfg.extra.inner_steps, cfg.inner_lr
    if steps < 1 or not lr > 0:
        raise ValueError(f"cfg.extra inner_steps must be >= 1 and inner_lr > 0, got {steps!r}, {lr!r}")
    Phi_P, Phi_H = proto.adapted_features(p, b, steps, lr)
    loss_P = proto.supervised_loss(Phi_P, p.w_P, b.y_P)
    loss_H = proto.supervised_loss(Phi_H, p.w_H, b.y_H)
    return [Term("outer", loss_P - loss_H, p.extractor()), Term("loss_P", loss_P, [p.w_P]),
            Term("loss_H", loss_H, [p.w_H])]


_TERMS_OF_OBJECTIVE = {"eq11": _eq11_terms, "kappa_gap": _opt_kappa_terms, "bilevel": _imma_terms}
#: method -> the terms of its objective (:attr:`kappalab.methods.MethodSpec.objective`)
TERMS: dict[str, Callable[[Protocol, Params, Batch, MethodConfig], list[Term]]] = {
    m: _TERMS_OF_OBJECTIVE[SPECS[m].objective] for m in METHODS}


def step_gradients(proto: Protocol, p: Params, batch: Batch, cfg: MethodConfig, *, closed_form: bool = True,
                   theta_out: torch.Tensor | None = None) -> tuple[dict[int, torch.Tensor], list[Term]]:
    """Sum of every term's gradient per tensor (keyed by ``id``), theta's preconditioned where the term says.

    ``closed_form``: where :func:`kappalab.immunization.official_step.applies`, the step is computed in closed form
    (no autograd; the same gradients to rounding); False forces the autograd step below (the tests' reference).
    ``theta_out``: route "features", theta's gradient is written into this tensor (:func:`train` passes the last
    step's gradient, which Adam has consumed, so that no fresh ``D x D`` output is allocated and page-faulted in
    every step); None allocates it.

    ``batch`` must be a fresh step view (:meth:`Batch.for_step`). Route "features": a term that updates the
    extractor is differentiated with respect to the step's feature leaves instead of theta and the bias, and
    :func:`_extractor_grads` maps the result back (see :mod:`kappalab.immunization.protocols`). With stacked runs
    (:mod:`kappalab.immunization.batched`) a term's value holds one scalar per run; the gradient of their sum is
    each run's own gradient (the runs share no parameter). Route "closed_form" (paper protocol, Ours and R_ill
    Only): :func:`kappalab.immunization.paper_step.closed_form_gradients` (that route has no autograd twin; its
    reference is route "dense")."""
    if proto.route == "closed_form":  # the protocol admits it for Ours and R_ill Only only (route_problem)
        return closed_form_gradients(proto, p, batch, cfg)
    if closed_form and official_step.applies(proto, batch, cfg):
        return official_step.closed_form_gradients(proto, p, batch, cfg, theta_out)
    terms = TERMS[cfg.method](proto, p, batch, cfg)
    total: dict[int, torch.Tensor] = {}
    feature_grads: dict[str, list[torch.Tensor]] = {"theta_P": [], "theta_H": [], "bias": []}
    leaves = {w: batch.step[f"Phi_{w}"] for w in ("P", "H") if f"Phi_{w}" in batch.step} \
        if proto.feature_space(batch) else {}
    for term in terms:
        params = term.params
        through_features = bool(leaves) and any(t is p.theta for t in params)
        if through_features:
            params = [t for t in params if not any(t is e for e in p.extractor())]
        names = list(leaves) if through_features else []
        grads = torch.autograd.grad(term.value.sum(), params + [leaves[w] for w in names], retain_graph=True,
                                    allow_unused=True)
        for param, g in zip(params, grads):
            if g is None:
                continue
            if term.precondition is not None and param is p.theta:
                g = proto.precondition(g, batch, term.precondition)
            total[id(param)] = total[id(param)] + g if id(param) in total else g
        if through_features and all(M is None for M in grads[len(params):]):
            raise ValueError(f"term {term.name!r} updates the extractor but does not depend on the step's features "
                             "(Protocol.batch_features): the 'features' route would drop its gradient")
        for which, M in zip(names, grads[len(params):]):
            if M is None:
                continue
            M = M.contiguous()  # one layout, so that a run and a stack of runs reduce and multiply M alike
            if p.bias is not None:
                feature_grads["bias"].append(M.sum(dim=-2))
            if term.precondition is not None:
                if which != term.precondition:
                    raise ValueError(f"term {term.name!r} is preconditioned with K_{term.precondition} but depends "
                                     f"on the features of task {which}: the 'features' route cannot map that "
                                     "gradient; use spectral_route 'gram'")
                M = proto.precondition_features(M, batch, which)
            feature_grads["theta_" + which].append(M)
    total.update(_extractor_grads(p, batch, feature_grads, theta_out))
    return total, terms


def _extractor_grads(p: Params, batch: Batch, feature_grads: dict[str, list[torch.Tensor]],
                     theta_out: torch.Tensor | None = None) -> dict[int, torch.Tensor]:
    """Route "features": theta's gradient ``X_P^T sum(M_P) + X_H^T sum(M_H)`` (:func:`theta_gradient`), and the
    bias's ``sum`` of the unpreconditioned column sums."""
    out: dict[int, torch.Tensor] = {}
    tasks = [w for w in ("P", "H") if feature_grads["theta_" + w]]
    if tasks:
        Ms = [sum(feature_grads["theta_" + w][1:], feature_grads["theta_" + w][0]) for w in tasks]
        out[id(p.theta)] = theta_gradient(batch, tasks, Ms, theta_out)
    if feature_grads["bias"] and p.bias is not None:
        out[id(p.bias)] = sum(feature_grads["bias"][1:], feature_grads["bias"][0])
    return out


@dataclass(frozen=True)
class EpochEnd:
    """After a step of :func:`train`: the run ``run`` of a stack (None: every run the step trained) has finished its
    epoch ``epoch``."""

    epoch: int
    run: int | None = None


class Schedule:
    """The steps :func:`train` takes: each step's batch and the :class:`EpochEnd` s after it, the whole-task kappa
    of a finished epoch, and what happens to the parameters after a step. This one: every run of the parameters
    (one run, or a stack of runs of equal shapes) takes ``epoch_batches(epoch)``'s batches in epochs 1, ...,
    ``epochs`` (a batch is whatever the :data:`Gradients` hook of :func:`train` reads: a :class:`Batch`, or the
    data-parallel ranks' row indices); :class:`kappalab.immunization.batched.RunSteps` gives each run of a stack
    its own steps."""

    def __init__(self, proto: Protocol, epochs: int, epoch_batches: Callable[[int], Iterable[Any]]) -> None:
        self.proto, self.epochs, self.epoch_batches = proto, epochs, epoch_batches

    def steps(self) -> Iterator[tuple[Any, tuple[EpochEnd, ...]]]:
        for epoch in range(1, self.epochs + 1):
            batches = iter(self.epoch_batches(epoch))
            batch = next(batches)
            for following in batches:
                yield batch, ()
                batch = following
            yield batch, (EpochEnd(epoch),)

    def monitor(self, p: Params, run: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        """kappa(H_P), kappa(H_H) on the whole task of ``run`` (None: of every run, stacked)."""
        return self.proto.monitor(p)

    def after_step(self, p: Params, step: int) -> None:
        """Called after optimizer step ``step`` (1, 2, ...) and before its epoch ends are recorded."""


@dataclass
class RunLog:
    """What :func:`train` records at one run's (or every run's) epoch ends: the whole-task kappas at the monitored
    epochs, each term's last value per epoch (tensors: one scalar, or one per stacked run), and the steps taken
    by the last epoch end."""

    kappas: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    monitored: list[int] = field(default_factory=list)
    term_log: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    n_steps: int = 0


@dataclass
class Training:
    """What :func:`train` returns: the :class:`RunLog` of every run (key None: of all runs together), the steps
    taken, steps with a degenerate-spectrum warning, wall time, and the eigensolver's LAPACK fallbacks (steps and
    monitored kappas; :meth:`eigensolver_fallbacks`)."""

    logs: dict[int | None, RunLog]
    n_steps: int
    degenerate: int
    wall_time_s: float
    fallbacks: FallbackCount = field(default_factory=FallbackCount)

    def eigensolver_fallbacks(self, run: int | None = None) -> int:
        """Matrices of stacked run ``run`` (None: of all) that the tensor path gave up on (LAPACK's instead)."""
        return self.fallbacks.of(run)

    def log(self, run: int | None = None) -> RunLog:
        """The :class:`RunLog` that holds stacked run ``run``'s epochs."""
        return self.logs[run] if run in self.logs else self.logs[None]

    def history(self, run: int | None = None) -> dict[str, list[float]]:
        """:attr:`ImmunizationRun.history` (of stacked run ``run`` when given)."""
        pick = lambda t: float(t) if run is None or t.ndim == 0 else float(t[run])
        log = self.log(run)
        out = {"kappa_P": [pick(a) for a, _ in log.kappas], "kappa_H": [pick(b) for _, b in log.kappas],
               "kappa_epoch": [float(e) for e in log.monitored]}
        out.update({name: [pick(v) for v in values] for name, values in log.term_log.items()})
        return out


#: A step's gradients: ``gradients(params, batch)`` sets every parameter's ``.grad`` for the step's ``batch`` (what
#: :meth:`Schedule.steps` yields) and returns the step's terms (their values go to the history).
Gradients = Callable[[Params, Any], list[Term]]


def plain_gradients(proto: Protocol, cfg: MethodConfig) -> Gradients:
    """The one-process step: :func:`step_gradients` of the :class:`Batch` (theta's written into the storage of the
    previous step's gradient, which Adam has consumed)."""
    def gradients(p: Params, batch: Batch) -> list[Term]:
        grads, terms = step_gradients(proto, p, batch.for_step(), cfg, theta_out=p.theta.grad)
        for param in p.all():
            param.grad = grads.get(id(param))
        return terms
    return gradients


def train(proto: Protocol, p: Params, cfg: MethodConfig, schedule: Schedule, desc: str,
          progress: bool = False, observer: Callable[[int, Params], None] | None = None,
          gradients: Gradients | None = None) -> Training:
    """The training loop shared by :func:`immunize`, :func:`kappalab.immunization.batched.immunize_batch` and
    :func:`kappalab.immunization.data_parallel.train`: Adam (``adam_betas``, ``adam_eps``, ``adam_fused``) over
    ``p``, the steps of ``schedule``, each step's gradients set by ``gradients`` (default :func:`plain_gradients`);
    at each epoch end, each term's value, and the whole-task kappa every ``monitor_every``-th epoch and at the
    last. Steps on which the core warned of a degenerate spectrum are counted, and so are the matrices the
    tensor-op eigensolver recomputed by LAPACK (a step's by the leading run axis of its stacks, a monitored kappa's
    for its run).

    ``observer(step, params)``, when given, is called before the first step (step 0) and after every optimizer
    step (step = steps taken so far) with the live parameters (read them detached, never modify them)."""
    gradients = plain_gradients(proto, cfg) if gradients is None else gradients
    opt = torch.optim.Adam(p.all(), lr=cfg.eta, betas=cfg.extra.adam_betas, eps=cfg.extra.adam_eps,
                           **({"fused": True} if cfg.extra.adam_fused else {}))
    logs: dict[int | None, RunLog] = {}
    start = time.perf_counter()
    if observer is not None:
        observer(0, p)
    with count_fallbacks() as fallbacks:
        n_steps, degenerate = _steps(p, cfg, schedule, desc, progress, observer, gradients, opt, logs, fallbacks)
    return Training(logs, n_steps, degenerate, time.perf_counter() - start, fallbacks)


def _steps(p: Params, cfg: MethodConfig, schedule: Schedule, desc: str, progress: bool,
           observer: Callable[[int, Params], None] | None, gradients: Gradients, opt: torch.optim.Optimizer,
           logs: dict[int | None, RunLog], fallbacks: FallbackCount) -> tuple[int, int]:
    """:func:`train`'s loop: every step of ``schedule``, the epoch ends into ``logs``; ``(steps, degenerate)``."""
    n_steps = degenerate = 0
    for batch, ends in tqdm(schedule.steps(), desc=desc, disable=not progress, leave=False):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DegenerateSpectrumWarning)
            terms = gradients(p, batch)
        degenerate += int(any(issubclass(w.category, DegenerateSpectrumWarning) for w in caught))
        opt.step()
        n_steps += 1
        schedule.after_step(p, n_steps)
        if observer is not None:
            observer(n_steps, p)
        for end in ends:
            log = logs.setdefault(end.run, RunLog())
            for term in terms:
                log.term_log.setdefault(term.name, []).append(term.value.detach())
            if end.epoch % cfg.extra.monitor_every == 0 or end.epoch == cfg.epochs:
                with fallbacks.owned_by(end.run):
                    log.kappas.append(schedule.monitor(p, end.run))
                log.monitored.append(end.epoch)
            log.n_steps = n_steps
    return n_steps, degenerate


def run_of(p: Params, t: Training, cfg: MethodConfig, seed: int, device: str, notes: list[str] | None = None
           ) -> ImmunizationRun:
    """The :class:`ImmunizationRun` of one trained run: its parameters (float64 NumPy) and :func:`train`'s log."""
    to_np = lambda x: None if x is None else x.detach().cpu().numpy().astype(np.float64)
    return ImmunizationRun(theta_I=to_np(p.theta), bias=to_np(p.bias), head=to_np(p.w_P), history=t.history(),
                           wall_time_s=t.wall_time_s, n_steps=t.n_steps, degenerate_count=t.degenerate,
                           method=cfg.method, protocol=cfg.protocol, seed=int(seed), device=str(device),
                           notes=list(notes or []), eigensolver_fallbacks=t.eigensolver_fallbacks())


def immunize(task: LinearTask, cfg: MethodConfig, seed: int, device: str = "cpu",
             progress: bool = False, observer: Callable[[int, Params], None] | None = None) -> ImmunizationRun:
    """Run one method (``cfg.method``) under one protocol (``cfg.protocol``) and return the immunized extractor
    (``observer``: see :func:`train`)."""
    if not isinstance(task, LinearTask):
        raise ValueError(f"task must be a LinearTask, got {type(task).__name__}")
    if not isinstance(cfg, MethodConfig):
        raise ValueError(f"cfg must be a MethodConfig, got {type(cfg).__name__}")
    if cfg.method == "imma" and task.y_H is None:
        raise ValueError("task.y_H is None: IMMA needs the harmful task's labels")
    proto = make_protocol(task, cfg, device)
    p = proto.init_params(seed, with_w_H=cfg.method == "imma")
    gen = torch.Generator().manual_seed(int(seed) + 1)
    t = train(proto, p, cfg, Schedule(proto, cfg.epochs, lambda epoch: proto.batches(gen)),
              f"{cfg.protocol}/{cfg.method}/seed{seed}", progress, observer)
    return run_of(p, t, cfg, seed, device)
