"""Evaluation of an immunized deep net: RIR_theta0 (Eq. 17), D_P accuracy, linear-probing curves (Figure 3).

kappa of ``H~ = F^T F`` is computed as ``kappa(F)^2`` from the singular values of the feature matrix ``F``
(the nonzero eigenvalues of ``F^T F`` are the squared nonzero singular values of ``F``): a group of 100 samples in
512 dimensions gives a rank-100 ``H~``, and the SVD of ``F`` separates its zero eigenvalues from the nonzero ones
far more reliably than an eigen-decomposition of ``H~``. kappa is the pseudo-inverse condition number of
:func:`kappalab.condition_number` (rank tolerance ``rtol`` relative to ``s_max(F)``; default
``max(N, D) * eps``).

RIR_theta0 as the paper estimates it (Sec. 5.2): draw 20 random groups of 100 training samples; for each group g
compute ``(i)_g = kappa(H~_H,g(theta_I)) / kappa(H~_H,g(theta_0))`` (same samples for both models) and
``(ii)_g`` likewise on D_P, and ``RIR_g = (i)_g / (ii)_g``; report the averages over the groups ("reporting the
average values"). The exact Eq. 17 uses all samples at once. On small data :func:`rir_theta0` returns both;
the estimator is biased because kappa of a 100-sample ``H~`` is not kappa of the full ``H~`` (see the tests).

The authors' released code computes a different kappa, kept under its own name
(:func:`kappalab.estimators.log_kappa_authors`, ``rir_theta0(..., estimator="authors")``) because it is a
different quantity, not a second copy of ours: in float64 it takes the eigenvalues of ``H~ + 1e-6 I`` and
divides the largest by the smallest one *above* ``1e-6``; per group it reports ``exp(log kappa_I - log kappa_0)``
and averages those over the groups. When ``D_hid`` exceeds the group size, ``H~`` of a group has
``D_hid - group_size`` zero eigenvalues that come out as ``1e-6 +- rounding``; some land above ``1e-6``, so the
authors' ``s_min`` is that floor and their kappa is ``~ s_max / 1e-6``, a measure of the features' scale (doubling
the features quadruples it) rather than of their conditioning. Where ``D_hid <= group size`` (and
``s_min >> 1e-6``) both kappas agree to ``~1e-6 / s_min``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ..estimators import AUTHORS_SHIFT, log_kappa_authors  # noqa: F401 (re-exported: their home is kappalab.estimators)
from ..estimators import Kappa, group_terms, kappa_ratio
from ..extremes import batched_extremes
from ..kappa import kappa_of_features
from .model import ImmunizableModel, hessian_tilde


def as_loader(data: DataLoader | torch.Tensor | tuple[torch.Tensor, ...], batch_size: int = 256) -> DataLoader:
    """A DataLoader over ``data`` (returned as is when it already is one; tensors are wrapped, unshuffled)."""
    if isinstance(data, DataLoader):
        return data
    tensors = data if isinstance(data, tuple) else (data,)
    return DataLoader(TensorDataset(*tensors), batch_size=batch_size, shuffle=False)


@torch.no_grad()
def extract_features(model: ImmunizableModel, data: DataLoader | torch.Tensor, device: str | torch.device = "cpu",
                     progress: bool = False) -> torch.Tensor:
    """Stacked features ``X~`` (N x D_hid) of all inputs (the first tensor of each batch), in eval mode."""
    from tqdm.auto import tqdm

    was_training = model.training
    model.eval()
    try:
        out = [model.features(batch[0].to(device) if isinstance(batch, (list, tuple)) else batch.to(device))
               for batch in tqdm(as_loader(data), desc="features", leave=False, disable=not progress)]
    finally:
        model.train(was_training)
    return torch.cat(out)


def kappa_tilde(F: torch.Tensor, rtol: float | None = None) -> float:
    """kappa(H~) = kappa(F^T F) = kappa(F)^2 (pseudo-inverse condition number, see the module docstring)."""
    if F.ndim != 2:
        raise ValueError(f"F must be a 2-D (samples x features) matrix, got shape {tuple(F.shape)}")
    return float(kappa_of_features(F.detach(), rtol))


@dataclass(frozen=True)
class RIRTheta0:
    """Eq. 17 terms. ``exact_*``: all samples at once; ``est_*``: mean and std (ddof 0) over the random groups;
    ``estimator``: the kappa used (see :func:`kappalab.estimators.kappa_ratio`)."""

    exact_i: float
    exact_ii: float
    exact_rir: float
    est_i: float
    est_ii: float
    est_rir: float
    std_i: float
    std_ii: float
    std_rir: float
    groups: int
    group_size: int
    per_group_i: tuple[float, ...]
    per_group_ii: tuple[float, ...]
    estimator: str = "pinv"


def rir_theta0(F_H_I: torch.Tensor, F_H_0: torch.Tensor, F_P_I: torch.Tensor, F_P_0: torch.Tensor, *,
               groups: int = 20, group_size: int = 100, seed: int = 0, rtol: float | None = None,
               estimator: Kappa = "pinv") -> RIRTheta0:
    """Eq. 17 from features of theta_I (``*_I``) and theta_0 (``*_0``) on the same D_H / D_P samples (row i of
    ``F_H_I`` and ``F_H_0`` is the same image). Exact value and the paper's group estimator, with our kappa
    (``"pinv"``) or the authors' (``"authors"``); both use the same groups for the same ``seed``. The group code is
    :mod:`kappalab.estimators`' (run here on the tensors as they are; its ``estimate_all`` adds the intervals)."""
    for name, (a, b) in {"F_H": (F_H_I, F_H_0), "F_P": (F_P_I, F_P_0)}.items():
        if a.shape[0] != b.shape[0]:
            raise ValueError(f"{name}_I and {name}_0 must hold the same samples, got {a.shape[0]} and {b.shape[0]} "
                             "rows")
    kr = kappa_ratio(estimator, rtol)
    i_g, ii_g = group_terms(F_H_I, F_H_0, F_P_I, F_P_0, kr, groups=groups, group_size=group_size, seed=seed)
    rir_g = i_g / ii_g
    ex_i, ex_ii = kr(F_H_I, F_H_0), kr(F_P_I, F_P_0)
    return RIRTheta0(ex_i, ex_ii, ex_i / ex_ii, float(i_g.mean()), float(ii_g.mean()), float(rir_g.mean()),
                     float(i_g.std()), float(ii_g.std()), float(rir_g.std()), groups, group_size,
                     tuple(map(float, i_g)), tuple(map(float, ii_g)), estimator)


@torch.no_grad()
def accuracy(model: nn.Module, data: DataLoader | tuple[torch.Tensor, torch.Tensor],
             device: str | torch.device = "cpu") -> float:
    """Top-1 accuracy (fraction) of ``model``'s logits on labelled data."""
    was_training = model.training
    model.eval()
    correct = total = 0
    try:
        for x, y in as_loader(data):
            pred = model(x.to(device)).argmax(1)
            correct += int((pred == y.to(device)).sum())
            total += len(y)
    finally:
        model.train(was_training)
    if total == 0:
        raise ValueError("data is empty")
    return correct / total


def linear_probe_curve(F_train: torch.Tensor, y_train: torch.Tensor, F_test: torch.Tensor, y_test: torch.Tensor,
                       *, epochs: int, num_classes: int, step: str | float = "1/smax") -> list[float]:
    """Figure 3: test accuracy of a linear probe ``softmax(F w)`` trained by full-batch gradient descent.

    Entry ``t`` is the test accuracy after ``t`` epochs (entry 0: the zero-initialised probe). ``step="1/smax"``
    uses ``1 / s_max(H~ / N)`` (the constant step of Eq. 2 / Claim E2, which upper-bounds the softmax loss's
    curvature), so every extractor is probed at its own safe step and the curve reflects kappa, not the scale of
    the features. A float gives a fixed step for all extractors.
    """
    if not (isinstance(epochs, int) and epochs >= 0):
        raise ValueError(f"epochs must be a non-negative int, got {epochs!r}")
    descent = _probe_descent(F_train, y_train, num_classes, probe_step(F_train, step))
    return [float(((F_test @ W).argmax(1) == y_test).to(torch.float64).mean())
            for _, (W, _) in zip(range(epochs + 1), descent)]


def _probe_descent(F: torch.Tensor, y: torch.Tensor, num_classes: int,
                   eta: float) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The probes' full-batch softmax gradient descent from ``W_0 = 0``: ``W_{t+1} = W_t - eta F^T (softmax(F W_t)
    - Y) / N`` (Y one-hot); yields ``(W_t, F W_t)`` for t = 0, 1, ... without end."""
    N = F.shape[0]
    W = torch.zeros(F.shape[1], num_classes, dtype=F.dtype, device=F.device)
    Y = torch.nn.functional.one_hot(y, num_classes).to(F.dtype)
    while True:
        logits = F @ W
        yield W, logits
        W = W - eta * (F.T @ (torch.softmax(logits, 1) - Y) / N)


def probe_step(F: torch.Tensor, step: str | float) -> float:
    """The probe's step: ``1 / s_max(H~ / N)`` for ``step="1/smax"`` (Eq. 2's constant step), or a positive float."""
    if step == "1/smax":
        return 1.0 / float(batched_extremes(hessian_tilde(F) / F.shape[0], vectors=False).largest)
    if isinstance(step, (int, float)) and step > 0:
        return float(step)
    raise ValueError(f"step must be '1/smax' or a positive float, got {step!r}")


def probe_iterations_to_loss(F: torch.Tensor, y: torch.Tensor, *, num_classes: int, target: float, max_iter: int,
                             step: str | float = "1/smax") -> int | None:
    """Figure 3's cost to the attacker as one number: full-batch gradient-descent iterations of a zero-initialised
    linear probe ``softmax(F w)`` (the loop of :func:`linear_probe_curve`) until its training cross-entropy is at
    most ``target``; None when ``max_iter`` iterations do not reach it."""
    if not (isinstance(max_iter, int) and max_iter >= 1) or not target > 0:
        raise ValueError(f"max_iter must be a positive int and target > 0, got {max_iter!r}, {target!r}")
    descent = _probe_descent(F, y, num_classes, probe_step(F, step))
    for t, (_, logits) in zip(range(max_iter + 1), descent):
        if float(torch.nn.functional.cross_entropy(logits, y)) <= target:
            return t
    return None

