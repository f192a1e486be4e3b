"""Writes the features of docs/measure.md's worked example (seeded; run from the repository root):

    PYTHONPATH=src python docs/measure/make_features.py

theta_0: a random ReLU layer, D = 128 features (more than the group size of 100), on N = 256 samples per task
(D_P: standard Gaussian inputs; D_H: inputs with a shifted mean). Two theta_I's on D_H, D_P unchanged (pi = p0):
``hi_x2`` doubles theta_0's features (a pure rescaling: kappa, and so the exact RIR, unchanged) and ``hi_weak``
scales the weakest half of their spectrum by 0.2 (the exact RIR 0.2^-2 = 25): docs/reproduction/table3.md's scale
test, through :func:`kappalab.estimators.shrink_weak_half`. float64 .npy files next to this script.
"""

from pathlib import Path

import numpy as np

from kappalab.estimators import shrink_weak_half

HERE = Path(__file__).resolve().parent
rng = np.random.default_rng(2026)
A = rng.standard_normal((128, 128)) / np.sqrt(128)
p0 = np.maximum(rng.standard_normal((256, 128)) @ A, 0.0)
h0 = np.maximum((rng.standard_normal((256, 128)) + 0.5) @ A, 0.0)
for name, array in {"p0": p0, "h0": h0, "hi_x2": 2 * h0, "hi_weak": shrink_weak_half(h0, 0.2)}.items():
    np.save(HERE / f"{name}.npy", array)
