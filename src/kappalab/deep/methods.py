"""The four immunization objectives for a deep net, one minibatch pair at a time.

All four share the task loss ``L(D_P)`` (label-smoothing cross-entropy of the D_P head), as in Eq. 11:

* ``ours``: ``L + lambda_P R_well(H~_P) + lambda_H R_ill(H~_H)`` (Eq. 11 with Eq. 18's ``H~``). The regularizers
  reach the dummy layer through calls with ``precondition=True`` (Alg. 1's ``K_P^{-1}`` / ``K_H^{-1}``, K the batch
  covariance of the dummy layer's input); the task loss goes through an unpreconditioned call of the same layer on
  the same pre-features, so it gets the plain gradient as in Alg. 1. R_well/R_ill backpropagate through the core's
  closed-form gradients (:func:`kappalab.r_well`, :func:`kappalab.r_ill`).
* ``rill_only``: ``L + lambda_H R_ill(H~_H)``: Ours without the R_well term (the ablation reading of "R_ill Only";
  the task loss is kept so that D_P accuracy is comparable, as the paper's Table 3 reports it for every row).
* ``opt_kappa``: ``L + lambda_kappa (kappa(H~_P) - kappa(H~_H))``, kappa by autograd through ``eigvalsh``
  (:func:`kappa_autograd`); no preconditioning (it is a plain gradient method on kappa).
* ``imma``: bi-level. Inner: ``inner_steps`` gradient steps of a zero-initialised linear probe on the D_H batch's
  features (lr ``inner_lr``, differentiable, ``create_graph=True``). Outer: ``L - lambda_imma L_H(w*)``, i.e.
  maximise the harmful loss after the adversary's adaptation while keeping D_P.

Under ``protocol="official"`` (:mod:`kappalab.deep.official`: the authors' code) Ours and R_ill Only use their
r1 / r2 (shifted extremes, ``k = p`` = the input width) on an extractor without dummy layer, and Opt kappa their
``1 / log kappa_H + log kappa_P`` (term ``kappa_log``); IMMA and the task loss are the same under both.

Spectral route (``ObjectiveConfig.spectral_route``): ``"dense"`` forms ``H~ = F^T F`` (``D_hid x D_hid``: 1280 x
1280 for EfficientNet-Lite0) and takes its spectrum and the dummy layer's ``D_hid x D_hid`` solves; ``"gram"``
computes the same values and gradients from the ``N x N`` minibatch Gram matrix ``F F^T`` whenever ``N < D_hid``
(:func:`kappalab.gram.regularizers_from_features`, :class:`~kappalab.immunization.spectra.FeatureGram`, the
Woodbury route of :mod:`kappalab.dummy_layer`): equal up to rounding (tests/test_deep_gram_route.py), several
times faster (benchmarks/test_bench_deep_step.py).

Two controls run through the same loop (``CONTROLS``), so that a verdict can say what the measure could show:

* ``oracle``: ``L + lambda_oracle (log kappa(H~_P) - log kappa(H~_H))``, the pinv kappa of each training batch's
  ``H~`` (the group estimator's statistic, :mod:`kappalab.estimators`, on the batch), by autograd through the
  eigenvalues, with Adam (:data:`OPTIMIZER_OF`): how far this network and data can move the measure with utility
  kept (a positive control);
* ``task_only``: ``L`` alone, the same budget and optimizer as the methods: what training on D_P does by itself (the
  null control).

``lambda_P``, ``lambda_H``, ``lambda_kappa``, ``lambda_imma`` and ``lambda_oracle`` are chosen by the paper's rule
(Appendix C.2: balance gradient norms) with :func:`gradient_norms` and :func:`balanced_scale`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as nnf

from ..dummy_layer import ROUTES, Route
from ..gram import r_ill_of_features, r_well_of_features
from ..immunization.config import PROTOCOLS
from ..immunization.spectra import FeatureGram, torch_extremes
from ..kappa import DEFAULT_SHIFT
from ..methods import CONTROLS as _CONTROLS, DEEP_METHODS, LABELS, SPECS
from ..regularizers import r_ill, r_well
from .model import ImmunizableModel, feature_matrix, hessian_tilde
from .official import kappa_log_loss, r_ill_official, r_well_official

#: the paper's four methods (:data:`kappalab.methods.DEEP_METHODS`)
METHODS: tuple[str, ...] = DEEP_METHODS
#: the controls of Table 3's decision (module docstring): what the measure can do here, and what D_P training alone does
CONTROLS: tuple[str, ...] = _CONTROLS
METHOD_LABELS = {m: LABELS[m] for m in METHODS + CONTROLS}
#: the optimizer of each method that does not use the paper's SGD (Appendix C.2)
OPTIMIZER_OF: dict[str, str] = {m: SPECS[m].optimizer for m in METHODS + CONTROLS if SPECS[m].optimizer != "sgd"}


@dataclass(frozen=True)
class ObjectiveConfig:
    """Weights and numerical settings of the objectives (see the module docstring).

    Attributes:
        lambda_P, lambda_H: Eq. 11's weights (Table 4).
        lambda_kappa: weight of Opt kappa's ``kappa(H~_P) - kappa(H~_H)``.
        lambda_imma: weight of IMMA's harmful-loss term.
        lambda_oracle: weight of the oracle control's ``log kappa(H~_P) - log kappa(H~_H)``.
        imma_inner_steps, imma_inner_lr: IMMA's inner linear-probe adaptation.
        harmful_classes: number of D_H classes (IMMA's probe).
        label_smoothing: of the task loss.
        reg_rtol: relative rank tolerance for R_well/R_ill/kappa on ``H~`` (None: the core's default).
        on_degenerate: the core's policy at a tie of an extreme eigenvalue.
        protocol: "paper" (the paper's objectives) or "official" (the authors' code, see the module docstring).
        shift: the shifted kappa's shift (official protocol).
        official_k: the official protocol's ``k`` (the image width) where the model's input is not the image
            (cached trunk activations); None: the input batch's last dimension, as in the authors' code.
        spectral_route: "dense" or "gram" (see the module docstring).
        host_checks: the spectral core validates ``H~`` and checks that R_ill is defined (host reads every
            step). ``False`` (with ``on_degenerate="ignore"``, since a tie check is a host read, and a model built
            with ``check=False`` for the dummy layer's Cholesky check) makes a step read nothing back: for a CUDA
            hot loop; an undefined value then surfaces as a non-finite loss at the end of the epoch.
    """

    lambda_P: float = 0.0
    lambda_H: float = 0.0
    lambda_kappa: float = 0.0
    lambda_imma: float = 0.0
    lambda_oracle: float = 0.0
    imma_inner_steps: int = 1
    imma_inner_lr: float = 1.0
    harmful_classes: int = 2
    label_smoothing: float = 0.1
    reg_rtol: float | None = None
    on_degenerate: str = "warn"
    host_checks: bool = True
    protocol: str = "paper"
    shift: float = DEFAULT_SHIFT
    official_k: int | None = None
    spectral_route: Route = "dense"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        if self.spectral_route not in ROUTES:
            raise ValueError(f"spectral_route must be one of {ROUTES}, got {self.spectral_route!r}")


def kappa_autograd(H: "torch.Tensor | FeatureGram", rtol: float | None = None) -> torch.Tensor:
    """kappa of the PSD ``H`` (largest over smallest eigenvalue above ``rtol * max``: :mod:`kappalab.kappa`'s rank
    rule, through :func:`kappalab.immunization.spectra.torch_extremes`), differentiable through
    ``torch.linalg.eigvalsh`` (whose backward has no eigen-gap denominators); ``H`` may be a
    :class:`~kappalab.immunization.spectra.FeatureGram` (the eigenvalues of its ``N x N`` Gram matrix, ranked as
    ``H``'s). Computed on the device without reading anything back: a zero ``H`` gives NaN, which the training loop
    reports as a non-finite loss."""
    if isinstance(H, FeatureGram):
        e = torch_extremes(H.G, "pinv", rtol=rtol, dim=H.dim)
    else:
        e = torch_extremes(H, "pinv", rtol=rtol)
    return e.s_max / e.s_min


def regularizer(name: str, F: torch.Tensor, cfg: ObjectiveConfig) -> torch.Tensor:
    """R_well (``name="r_well"``) or R_ill of ``H~ = F^T F`` by ``cfg``'s spectral route, differentiable in F."""
    options = dict(rtol=cfg.reg_rtol, on_degenerate=cfg.on_degenerate, check=cfg.host_checks)
    if cfg.spectral_route == "gram":
        return (r_well_of_features if name == "r_well" else r_ill_of_features)(F, **options)
    return (r_well if name == "r_well" else r_ill)(hessian_tilde(F), psd=True, **options)


def _xy(batch: Any, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = batch[0], batch[1]
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def objective_terms(model: ImmunizableModel, method: str, batch_P: Any, batch_H: Any, cfg: ObjectiveConfig,
                    device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The unweighted terms of ``method``'s objective on one (D_P, D_H) batch pair, each differentiable.

    Keys: ``task`` always; ``r_well``/``r_ill`` (ours), ``r_ill`` (rill_only), ``kappa_gap`` (opt_kappa; official
    protocol: ``kappa_log``), ``harmful`` (imma; the loss to be *maximised*), ``log_kappa_ratio`` (oracle); nothing
    more for task_only. :func:`weighted_loss` combines them.
    """
    if method not in METHODS + CONTROLS:
        raise ValueError(f"method must be one of {METHODS + CONTROLS}, got {method!r}")
    official = cfg.protocol == "official"
    if official and model.dummy is not None:
        raise ValueError("protocol 'official': the authors' code has no dummy layer; build the model with "
                         "dummy=False")
    x_P, y_P = _xy(batch_P, device)
    x_H, y_H = _xy(batch_H, device)
    z_P = model.pre_features(x_P)
    terms = {"task": nnf.cross_entropy(model.classifier(model.head_features(z_P)), y_P,
                                       label_smoothing=cfg.label_smoothing)}
    route = cfg.spectral_route
    spec = SPECS[method]
    if spec.objective == "task":
        return terms
    if spec.objective == "log_kappa_ratio":
        log_kappa = lambda F: torch.log(kappa_autograd(feature_matrix(F, route), cfg.reg_rtol))  # noqa: E731
        terms["log_kappa_ratio"] = log_kappa(model.head_features(z_P)) - log_kappa(model.features(x_H))
    elif official and spec.objective in ("eq11", "kappa_gap"):
        # their K = X1.size(-1): the D_P image batch's last dimension (official_k when the batch holds cached
        # trunk activations instead of images)
        k = cfg.official_k or int(x_P.shape[-1])
        S_H = feature_matrix(model.features(x_H), route)
        S_P = feature_matrix(model.head_features(z_P), route)
        if spec.objective == "kappa_gap":
            terms["kappa_log"] = kappa_log_loss(S_P, S_H, cfg.shift)
        else:
            terms["r_ill"] = r_ill_official(S_H, k, cfg.shift)
            if spec.r_well:
                terms["r_well"] = r_well_official(S_P, k, cfg.shift)
    elif spec.objective == "eq11":
        F_H = model.head_features(model.pre_features(x_H), precondition=True, route=route)
        terms["r_ill"] = regularizer("r_ill", F_H, cfg)
        if spec.r_well:
            terms["r_well"] = regularizer("r_well", model.head_features(z_P, precondition=True, route=route), cfg)
    elif spec.objective == "kappa_gap":
        F_H = model.head_features(model.pre_features(x_H))
        terms["kappa_gap"] = (kappa_autograd(feature_matrix(model.head_features(z_P), route), cfg.reg_rtol)
                              - kappa_autograd(feature_matrix(F_H, route), cfg.reg_rtol))
    else:  # bilevel: IMMA
        F_H = model.head_features(model.pre_features(x_H))
        W = torch.zeros(F_H.shape[1], cfg.harmful_classes, dtype=F_H.dtype, device=F_H.device, requires_grad=True)
        for _ in range(cfg.imma_inner_steps):
            (g,) = torch.autograd.grad(nnf.cross_entropy(F_H @ W, y_H), W, create_graph=True)
            W = W - cfg.imma_inner_lr * g
        terms["harmful"] = nnf.cross_entropy(F_H @ W, y_H)
    return terms


WEIGHTS = {"r_well": ("lambda_P", 1.0), "r_ill": ("lambda_H", 1.0), "kappa_gap": ("lambda_kappa", 1.0),
           "kappa_log": ("lambda_kappa", 1.0), "harmful": ("lambda_imma", -1.0),
           "log_kappa_ratio": ("lambda_oracle", 1.0)}
"""term -> (config weight, sign) in the minimised loss; ``task`` has weight 1."""


def weighted_loss(terms: dict[str, torch.Tensor], cfg: ObjectiveConfig) -> torch.Tensor:
    """``task + sum_t sign_t * weight_t * term_t`` (see :data:`WEIGHTS`)."""
    loss = terms["task"]
    for name, value in terms.items():
        if name != "task":
            weight, sign = WEIGHTS[name]
            loss = loss + sign * getattr(cfg, weight) * value
    return loss


def gradient_norms(model: ImmunizableModel, method: str, batch_P: Any, batch_H: Any, cfg: ObjectiveConfig,
                   device: torch.device | str = "cpu") -> dict[str, float]:
    """L2 norm, over the immunized parameters, of the gradient of each unweighted term (with the same
    preconditioning the training step applies): the quantities Appendix C.2 balances."""
    params = [p for p in model.extractor_parameters() if p.requires_grad]
    terms = objective_terms(model, method, batch_P, batch_H, cfg, device)
    norms = {}
    for name, value in terms.items():
        grads = torch.autograd.grad(value, params, retain_graph=True, allow_unused=True)
        norms[name] = math.sqrt(sum(float((g * g).sum()) for g in grads if g is not None))
    return norms


def balanced_scale(task_norm: float, term_norm: float) -> float:
    """The power of ten ``10^round(log10(task_norm / term_norm))``: the weight that brings the term's gradient
    norm to the task loss's scale (Appendix C.2 then searches multiples {1, 2, 3, 5} of it)."""
    if not (task_norm > 0 and term_norm > 0 and math.isfinite(task_norm) and math.isfinite(term_norm)):
        raise ValueError(f"gradient norms must be finite and > 0, got task_norm={task_norm!r}, "
                         f"term_norm={term_norm!r}")
    return 10.0 ** round(math.log10(task_norm / term_norm))
