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

``lambda_P``, ``lambda_H``, ``lambda_kappa`` and ``lambda_imma`` are chosen by the paper's rule (Appendix C.2:
balance gradient norms) with :func:`gradient_norms` and :func:`balanced_scale`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as nnf

from ..immunization.config import PROTOCOLS
from ..immunization.spectra import torch_extremes
from ..kappa import DEFAULT_SHIFT
from ..regularizers import r_ill, r_well
from .model import ImmunizableModel, hessian_tilde
from .official import kappa_log_loss, r_ill_official, r_well_official

Method = Literal["ours", "rill_only", "imma", "opt_kappa"]
METHODS: tuple[str, ...] = ("ours", "rill_only", "imma", "opt_kappa")
METHOD_LABELS = {"ours": "Ours", "rill_only": "R_ill Only", "imma": "IMMA", "opt_kappa": "Opt kappa"}


@dataclass(frozen=True)
class ObjectiveConfig:
    """Weights and numerical settings of the objectives (see the module docstring).

    Attributes:
        lambda_P, lambda_H: Eq. 11's weights (Table 4).
        lambda_kappa: weight of Opt kappa's ``kappa(H~_P) - kappa(H~_H)``.
        lambda_imma: weight of IMMA's harmful-loss term.
        imma_inner_steps, imma_inner_lr: IMMA's inner linear-probe adaptation.
        harmful_classes: number of D_H classes (IMMA's probe).
        label_smoothing: of the task loss.
        reg_rtol: relative rank tolerance for R_well/R_ill/kappa on ``H~`` (None: the core's default).
        on_degenerate: the core's policy at a tie of an extreme eigenvalue.
        protocol: "paper" (the paper's objectives) or "official" (the authors' code, see the module docstring).
        shift: the shifted kappa's shift (official protocol).
        official_k: the official protocol's ``k`` (the image width) where the model's input is not the image
            (cached trunk activations); None: the input batch's last dimension, as in the authors' code.
        host_checks: the spectral core validates ``H~`` and checks that R_ill is defined (host reads every
            step). ``False`` (with ``on_degenerate="ignore"``, since a tie check is a host read, and a model built
            with ``check=False`` for the dummy layer's Cholesky check) makes a step read nothing back: for a CUDA
            hot loop; an undefined value then surfaces as a non-finite loss at the end of the epoch.
    """

    lambda_P: float = 0.0
    lambda_H: float = 0.0
    lambda_kappa: float = 0.0
    lambda_imma: float = 0.0
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
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")


def kappa_autograd(H: torch.Tensor, rtol: float | None = None) -> torch.Tensor:
    """kappa of the PSD ``H`` (largest over smallest eigenvalue above ``rtol * max``: :mod:`kappalab.kappa`'s rank
    rule, through :func:`kappalab.immunization.spectra.torch_extremes`), differentiable through
    ``torch.linalg.eigvalsh`` (whose backward has no eigen-gap denominators). Computed on the device without
    reading anything back: a zero ``H`` gives NaN, which the training loop reports as a non-finite loss."""
    e = torch_extremes(H, "pinv", rtol=rtol)
    return e.s_max / e.s_min


def _xy(batch: Any, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = batch[0], batch[1]
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def objective_terms(model: ImmunizableModel, method: str, batch_P: Any, batch_H: Any, cfg: ObjectiveConfig,
                    device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The unweighted terms of ``method``'s objective on one (D_P, D_H) batch pair, each differentiable.

    Keys: ``task`` always; ``r_well``/``r_ill`` (ours), ``r_ill`` (rill_only), ``kappa_gap`` (opt_kappa; official
    protocol: ``kappa_log``), ``harmful`` (imma; the loss to be *maximised*). :func:`weighted_loss` combines them.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    official = cfg.protocol == "official"
    if official and model.dummy is not None:
        raise ValueError("protocol 'official': the authors' code has no dummy layer; build the model with "
                         "dummy=False")
    x_P, y_P = _xy(batch_P, device)
    x_H, y_H = _xy(batch_H, device)
    z_P = model.pre_features(x_P)
    terms = {"task": nnf.cross_entropy(model.classifier(model.head_features(z_P)), y_P,
                                       label_smoothing=cfg.label_smoothing)}
    reg = dict(psd=True, rtol=cfg.reg_rtol, on_degenerate=cfg.on_degenerate, check=cfg.host_checks)
    if official and method in ("ours", "rill_only", "opt_kappa"):
        # their K = X1.size(-1): the D_P image batch's last dimension (official_k when the batch holds cached
        # trunk activations instead of images)
        k = cfg.official_k or int(x_P.shape[-1])
        S_H, S_P = hessian_tilde(model.features(x_H)), hessian_tilde(model.head_features(z_P))
        if method == "opt_kappa":
            terms["kappa_log"] = kappa_log_loss(S_P, S_H, cfg.shift)
        else:
            terms["r_ill"] = r_ill_official(S_H, k, cfg.shift)
            if method == "ours":
                terms["r_well"] = r_well_official(S_P, k, cfg.shift)
    elif method in ("ours", "rill_only"):
        F_H = model.head_features(model.pre_features(x_H), precondition=True)
        terms["r_ill"] = r_ill(hessian_tilde(F_H), **reg)
        if method == "ours":
            terms["r_well"] = r_well(hessian_tilde(model.head_features(z_P, precondition=True)), **reg)
    elif method == "opt_kappa":
        F_H = model.head_features(model.pre_features(x_H))
        terms["kappa_gap"] = (kappa_autograd(hessian_tilde(model.head_features(z_P)), cfg.reg_rtol)
                              - kappa_autograd(hessian_tilde(F_H), cfg.reg_rtol))
    else:  # imma
        F_H = model.head_features(model.pre_features(x_H))
        W = torch.zeros(F_H.shape[1], cfg.harmful_classes, dtype=F_H.dtype, device=F_H.device, requires_grad=True)
        for _ in range(cfg.imma_inner_steps):
            (g,) = torch.autograd.grad(nnf.cross_entropy(F_H @ W, y_H), W, create_graph=True)
            W = W - cfg.imma_inner_lr * g
        terms["harmful"] = nnf.cross_entropy(F_H @ W, y_H)
    return terms


WEIGHTS = {"r_well": ("lambda_P", 1.0), "r_ill": ("lambda_H", 1.0), "kappa_gap": ("lambda_kappa", 1.0),
           "kappa_log": ("lambda_kappa", 1.0), "harmful": ("lambda_imma", -1.0)}
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
