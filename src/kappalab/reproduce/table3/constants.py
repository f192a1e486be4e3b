"""Table 3's fixed names and numbers: the paper's reference values, the weight(s) each method's search and
settings line name, and the parts the real network's images are drawn into (:mod:`.real_data`)."""

from __future__ import annotations

from kappalab.methods import DEEP_METHODS, SPECS

PAPER_TABLE3 = {  # Table 3 of the paper, ResNet18 / Cars and Country211: (i), (ii), RIR_theta0, D_P test acc.
    "cars": {"rill_only": (1.878, 1.786, 1.057, 63.84), "imma": (0.866, 0.889, 0.974, 63.57),
             "opt_kappa": (1.217, 0.798, 1.527, 63.65), "ours": (2.386, 0.699, 3.467, 62.36)},
    "country211": {"rill_only": (20.727, 20.675, 1.038, 62.17), "imma": (0.791, 0.814, 0.972, 67.03),
                   "opt_kappa": (1.538, 1.053, 1.472, 66.81), "ours": (3.287, 0.399, 8.714, 65.01)},
}

#: method -> the objective weights (lambdas) it trains with: the search's grids and the table's settings line
LAMBDA_OF = {m: SPECS[m].lambdas for m in DEEP_METHODS}

#: the parts every real-network run draws (:mod:`.real_data`); their images go through the trunk together
PARTS = ("train", "heldout", "test")
#: the optional part that selects a setting (:mod:`.grid`), drawn where ``per_class`` names it
VALIDATION = "validation"
