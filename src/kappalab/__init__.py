"""kappalab: a verification-first numerical lab for *Model Immunization from a Condition Number Perspective*
(Zheng, Bai, Bullins, Yeh; ICML 2025).

Every function takes a NumPy array or a torch tensor and returns the same kind (torch: any device, float64 by
default, differentiable where it says so). Notation and tolerances: :mod:`kappalab.spectral`,
:mod:`kappalab.regularizers`, :mod:`kappalab.linear`.
"""

from .bounds import step_bound_ill, step_bound_theta_ill, step_bound_theta_well, step_bound_well
from .eq10 import eq10_singular_values
from .errors import (DegenerateSpectrumError, DegenerateSpectrumWarning, KappalabError, RankZeroError,
                     UndefinedRegularizerError)
from .extremes import BatchedExtremes, batched_extremes
from .linear import grad_theta_r_ill, grad_theta_r_well, hessian, preconditioned_step
from .kappa import condition_number
from .regularizers import grad_r_ill, grad_r_well, r_ill, r_well
from .rir import RIRResult, rir
from .spectral import Extremes, psd_extremes, svd_extremes

__version__ = "0.1.0"

__all__ = [
    "condition_number", "r_well", "r_ill", "grad_r_well", "grad_r_ill",
    "hessian", "grad_theta_r_well", "grad_theta_r_ill", "preconditioned_step",
    "step_bound_well", "step_bound_ill", "step_bound_theta_well", "step_bound_theta_ill",
    "eq10_singular_values", "batched_extremes", "BatchedExtremes", "rir", "RIRResult", "Extremes", "psd_extremes", "svd_extremes",
    "KappalabError", "DegenerateSpectrumError", "DegenerateSpectrumWarning", "UndefinedRegularizerError",
    "RankZeroError",
]
