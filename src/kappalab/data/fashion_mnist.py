"""Fashion-MNIST (Xiao, Rasul, Vollgraf 2017): 28 x 28 grey photographs of clothing in 10 classes, MNIST's format.

Source: Debian's package ``dataset-fashion-mnist`` (:data:`DEB_VERSION`), fetched once with ``apt-get download``
(never installed; the ``.deb``'s sha256 :data:`DEB_SHA256` is checked) into ``<cache>/fashion-mnist/deb/`` and
unpacked with ``dpkg-deb -x``; its four IDX files (``usr/share/datasets/fashion-mnist/*.gz``, recompressed by
Debian) are decompressed into ``<cache>/fashion-mnist/`` (cache directory ``$KAPPALAB_CACHE`` or
``~/.cache/kappalab``). Every load compares each IDX file's uncompressed md5 with the upstream files'
:data:`FASHION_MD5` (:func:`kappalab.data.idx.load_idx_split`, the IDX reader MNIST uses). ``data_dir`` reads a
user's four IDX files (plain or ``.gz``) instead, checked the same way.

Labels: 0 T-shirt/top, 1 trouser, 2 pullover, 3 dress, 4 coat, 5 sandal, 6 shirt, 7 sneaker, 8 bag, 9 ankle boot
(:data:`CLASSES`); 6000 training and 1000 test images per class.
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
import tempfile
from pathlib import Path

from kappalab.atomic_io import write_bytes
from kappalab.data.fetch import cache_dir, cached, digest_of, fetch_into, verify_digest
from kappalab.data.idx import IDX_NAMES, idx_folder, load_idx_split
from kappalab.data.mnist import MnistData

DEB_PACKAGE = "dataset-fashion-mnist"
DEB_VERSION = "0.0~git20200523.55506a9-1"
DEB_SHA256 = "39e172fe32dd318ebb3e512220c3beea2fa47d7e20bab348fb4e0922d6beefc0"
DEB_DIR = "usr/share/datasets/fashion-mnist"
FASHION_MD5 = {
    "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
    "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
    "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
}
"""md5 of the upstream (zalandoresearch) uncompressed IDX files."""
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
LABEL = {"train": "Fashion-MNIST train (md5-verified)", "test": "Fashion-MNIST t10k (md5-verified)"}

_MANUAL_HINT = (
    f"Get the files by hand: run `apt-get update; apt-get download {DEB_PACKAGE}={DEB_VERSION}` on a Debian "
    "machine and copy the .deb into <cache>/fashion-mnist/deb/, or pass data_dir, a folder with the four "
    "Fashion-MNIST IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
    "t10k-labels-idx1-ubyte, plain or .gz)."
)
_MISMATCH_HINT = "The data is not upstream Fashion-MNIST (or it is corrupt): delete the file and it is fetched again."


def _download_deb(directory: Path) -> Path:
    """The verified ``.deb`` in ``directory``: one there already (fetched before or placed by hand), else
    ``apt-get download``."""
    directory.mkdir(parents=True, exist_ok=True)
    pattern = f"{DEB_PACKAGE}_*_all.deb"
    present = sorted(directory.glob(pattern))
    if present and digest_of(present[0]) == DEB_SHA256:
        return present[0]
    for stale in present:
        stale.unlink()

    def apt(folder: Path) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(["apt-get", "download", f"{DEB_PACKAGE}={DEB_VERSION}"], cwd=folder,
                                  capture_output=True, text=True, check=False)
        except FileNotFoundError:
            raise RuntimeError(f"apt-get is not on this machine. {_MANUAL_HINT}") from None

    def failed(result: subprocess.CompletedProcess) -> str:
        return (f"apt-get download {DEB_PACKAGE}={DEB_VERSION} failed (exit code {result.returncode}): "
                f"{result.stderr.strip()[-600:]}\n(if the package is unknown, run apt-get update first) "
                + _MANUAL_HINT)

    def verify(deb: Path) -> None:
        verify_digest(deb, DEB_SHA256, f"the downloaded package {deb.name}",
                      "Debian's archive holds another build of the package; it was not kept. " + _MANUAL_HINT)

    return fetch_into(directory, pattern, apt, failed, verify)


def fetch_fashion_mnist(cache: Path | None = None) -> Path:
    """Folder of the cached, uncompressed Fashion-MNIST IDX files, fetched and unpacked when needed.

    Each file is written only after the md5 of its uncompressed bytes equals :data:`FASHION_MD5`.
    """
    root = (cache if cache is not None else cache_dir()) / "fashion-mnist"
    names = [base for pair in IDX_NAMES.values() for base in pair]
    if all(cached(root / base, FASHION_MD5[base], "md5") for base in names):
        return root
    deb = _download_deb(root / "deb")
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        unpacked = subprocess.run(["dpkg-deb", "-x", str(deb), tmp], capture_output=True, text=True, check=False)
        if unpacked.returncode != 0:
            raise RuntimeError(f"dpkg-deb -x {deb} failed: {unpacked.stderr.strip()[-400:]}. {_MANUAL_HINT}")
        payloads = {}
        for base in names:
            member = Path(tmp) / DEB_DIR / f"{base}.gz"
            if not member.is_file():
                raise RuntimeError(f"{deb} has no {DEB_DIR}/{base}.gz. {_MANUAL_HINT}")
            with gzip.open(member, "rb") as handle:
                payloads[base] = handle.read()
            verify_digest(payloads[base], FASHION_MD5[base], f"{base} from {deb.name}", _MISMATCH_HINT, "md5")
        shutil.rmtree(Path(tmp) / "usr")
    for base, payload in payloads.items():
        write_bytes(root / base, payload)
    return root


def load_fashion_mnist(split: str = "train", data_dir: str | Path | None = None, *,
                       cache: Path | None = None) -> MnistData:
    """One split (``"train"`` or ``"test"``) of Fashion-MNIST, md5-verified on this load.

    Args:
        split: ``"train"`` (60000 images) or ``"test"`` (10000).
        data_dir: a folder with the four IDX files instead of the cached Debian package.
        cache: cache directory; default :func:`~kappalab.data.fetch.cache_dir`.
    """
    if split not in IDX_NAMES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    directory = idx_folder(data_dir, lambda: fetch_fashion_mnist(cache))
    images, labels = load_idx_split(directory, split, FASHION_MD5, "Fashion-MNIST", _MISMATCH_HINT)
    return MnistData(images, labels, LABEL[split], "fashion-mnist", split, True)
