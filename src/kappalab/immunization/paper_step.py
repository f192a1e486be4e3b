"""Alg. 1's step for Ours and R_ill Only in closed form (paper protocol, ``extra.spectral_route = "closed_form"``).

The regularizer terms of Eq. 11 get their theta-gradients from Thm 4.2 through the core
(:func:`kappalab.gram.regularizers_from_covariance`: ``H = theta^T K theta``, its extreme eigenpairs by
:func:`kappalab.spectral.psd_extremes`, the formulas of :mod:`kappalab.regularizers`) instead of ``eigh`` and
autograd through it. Alg. 1's preconditioner enters as a left factor: the gradients are ``2 K theta G``, so
``(K + ridge I)^{-1} 2 K theta G = 2 (A theta) G`` with ``A = (K + ridge I)^{-1} K``
(:func:`kappalab.linear.ridge_projector`, from the SVD of the task's X, formed once per run and cached on the full
batch): no solve per step. The D_P loss keeps its autograd gradient (two matrix-vector products with
``logits_order = "head_first"``).

Per task and step: four ``D x D`` products (``K theta``, ``theta^T K theta``, ``A theta``, ``(A theta) H``) and the
extreme eigenpairs of H: on the CPU theta and K are read as NumPy arrays (no copy) and ``solver="auto"`` takes the
``"tridiag"`` route (one ``sytrd``, all eigenvalues, two eigenvectors); on CUDA the tensors stay on the device
(``eigh``). The warm :class:`~kappalab.tracker.ExtremeTracker` does not apply: H has the rank of K (< D on MNIST),
and a rank-deficient H needs its whole spectrum for the rank rule.

Degenerate extremes follow the config's ``on_degenerate`` exactly as the autograd path does (the core's
:func:`~kappalab.spectral.require_unique`: a :class:`~kappalab.errors.DegenerateSpectrumWarning` counted by the
training loop, or an error).

Not equal to the dense route to the last bits: the dense route's Cholesky solve with ``K + ridge I`` amplifies the
rounding of the gradient by the condition number ``lambda_max(K) / ridge`` (~2e9 on Table 2's full-MNIST pairs: a
product-order change moves its result by ~1e-7 relative), the projector does not; so the route is a config choice
and part of a run's identity. Methods without regularizer terms (IMMA, Opt kappa) have nothing to replace: under
this route they take the autograd step unchanged.
"""

from __future__ import annotations

import torch

from kappalab.gram import regularizers_from_covariance
from kappalab.linear import ridge_projector

from .config import MethodConfig
from .protocols import Batch, Params, Protocol, Term

#: the methods whose step this module computes (Eq. 11's terms)
CLOSED_FORM_METHODS: tuple[str, ...] = ("ours", "rill_only")

#: Eq. 11's regularizer terms: name, weight field, task, the extreme the gradient needs, the FromData fields
_REGULARIZERS = (("R_well", "lambda_P", "P", "max", "r_well", "grad_well"),
                 ("R_ill", "lambda_H", "H", "min", "r_ill", "grad_ill"))


def _host_or_device(t: torch.Tensor):
    """``t`` detached, as a NumPy view on the CPU (the core's ``tridiag`` route), else the device tensor."""
    t = t.detach()
    return t.numpy() if t.device.type == "cpu" else t


def projector(proto: Protocol, batch: Batch, which: str):
    """``(K + ridge I)^{-1} K`` of task ``which`` (:func:`~kappalab.linear.ridge_projector`), cached on the batch
    (the full batch is one object per run)."""
    key = f"ridge_projector_{which}"
    if key not in batch.cache:
        batch.cache[key] = ridge_projector(_host_or_device(batch.X(which)), proto.ridge(which))
    return batch.cache[key]


def closed_form_gradients(proto: Protocol, p: Params, batch: Batch, cfg: MethodConfig
                          ) -> tuple[dict[int, torch.Tensor], list[Term]]:
    """What :func:`kappalab.immunization.methods.step_gradients` returns, for Ours and R_ill Only under the paper
    protocol: the gradient per tensor (theta's regularizer parts preconditioned when ``extra.precondition``) and
    the step's :class:`~kappalab.immunization.protocols.Term` s (values for the history)."""
    if proto.name != "paper" or cfg.method not in CLOSED_FORM_METHODS:
        raise ValueError(f"the closed-form step is for the paper protocol's {CLOSED_FORM_METHODS}, got "
                         f"{proto.name!r} / {cfg.method!r}")
    pre = bool(cfg.get("precondition", True))
    terms: list[Term] = []
    total: dict[int, torch.Tensor] = {}
    if cfg.get("supervised_loss", True):
        loss = proto.task_loss(p, batch)
        for param, g in zip((p.theta, p.w_P), torch.autograd.grad(loss, [p.theta, p.w_P])):
            total[id(param)] = g
        terms.append(Term("loss_P", loss, p.extractor() + [p.w_P]))
    theta = _host_or_device(p.theta)
    for name, weight_field, which, end, value_field, grad_field in _REGULARIZERS:
        weight = float(getattr(cfg, weight_field))
        if not weight > 0:
            continue
        r = regularizers_from_covariance(theta, _host_or_device(batch.covariance(which)), rtol=proto.rank_rtol,
                                         on_degenerate=proto.on_degenerate, which=(end,),
                                         left=projector(proto, batch, which) if pre else None)
        g = weight * torch.as_tensor(getattr(r, grad_field), device=p.theta.device)
        total[id(p.theta)] = total[id(p.theta)] + g if id(p.theta) in total else g
        value = weight * torch.as_tensor(getattr(r, value_field), dtype=p.theta.dtype, device=p.theta.device)
        terms.append(Term(name, value, p.extractor(), which if pre else None))
    return total, terms
