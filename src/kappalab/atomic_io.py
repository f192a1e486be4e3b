"""The one I/O layer for every file kappalab writes: whole files or none, and one-line disk faults.

* **Files** (:func:`write_bytes`, :func:`write_text`, :func:`write_json`, :func:`save_npy`, :func:`save_npz`,
  :func:`save_figure`, :func:`torch_save`, :func:`copy_file`, and :func:`atomic_open` for any other writer such as
  ``csv``): the bytes go to a temporary file in the target's folder (``.<name>.<pid>.<random>.tmp``), are flushed
  and ``fsync``-ed, and the file is renamed into place with ``os.replace`` (then the folder is ``fsync``-ed). A
  reader never sees half a file: it sees the old file or the new one. On any failure the temporary file is
  removed and the target is as it was.
* **Lines** (:func:`append_whole`, the results store's append): the line goes out with ``os.write`` and
  ``os.fsync``; on a failure the file is cut back to its length before the append, so a line is whole or absent.
* **Disk faults** the user can fix (a full disk or quota, a read-only or unwritable folder, an I/O error:
  :data:`ADVICE`) at any of them raise :class:`DiskWriteError`, whose message is one line naming the path and what
  to do; the CLI prints it and exits with status 2 (:func:`kappalab.cli_options.command`), from a sweep worker
  process too (:mod:`kappalab.sweep`).
* **Caches** (:func:`write_checked`, :func:`cache_ok`): a cache file gets a ``<file>.sha256`` beside it, written
  after the file; a file whose digest is missing or differs (a torn or truncated entry) is removed on load and
  rebuilt by its caller, never used.

Every byte of a file or line written here passes through :func:`_open` and :func:`_write` (``os.open`` and
``os.write``), the two points at which the fault-injection tests make the k-th write fail.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

PathLike = str | os.PathLike[str]

#: errno of a write fault the user can fix -> what to do
ADVICE = {
    errno.ENOSPC: "free some disk space",
    errno.EDQUOT: "free some space (disk quota exceeded)",
    errno.EFBIG: "free some space or choose another --out (file too large)",
    errno.EROFS: "make the folder writable or choose another --out",
    errno.EACCES: "make the folder writable or choose another --out",
    errno.EPERM: "make the folder writable or choose another --out",
    errno.EIO: "check the disk (it reported an I/O error) or choose another --out",
}
RESUME = "then run the same command again: it resumes after the runs already stored"


class DiskWriteError(RuntimeError):
    """A write failed for a reason the user can fix; ``path`` names the file and ``reason`` says what happened
    and what to do. Nothing was half-written: the target is as it was before the write."""

    def __init__(self, path: PathLike, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = str(path), reason

    def __reduce__(self) -> tuple[Any, ...]:  # pickled from a sweep worker to its parent
        return type(self), (self.path, self.reason)


def disk_fault(error: BaseException, path: PathLike | None = None) -> DiskWriteError | None:
    """The one-line :class:`DiskWriteError` for an OSError the user can fix (:data:`ADVICE`), else None; a
    DiskWriteError is returned as it is."""
    if isinstance(error, DiskWriteError):
        return error
    if not isinstance(error, OSError) or error.errno not in ADVICE:
        return None
    where = path if path is not None else error.filename if error.filename is not None else "an output file"
    return DiskWriteError(where, f"{error.strerror or error}; {ADVICE[error.errno]}; {RESUME}")


@contextlib.contextmanager
def disk_faults(path: PathLike) -> Iterator[None]:
    """Turn a fixable OSError raised inside into :class:`DiskWriteError` naming ``path``."""
    try:
        yield
    except OSError as error:
        raise (disk_fault(error, path) or error) from None


# ---- the two points every byte passes through -------------------------------------------------------------------

def _open(path: PathLike, flags: int) -> int:
    """``os.open`` of a file to write (mode 0o666 less the umask)."""
    return os.open(path, flags, 0o666)


def _write(fd: int, data: memoryview) -> int:
    """``os.write``: returns how many bytes went out."""
    return os.write(fd, data)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        written = _write(fd, view)
        if written == 0:  # a regular file takes no byte more: the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


class _FdWriter(io.RawIOBase):
    """A raw (unbuffered: nothing is left to flush when a write fails), seekable, write-only file over an fd whose
    writes go through :func:`_write`. It has no ``fileno()``, so numpy and torch write through ``write`` (numpy's
    ``tofile`` on a full disk raises an OSError without an errno)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd
        self.error: OSError | None = None  #: the first write error, should a caller turn it into its own

    def release(self) -> None:
        """Close the fd (once) and this object."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            with contextlib.suppress(OSError):
                os.close(fd)
        self.close()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return os.lseek(self.fd, offset, whence)

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        try:
            _write_all(self.fd, view)
        except OSError as error:
            self.error = self.error or error
            raise
        return len(view)


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: PathLike, mode: str = "wb", newline: str | None = None) -> Iterator[IO[Any]]:
    """A file object whose content replaces ``path`` when the block ends without an error (module docstring):
    ``"wb"`` an unbuffered binary file, ``"w"`` a text buffer (``newline`` as for ``open``) written as UTF-8 at
    the end. The folder is created. A fixable OSError becomes :class:`DiskWriteError` naming ``path``."""
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', got {mode!r}")
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    raw = None
    try:
        with disk_faults(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            raw = _FdWriter(_open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            if mode == "wb":
                yield raw
            else:
                text = io.StringIO(newline=newline)
                yield text
                raw.write(text.getvalue().encode("utf-8"))
            os.fsync(raw.fd)
            raw.release()
            os.replace(temporary, target)
            _sync_folder(target.parent)
    except Exception as error:
        # a writer that caught the disk's error and raised its own (torch.save: "unexpected pos ...") failed by it
        fault = disk_fault(raw.error, target) if raw is not None and raw.error is not None else None
        if fault is None or isinstance(error, DiskWriteError):
            raise
        raise fault from None
    finally:
        if raw is not None:
            raw.release()
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)


def _atomic(path: PathLike, write: Callable[[IO[bytes]], Any]) -> Path:
    with atomic_open(path) as handle:
        write(handle)
    return Path(path)


def write_bytes(path: PathLike, data: bytes) -> Path:
    """``data`` as the whole of ``path`` (atomic)."""
    return _atomic(path, lambda handle: handle.write(data))


def write_text(path: PathLike, text: str) -> Path:
    """``text`` (UTF-8) as the whole of ``path`` (atomic)."""
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: PathLike, value: Any, **dumps: Any) -> Path:
    """``json.dumps(value, **dumps)`` and a newline as the whole of ``path`` (atomic)."""
    return write_text(path, json.dumps(value, **dumps) + "\n")


def save_npy(path: PathLike, array: Any) -> Path:
    """``np.save`` to exactly ``path`` (atomic)."""
    import numpy as np

    return _atomic(path, lambda handle: np.save(handle, np.asarray(array)))


def save_npz(path: PathLike, compressed: bool = False, **arrays: Any) -> Path:
    """``np.savez`` (``compressed``: ``np.savez_compressed``) to exactly ``path`` (atomic)."""
    import numpy as np

    save = np.savez_compressed if compressed else np.savez
    return _atomic(path, lambda handle: save(handle, **arrays))


def save_figure(figure: Any, path: PathLike, **savefig: Any) -> Path:
    """A matplotlib figure's ``savefig`` in the format of ``path``'s suffix (atomic)."""
    kind = Path(path).suffix.lstrip(".")
    return _atomic(path, lambda handle: figure.savefig(handle, format=kind, **savefig))


def torch_save(value: Any, path: PathLike) -> Path:
    """``torch.save`` (atomic)."""
    import torch

    return _atomic(path, lambda handle: torch.save(value, handle))


def copy_file(source: PathLike, target: PathLike) -> Path:
    """A copy of ``source``'s bytes as ``target`` (atomic)."""
    return write_bytes(target, Path(source).read_bytes())


def append_whole(path: PathLike, data: bytes) -> None:
    """Append ``data`` to ``path`` (created if absent) with ``os.write`` + ``os.fsync``; on a failure the file is
    cut back to its length before, and a fixable OSError becomes :class:`DiskWriteError` naming ``path``. A
    vanished folder raises FileNotFoundError (the caller knows what that means)."""
    try:
        fd = _open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise (disk_fault(error, path) or error) from None
    try:
        start = os.fstat(fd).st_size
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
                os.fsync(fd)
            raise (disk_fault(error, path) or error) from None
    finally:
        os.close(fd)


# ---- caches: checked by their digest on every load --------------------------------------------------------------

def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checked(path: PathLike, write: Callable[[Path], Any]) -> Path:
    """Write a cache entry with ``write(path)`` (which must write through this module), then its sha256 to
    ``<path>.sha256`` (after the file, so a digest present means the file was whole when it was written)."""
    target = Path(path)
    write(target)
    write_text(_digest_path(target), _sha256(target) + "\n")
    return target


def cache_ok(path: PathLike) -> bool:
    """Whether the cache entry ``path`` is whole: it and its ``.sha256`` exist and agree. An entry that is not
    (torn, truncated, or without its digest) is removed, so that the caller rebuilds it."""
    target = Path(path)
    digest = _digest_path(target)
    if target.is_file() and digest.is_file():
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if digest.read_text().strip() == _sha256(target):
                return True
    for stale in (target, digest):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    return False
