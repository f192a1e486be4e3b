"""The authors' deep-net objective (their public code as read; no code copied): ``--protocol official``.

What their immunization step computes on a (D_P, D_H) batch pair, with ``S_P = F_P^T F_P`` and ``S_H = F_H^T F_H``
the batches' feature Gram matrices (``H~`` of Eq. 18):

* **Regularizers** (:func:`r_well_official`, :func:`r_ill_official`): ``r1 = s_max^2/2 - ||S_P||_F^2/(2k)`` and
  ``r2 = 1 / (||S_H||_F^2/(2k) - s_min^2/2)``, the core's R_well / R_ill formulas
  (:func:`kappalab.regularizers.r_well_from_extremes`, :func:`~kappalab.regularizers.ill_denominator`) with
  ``p = k`` = the **last dimension of the D_P input batch** (their ``K = X1.size(-1)``: the image width, 224 for
  the paper's models, 28 for the MNIST proxy), not the feature dimension (Eq. 3's p) or the rank (Eq. 12's k);
  ``s_max`` and ``s_min`` are the shifted rule's extremes (:mod:`kappalab.kappa`: eigenvalues of ``S + 1e-6 I``,
  the largest, and the smallest one above ``1e-6``). With more features than batch rows (512 or 768 vs 64), ``s_min``
  is the ``1e-6`` floor (see :mod:`kappalab.deep.metrics`), so ``r2 ~ 2k / ||S_H||_F^2``.
* **Opt kappa** (:func:`kappa_log_loss`): their optional ``kappa`` loss ``1 / log kappa(S_H) + log kappa(S_P)``
  with the shifted kappa (their two inner weights set to 1; ``lambda_kappa`` carries the scale).
* **No dummy layer and no ``K^{-1}`` preconditioning**: the regularizers' gradients reach the immunized layers
  unchanged (:class:`~kappalab.deep.model.ImmunizableModel` built with ``dummy=False``).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..immunization.spectra import FeatureGram, shifted_extremes, torch_kappa
from ..kappa import DEFAULT_SHIFT
from ..regularizers import ill_denominator, r_well_from_extremes
from ..spectral import Extremes


def official_extremes(S: "torch.Tensor | FeatureGram", k: int, shift: float = DEFAULT_SHIFT) -> Extremes:
    """The shifted rule's extremes of ``S`` (differentiable) with ``p = rank = k`` (see the module docstring); ``S``
    may be a :class:`~kappalab.immunization.spectra.FeatureGram` (the gram route: ``s_min`` is the shift, see
    :func:`~kappalab.immunization.spectra.gram_extremes_shifted`)."""
    if not (isinstance(k, int) and k >= 1):
        raise ValueError(f"k must be a positive int (the input batch's last dimension), got {k!r}")
    return replace(shifted_extremes(S, shift, rank=k), p=k)


def r_well_official(S: "torch.Tensor | FeatureGram", k: int, shift: float = DEFAULT_SHIFT) -> torch.Tensor:
    """Their ``r1 = s_max^2/2 - ||S||_F^2/(2k)``."""
    return r_well_from_extremes(official_extremes(S, k, shift))


def r_ill_official(S: "torch.Tensor | FeatureGram", k: int, shift: float = DEFAULT_SHIFT) -> torch.Tensor:
    """Their ``r2 = 1 / (||S||_F^2/(2k) - s_min^2/2)`` (no definedness check: the step reads nothing back)."""
    return 1.0 / ill_denominator(official_extremes(S, k, shift), check=False)


def kappa_log_loss(S_P: "torch.Tensor | FeatureGram", S_H: "torch.Tensor | FeatureGram",
                   shift: float = DEFAULT_SHIFT) -> torch.Tensor:
    """Their kappa loss ``1 / log kappa(S_H) + log kappa(S_P)`` (shifted kappa, autograd through the eigenvalues)."""
    kappa = lambda S: torch_kappa(S, "shifted", shift=shift)  # noqa: E731  (eigenvalues: kappalab.extremes)
    return 1.0 / torch.log(kappa(S_H)) + torch.log(kappa(S_P))
