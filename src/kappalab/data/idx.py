"""The IDX file format of MNIST and Fashion-MNIST: reading (plain or ``.gz``, checked against md5s), writing, and
the folder a loader reads (a user's ``data_dir`` or the fetched cache)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Callable

import numpy as np

from kappalab.data.fetch import verify_digest

IMAGE_SHAPE = (28, 28)

IDX_NAMES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
"""(images, labels) base names of each IDX split; the ``.gz`` variant appends ``.gz``."""

_UBYTE = 0x08  # IDX type code of unsigned bytes, the only one MNIST uses


def idx_bytes(array: np.ndarray) -> bytes:
    """IDX encoding (unsigned bytes) of an array of values 0..255."""
    values = np.asarray(array)
    if values.size and (values.min() < 0 or values.max() > 255):
        raise ValueError(f"IDX unsigned bytes need values 0..255, got {values.min()}..{values.max()}")
    header = bytes([0, 0, _UBYTE, values.ndim]) + struct.pack(f">{values.ndim}I", *values.shape)
    return header + values.astype(np.uint8).tobytes()


def _read_bytes(path: Path) -> bytes:
    """File contents, decompressed when the name ends in ``.gz``."""
    if path.suffix != ".gz":
        return path.read_bytes()
    try:
        with gzip.open(path, "rb") as handle:
            return handle.read()
    except (OSError, EOFError) as error:
        raise ValueError(f"{path}: cannot decompress gzip data ({error}); the file is corrupt or truncated") from error


def parse_idx(raw: bytes, what: str) -> np.ndarray:
    """Decode IDX bytes of unsigned bytes into a uint8 array.

    Raises ValueError naming ``what`` for a wrong magic number or a byte length that does not match the header
    (truncated or with trailing bytes).
    """
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != _UBYTE:
        raise ValueError(f"{what}: bad IDX magic number {raw[:4].hex()!r}; expected 0000 08 0n (unsigned bytes)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{what}: truncated IDX header: expected at least {header} bytes, got {len(raw)}")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = header + int(np.prod(dims, dtype=np.int64))
    if len(raw) != expected:
        kind = "truncated" if len(raw) < expected else "has trailing bytes"
        raise ValueError(f"{what}: IDX file {kind}: expected {expected} bytes for dims {dims}, got {len(raw)}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims).copy()


def read_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file of unsigned bytes (plain or ``.gz``) into a uint8 array (see :func:`parse_idx`)."""
    path = Path(path)
    return parse_idx(_read_bytes(path), str(path))


def _find(directory: Path, base: str) -> Path:
    """Path of ``base`` or ``base.gz`` in ``directory`` (plain preferred)."""
    for candidate in (directory / base, directory / f"{base}.gz"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"data_dir {directory}: missing IDX file {base} (or {base}.gz). Expected names: "
        + ", ".join(f"{n}[.gz]" for pair in IDX_NAMES.values() for n in pair)
    )


def load_idx_split(directory: Path, split: str, md5: dict[str, str] | None, what: str, hint: str
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 28, 28) and labels (N,) of one IDX split in ``directory`` (the one IDX reader of MNIST and
    Fashion-MNIST), each file's decompressed bytes checked against ``md5[base]`` when ``md5`` is given.

    Args:
        directory: folder with the split's two files (plain or ``.gz``; names :data:`IDX_NAMES`).
        split: ``"train"`` or ``"test"``.
        md5: expected md5 of each uncompressed file by base name; None: not checked.
        what: the dataset's name in messages (e.g. ``"official"``, ``"Fashion-MNIST"``).
        hint: what to do about a checksum mismatch.
    """
    arrays = []
    for base in IDX_NAMES[split]:
        path = _find(directory, base)
        raw = _read_bytes(path)
        if md5 is not None:
            verify_digest(raw, md5[base], f"{path} ({what} {base})", hint, "md5")
        arrays.append(parse_idx(raw, str(path)))
    images, labels = arrays
    if images.ndim != 3 or images.shape[1:] != IMAGE_SHAPE:
        raise ValueError(f"{directory}: expected images of shape (N, 28, 28), got {images.shape}")
    if labels.shape != (images.shape[0],):
        raise ValueError(f"{directory}: expected {images.shape[0]} labels, got shape {labels.shape}")
    if labels.size and labels.max() > 9:
        raise ValueError(f"{directory}: labels must be classes 0..9, found {int(labels.max())}")
    return images, labels.astype(np.int64)


def idx_folder(data_dir: str | Path | None, fetch: Callable[[], Path]) -> Path:
    """The folder of IDX files a loader reads: ``data_dir`` (checked to be a folder) or, when None, ``fetch()``
    (the dataset's cached download)."""
    if data_dir is None:
        return fetch()
    directory = Path(data_dir).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(f"data_dir {directory} does not exist or is not a folder")
    return directory
