"""MNIST: embedded subset, IDX reader, digit pairs and normalization."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from kappalab.data import mnist


@pytest.fixture(scope="module")
def subset() -> mnist.MnistData:
    return mnist.load_mnist()


def _idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write_split(folder: Path, images: np.ndarray, labels: np.ndarray, gz: bool) -> None:
    for base, array in zip(mnist.IDX_NAMES["train"], (images, labels)):
        payload = _idx_bytes(array)
        if gz:
            (folder / f"{base}.gz").write_bytes(gzip.compress(payload))
        else:
            (folder / base).write_bytes(payload)


@pytest.fixture
def synthetic() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.integers(0, 256, (7, 28, 28), dtype=np.uint8), np.array([0, 1, 2, 3, 4, 5, 9], dtype=np.uint8)


def test_embedded_subset(subset: mnist.MnistData) -> None:
    assert subset.images.shape == (5000, 28, 28) and subset.images.dtype == np.uint8
    assert subset.labels.dtype == np.int64
    np.testing.assert_array_equal(np.bincount(subset.labels), [500] * 10)
    assert subset.source_label == "MNIST subset (500/digit)"
    assert subset.images.max() == 255 and subset.images.min() == 0


def test_idx_round_trip_plain(tmp_path: Path, synthetic: tuple[np.ndarray, np.ndarray]) -> None:
    images, labels = synthetic
    _write_split(tmp_path, images, labels, gz=False)
    data = mnist.load_mnist(tmp_path)
    np.testing.assert_array_equal(data.images, images)
    np.testing.assert_array_equal(data.labels, labels)
    assert data.source_label == f"MNIST (IDX files from {tmp_path})"


def test_idx_round_trip_gz_warns_on_unofficial_checksum(tmp_path: Path, synthetic: tuple[np.ndarray, np.ndarray]) -> None:
    images, labels = synthetic
    _write_split(tmp_path, images, labels, gz=True)
    with pytest.warns(UserWarning) as caught:
        data = mnist.load_mnist(tmp_path)
    messages = " ".join(str(w.message) for w in caught)
    assert "f68b3c2dcbeaaa9fbdd348bbdeb94873" in messages and "d53e105ee54ea40749a09fcbcd1e9432" in messages
    np.testing.assert_array_equal(data.images, images)
    np.testing.assert_array_equal(data.labels, labels)


def test_truncated_file_names_file_and_byte_counts(tmp_path: Path, synthetic: tuple[np.ndarray, np.ndarray]) -> None:
    images, labels = synthetic
    _write_split(tmp_path, images, labels, gz=False)
    path = tmp_path / "train-images-idx3-ubyte"
    full = path.read_bytes()
    path.write_bytes(full[:-5])
    with pytest.raises(ValueError, match=f"train-images-idx3-ubyte: IDX file truncated: expected {len(full)} bytes.*got {len(full) - 5}"):
        mnist.load_mnist(tmp_path)


def test_truncated_gzip_stream(tmp_path: Path) -> None:
    path = tmp_path / "x-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(_idx_bytes(np.arange(100, dtype=np.uint8)))[:-12])
    with pytest.raises(ValueError, match="x-idx1-ubyte.gz: cannot decompress"):
        mnist.read_idx(path)


def test_bad_magic_and_trailing_bytes(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x00\x00\x0d\x01" + struct.pack(">I", 1) + b"\x00" * 4)
    with pytest.raises(ValueError, match="bad IDX magic"):
        mnist.read_idx(bad)
    long = tmp_path / "long"
    long.write_bytes(_idx_bytes(np.zeros(3, dtype=np.uint8)) + b"\x00")
    with pytest.raises(ValueError, match="trailing bytes: expected 11 bytes"):
        mnist.read_idx(long)


def test_missing_files_list_expected_names(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte.*t10k-labels-idx1-ubyte"):
        mnist.load_mnist(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        mnist.load_mnist(tmp_path / "absent")


def test_split_argument_errors() -> None:
    with pytest.raises(ValueError, match="split must be"):
        mnist.load_mnist(split="val")
    with pytest.raises(ValueError, match="needs directory"):
        mnist.load_mnist(split="test")


def _toy(counts: dict[int, int]) -> mnist.MnistData:
    labels = np.concatenate([np.full(n, d) for d, n in counts.items()]).astype(np.int64)
    images = (np.arange(labels.size, dtype=np.uint8)[:, None, None] * np.ones((1, 28, 28), dtype=np.uint8))
    return mnist.MnistData(images, labels, "toy")


def test_digit_pair_caps_and_is_seeded() -> None:
    data = _toy({1: 5, 2: 3})
    X_P, X_H = mnist.digit_pair(data, 1, 2, seed=0)
    assert X_P.shape == X_H.shape == (3, 784) and X_P.dtype == np.float64
    again_P, again_H = mnist.digit_pair(data, 1, 2, seed=0)
    np.testing.assert_array_equal(X_P, again_P)
    np.testing.assert_array_equal(X_H, again_H)
    np.testing.assert_array_equal(X_H, mnist.normalize_images(data.images[5:8]))
    draws = {mnist.digit_pair(data, 1, 2, seed=s)[0][:, 0].tobytes() for s in range(8)}
    assert len(draws) > 1
    X_P2, X_H2 = mnist.digit_pair(data, 2, 1, seed=0)
    assert X_P2.shape == X_H2.shape == (3, 784)


def test_digit_pair_on_subset(subset: mnist.MnistData) -> None:
    X_P, X_H = mnist.digit_pair(subset, 3, 8, seed=0)
    assert X_P.shape == X_H.shape == (500, 784)
    np.testing.assert_array_equal(X_P, mnist.normalize_images(subset.images[subset.labels == 3]))


def test_digit_pair_errors() -> None:
    data = _toy({1: 2, 2: 2})
    with pytest.raises(ValueError, match="different digits"):
        mnist.digit_pair(data, 1, 1, seed=0)
    with pytest.raises(ValueError, match=r"digits \[3\]"):
        mnist.digit_pair(data, 1, 3, seed=0)


def test_normalization_constants() -> None:
    assert (mnist.MNIST_MEAN, mnist.MNIST_STD) == (0.1307, 0.3081)
    images = np.stack([np.zeros((28, 28)), np.full((28, 28), 255)]).astype(np.uint8)
    out = mnist.normalize_images(images)
    assert out.shape == (2, 784) and out.dtype == np.float64
    np.testing.assert_allclose(out[0], -0.1307 / 0.3081)
    np.testing.assert_allclose(out[1], (1 - 0.1307) / 0.3081)


def test_select_digits(subset: mnist.MnistData) -> None:
    X, y = mnist.select_digits(subset, range(5))
    assert X.shape == (2500, 784) and set(np.unique(y)) == {0, 1, 2, 3, 4}
    images, _ = mnist.select_digits(subset, [5, 6, 7, 8, 9], flatten=False)
    assert images.shape == (2500, 28, 28)
    with pytest.raises(ValueError, match="distinct"):
        mnist.select_digits(subset, [1, 1])
