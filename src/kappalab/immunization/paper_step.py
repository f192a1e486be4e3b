"""Alg. 1's step for Ours and R_ill Only in closed form (paper protocol, ``extra.spectral_route = "closed_form"``).

The regularizer terms of Eq. 11 get their theta-gradients from Thm 4.2 through the core instead of ``eigh`` and
autograd through it: :func:`kappalab.gram.regularizers_from_data` on K's factor ``X_f = diag(s) Wt`` (``K =
X_f^T X_f``; :func:`kappalab.linear.covariance_factor`, one SVD of the task's X per run, cached on the full batch),
whose features ``F = X_f theta`` have r = rank(X) rows (full MNIST: 521-598 of D = 784): the spectrum of H comes
from the ``r x r`` ``F F^T`` (the gram route, H's rank rule), the formulas from :mod:`kappalab.regularizers`.
Alg. 1's preconditioner enters as row weights: the gradients are ``2 K theta G``, and
``(K + ridge I)^{-1} 2 K theta G = 2 X_f^T diag(1 / (s^2 + ridge)) X_f theta G``
(:func:`kappalab.linear.ridge_weights`): no solve per step. The D_P loss keeps its autograd gradient (two
matrix-vector products with ``logits_order = "head_first"``).

Per task and step: two products of ``r x D`` by ``D x D`` size (``F = X_f theta`` and the gradient
``X_f^T (...)``), ``F F^T`` (symmetric rank-r update), ``(F F^T) F``, and the extreme eigenpairs of the ``r x r``
``F F^T``: on the CPU theta is read as a NumPy array (no copy) and ``solver="auto"`` takes the ``"tridiag"`` route
(one ``sytrd``, all eigenvalues, two eigenvectors); on CUDA the tensors stay on the device (``eigh``). The warm
:class:`~kappalab.tracker.ExtremeTracker` is not used: the rank rule needs the whole spectrum, and ``F F^T`` may
hold eigenvalues below H's rank threshold.

Degenerate extremes follow the config's ``on_degenerate`` exactly as the autograd path does (the core's
:func:`~kappalab.spectral.require_unique`: a :class:`~kappalab.errors.DegenerateSpectrumWarning` counted by the
training loop, or an error).

Not equal to the dense route to the last bits: the dense route's Cholesky solve with ``K + ridge I`` amplifies the
rounding of the gradient by the condition number ``lambda_max(K) / ridge`` (~2e9 on Table 2's full-MNIST pairs: a
product-order change moves its result by ~1e-7 relative); the weights from X's SVD do not. So the route is a config
choice and part of a run's identity. Methods without Eq. 11's regularizer terms (IMMA, Opt kappa) are refused under
this route (:func:`kappalab.immunization.protocols.route_problem`), not run as the dense step under its name.
"""

from __future__ import annotations

import torch

from kappalab.gram import regularizers_from_data
from kappalab.linear import covariance_factor, ridge_weights

from .config import MethodConfig
from .protocols import PaperProtocol, Protocol
from .step_types import Batch, Params, Term

#: the methods whose step this module computes (Eq. 11's terms; declared with the protocol's routes)
CLOSED_FORM_METHODS: tuple[str, ...] = PaperProtocol.route_methods["closed_form"]

#: Eq. 11's regularizer terms: name, weight field, task, the extreme the gradient needs, the FromData fields
_REGULARIZERS = (("R_well", "lambda_P", "P", "max", "r_well", "grad_well"),
                 ("R_ill", "lambda_H", "H", "min", "r_ill", "grad_ill"))


def _host_or_device(t: torch.Tensor):
    """``t`` detached, as a NumPy view on the CPU (the core's ``tridiag`` route), else the device tensor."""
    t = t.detach()
    return t.numpy() if t.device.type == "cpu" else t


def factor(batch: Batch, which: str):
    """``(s, X_f)`` of task ``which``: X's kept singular values and K's factor ``X_f = diag(s) Wt``
    (:func:`~kappalab.linear.covariance_factor`), computed once per run (cached on the full batch)."""
    key = f"covariance_factor_{which}"
    if key not in batch.cache:
        s, Wt = covariance_factor(_host_or_device(batch.X(which)))
        batch.cache[key] = (s, s[:, None] * Wt)
    return batch.cache[key]


def _weights(proto: Protocol, s, which: str):
    """The preconditioner's :func:`~kappalab.linear.ridge_weights` with the config's ``ridge_<which>``."""
    ridge = proto.ridge(which)
    if not ridge > 0:
        raise ValueError(f"spectral_route 'closed_form' preconditions with (K + ridge_{which} I)^-1 K and needs "
                         f"ridge_{which} > 0, got {ridge!r}")
    return ridge_weights(s, ridge)


def closed_form_gradients(proto: Protocol, p: Params, batch: Batch, cfg: MethodConfig
                          ) -> tuple[dict[int, torch.Tensor], list[Term]]:
    """What :func:`kappalab.immunization.methods.step_gradients` returns, for Ours and R_ill Only under the paper
    protocol: the gradient per tensor (theta's regularizer parts preconditioned when ``extra.precondition``) and
    the step's :class:`~kappalab.immunization.step_types.Term` s (values for the history)."""
    if proto.name != "paper" or cfg.method not in CLOSED_FORM_METHODS:
        raise ValueError(f"the closed-form step is for the paper protocol's {CLOSED_FORM_METHODS}, got "
                         f"{proto.name!r} / {cfg.method!r}")
    pre = cfg.extra.precondition
    terms: list[Term] = []
    total: dict[int, torch.Tensor] = {}
    if cfg.extra.supervised_loss:
        loss = proto.task_loss(p, batch)
        for param, g in zip((p.theta, p.w_P), torch.autograd.grad(loss, [p.theta, p.w_P])):
            total[id(param)] = g
        terms.append(Term("loss_P", loss, p.extractor() + [p.w_P]))
    theta = _host_or_device(p.theta)
    for name, weight_field, which, end, value_field, grad_field in _REGULARIZERS:
        weight = float(getattr(cfg, weight_field))
        if not weight > 0:
            continue
        s, X_f = factor(batch, which)
        r = regularizers_from_data(theta, X_f, rtol=proto.rank_rtol, on_degenerate=proto.on_degenerate,
                                   which=(end,), row_weights=_weights(proto, s, which) if pre else None)
        g = weight * torch.as_tensor(getattr(r, grad_field), device=p.theta.device)
        total[id(p.theta)] = total[id(p.theta)] + g if id(p.theta) in total else g
        value = weight * torch.as_tensor(getattr(r, value_field), dtype=p.theta.dtype, device=p.theta.device)
        terms.append(Term(name, value, p.extractor(), which if pre else None))
    return total, terms
