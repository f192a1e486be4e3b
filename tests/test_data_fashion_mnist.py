"""Fashion-MNIST: the Debian-package route (fetch, unpack, md5 of the uncompressed IDX files, cache), the md5 check on
every load through the IDX reader MNIST uses, and the real files where they are in kappalab's cache.

The route is exercised with a synthetic ``.deb`` built by ``dpkg-deb -b`` and a stand-in for ``apt-get download``
that copies it (the expected digests patched to the synthetic files'), so CI fetches nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kappalab.data import fashion_mnist as fm
from kappalab.data import fetch, mnist


def _idx_bytes(array: np.ndarray) -> bytes:
    """Independent IDX writer (header by struct)."""
    return bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


@pytest.fixture
def synthetic() -> dict[str, bytes]:
    rng = np.random.default_rng(3)
    arrays = {"train": (rng.integers(0, 256, (6, 28, 28), dtype=np.uint8), np.array([0, 1, 9, 3, 4, 5], np.uint8)),
              "test": (rng.integers(0, 256, (2, 28, 28), dtype=np.uint8), np.array([7, 8], np.uint8))}
    return {base: _idx_bytes(a) for split, pair in arrays.items() for base, a in zip(mnist.IDX_NAMES[split], pair)}


def _md5s(payloads: dict[str, bytes]) -> dict[str, str]:
    return {base: hashlib.md5(raw).hexdigest() for base, raw in payloads.items()}


def _build_deb(tmp: Path, payloads: dict[str, bytes]) -> Path:
    """A .deb holding the payloads gzip-compressed under usr/share/datasets/fashion-mnist/, as Debian's does."""
    root = tmp / "pkg"
    folder = root / fm.DEB_DIR
    folder.mkdir(parents=True)
    for base, raw in payloads.items():
        (folder / f"{base}.gz").write_bytes(gzip.compress(raw))
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text(f"Package: {fm.DEB_PACKAGE}\nVersion: {fm.DEB_VERSION}\n"
                                             "Architecture: all\nMaintainer: test <t@t>\nDescription: test\n")
    deb = tmp / f"{fm.DEB_PACKAGE}_test_all.deb"
    subprocess.run(["dpkg-deb", "-b", str(root), str(deb)], check=True, capture_output=True)
    return deb


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not on this machine")
def test_deb_route_unpacks_verifies_and_caches(tmp_path: Path, synthetic, monkeypatch: pytest.MonkeyPatch) -> None:
    deb = _build_deb(tmp_path, synthetic)
    monkeypatch.setattr(fm, "DEB_SHA256", fetch.digest_of(deb))
    monkeypatch.setattr(fm, "FASHION_MD5", _md5s(synthetic))
    calls = []
    real_run = subprocess.run

    def fake_apt(command, cwd=None, **kwargs):
        if command[0] != "apt-get":
            return real_run(command, cwd=cwd, **kwargs)
        calls.append(command)
        shutil.copy(deb, Path(cwd) / deb.name)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(fm.subprocess, "run", fake_apt)
    cache = tmp_path / "cache"
    data = fm.load_fashion_mnist("train", cache=cache)
    assert calls == [["apt-get", "download", f"{fm.DEB_PACKAGE}={fm.DEB_VERSION}"]]
    assert data.name == "fashion-mnist" and data.checksum_verified and data.images.shape == (6, 28, 28)
    assert data.labels.tolist() == [0, 1, 9, 3, 4, 5]
    assert data.sha256 == hashlib.sha256(synthetic["train-images-idx3-ubyte"]
                                         + synthetic["train-labels-idx1-ubyte"]).hexdigest()
    assert fm.load_fashion_mnist("test", cache=cache).labels.tolist() == [7, 8] and len(calls) == 1  # cached
    target = cache / "fashion-mnist" / "t10k-labels-idx1-ubyte"
    whole = target.read_bytes()
    for spoiled in (whole[:-1] + bytes([whole[-1] ^ 1]), whole[:9]):  # altered, torn: unpacked again, never used
        target.write_bytes(spoiled)
        assert fm.load_fashion_mnist("test", cache=cache).labels.tolist() == [7, 8]
        assert target.read_bytes() == whole and len(calls) == 1  # from the cached package, not a new download


def test_wrong_deb_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_apt(command, cwd=None, **kwargs):
        (Path(cwd) / f"{fm.DEB_PACKAGE}_x_all.deb").write_bytes(b"not the package")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(fm.subprocess, "run", fake_apt)
    with pytest.raises(fetch.ChecksumError, match=f"expected sha256 {fm.DEB_SHA256}"):
        fm.load_fashion_mnist(cache=tmp_path)


def test_failed_download_names_the_manual_route(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fm.subprocess, "run",
                        lambda command, **kw: subprocess.CompletedProcess(command, 100, "", "E: Unable to locate"))
    with pytest.raises(RuntimeError, match="(?s)apt-get download.*Unable to locate.*apt-get update.*data_dir"):
        fm.load_fashion_mnist(cache=tmp_path)


def test_data_dir_is_md5_checked(tmp_path: Path, synthetic, monkeypatch: pytest.MonkeyPatch) -> None:
    for base, raw in synthetic.items():
        (tmp_path / base).write_bytes(raw)
    with pytest.raises(fetch.ChecksumError, match="Fashion-MNIST train-images-idx3-ubyte"):
        fm.load_fashion_mnist("train", tmp_path)
    monkeypatch.setattr(fm, "FASHION_MD5", _md5s(synthetic))
    assert fm.load_fashion_mnist("train", tmp_path).images.shape == (6, 28, 28)
    with pytest.raises(ValueError, match="split must be 'train' or 'test'"):
        fm.load_fashion_mnist("val", tmp_path)


@pytest.mark.skipif(not all((fetch.cache_dir() / "fashion-mnist" / b).is_file() for b in fm.FASHION_MD5),
                    reason="Fashion-MNIST is not in kappalab's cache (kappalab.data.fashion_mnist fetches it)")
def test_real_files_have_the_upstream_counts() -> None:
    for split, n in (("train", 6000), ("test", 1000)):
        data = fm.load_fashion_mnist(split)
        assert data.images.shape == (10 * n, 28, 28)
        assert np.bincount(data.labels).tolist() == [n] * 10
