"""What every Table 3 method record keeps besides utility, so that an outside script can recompute its estimates and
see whether anything moved (the one record schema of the proxy, the paper's networks and the real network).

* :func:`held_out_measures`: the three estimators on theta_0's and theta_I's held-out features, the rank rule, the
  singular values of the four matrices and the group spectra; :func:`train_measured`: the training with its
  checkpoints, or the divergence that stopped it.

* :func:`features_rtol`: the rank rule at the precision of the data the features were computed from. The trunk's
  activations are float32 (relative rounding ``u = eps(float32) / 2``); the float64 tail cannot make its features more
  precise than its inputs, and by Weyl's bound a singular value of ``F`` below the input rounding's norm cannot be
  told from zero. The rule of :func:`kappalab.kappa.kappa_of_features` with that dtype's eps: ``rtol = max(N, D)
  eps(float32)`` relative to ``s_1(F)`` (float64's eps would keep singular values 1.4e-8 below ``s_1``, inside
  what float32 inputs can move).
* :func:`group_spectra`: the singular values of each group's rows of the four held-out feature matrices, the groups
  drawn exactly as :func:`kappalab.estimators.group_terms` draws them (D_H's first, then D_P's, from
  ``default_rng(seed)``): the per-group kappas of the "groups" estimator are ``(s_1 / s_k)^2`` of these values.
* :func:`displacement`: ``||theta_I - theta_0|| / ||theta_0||`` per trained module.
* :class:`Checkpoints`: the three estimators' terms at chosen epochs of training (``on_epoch_end``), with the step.
* :func:`write_feature_store`: the committed ``features.npz`` of a store, the float64 triangular factors
  (:func:`triangular_factor`) of the kept held-out features, from which the exact estimator is recomputed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from torch import nn

from ...atomic_io import save_npz, write_json
from ...deep import immunize
from ...deep.train import DIVERGED
from ...errors import CollapsedFeaturesError, RankZeroError
from ...estimators import estimate_all, random_groups

#: the dtype of the cached trunk activations the real network's tail reads (kappalab.deep.trunk)
INPUT_DTYPE = np.float32


def features_rtol(n: int, d: int, dtype: Any = INPUT_DTYPE) -> float:
    """``max(n, d) * eps(dtype)``: the rank tolerance, relative to ``s_1(F)``, of ``n x d`` features computed from
    data of ``dtype`` (module docstring)."""
    return max(n, d) * float(np.finfo(dtype).eps)


#: a run's features computed again from its kept weights (``theta_I.pt``) against its kept ``features.npz``,
#: relative to their largest entry: the same weights and float64 path, equal up to summation order
KEPT_FEATURES_RTOL = 1e-9


def same_features(F: np.ndarray, kept: np.ndarray) -> bool:
    """Whether features computed again from a run's kept weights are the run's kept ones
    (:data:`KEPT_FEATURES_RTOL`): the check that a rebuilt model is the model that ran."""
    return F.shape == kept.shape and bool(np.abs(F - kept).max() <= KEPT_FEATURES_RTOL * np.abs(kept).max())


def group_spectra(F0: dict[str, np.ndarray], FI: dict[str, np.ndarray], *, groups: int, group_size: int,
                  seed: int) -> dict[str, list[list[float]]]:
    """``{"H_0", "H_I", "P_0", "P_I"}``: per group (in draw order), the singular values (descending) of the group's
    rows of theta_0's and theta_I's held-out features on each task (``F0["H"]``, ...)."""
    rng = np.random.default_rng(seed)
    rows = {"H": random_groups(F0["H"].shape[0], groups, group_size, rng)}
    rows["P"] = random_groups(F0["P"].shape[0], groups, group_size, rng)
    return {f"{task}_{which}": [np.linalg.svd(F[task][g], compute_uv=False).tolist() for g in rows[task]]
            for task in ("H", "P") for which, F in (("0", F0), ("I", FI))}


def displacement(model: nn.Module, base: nn.Module) -> dict[str, float]:
    """``||theta_I - theta_0||_F / ||theta_0||_F`` over the parameters of each top-level child module of ``model``'s
    ``trainable`` part (e.g. ``trainable.0``), its dummy layer and its classifier."""
    before = dict(base.named_parameters())
    moved: dict[str, list[float]] = {}
    for name, p in model.named_parameters():
        parts = name.split(".")
        module = ".".join(parts[:2]) if parts[0] == "trainable" and len(parts) > 2 else parts[0]
        q = before[name].detach()
        sums = moved.setdefault(module, [0.0, 0.0])
        sums[0] += float(((p.detach() - q) ** 2).sum())
        sums[1] += float((q ** 2).sum())
    return {m: (d / n) ** 0.5 if n > 0 else float("nan") for m, (d, n) in moved.items()}


@dataclass
class Checkpoints:
    """``on_epoch_end`` callback of :func:`kappalab.deep.immunize`: at each epoch of ``at``, the three estimators'
    terms on the held-out features of the model in training (``features()`` gives ``{"P", "H"}``), against
    theta_0's ``F0``, and what ``measures()`` returns (e.g. D_P accuracy); ``entries`` holds one dict per
    checkpoint with its epoch and optimizer step.

    ``keep``: a JSON file the entries are written to after each one and read from at the start, for a training that
    resumes from its epoch checkpoint (:func:`~kappalab.deep.immunize` calls this before it saves the epoch, so the
    file holds every epoch the checkpoint has; an epoch trained again replaces its entry)."""

    at: tuple[int, ...]
    steps_per_epoch: int
    features: Callable[[], dict[str, np.ndarray]]
    F0: dict[str, np.ndarray]
    seed: int
    groups: int
    group_size: int
    rtol: float | None
    measures: Callable[[], dict[str, Any]] | None = None
    keep: Path | None = None
    entries: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.keep is not None and self.keep.exists():
            self.entries = json.loads(self.keep.read_text())

    def __call__(self, epoch: int, terms: dict[str, float]) -> None:
        if epoch not in self.at:
            return
        FI = self.features()
        collapsed = [f"D_{t}" for t in ("P", "H") if not FI[t].any()]
        if collapsed:  # kappa undefined: the run is recorded as diverged, with the checkpoints so far
            raise CollapsedFeaturesError(f"epoch {epoch}: theta_I's held-out features of {' and '.join(collapsed)} "
                                         "are all zero (the tail's activations died): kappa and RIR undefined")
        try:
            est = estimate_all(self.F0["P"], self.F0["H"], FI["P"], FI["H"], seed=self.seed, groups=self.groups,
                               group_size=self.group_size, n_boot=200, n_boot_exact=0, rtol=self.rtol,
                               exact=exact_defined(self.F0))
        except RankZeroError as e:  # a group estimator's rows of theta_I's features are all zero
            raise CollapsedFeaturesError(f"epoch {epoch}: a row group of theta_I's held-out features is all zero "
                                         f"(most of the tail's activations died): kappa and RIR undefined ({e})") from e
        entry = {"epoch": epoch, "step": epoch * self.steps_per_epoch, "train_terms": dict(terms),
                 "estimates": {k: {"term_i": e.term_i, "term_ii": e.term_ii, "rir": e.rir} for k, e in est.items()},
                 **(self.measures() if self.measures else {})}
        self.entries = [e for e in self.entries if e["epoch"] < epoch] + [entry]
        if self.keep is not None:
            write_json(self.keep, self.entries)


def checkpoint_epochs(epochs: int, count: int = 4) -> tuple[int, ...]:
    """``count`` epochs spread evenly over training, the last one included (fewer when there are fewer epochs)."""
    return tuple(sorted({max(1, round(epochs * (i + 1) / count)) for i in range(count)}))


def singular_values(F: np.ndarray) -> list[float]:
    """Singular values of a feature matrix, descending (the exact estimator's input, stored per run)."""
    return np.linalg.svd(F, compute_uv=False).tolist()


def exact_defined(F0: dict[str, np.ndarray]) -> bool:
    """Whether the exact estimator is defined on held-out features of this shape: N >= D on both tasks (a smoke
    run's few images of a wide network are not; its group estimators still are)."""
    return min(F0["P"].shape[0], F0["H"].shape[0]) >= F0["P"].shape[1]


def held_out_measures(F0: dict[str, np.ndarray], FI: dict[str, np.ndarray], *, seed: int, groups: int,
                      group_size: int, rtol: float | None) -> dict[str, Any]:
    """A method record's estimates from theta_0's and theta_I's held-out features (``{"P", "H"}`` each): the three
    estimators (:func:`kappalab.estimators.estimate_all`, ``groups`` of ``group_size`` rows, the rank rule ``rtol``),
    the rule itself, the singular values of the four matrices and the group spectra (:func:`group_spectra`)."""
    est = estimate_all(F0["P"], F0["H"], FI["P"], FI["H"], seed=seed, groups=groups, group_size=group_size, rtol=rtol,
                       exact=exact_defined(F0))
    return {"estimates": {k: e.as_dict() for k, e in est.items()}, "rank_rtol": rtol,
            "singular_values": {f"{t}_{w}": singular_values(F[t]) for w, F in (("0", F0), ("I", FI))
                                for t in ("P", "H")},
            "group_spectra": group_spectra(F0, FI, groups=groups, group_size=group_size, seed=seed)}


def train_measured(model: nn.Module, method: str, loader: Any, obj: Any, train: Any, checkpoints: Checkpoints,
                   **options: Any) -> dict[str, Any]:
    """Train ``model`` by :func:`kappalab.deep.immunize` with ``checkpoints`` at its epoch ends: ``{"history",
    "n_steps", "checkpoints"}``; a training that diverges (:data:`kappalab.deep.train.DIVERGED`) gives ``{"diverged":
    what was raised and when, "checkpoints": those so far}``, and the planned steps were not all taken."""
    try:
        history = immunize(model, method, loader, obj, train, on_epoch_end=checkpoints, **options)
    except DIVERGED as error:  # the message says when (e.g. the epoch)
        return {"diverged": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}",
                "checkpoints": checkpoints.entries}
    return {"history": history, "n_steps": train.epochs * len(loader), "checkpoints": checkpoints.entries}


def triangular_factor(F: np.ndarray) -> np.ndarray:
    """The ``D x D`` factor R of ``F = Q R`` (float64 Householder QR): ``R^T R = F^T F``, so R has F's singular
    values and recomputes the exact estimator, in half the bytes of a 2560 x 1280 ``F``. Float64, not float32: theta_0's
    MNIST features have s_min / s_max ~ 1e-8 (nearly dead channels), below float32's resolution."""
    return np.linalg.qr(np.asarray(F, dtype=np.float64), mode="r")


def write_feature_store(records: list[dict[str, Any]], work: Path, out: Path, theta_i_runs: list[str]) -> Path:
    """``out/features.npz`` (compressed): the float64 triangular factor (:func:`triangular_factor`) of theta_0's
    held-out features of each dataset (``theta0/<name>``) and of theta_I's of the runs named in ``theta_i_runs``
    (``<key>/P_I``, ``<key>/H_I``), from the work folder's per-run ``features.npz``. Every record keeps the singular
    values of its four matrices in float64; these factors let a reader recompute them (within the QR's rounding)
    and the exact estimator."""
    arrays: dict[str, np.ndarray] = {}
    for r in records:
        if r["method"] == "init":
            continue
        saved = np.load(work / r["key"].replace("/", "_") / "features.npz")
        data = r["identity"]["data"]
        for tag in ("P", "H"):
            name = f"theta0/{data[tag]['name']}"
            if name not in arrays:
                arrays[name] = triangular_factor(saved[f"{tag}_0"])
            if r["key"] in theta_i_runs:
                arrays[f"{r['key']}/{tag}_I"] = triangular_factor(saved[f"{tag}_I"])
    path = out / "features.npz"
    return save_npz(path, compressed=True, **arrays)
