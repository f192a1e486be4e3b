"""Immunizing LINEAR feature extractors (Sec. 5.1): the four methods of Table 1, two protocols, evaluation.

* :class:`LinearTask` - the data of one problem; :func:`house_prices_task` builds Table 1's.
* :class:`MethodConfig` (its typed :class:`Extras`) / :func:`load_config` - run settings from the shipped configs
  (:mod:`kappalab.configs`).
* :func:`immunize` - train one method (:data:`METHODS`, :mod:`kappalab.methods`) under one protocol ("paper":
  Alg. 1 as stated; "official": what the authors' code does) -> :class:`ImmunizationRun`.
* :func:`evaluate` - Eq. 15 under both kappa definitions ("pinv", "shifted") with a tolerance sensitivity block.
* :func:`exact_line_search_gd` - Figure 1's linear probing curves (Eq. 16).
"""

from .config import CONFIG_DIR, METHODS, PROTOCOLS, Extras, MethodConfig, load_config, table1_config
from .evaluate import evaluate, hessians
from .methods import ImmunizationRun, immunize, step_gradients
from .probing import ProbeCurve, exact_line_search_gd, features
from .spectra import kappa, kappa_shifted, official_r1, official_r2, torch_kappa
from .task import LinearTask, house_prices_task

__all__ = [
    "LinearTask", "house_prices_task", "MethodConfig", "Extras", "load_config", "table1_config", "CONFIG_DIR",
    "METHODS", "PROTOCOLS", "immunize", "ImmunizationRun", "step_gradients", "evaluate", "hessians",
    "exact_line_search_gd", "ProbeCurve", "features", "kappa", "kappa_shifted", "official_r1", "official_r2",
    "torch_kappa",
]
