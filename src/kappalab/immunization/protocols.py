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

Spectral route (config ``extra.spectral_route``, default ``"dense"``; official protocol only)
    ``"dense"``: ``eigvalsh`` of the ``D x D`` S and a ``D x D`` Cholesky solve per preconditioned term (Table 1,
    and every run recorded before the option existed). ``"gram"`` (Table 2's configs): when a batch has
    ``N < D`` rows, :meth:`OfficialProtocol.gram` returns a :class:`~kappalab.immunization.spectra.FeatureGram`
    (spectra of the ``N x N`` ``Phi Phi^T``; no ``D x D`` eigenproblem, S never formed) and the preconditioner is
    :func:`woodbury_precondition` (one ``N x N`` Cholesky per batch and task). Equal to the dense route up to
    rounding, with one documented convention: ``s_min := shift`` when rank(S) < D, which is the dense rule's
    outcome (see :func:`~kappalab.immunization.spectra.gram_extremes_shifted`). With ``N >= D`` (e.g. ``--quick``'s
    D = 49) the gram route computes exactly what the dense route does. Woodbury is the more accurate of the two
    solves when ``ridge`` is tiny: it never forms ``K = X^T X`` (condition number squared); at Table 2's
    ``ridge_H = 1e-7`` the dense Cholesky solve is off by ~4e-6 relative from an SVD-based reference, Woodbury by
    ~1e-13.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator

import torch

from kappalab.dummy_layer import precondition_weight_grad
from kappalab.linear import hessian
from kappalab.regularizers import r_ill, r_well

from .config import MethodConfig
from .spectra import DEFAULT_SHIFT, SPECTRAL_ROUTES, FeatureGram, official_r1, official_r2, torch_kappa
from .task import LinearTask


@dataclass
class Params:
    """Trainable tensors: extractor ``theta`` (D x D), optional ``bias`` (D), heads ``w_P`` (and IMMA's ``w_H``)."""

    theta: torch.Tensor
    bias: torch.Tensor | None
    w_P: torch.Tensor
    w_H: torch.Tensor | None = None

    def extractor(self) -> list[torch.Tensor]:
        """theta and (when present) the bias."""
        return [self.theta] + ([self.bias] if self.bias is not None else [])

    def all(self) -> list[torch.Tensor]:
        """Every trainable tensor."""
        return self.extractor() + [self.w_P] + ([self.w_H] if self.w_H is not None else [])


@dataclass
class Batch:
    """One step's data; ``K_P``/``K_H`` are the batch covariances ``X^T X`` (``D x D``), formed on first use
    only (the gram route never uses them). ``cache`` holds per-batch factorizations (gram route)."""

    X_P: torch.Tensor
    y_P: torch.Tensor
    X_H: torch.Tensor
    y_H: torch.Tensor | None
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    def covariance(self, which: str) -> torch.Tensor:
        """The batch covariance ``X^T X`` of task ``which`` ("P" or "H"), symmetrized, cached."""
        key = "K_" + which
        if key not in self.cache:
            X = self.X_P if which == "P" else self.X_H
            K = X.T @ X
            self.cache[key] = 0.5 * (K + K.T)
        return self.cache[key]

    @property
    def K_P(self) -> torch.Tensor:
        return self.covariance("P")

    @property
    def K_H(self) -> torch.Tensor:
        return self.covariance("H")


def _uniform(gen: torch.Generator, shape: tuple[int, ...], bound: float) -> torch.Tensor:
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2.0 - 1.0) * bound


class Protocol:
    """Shared machinery; subclasses set the protocol-specific parts."""

    name = "base"
    supports_gram_route = False
    precondition_side = "input"
    kappa_definition = "pinv"
    has_bias = False

    def __init__(self, task: LinearTask, cfg: MethodConfig, device: str) -> None:
        self.task, self.cfg, self.device = task, cfg, torch.device(device)
        as_t = lambda a: None if a is None else torch.as_tensor(a, dtype=torch.float64, device=self.device)
        self.X_P, self.y_P, self.X_H, self.y_H = as_t(task.X_P), as_t(task.y_P), as_t(task.X_H), as_t(task.y_H)
        self.D = task.dim
        self.shift = float(cfg.get("shift", DEFAULT_SHIFT))
        self.rank_rtol = cfg.get("rank_rtol", None)
        self.on_degenerate = cfg.get("on_degenerate", "warn")
        self.route = cfg.get("spectral_route", "dense")
        if self.route not in SPECTRAL_ROUTES:
            raise ValueError(f"cfg.extra['spectral_route'] must be one of {SPECTRAL_ROUTES}, got {self.route!r}")
        if self.route == "gram" and not self.supports_gram_route:
            raise ValueError(f"spectral_route 'gram' is implemented for the official protocol only, not "
                             f"{self.name!r}; use 'dense'")

    # -- initialization ----------------------------------------------------------------------------------------
    def init_params(self, seed: int, with_w_H: bool) -> Params:
        """theta: ``theta_init`` ("torch_linear" = nn.Linear's default U(-1/sqrt(D), 1/sqrt(D)) or "identity");
        heads: ``head_init`` ("standard_normal" or "zeros"); drawn on the CPU from ``seed``, then moved."""
        gen = torch.Generator().manual_seed(int(seed))
        bound = 1.0 / math.sqrt(self.D)
        kind = self.cfg.get("theta_init", "torch_linear")
        if kind == "torch_linear":
            theta = _uniform(gen, (self.D, self.D), bound)
        elif kind == "identity":
            theta = torch.eye(self.D, dtype=torch.float64)
        else:
            raise ValueError(f"cfg.extra['theta_init'] must be 'torch_linear' or 'identity', got {kind!r}")
        bias = _uniform(gen, (self.D,), bound) if self.has_bias else None
        head = self.cfg.get("head_init", "standard_normal")
        if head not in ("standard_normal", "zeros"):
            raise ValueError(f"cfg.extra['head_init'] must be 'standard_normal' or 'zeros', got {head!r}")
        draw = (lambda: torch.randn(self.D, generator=gen, dtype=torch.float64)) if head == "standard_normal" \
            else (lambda: torch.zeros(self.D, dtype=torch.float64))
        w_P = draw()
        w_H = draw() if with_w_H else None
        to = lambda t: None if t is None else t.to(self.device).requires_grad_(True)
        return Params(to(theta), to(bias), to(w_P), to(w_H))

    # -- data ----------------------------------------------------------------------------------------------------
    def batches(self, gen: torch.Generator) -> Iterator[Batch]:
        """The epoch's batches (full batch when ``cfg.batch_size`` is None)."""
        bs = self.cfg.batch_size
        if bs is None:
            yield self._full
            return
        n_P, n_H = self.X_P.shape[0], self.X_H.shape[0]
        if bs > min(n_P, n_H):
            raise ValueError(f"batch_size {bs} exceeds the smaller split ({min(n_P, n_H)} rows) with drop_last")
        shuffle = bool(self.cfg.get("shuffle", True))
        order = lambda n: (torch.randperm(n, generator=gen) if shuffle else torch.arange(n)).to(self.device)
        perm_P, perm_H = order(n_P), order(n_H)
        for i in range(min(n_P // bs, n_H // bs)):
            iP, iH = perm_P[i * bs:(i + 1) * bs], perm_H[i * bs:(i + 1) * bs]
            yield self._batch(self.X_P[iP], self.y_P[iP], self.X_H[iH], None if self.y_H is None else self.y_H[iH])

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
        return Phi + bias if bias is not None else Phi

    def supervised_loss(self, Phi: torch.Tensor, w: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
        """MSE ``mean((Phi w - y)^2)`` or BCE with logits ``Phi w`` (labels in {0, 1})."""
        if y is None:
            raise ValueError("task.y_H is None but this method needs the harmful task's labels")
        pred = Phi @ w
        if self.task.loss == "mse":
            return torch.mean((pred - y) ** 2)
        return torch.nn.functional.binary_cross_entropy_with_logits(pred, y)

    def gram(self, p: Params, batch: Batch, which: str, theta=None, bias=None) -> torch.Tensor:
        """The linear-probing Hessian of task ``which`` ("P" or "H") at (theta, bias)."""
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
        ``N < D`` rows and ``ridge > 0``: :func:`woodbury_precondition` (an ``N x N`` Cholesky, cached per
        batch); otherwise the dense solve with its Cholesky factor cached on the batch (the full batch is one
        object per run, so it is factored once per run)."""
        ridge = self.ridge(which)
        X = batch.X_P if which == "P" else batch.X_H
        if self.route == "gram" and ridge > 0 and X.shape[0] < X.shape[1]:
            return woodbury_precondition(grad_theta, X, ridge, self.precondition_side, batch.cache, which)
        K = batch.K_P if which == "P" else batch.K_H
        return precondition_weight_grad(grad_theta.T, K, ridge, self.precondition_side).T

    @torch.no_grad()
    def monitor(self, p: Params) -> tuple[torch.Tensor, torch.Tensor]:
        """kappa(H_P), kappa(H_H) on the whole task (protocol's definition), for the history."""
        full = self._full
        return (torch_kappa(self.gram(p, full, "P"), self.kappa_definition, rtol=self.rank_rtol, shift=self.shift),
                torch_kappa(self.gram(p, full, "H"), self.kappa_definition, rtol=self.rank_rtol, shift=self.shift))


class PaperProtocol(Protocol):
    """Alg. 1 as stated (see module docstring)."""

    name = "paper"
    precondition_side = "input"
    kappa_definition = "pinv"
    has_bias = False

    def gram(self, p, batch, which, theta=None, bias=None):
        theta = p.theta if theta is None else theta
        return hessian(theta, batch.K_P if which == "P" else batch.K_H, check=False)

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

    supports_gram_route = True

    def gram(self, p, batch, which, theta=None, bias=None):
        """``S = Phi^T Phi`` (dense route, or N >= D), or its :class:`FeatureGram` (gram route, N < D)."""
        Phi = self.features(p, batch.X_P if which == "P" else batch.X_H, theta, bias)
        if self.route == "gram" and Phi.shape[0] < Phi.shape[1]:
            return FeatureGram(Phi)
        S = Phi.T @ Phi
        return 0.5 * (S + S.T)

    def reg_well(self, S):
        return official_r1(S, self.shift)

    def reg_ill(self, S):
        return official_r2(S, self.shift)


def woodbury_precondition(grad_theta: torch.Tensor, X: torch.Tensor, ridge: float, side: str,
                          cache: dict | None = None, key: str = "") -> torch.Tensor:
    """The dummy layer's preconditioning with ``K = X^T X`` (``X``: ``N x D``, ``N < D``) by Woodbury, in theta's
    orientation: ``side="output"`` gives ``grad_theta (K + ridge I)^{-1}`` (the official code's solve on
    nn.Linear's output index), ``side="input"`` gives ``(K + ridge I)^{-1} grad_theta``; equal to
    :func:`kappalab.dummy_layer.precondition_weight_grad` on ``grad_theta^T`` (transposed back).

    ``(X^T X + r I)^{-1} B = (B - X^T (r I + X X^T)^{-1} X B) / r``: one ``N x N`` Cholesky (cached in ``cache``
    under ``key`` when given) and products with X, instead of a ``D x D`` factorization. ``ridge`` must be > 0.
    """
    if not ridge > 0:
        raise ValueError(f"ridge must be > 0 for the Woodbury identity, got {ridge!r}")
    name = f"woodbury_{key}_{ridge!r}"
    L = None if cache is None else cache.get(name)
    if L is None:
        A = X @ X.T
        A = 0.5 * (A + A.T) + ridge * torch.eye(X.shape[0], dtype=X.dtype, device=X.device)
        L, info = torch.linalg.cholesky_ex(A)
        if int(info) != 0:
            raise ValueError(f"X X^T + ridge*I (ridge = {ridge}) is not positive definite (Cholesky failed at "
                             f"pivot {int(info)})")
        if cache is not None:
            cache[name] = L
    scale = 1.0 / ridge  # (B - P Q) / r as one fused addmm: B / r - (P Q) / r
    if side == "output":
        T = grad_theta @ X.T  # D x N
        return torch.addmm(grad_theta, torch.cholesky_solve(T.T, L).T, X, beta=scale, alpha=-scale)
    if side == "input":
        return torch.addmm(grad_theta, X.T, torch.cholesky_solve(X @ grad_theta, L), beta=scale, alpha=-scale)
    raise ValueError(f"side must be 'input' or 'output', got {side!r}")


PROTOCOL_CLASSES: dict[str, type[Protocol]] = {"paper": PaperProtocol, "official": OfficialProtocol}


def make_protocol(task: LinearTask, cfg: MethodConfig, device: str) -> Protocol:
    """The :class:`Protocol` named by ``cfg.protocol``."""
    return PROTOCOL_CLASSES[cfg.protocol](task, cfg, device)
