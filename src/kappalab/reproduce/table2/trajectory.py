"""Per-epoch (i), (ii), RIR of a Table 2 run on the three parts of its digit pair (App. C.2's early stopping).

A :class:`PairTrajectory` is the ``observer(step, params)`` of :func:`kappalab.immunization.immunize` (called per
optimizer step; ``steps_per_epoch`` of them make an epoch: 1 for Alg. 1's full batch, ``min(N_P, N_H) // 64`` for
the official protocol's minibatches). Every ``every``-th epoch (and before the first step) it records, for each part
of :func:`kappalab.data.mnist.pair_splits` (``train``: the rows the run is trained on; ``validation``: the held-out
10% of the training split; ``test``: MNIST's t10k digits), Table 2's Eq. 15 by :func:`.spectra.rir_from_spectra`
(the rank of each task decided once on the part's ``K = X^T X`` at ``n eps`` and reused for ``H(theta)``; the same
rule as the headline of every Table 2 record), from the squared singular values of ``R theta`` where ``X = Q R``
(thin QR, once per part: the singular values of ``X theta`` without the ``N x D x D`` product). With the official
protocol's bias the features are ``X theta + 1 b^T = [X 1] [theta; b]``, so the R factor is that of ``[X 1]``
while K stays ``X^T X`` (the convention of every official Table 2 record: :func:`.spectra.run_spectra`).

``loss_P`` is the trained head's D_P loss on the part, ``mean(BCE(X_P theta w_P (+ b . w_P), y_P))`` (the training
objective's ``L(D_P)``; D_P's labels are all 0 in the authors' code, so it measures nothing a selection should
keep). ``fit_P`` (Table 1's least-squares fit) has no meaning for a BCE task and is stored as NaN, so that the arrays
follow :mod:`kappalab.immunization.trajectory`'s layout (``epoch``, ``<view>.<metric>``) and
:mod:`kappalab.immunization.selection` reads them unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from kappalab.immunization.task import with_ones_column

from .spectra import rir_from_spectra, stored_spectrum

PARTS = ("train", "validation", "test")


def _softplus(z: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, z)


def _r_factor(X: np.ndarray, bias: bool) -> np.ndarray:
    """R of the thin QR of ``X`` (``[X 1]`` with a bias)."""
    return np.linalg.qr(with_ones_column(X, bias), mode="r")


def reduce_parts(parts: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]], bias: bool = False
                 ) -> dict[str, dict[str, Any]]:
    """Per part (``(X_P, y_P, X_H)``): the rows of D_P and its labels, the R factors of ``X_P`` and ``X_H``
    (of ``[X 1]`` when the observed runs have a ``bias``), and the spectra of ``K_P``, ``K_H`` (data only: computed
    once per pair and seed, shared by the methods' runs)."""
    return {name: {"X_P": X_P, "y_P": y_P, "R_P": _r_factor(X_P, bias), "R_H": _r_factor(X_H, bias),
                   "K_P": stored_spectrum(X_P), "K_H": stored_spectrum(X_H), "bias": bias}
            for name, (X_P, y_P, X_H) in parts.items()}


@dataclass
class PairTrajectory:
    """``observer(step, params)`` recording :data:`kappalab.immunization.trajectory.METRICS` per part at epochs 0,
    every, 2 every, ... (epoch = step // steps_per_epoch). ``reduced``: :func:`reduce_parts` of the parts (with
    ``bias`` as the observed runs have it)."""

    reduced: Mapping[str, Mapping[str, Any]]
    every: int = 1
    steps_per_epoch: int = 1
    epochs: list[int] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("every", "steps_per_epoch"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name} must be a positive int, got {value!r}")

    def __call__(self, step: int, params: Any) -> None:
        if step % (self.every * self.steps_per_epoch):
            return
        as_np = lambda t: None if t is None else t.detach().cpu().numpy().astype(np.float64)
        theta, bias, w = as_np(params.theta), as_np(params.bias), as_np(params.w_P)
        self.epochs.append(int(step) // self.steps_per_epoch)
        for name, r in self.reduced.items():
            for metric, value in self.metrics(theta, w, r, bias).items():
                self.values.setdefault(f"{name}.{metric}", []).append(value)

    @staticmethod
    def metrics(theta: np.ndarray, w: np.ndarray, r: Mapping[str, Any], bias: np.ndarray | None = None
                ) -> dict[str, float]:
        """The metrics of one part at ``(theta, bias, w_P)``; ``bias`` must be given iff ``r`` was reduced with
        one."""
        if (bias is not None) != r["bias"]:
            raise ValueError(f"the parts were reduced with bias={r['bias']}, the observed run has "
                             f"bias={bias is not None}")
        theta_aug = theta if bias is None else np.vstack([theta, bias[None, :]])
        spectra = {"K_P": r["K_P"], "K_H": r["K_H"], "H_P": stored_spectrum(r["R_P"] @ theta_aug),
                   "H_H": stored_spectrum(r["R_H"] @ theta_aug)}
        e = rir_from_spectra(spectra)
        z = r["X_P"] @ (theta @ w) + (0.0 if bias is None else float(bias @ w))
        loss = float(np.mean(_softplus(z) - r["y_P"] * z))  # BCE with logits z
        return {"term_i": e["term_i"], "term_ii": e["term_ii"], "rir": e["rir"], "loss_P": loss, "fit_P": np.nan}

    def arrays(self) -> dict[str, np.ndarray]:
        """``epoch`` and ``<part>.<metric>`` arrays (the layout of :mod:`kappalab.immunization.trajectory`)."""
        out = {"epoch": np.asarray(self.epochs, dtype=np.int64)}
        out.update({k: np.asarray(v, dtype=np.float64) for k, v in self.values.items()})
        return out
