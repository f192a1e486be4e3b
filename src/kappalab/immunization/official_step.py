"""The official protocol's training step in closed form (route "features", Table 2's configs): no autograd.

For Ours and R_ill Only (Eq. 11's terms: task loss, lambda_P r1(S_P), lambda_H r2(S_H)) and Opt kappa (task loss,
kappa_weight_P kappa(S_P) - kappa_weight_H kappa(S_H)) on minibatches of ``N < D`` rows, the gradient of every term
with respect to a task's features ``Phi = X theta + 1 b^T`` is ``A Phi`` with an ``N x N`` coefficient ``A``
(:mod:`kappalab.immunization.spectra`: ``official_r1_coefficient``, ``official_r2_coefficient``,
``shifted_kappa_coefficient``, next to the values they differentiate), plus the task loss's rank-one ``g w^T``
(:meth:`~kappalab.immunization.protocols.Protocol.loss_of_logits_grad`). One step, per run or for a stack of runs
(leading run dimension, :mod:`kappalab.immunization.batched`):

1. the features of the tasks the method uses: one ``2N x D x D`` product ``[X_P; X_H] theta`` (plus the bias);
2. per task: ``G = Phi Phi^T``, one ``eigh`` of the ``N x N`` G (values and the top eigenvector, from
   :func:`kappalab.extremes.batched_eigh`), the terms' values
   through the core's formulas (``r_well_from_extremes``, ``official_r2_of_extremes``, ``kappa_of_extremes``) and
   the sum of their coefficients, split into the preconditioned part (Alg. 1's dummy layer: R_well on P, R_ill on
   H) and the rest;
3. ``M = g w^T + A_plain Phi + precondition(A_pre Phi)`` per task (Woodbury in feature space,
   :meth:`~kappalab.immunization.protocols.Protocol.precondition_features`), the bias's gradient from the
   unpreconditioned column sums, the head's ``Phi_P^T g``;
4. theta's gradient ``[X_P; X_H]^T [M_P; M_H]``: one ``D x 2N x D`` product.

It computes what :func:`kappalab.immunization.methods.step_gradients` computes by autograd on the same route, to
rounding (tests/test_official_step.py: per step to 1e-10 relative, whole runs against the committed Table 2
store). IMMA with one inner step (Table 2's config) has its own closed form (:func:`_imma_gradients`); IMMA with
more inner steps and ``opt_kappa_log`` keep the autograd step.
"""

from __future__ import annotations

import torch

from kappalab.extremes import batched_eigh
from kappalab.regularizers import r_well_from_extremes

from .config import MethodConfig
from .features_route import stacked_inputs, theta_gradient
from .protocols import OfficialProtocol, Protocol
from .spectra import (FeatureGram, extremes_of_gram_spectrum, kappa_of_extremes, official_r1_coefficient,
                      official_r2_coefficient, official_r2_of_extremes, shifted_kappa_coefficient, top_projector)
from .step_types import Batch, Params, Term
from ..methods import IMMA, OPT_KAPPA, OURS, RILL_ONLY
from ..woodbury import addmm

#: the methods with a closed-form official step (IMMA: with one inner step)
CLOSED_FORM_METHODS: tuple[str, ...] = (OURS.name, RILL_ONLY.name, OPT_KAPPA.name, IMMA.name)


def applies(proto: Protocol, batch: Batch, cfg: MethodConfig) -> bool:
    """True when :func:`closed_form_gradients` implements this step: the official protocol on route "features"
    with both batches of fewer rows than features, a method of :data:`CLOSED_FORM_METHODS`, and for IMMA
    ``inner_steps = 1`` with ``inner_lr > 0`` (other values take the autograd step, which refuses invalid ones)."""
    if cfg.method == "imma" and not (cfg.extra.inner_steps == 1 and cfg.inner_lr > 0):
        return False
    return isinstance(proto, OfficialProtocol) and cfg.method in CLOSED_FORM_METHODS and proto.feature_space(batch)


@torch.no_grad()
def closed_form_gradients(proto: Protocol, p: Params, batch: Batch, cfg: MethodConfig,
                          theta_out: torch.Tensor | None = None) -> tuple[dict[int, torch.Tensor], list]:
    """:func:`~kappalab.immunization.methods.step_gradients` of one step where :func:`applies` (module docstring):
    the gradient per tensor (keyed by ``id``; theta's written into ``theta_out`` when given) and the step's terms
    (values detached)."""
    if cfg.method == "imma":
        return _imma_gradients(proto, p, batch, cfg, theta_out)
    pre, supervised = cfg.extra.precondition, cfg.extra.supervised_loss
    extractor = p.extractor()
    opt_kappa = cfg.method == "opt_kappa"
    uses = {"P": supervised or opt_kappa or cfg.lambda_P > 0, "H": opt_kappa or cfg.lambda_H > 0}
    tasks = [w for w in ("P", "H") if uses[w]]
    if not tasks:
        return {}, []
    Phi = _features(p, stacked_inputs(batch, tasks), tasks, batch.X_P.shape[-2])
    terms: list = []
    plain: dict[str, torch.Tensor] = {}  # unpreconditioned coefficient per task
    precond: dict[str, torch.Tensor] = {}  # preconditioned coefficient per task
    loss_grad = None
    if supervised:
        pred = proto.logits(Phi["P"], p.w_P)
        terms.append(Term("loss_P", proto.loss_of_logits(pred, batch.y_P), extractor + [p.w_P]))
        loss_grad = proto.loss_of_logits_grad(pred, batch.y_P)
    # eigenvectors where a value needs lambda_max (r1 on P, both kappas); r2 needs ||G||_F^2 only
    spectra = {w: _spectrum(proto, Phi[w], top=opt_kappa or w == "P") for w in tasks
               if w == "H" or opt_kappa or cfg.lambda_P > 0}
    if opt_kappa:
        (eP, _, uP), (eH, _, uH) = spectra["P"], spectra["H"]
        wP, wH = cfg.extra.kappa_weight_P, cfg.extra.kappa_weight_H
        value = wP * kappa_of_extremes(eP) - wH * kappa_of_extremes(eH)
        terms.append(Term("kappa_P-kappa_H", value, extractor))
        plain["P"] = wP * shifted_kappa_coefficient(eP, uP)
        plain["H"] = -wH * shifted_kappa_coefficient(eH, uH)
    else:
        if cfg.lambda_P > 0:
            e, G, uuT = spectra["P"]
            terms.append(Term("R_well", cfg.lambda_P * r_well_from_extremes(e), extractor, "P" if pre else None))
            (precond if pre else plain)["P"] = cfg.lambda_P * official_r1_coefficient(e, G, uuT)
        if cfg.lambda_H > 0:
            e, G, _ = spectra["H"]
            terms.append(Term("R_ill", cfg.lambda_H * official_r2_of_extremes(e), extractor, "H" if pre else None))
            (precond if pre else plain)["H"] = cfg.lambda_H * official_r2_coefficient(e, G)
    Ms, bias_grad = [], None
    for w in tasks:
        M = None
        if w in plain:
            M = plain[w] @ Phi[w]
        if w == "P" and loss_grad is not None:
            M = _outer(loss_grad, p.w_P) if M is None else M + _outer(loss_grad, p.w_P)
        T = precond[w] @ Phi[w] if w in precond else None
        for part in (M, T) if p.bias is not None else ():  # the bias: unpreconditioned column sums
            if part is not None:
                bias_grad = part.sum(dim=-2) if bias_grad is None else bias_grad + part.sum(dim=-2)
        if T is not None:
            T = proto.precondition_features(T, batch, w)
            M = T if M is None else M + T
        Ms.append(M)
    grads = {id(p.theta): theta_gradient(batch, tasks, Ms, theta_out)}
    if p.bias is not None:
        grads[id(p.bias)] = bias_grad
    if loss_grad is not None:
        grads[id(p.w_P)] = _mv(Phi["P"].mT, loss_grad)
    return grads, terms


def _imma_gradients(proto: Protocol, p: Params, batch: Batch, cfg: MethodConfig, theta_out: torch.Tensor | None
                    ) -> tuple[dict[int, torch.Tensor], list]:
    """IMMA with one inner step in feature space (:meth:`Protocol.adapted_features`), differentiated by hand.

    With ``z = Phi_H w_H``, ``g = l'(z)``, ``h = l''(z)`` (:meth:`Protocol.loss_of_logits_grad`, ``_curvature``), the
    inner step moves the features by rank-one terms, ``Phi_w* = Phi_w - lr (C_wH g) w_H^T`` (``C_wH``: the inner
    kernels). With ``g_w* = l'(Phi_w* w_w)``, the outer loss ``L_P* - L_H*`` has ``dPhi_P = g_P* w_P^T`` and
    ``dPhi_H = -g_H* w_H^T - lr (r o h) w_H^T`` with ``r = (w_P . w_H) C_PH^T g_P* - |w_H|^2 C_HH^T g_H*``; the
    heads: ``dw_P = Phi_P*^T g_P*`` and ``dw_H = Phi_H*^T g_H* - lr (|w_H|^2 Phi_H^T ((C_HH^T g_H*) o h) +
    (g_H*^T C_HH g) w_H)`` (L_H* depends on w_H through the inner step too)."""
    lr = cfg.inner_lr
    Phi = _features(p, stacked_inputs(batch, ["P", "H"]), ["P", "H"], batch.X_P.shape[-2])
    C_PH, C_HH = proto.inner_kernel(batch, "P"), proto.inner_kernel(batch, "H")
    w_P, w_H = p.w_P, p.w_H
    z = proto.logits(Phi["H"], w_H)
    g, h = proto.loss_of_logits_grad(z, batch.y_H), proto.loss_of_logits_curvature(z)
    CHg = _mv(C_HH, g)  # C_HH g: the harmful rows' move by the inner step (times w_H); used twice below
    adapted = {"P": Phi["P"] - lr * _outer(_mv(C_PH, g), w_H), "H": Phi["H"] - lr * _outer(CHg, w_H)}
    z_P, z_H = proto.logits(adapted["P"], w_P), proto.logits(adapted["H"], w_H)
    loss_P, loss_H = proto.loss_of_logits(z_P, batch.y_P), proto.loss_of_logits(z_H, batch.y_H)
    g_P, g_H = proto.loss_of_logits_grad(z_P, batch.y_P), proto.loss_of_logits_grad(z_H, batch.y_H)
    wH2 = (w_H * w_H).sum(dim=-1, keepdim=True)
    CHg_H = _mv(C_HH.mT, g_H)
    r = (w_P * w_H).sum(dim=-1, keepdim=True) * _mv(C_PH.mT, g_P) - wH2 * CHg_H
    Ms = [_outer(g_P, w_P), -_outer(g_H, w_H) - lr * _outer(r * h, w_H)]
    grads = {id(p.theta): theta_gradient(batch, ["P", "H"], Ms, theta_out),
             id(w_P): _mv(adapted["P"].mT, g_P),
             id(w_H): _mv(adapted["H"].mT, g_H) - lr * (wH2 * _mv(Phi["H"].mT, CHg_H * h)
                                                        + (g_H * CHg).sum(dim=-1, keepdim=True) * w_H)}
    if p.bias is not None:
        grads[id(p.bias)] = Ms[0].sum(dim=-2) + Ms[1].sum(dim=-2)
    terms = [Term("outer", loss_P - loss_H, p.extractor()), Term("loss_P", loss_P, [w_P]),
             Term("loss_H", loss_H, [w_H])]
    return grads, terms


def _mv(A: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``A v``: one run's matrix-vector product; a stack's product and sum (the same bits for any number of stacked
    runs, which a batched ``A @ v[..., None]`` does not give)."""
    return A @ v if A.ndim == 2 else (A * v.unsqueeze(-2)).sum(dim=-1)


def _outer(v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``v w^T`` (per stacked run)."""
    return v.unsqueeze(-1) * w.unsqueeze(-2)


def _features(p: Params, X: torch.Tensor, tasks: list[str], n_P: int) -> dict[str, torch.Tensor]:
    """Each used task's features ``X theta + 1 b^T`` from one product over the stacked rows ``X``
    (``n_P``: the P batch's rows)."""
    Phi = X @ p.theta if p.bias is None else addmm(p.bias.unsqueeze(-2), X, p.theta)
    if len(tasks) == 1:
        return {tasks[0]: Phi}
    return {"P": Phi[..., :n_P, :], "H": Phi[..., n_P:, :]}


def _spectrum(proto: Protocol, Phi: torch.Tensor, top: bool):
    """The gram route's shifted extremes of ``S = Phi^T Phi`` (k = D), ``G = Phi Phi^T`` and ``u u^T`` of its top
    eigenvector, from one ``eigh`` of G (:func:`kappalab.extremes.batched_eigh`: LAPACK on the CPU, the tensor
    path on CUDA; ``top=False``: no eigenproblem, only the r2 fields; ``u u^T`` None)."""
    F = FeatureGram(Phi, copy_right_factor=False)
    if not top:
        return extremes_of_gram_spectrum(None, F, proto.shift, rank=F.dim), F.G, None
    lam, V, _ = batched_eigh(F.G)  # a matrix the tensor path did not converge on: LAPACK's eigenpairs, counted
    return extremes_of_gram_spectrum(lam, F, proto.shift, rank=F.dim), F.G, top_projector(V)
