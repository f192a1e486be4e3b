"""The images of Table 3's real-network rows: Fashion-MNIST and MNIST, drawn into three disjoint parts per dataset.

Per dataset (:func:`draw_parts`, one fixed draw ``numpy.random.default_rng(split_seed)`` shared by every seed,
method and protocol, so that all runs see the same images), class-balanced:

* ``train``: ``per_class["train"]`` images per class of the training split: immunization's minibatches, the D_P
  head's fit at theta_0 and the linear probes' training sets;
* ``heldout``: ``per_class["heldout"]`` further images per class of the training split (disjoint from ``train``):
  the samples of the three RIR estimators (Eq. 17; the exact one needs at least twice the feature width);
* ``test``: ``per_class["test"]`` images per class of the test split (t10k): accuracies and probe tests;
* ``validation`` (only where ``per_class`` names it): ``per_class["validation"]`` further images per class of the
  training split, disjoint from the other two training parts: the selection of a setting (:mod:`.grid`) reads it
  and nothing else does. Drawn from the same permutation after ``train`` and ``heldout``, so the other parts' rows
  are the same with or without it.

Each part's identity (the dataset's split sha256, the rows drawn, their sha256) goes into every run record.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ...data.fashion_mnist import load_fashion_mnist
from ...data.mnist import MnistData, load_digits
from .constants import PARTS, VALIDATION

DATASETS = ("mnist", "fashion-mnist")


def load_dataset(name: str, split: str) -> MnistData:
    """One verified split of ``"mnist"`` (full MNIST) or ``"fashion-mnist"``."""
    if name == "mnist":
        return load_digits("mnist", split=split)
    if name == "fashion-mnist":
        return load_fashion_mnist(split)
    raise ValueError(f"dataset must be one of {DATASETS}, got {name!r}")


@dataclass(frozen=True, eq=False)
class Parts:
    """The three parts of one dataset: ``images[part]`` uint8 (n, 28, 28), ``labels[part]`` int64 (n,), and
    ``rows[part]`` (indices into the part's source split)."""

    name: str
    images: dict[str, np.ndarray]
    labels: dict[str, np.ndarray]
    rows: dict[str, np.ndarray]
    split_sha256: dict[str, str]

    def all_images(self) -> np.ndarray:
        """The images of :data:`PARTS` stacked in that order (the trunk is run once on all of them; the validation
        part, where drawn, has its own trunk call, so that the others' cached activations are shared)."""
        return np.concatenate([self.images[p] for p in PARTS])

    def offsets(self) -> dict[str, slice]:
        """Where each part sits in :meth:`all_images`."""
        out, start = {}, 0
        for p in PARTS:
            out[p] = slice(start, start + len(self.labels[p]))
            start += len(self.labels[p])
        return out

    def identity(self) -> dict[str, object]:
        """The record's data entry: name, the source splits' sha256, images per part, the drawn rows' sha256."""
        return {"name": self.name, "split_sha256": dict(self.split_sha256),
                "sizes": {p: int(len(self.labels[p])) for p in self.labels},
                "rows_sha256": {p: hashlib.sha256(self.rows[p].astype(np.int64).tobytes()).hexdigest()
                                for p in self.labels}}


def draw_parts(name: str, per_class: dict[str, int], seed: int) -> Parts:
    """Draw the three parts of dataset ``name`` (see the module docstring)."""
    parts = (*PARTS, VALIDATION) if VALIDATION in per_class else PARTS
    if set(per_class) != set(parts) or not all(isinstance(n, int) and n >= 1 for n in per_class.values()):
        raise ValueError(f"per_class must give a positive int for each of {PARTS} (and optionally "
                         f"{VALIDATION!r}), got {per_class!r}")
    train, test = load_dataset(name, "train"), load_dataset(name, "test")
    rng = np.random.default_rng(seed)
    rows: dict[str, list[np.ndarray]] = {p: [] for p in parts}
    for c in range(10):
        pool = rng.permutation(np.flatnonzero(train.labels == c))
        n_fit, n_held, n_val = per_class["train"], per_class["heldout"], per_class.get(VALIDATION, 0)
        if len(pool) < n_fit + n_held + n_val:
            raise ValueError(f"{name}: class {c} has {len(pool)} training images, fewer than "
                             f"{n_fit + n_held + n_val}")
        rows["train"].append(pool[:n_fit])
        rows["heldout"].append(pool[n_fit:n_fit + n_held])
        if n_val:
            rows[VALIDATION].append(pool[n_fit + n_held:n_fit + n_held + n_val])
        rows["test"].append(rng.choice(np.flatnonzero(test.labels == c), per_class["test"], replace=False))
    picked = {p: np.sort(np.concatenate(r)) for p, r in rows.items()}
    source = {"train": train, "heldout": train, "test": test, VALIDATION: train}
    return Parts(name=name, images={p: source[p].images[picked[p]] for p in parts},
                 labels={p: source[p].labels[picked[p]] for p in parts}, rows=picked,
                 split_sha256={"train": train.sha256, "test": test.sha256})
