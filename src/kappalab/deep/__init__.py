"""Immunizing deep nets (Sec. 5.2, Table 3, Figure 3) for any torch feature extractor.

* :mod:`.model`: :class:`ImmunizableModel` (frozen / immunized layers, dummy layer, classifier), ``hessian_tilde``,
  the proxy's :class:`SmallCNN`.
* :mod:`.loader`: the paper's :class:`CombinedLoader`.
* :mod:`.methods`: the objectives of Ours, R_ill Only, IMMA and Opt kappa; the gradient-norm rule for the lambdas.
* :mod:`.train`: SGD + Nesterov training with checkpoints and data-parallel gradient averaging.
* :mod:`.search`: Appendix C.2's lambda selection (gradient-norm scales, {1, 2, 3, 5} grid, early stopping).
* :mod:`.metrics`: RIR_theta0 (Eq. 17, exact and the paper's 20x100 estimator, with our kappa or the authors'
  shifted one), accuracy, linear-probing curves.
* :mod:`.timm_models` / :mod:`.imagefolder`: the paper's ResNet18 / ViT and ImageNet / Cars / Country211 (need
  ``kappalab[deep]``; imported only when used); :mod:`.smoke`: MNIST digits as 224 x 224 image folders for a CPU
  smoke run of that path.
"""

from .loader import CombinedLoader
from .methods import (METHOD_LABELS, METHODS, ObjectiveConfig, balanced_scale, gradient_norms, kappa_autograd,
                      objective_terms, weighted_loss)
from .metrics import RIRTheta0, accuracy, extract_features, kappa_tilde, linear_probe_curve, rir_theta0
from .model import ImmunizableModel, SmallCNN, hessian_tilde
from .train import TrainConfig, immunize, make_optimizer, pretrain

__all__ = [
    "CombinedLoader", "METHODS", "METHOD_LABELS", "ObjectiveConfig", "balanced_scale", "gradient_norms",
    "kappa_autograd", "objective_terms", "weighted_loss", "RIRTheta0", "accuracy", "extract_features",
    "kappa_tilde", "linear_probe_curve", "rir_theta0", "ImmunizableModel", "SmallCNN", "hessian_tilde",
    "TrainConfig", "immunize", "make_optimizer", "pretrain",
]
