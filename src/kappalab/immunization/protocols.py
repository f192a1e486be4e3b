"""The two training protocols: what a step sees (data, features, Gram matrix, regularizers, preconditioner).

``paper`` (Alg. 1 as stated)
    theta is ``D x D``, no bias, full batch; ``H(theta) = theta^T K theta`` with the split's ``K = X^T X`` (core
    :func:`kappalab.hessian`); regularizers are the core's R_well (``p = D``) and R_ill (``k = rank``) with
    autograd through their closed forms (Thm A.1(3), 4.1(3)); the regularizer gradients (not grad L) are
    preconditioned on the INPUT side, ``(K + ridge I)^{-1} grad_theta`` (Alg. 1; the core's
    :func:`kappalab.dummy_layer.precondition_weight_grad` with ``side="input"``); kappa = pinv definition.
    K is singular (rank 74 / 76 of 79), so K^-1 does not exist: the ridge (config ``ridge_P``/``ridge_H``)
    replaces it. The regularizer gradients ``2 K theta M`` lie in range(K), where ``(K + ridge I)^{-1}`` equals
    K^+ up to a relative ``ridge / lambda_min^+(K)``; in null(K) the ridge only scales rounding noise.

``official`` (the authors' public code, as read and run by us; no code copied)
    theta (``D x D``) plus a bias b: features ``Phi = X theta + 1 b^T``; minibatches (``batch_size``, drop_last,
    shuffled per epoch, P and H batches paired in order); ``S = Phi^T Phi`` per minibatch; regularizers r1, r2
    of :mod:`kappalab.immunization.spectra` (``k = p = D``, shifted eigenvalues); the regularizer gradient of
    the weight is multiplied by ``(X_b^T X_b + ridge I)^{-1}`` of the batch from the LEFT of nn.Linear's
    ``W = theta^T`` (``side="output"``), i.e. from the right of theta; bias and MSE gradients are not
    preconditioned; kappa = shifted definition.

Spectral route (config ``extra.spectral_route``, default ``"dense"``; "gram" and "features": official protocol only;
"closed_form": paper protocol only, see :mod:`kappalab.immunization.paper_step`)
    ``"dense"``: ``eigvalsh`` of the ``D x D`` S and a ``D x D`` Cholesky solve per preconditioned term (Table 1,
    and every run recorded without the option). ``"gram"`` (Table 2's configs): when a batch has
    ``N < D`` rows, :meth:`OfficialProtocol.gram` returns a :class:`~kappalab.immunization.spectra.FeatureGram`
    (spectra of the ``N x N`` ``Phi Phi^T``; no ``D x D`` eigenproblem, S never formed) and the preconditioner is
    :func:`~kappalab.immunization.woodbury.woodbury_precondition` (one ``N x N`` Cholesky per batch and task). Equal to the dense route up to
    rounding, with one documented convention: ``s_min := shift`` when rank(S) < D, which is the dense rule's
    outcome (see :func:`~kappalab.immunization.spectra.gram_extremes_shifted`). With ``N >= D`` (e.g. ``--quick``'s
    D = 49) the gram route computes exactly what the dense route does. Woodbury is the more accurate of the two
    solves when ``ridge`` is tiny: it never forms ``K = X^T X`` (condition number squared); at Table 2's
    ``ridge_H = 1e-7`` the dense Cholesky solve is off by ~4e-6 relative from an SVD-based reference, Woodbury by
    ~1e-13.
"""

from __future__ import annotations

import math
from typing import Iterator

import torch

from kappalab.dummy_layer import precondition_weight_grad
from kappalab.linear import hessian
from kappalab.methods import OURS, RILL_ONLY
from kappalab.regularizers import r_ill, r_well

from .config import MethodConfig
from .spectra import (SPECTRAL_ROUTES, FeatureGram, features_lambda_max, gram_shifted_kappa,
                      official_r1, official_r2, torch_kappa)
from .step_types import Batch, Params
from .task import LinearTask
from ..woodbury import woodbury_features, woodbury_precondition


def _uniform(gen: torch.Generator, shape: tuple[int, ...], bound: float) -> torch.Tensor:
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2.0 - 1.0) * bound


class Protocol:
    """Shared machinery; subclasses set the protocol-specific parts."""

    name = "base"
    routes: tuple[str, ...] = ("dense",)  #: the spectral routes this protocol implements
    #: routes implemented for some methods only: route -> those methods (:func:`route_problem`)
    route_methods: dict[str, tuple[str, ...]] = {}
    precondition_side = "input"
    kappa_definition = "pinv"
    has_bias = False

    def __init__(self, task: LinearTask, cfg: MethodConfig, device: str) -> None:
        self.task, self.cfg, self.device = task, cfg, torch.device(device)
        as_t = lambda a: None if a is None else torch.as_tensor(a, dtype=torch.float64, device=self.device)
        self.X_P, self.y_P, self.X_H, self.y_H = as_t(task.X_P), as_t(task.y_P), as_t(task.X_H), as_t(task.y_H)
        self.D = task.dim
        self.shift = cfg.extra.shift
        self.rank_rtol = cfg.extra.rank_rtol
        self.on_degenerate = cfg.extra.on_degenerate
        self.route = cfg.extra.spectral_route
        # the config may take away the official protocol's bias and choose the preconditioner's side (Table 2's
        # protocol walk changes the two protocols' differences one at a time)
        self.has_bias = type(self).has_bias and cfg.extra.bias
        self.precondition_side = cfg.extra.precondition_side or type(self).precondition_side
        problem = route_problem(type(self), cfg.method, self.route)
        if problem is not None:
            raise ValueError(problem)

    def feature_space(self, batch: Batch) -> bool:
        """True when theta's gradient is assembled from the features' on this batch: route "features" and both
        tasks' batches have fewer rows than columns (otherwise the route computes what "gram", hence "dense",
        does)."""
        return self.route == "features" and max(batch.X_P.shape[-2], batch.X_H.shape[-2]) < self.D

    # -- initialization ----------------------------------------------------------------------------------------
    def init_params(self, seed: int, with_w_H: bool) -> Params:
        """theta: ``theta_init`` ("torch_linear" = nn.Linear's default U(-1/sqrt(D), 1/sqrt(D)) or "identity");
        heads: ``head_init`` ("standard_normal" or "zeros"); drawn on the CPU from ``seed``, then moved."""
        gen = torch.Generator().manual_seed(int(seed))
        bound = 1.0 / math.sqrt(self.D)
        if self.cfg.extra.theta_init == "torch_linear":
            theta = _uniform(gen, (self.D, self.D), bound)
        else:  # "identity" (Extras checks the value)
            theta = torch.eye(self.D, dtype=torch.float64)
        bias = _uniform(gen, (self.D,), bound) if self.has_bias else None
        draw = (lambda: torch.randn(self.D, generator=gen, dtype=torch.float64)) \
            if self.cfg.extra.head_init == "standard_normal" \
            else (lambda: torch.zeros(self.D, dtype=torch.float64))
        w_P = draw()
        w_H = draw() if with_w_H else None
        to = lambda t: None if t is None else t.to(self.device).requires_grad_(True)
        return Params(to(theta), to(bias), to(w_P), to(w_H))

    # -- data ----------------------------------------------------------------------------------------------------
    def batches(self, gen: torch.Generator) -> Iterator[Batch]:
        """The epoch's batches (full batch when ``cfg.batch_size`` is None)."""
        if self.cfg.batch_size is None:
            yield self._full
            return
        for iP, iH in self.epoch_order(gen):
            yield self._batch(self.X_P[iP], self.y_P[iP], self.X_H[iH], None if self.y_H is None else self.y_H[iH])

    def epoch_order(self, gen: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch's minibatches as row indices ``(iP, iH)`` into the P and H rows (``cfg.batch_size`` rows each,
        drop_last, P and H batches paired in order; shuffled by ``gen`` unless ``shuffle`` is false)."""
        bs, steps = self.cfg.batch_size, self.steps_per_epoch()
        shuffle = self.cfg.extra.shuffle
        order = lambda n: (torch.randperm(n, generator=gen) if shuffle else torch.arange(n)).to(self.device)
        perm_P, perm_H = order(self.X_P.shape[-2]), order(self.X_H.shape[-2])
        return [(perm_P[i * bs:(i + 1) * bs], perm_H[i * bs:(i + 1) * bs]) for i in range(steps)]

    def steps_per_epoch(self) -> int:
        """How many minibatches :meth:`epoch_order` gives (1: the full batch when ``cfg.batch_size`` is None)."""
        bs = self.cfg.batch_size
        if bs is None:
            return 1
        n_P, n_H = self.X_P.shape[-2], self.X_H.shape[-2]
        if bs > min(n_P, n_H):
            raise ValueError(f"batch_size {bs} exceeds the smaller split ({min(n_P, n_H)} rows) with drop_last")
        return min(n_P // bs, n_H // bs)

    @property
    def _full(self) -> Batch:
        if not hasattr(self, "_full_batch"):
            self._full_batch = self._batch(self.X_P, self.y_P, self.X_H, self.y_H)
        return self._full_batch

    @staticmethod
    def _batch(X_P, y_P, X_H, y_H) -> Batch:
        return Batch(X_P, y_P, X_H, y_H)

    # -- model ---------------------------------------------------------------------------------------------------
    def features(self, p: Params, X: torch.Tensor, theta: torch.Tensor | None = None,
                 bias: torch.Tensor | None = None) -> torch.Tensor:
        """``Phi = X theta (+ 1 b^T)`` (``theta``/``bias`` override the parameters, e.g. IMMA's inner iterate)."""
        theta = p.theta if theta is None else theta
        bias = p.bias if bias is None else bias
        Phi = X @ theta
        return Phi + bias.unsqueeze(-2) if bias is not None else Phi

    def batch_features(self, p: Params, batch: Batch, which: str) -> torch.Tensor:
        """The features of task ``which`` of this step's batch at the current parameters, computed once per step
        (cached in ``batch.step``). Route "features": a detached leaf that requires grad (the engine maps its
        gradient back to theta and the bias)."""
        key = "Phi_" + which
        if key not in batch.step:
            Phi = self.features(p, batch.X(which))
            batch.step[key] = Phi.detach().requires_grad_(True) if self.feature_space(batch) else Phi
        return batch.step[key]

    def adapted_features(self, p: Params, batch: Batch, steps: int, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
        """IMMA's inner loop: the features (Phi_P*, Phi_H*) of the batch at the extractor after ``steps``
        differentiable gradient steps of size ``lr`` on the harmful loss ``L(D_H, w_H, .)`` (create_graph, so the
        outer loss backpropagates through them). Route "features": in feature space (module docstring)."""
        if self.feature_space(batch):
            Phi_P, Phi_H = self.batch_features(p, batch, "P"), self.batch_features(p, batch, "H")
            C_PH, C_HH = self.inner_kernel(batch, "P"), self.inner_kernel(batch, "H")
            for _ in range(steps):
                inner = self.supervised_loss(Phi_H, p.w_H, batch.y_H)
                (M,) = torch.autograd.grad(inner.sum(), [Phi_H], create_graph=True)  # sum over stacked runs
                M = M.contiguous()  # one layout: the same GEMMs (and backward GEMMs) for a run and a stack
                Phi_P, Phi_H = Phi_P - lr * (C_PH @ M), Phi_H - lr * (C_HH @ M)
            return Phi_P, Phi_H
        theta, bias = p.theta, p.bias
        for _ in range(steps):
            inner = self.supervised_loss(self.features(p, batch.X_H, theta, bias), p.w_H, batch.y_H)
            grads = torch.autograd.grad(inner, [theta] + ([bias] if bias is not None else []), create_graph=True)
            theta = theta - lr * grads[0]
            bias = bias - lr * grads[1] if bias is not None else None
        return self.features(p, batch.X_P, theta, bias), self.features(p, batch.X_H, theta, bias)

    def inner_kernel(self, batch: Batch, which: str) -> torch.Tensor:
        """``X_which X_H^T`` (+ 1 when the model has a bias): how a gradient step on the harmful batch moves the
        features of task ``which``; cached per batch."""
        key = "inner_kernel_" + which
        if key not in batch.cache:
            C = batch.X(which) @ batch.X_H.mT
            batch.cache[key] = C + 1.0 if self.has_bias else C
        return batch.cache[key]

    def supervised_loss(self, Phi: torch.Tensor, w: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
        """MSE ``mean((Phi w - y)^2)`` or BCE with logits ``Phi w`` (labels in {0, 1}); with a leading run
        dimension (:mod:`kappalab.immunization.batched`), one loss per run. One run: ``Phi @ w`` (the rounding that
        the committed Table 1 records were computed with; 1000 full-batch epochs amplify a last-bit change of this
        product to 5% of Ours' RIR and 4x of Opt kappa's, measured). A stack: a product and a sum over the last
        axis, whose first and second derivatives (IMMA's inner step) are elementwise operations and reductions;
        the batched engine then agrees with the single one to 1e-10 (tests/test_batched.py)."""
        if y is None:
            raise ValueError("task.y_H is None but this method needs the harmful task's labels")
        return self.loss_of_logits(self.logits(Phi, w), y)

    @staticmethod
    def logits(Phi: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """The head's output ``Phi w``: ``Phi @ w`` for one run, a product and a sum for a stack
        (:meth:`supervised_loss`)."""
        return Phi @ w if Phi.ndim == 2 else (Phi * w.unsqueeze(-2)).sum(dim=-1)

    def task_loss(self, p: Params, batch: Batch) -> torch.Tensor:
        """``L(D_P, w_P, theta)`` of the step's batch. ``extra.logits_order = "head_first"`` (paper protocol, one
        run): the logits as ``X_P (theta w_P)``, two matrix-vector products instead of the ``N x D x D`` product
        of the features and its gradient (the same number up to rounding; Table 2's full-MNIST Alg. 1 runs, where
        the features were ~40% of a step); otherwise :meth:`supervised_loss` of the step's features."""
        if self.cfg.extra.logits_order == "head_first":
            if self.has_bias or p.theta.ndim != 2:
                raise ValueError("logits_order 'head_first' is implemented for the paper protocol's single runs "
                                 "(no bias, no stacked runs)")
            if batch.y_P is None:
                raise ValueError("task.y_P is None")
            return self.loss_of_logits(batch.X_P @ (p.theta @ p.w_P), batch.y_P)
        return self.supervised_loss(self.batch_features(p, batch, "P"), p.w_P, batch.y_P)

    def loss_of_logits(self, pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The task's loss of predictions ``pred``: MSE, or BCE with logits (one value per stacked run)."""
        if self.task.loss == "mse":
            return torch.mean((pred - y) ** 2, dim=-1)
        return torch.nn.functional.binary_cross_entropy_with_logits(pred, y, reduction="none").mean(dim=-1)

    def loss_of_logits_grad(self, pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``d loss_of_logits / d pred`` in closed form: ``2 (pred - y) / N`` (MSE), ``(sigmoid(pred) - y) / N``
        (BCE with logits), N = ``pred.shape[-1]``."""
        n = pred.shape[-1]
        if self.task.loss == "mse":
            return (2.0 / n) * (pred - y)
        return (torch.sigmoid(pred) - y) / n

    def loss_of_logits_curvature(self, pred: torch.Tensor) -> torch.Tensor:
        """The diagonal of ``d^2 loss_of_logits / d pred^2`` (the derivative of :meth:`loss_of_logits_grad`):
        ``2 / N`` (MSE), ``sigmoid(pred) (1 - sigmoid(pred)) / N`` (BCE)."""
        n = pred.shape[-1]
        if self.task.loss == "mse":
            return torch.full_like(pred, 2.0 / n)
        sig = torch.sigmoid(pred)
        return sig * (1.0 - sig) / n

    def gram(self, p: Params, batch: Batch, which: str) -> torch.Tensor:
        """The linear-probing Hessian of task ``which`` ("P" or "H") of the batch at the current parameters."""
        raise NotImplementedError

    def reg_well(self, S: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reg_ill(self, S: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def kappa(self, S: torch.Tensor) -> torch.Tensor:
        """Differentiable kappa under the protocol's definition (Opt kappa's objective)."""
        return torch_kappa(S, self.kappa_definition, rtol=self.rank_rtol, shift=self.shift)

    def ridge(self, which: str) -> float:
        return self.cfg.ridge_P if which == "P" else self.cfg.ridge_H

    def precondition(self, grad_theta: torch.Tensor, batch: Batch, which: str) -> torch.Tensor:
        """The dummy layer's effect on theta's gradient, in theta's orientation (nn.Linear's W = theta^T).

        Dense route: a Cholesky solve with the batch's ``K + ridge I`` (``D x D``). Gram route with a batch of
        ``N < D`` rows and ``ridge > 0`` (also route "features" for terms whose gradient is not taken through the
        features): :func:`woodbury_precondition` (an ``N x N`` Cholesky, cached per batch); otherwise the dense solve with its Cholesky factor cached on the batch (the full batch is one
        object per run, so it is factored once per run)."""
        ridge = self.ridge(which)
        X = batch.X(which)
        if self.route in ("gram", "features") and ridge > 0 and X.shape[0] < X.shape[1]:
            return woodbury_precondition(grad_theta, X, ridge, self.precondition_side, batch.cache, which)
        K = batch.K_P if which == "P" else batch.K_H
        return precondition_weight_grad(grad_theta.T, K, ridge, self.precondition_side).T

    def precondition_features(self, M: torch.Tensor, batch: Batch, which: str) -> torch.Tensor:
        """Route "features": ``M'`` with ``X^T M' = precondition(X^T M)`` for ``X`` the batch's task ``which``
        (:func:`woodbury_features`); needs ``ridge > 0``."""
        ridge, X = self.ridge(which), batch.X(which)
        if not ridge > 0:
            raise ValueError(f"spectral_route 'features' needs ridge_{which} > 0 (Woodbury), got {ridge!r}; use "
                             "'gram' or 'dense'")
        return woodbury_features(M, X, ridge, self.precondition_side, batch.cache, which)

    @torch.no_grad()
    def monitor(self, p: Params) -> tuple[torch.Tensor, torch.Tensor]:
        """kappa(H_P), kappa(H_H) on the whole task (protocol's definition), for the history."""
        return self.whole_task_kappa(p, "P"), self.whole_task_kappa(p, "H")

    def whole_task_kappa(self, p: Params, which: str) -> torch.Tensor:
        """:meth:`kappa` of task ``which``'s linear-probing Hessian on the whole task."""
        return self.kappa(self.gram(p, self._full.for_step(), which))


class PaperProtocol(Protocol):
    """Alg. 1 as stated (see module docstring)."""

    name = "paper"
    routes = ("dense", "closed_form")
    route_methods = {"closed_form": (OURS.name, RILL_ONLY.name)}  #: immunization.paper_step (Eq. 11's terms)
    precondition_side = "input"
    kappa_definition = "pinv"
    has_bias = False

    def gram(self, p, batch, which):
        return hessian(p.theta, batch.covariance(which), check=False)

    def reg_well(self, S):
        return r_well(S, psd=True, rtol=self.rank_rtol, on_degenerate=self.on_degenerate)

    def reg_ill(self, S):
        return r_ill(S, psd=True, rtol=self.rank_rtol, on_degenerate=self.on_degenerate)


class OfficialProtocol(Protocol):
    """The authors' public code's behaviour (see module docstring)."""

    name = "official"
    precondition_side = "output"
    kappa_definition = "shifted"
    has_bias = True
    routes = ("dense", "gram", "features")

    def gram(self, p, batch, which):
        """``S = Phi^T Phi`` (dense route, or N >= D), or its :class:`FeatureGram` (gram/features routes, N < D)."""
        Phi = self.batch_features(p, batch, which)
        if self.gram_side(Phi.shape[-2]):
            return FeatureGram(Phi)
        S = Phi.mT @ Phi
        return 0.5 * (S + S.mT)

    def reg_well(self, S):
        return official_r1(S, self.shift)

    def reg_ill(self, S):
        return official_r2(S, self.shift)

    def gram_side(self, rows: int) -> bool:
        """Whether ``S = Phi^T Phi`` of ``rows`` rows is taken from the ``rows x rows`` Gram side: the gram and
        features routes with fewer rows than features (:meth:`gram`)."""
        return self.route != "dense" and rows < self.D

    def whole_task_kappa(self, p: Params, which: str) -> torch.Tensor:
        """:meth:`Protocol.whole_task_kappa`; on the Gram side (:meth:`gram_side`) the gram route's shifted kappa
        ``(lambda_max + shift) / shift`` with ``lambda_max`` from
        :func:`~kappalab.immunization.spectra.features_lambda_max` (Lanczos with theta and X, residual-checked),
        or, when that does not converge, the Gram matrix's ``eigvalsh`` as on every other path."""
        X = self._full.X(which)
        if self.gram_side(X.shape[-2]):
            lam = features_lambda_max(X, p.theta, p.bias)
            if lam is not None:
                return gram_shifted_kappa(lam, self.shift)
        return super().whole_task_kappa(p, which)


PROTOCOL_CLASSES: dict[str, type[Protocol]] = {"paper": PaperProtocol, "official": OfficialProtocol}


def route_problem(protocol: str | type[Protocol], method: str, route: str) -> str | None:
    """Why ``extra.spectral_route = route`` cannot train ``method`` under ``protocol`` (a name of
    :data:`PROTOCOL_CLASSES` or a class), or None when it can: checked by every :class:`Protocol` and, before any
    run, by the command line."""
    cls = PROTOCOL_CLASSES[protocol] if isinstance(protocol, str) else protocol
    if route not in SPECTRAL_ROUTES:
        return f"cfg.extra['spectral_route'] must be one of {SPECTRAL_ROUTES}, got {route!r}"
    if route not in cls.routes:
        return f"spectral_route {route!r} is not implemented for the {cls.name!r} protocol; use one of {cls.routes}"
    methods = cls.route_methods.get(route)
    if methods is not None and method not in methods:
        return (f"spectral_route {route!r} of the {cls.name!r} protocol implements the methods {methods}, not "
                f"{method!r}; use 'dense'")
    return None


def make_protocol(task: LinearTask, cfg: MethodConfig, device: str) -> Protocol:
    """The :class:`Protocol` named by ``cfg.protocol``."""
    return PROTOCOL_CLASSES[cfg.protocol](task, cfg, device)
