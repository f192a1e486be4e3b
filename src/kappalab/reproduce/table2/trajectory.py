"""Per-epoch (i), (ii), RIR of a Table 2 run on the three parts of its digit pair (App. C.2's early stopping).

A :class:`PairTrajectory` is the ``observer(step, params)`` of :func:`kappalab.immunization.immunize` for a
full-batch run (one step per epoch). Every ``every``-th epoch (and before the first step) it records, for each part
of :func:`kappalab.data.mnist.pair_splits` (``train``: the rows the run is trained on; ``validation``: the held-out
10% of the training split; ``test``: MNIST's t10k digits), Table 2's Eq. 15 by :func:`.spectra.rir_from_spectra`
(the rank of each task decided once on the part's ``K = X^T X`` at ``n eps`` and reused for ``H(theta)``; the same
rule as the headline of every Table 2 record), from the squared singular values of ``R theta`` where ``X = Q R``
(thin QR, once per part: the singular values of ``X theta`` without the ``N x D x D`` product).

``loss_P`` is the trained head's D_P loss on the part, ``mean(BCE(X_P theta w_P, y_P))`` (the training objective's
``L(D_P)``; D_P's labels are all 0 in the authors' code, so it measures nothing a selection should keep). ``fit_P``
(Table 1's least-squares fit) has no meaning for a BCE task and is stored as NaN, so that the arrays follow
:mod:`kappalab.immunization.trajectory`'s layout (``epoch``, ``<view>.<metric>``) and
:mod:`kappalab.immunization.selection` reads them unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .spectra import feature_spectrum, rir_from_spectra

PARTS = ("train", "validation", "test")


def _softplus(z: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, z)


def reduce_parts(parts: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict[str, dict[str, Any]]:
    """Per part (``(X_P, y_P, X_H)``): the rows of D_P and its labels, the R factors of ``X_P`` and ``X_H``, and
    the spectra of ``K_P``, ``K_H`` (data only: computed once per pair and seed, shared by the methods' runs)."""
    return {name: {"X_P": X_P, "y_P": y_P, "R_P": np.linalg.qr(X_P, mode="r"), "R_H": np.linalg.qr(X_H, mode="r"),
                   "K_P": feature_spectrum(X_P), "K_H": feature_spectrum(X_H)}
            for name, (X_P, y_P, X_H) in parts.items()}


@dataclass
class PairTrajectory:
    """``observer(step, params)`` recording :data:`kappalab.immunization.trajectory.METRICS` per part at epochs 0,
    every, 2 every, ... (full batch: step = epoch). ``reduced``: :func:`reduce_parts` of the parts."""

    reduced: Mapping[str, Mapping[str, Any]]
    every: int = 1
    epochs: list[int] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.every, int) and self.every >= 1):
            raise ValueError(f"every must be a positive int, got {self.every!r}")

    def __call__(self, step: int, params: Any) -> None:
        if step % self.every:
            return
        if params.bias is not None:
            raise ValueError("PairTrajectory observes the paper protocol (no bias)")
        as_np = lambda t: t.detach().cpu().numpy().astype(np.float64)
        theta, w = as_np(params.theta), as_np(params.w_P)
        self.epochs.append(int(step))
        for name, r in self.reduced.items():
            for metric, value in self.metrics(theta, w, r).items():
                self.values.setdefault(f"{name}.{metric}", []).append(value)

    @staticmethod
    def metrics(theta: np.ndarray, w: np.ndarray, r: Mapping[str, Any]) -> dict[str, float]:
        """The metrics of one part at ``(theta, w_P)``."""
        spectra = {"K_P": r["K_P"], "K_H": r["K_H"], "H_P": feature_spectrum(r["R_P"] @ theta),
                   "H_H": feature_spectrum(r["R_H"] @ theta)}
        e = rir_from_spectra(spectra)
        z = r["X_P"] @ (theta @ w)
        loss = float(np.mean(_softplus(z) - r["y_P"] * z))  # BCE with logits z
        return {"term_i": e["term_i"], "term_ii": e["term_ii"], "rir": e["rir"], "loss_P": loss, "fit_P": np.nan}

    def arrays(self) -> dict[str, np.ndarray]:
        """``epoch`` and ``<part>.<metric>`` arrays (the layout of :mod:`kappalab.immunization.trajectory`)."""
        out = {"epoch": np.asarray(self.epochs, dtype=np.int64)}
        out.update({k: np.asarray(v, dtype=np.float64) for k, v in self.values.items()})
        return out
