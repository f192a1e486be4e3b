"""kappalab.atomic_io: every writer puts out a whole file or leaves the old one (no temporary file behind), a fixable
OSError at any step is one DiskWriteError line naming the file, and a torn cache entry is rebuilt, never used."""

from __future__ import annotations

import csv
import errno
import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from diskfull import DiskFull, leftovers
from kappalab import atomic_io
from kappalab.atomic_io import DiskWriteError


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1, 2], [1, 0, 1])
    ax.set_ylabel(r"$\|w\|^2$")
    return fig


def _csv(path: Path) -> Path:
    with atomic_io.atomic_open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["a", "b"])
        writer.writerow([1, 2.5])
    return path


ARRAY = np.arange(12.0).reshape(3, 4)
#: name -> (write to a path, read it back and check it)
WRITERS: dict[str, tuple[Callable[[Path], object], Callable[[Path], bool]]] = {
    "bytes.bin": (lambda p: atomic_io.write_bytes(p, b"\x00\x01" * 5000),
                  lambda p: p.read_bytes() == b"\x00\x01" * 5000),
    "text.md": (lambda p: atomic_io.write_text(p, "é\n" * 100),
                lambda p: p.read_text(encoding="utf-8") == "é\n" * 100),
    "value.json": (lambda p: atomic_io.write_json(p, {"x": [1, 2.5]}, indent=1),
                   lambda p: json.loads(p.read_text()) == {"x": [1, 2.5]}),
    "array.npy": (lambda p: atomic_io.save_npy(p, ARRAY), lambda p: np.array_equal(np.load(p), ARRAY)),
    "arrays.npz": (lambda p: atomic_io.save_npz(p, compressed=True, a=ARRAY, b=ARRAY[0]),
                   lambda p: np.array_equal(np.load(p)["a"], ARRAY) and np.array_equal(np.load(p)["b"], ARRAY[0])),
    "plain.npz": (lambda p: atomic_io.save_npz(p, a=ARRAY), lambda p: np.array_equal(np.load(p)["a"], ARRAY)),
    "figure.png": (lambda p: atomic_io.save_figure(_figure(), p, dpi=50),
                   lambda p: p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")),
    "figure.pdf": (lambda p: atomic_io.save_figure(_figure(), p), lambda p: p.read_bytes().startswith(b"%PDF")
                   and p.read_bytes().rstrip().endswith(b"%%EOF")),
    "table.csv": (_csv, lambda p: p.read_bytes() == b"a,b\r\n1,2.5\r\n"),
}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_each_writer_writes_the_whole_file(tmp_path: Path, name: str) -> None:
    write, check = WRITERS[name]
    path = tmp_path / "new folder" / name  # the folder is created
    write(path)
    assert check(path) and leftovers(tmp_path) == []


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_full_disk_leaves_the_old_file_and_no_temporary_file(tmp_path: Path, name: str) -> None:
    write, _ = WRITERS[name]
    path = tmp_path / name
    path.write_bytes(b"the old content")
    with DiskFull(fail_at=1).installed(), pytest.raises(DiskWriteError) as caught:
        write(path)
    assert str(caught.value) == f"{path}: No space left on device; free some disk space; then run the same " \
        "command again: it resumes after the runs already stored"
    assert path.read_bytes() == b"the old content" and leftovers(tmp_path) == []


def test_torch_save_is_atomic_too(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "state.pt"
    atomic_io.torch_save({"w": torch.arange(5.0)}, path)
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.arange(5.0))
    with DiskFull(fail_at=1).installed(), pytest.raises(DiskWriteError):
        atomic_io.torch_save({"w": torch.zeros(1000)}, path)
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.arange(5.0)) and leftovers(tmp_path) == []


@pytest.mark.parametrize("code, says", [
    (errno.ENOSPC, "free some disk space"), (errno.EDQUOT, "free some space (disk quota exceeded)"),
    (errno.EROFS, "make the folder writable or choose another --out"),
    (errno.EACCES, "make the folder writable or choose another --out"),
    (errno.EIO, "check the disk (it reported an I/O error) or choose another --out")])
@pytest.mark.parametrize("step", ["open", "fsync", "rename"])
def test_each_fixable_errno_at_each_step_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int,
                                                    says: str, step: str) -> None:
    path = tmp_path / "out.json"
    fault = OSError(code, os.strerror(code))

    def fail(*args: object) -> None:
        raise fault

    monkeypatch.setattr(*{"open": (atomic_io, "_open", fail), "fsync": (os, "fsync", fail),
                          "rename": (os, "replace", fail)}[step])
    with pytest.raises(DiskWriteError) as caught:
        atomic_io.write_json(path, [1])
    message = str(caught.value)
    assert message.startswith(f"{path}: {os.strerror(code)}; {says}; then run the same command") and "\n" not in message
    assert not path.exists() and leftovers(tmp_path) == []


def test_an_error_the_user_cannot_fix_is_not_disguised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def bad(*args: object) -> None:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    monkeypatch.setattr(atomic_io, "_write", bad)
    with pytest.raises(OSError) as caught:
        atomic_io.write_text(tmp_path / "x.md", "x")
    assert not isinstance(caught.value, DiskWriteError) and leftovers(tmp_path) == []


def test_a_disk_write_error_crosses_a_process_boundary_whole() -> None:
    error = DiskWriteError("/out/theta.npy", "No space left on device; free some disk space")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is DiskWriteError and str(again) == str(error) and again.path == error.path


def test_append_whole_cuts_a_failed_line_back(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    atomic_io.append_whole(path, b'{"key": "a"}\n')
    with DiskFull(fail_at=1).installed(), pytest.raises(DiskWriteError, match="runs.jsonl: No space left"):
        atomic_io.append_whole(path, b'{"key": "b", "pad": "' + b"x" * 100 + b'"}\n')
    assert path.read_bytes() == b'{"key": "a"}\n'


# ---- caches ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spoil", ["torn", "altered", "no digest"])
def test_a_spoilt_cache_entry_is_removed_so_that_it_is_rebuilt(tmp_path: Path, spoil: str) -> None:
    path = atomic_io.write_checked(tmp_path / "entry.npy", lambda p: atomic_io.save_npy(p, ARRAY))
    assert atomic_io.cache_ok(path)
    digest = path.with_name("entry.npy.sha256")
    if spoil == "torn":
        path.write_bytes(path.read_bytes()[:100])
    elif spoil == "altered":
        path.write_bytes(path.read_bytes()[:-1] + b"\x01")
    else:
        digest.unlink()
    assert not atomic_io.cache_ok(path) and not path.exists() and not digest.exists()


def test_the_trunk_cache_rebuilds_a_torn_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from kappalab.deep import efficientnet, trunk

    monkeypatch.setattr(efficientnet, "data_config", lambda net: {"mean": (0.5,) * 3, "std": (0.5,) * 3})
    net = torch.nn.Module()
    net.conv_stem, net.bn1 = torch.nn.Conv2d(3, 2, 3), torch.nn.Identity()
    net.blocks = torch.nn.Sequential(torch.nn.Identity(), torch.nn.Identity())
    calls = []
    net.conv_stem.register_forward_hook(lambda *args: calls.append(1))
    images = np.random.default_rng(0).integers(0, 256, (3, 28, 28), dtype=np.uint8)
    first, meta = trunk.cached_trunk(net, "w" * 64, images, "blocks.1", 8, cache=tmp_path)
    [entry] = (tmp_path / "table3-real" / "trunk").glob("*.npy")
    assert len(calls) == 1 and trunk.cached_trunk(net, "w" * 64, images, "blocks.1", 8, cache=tmp_path)[1] == meta
    assert len(calls) == 1  # read from the cache
    for spoil in (entry, entry.with_suffix(".json")):  # a torn array, then torn metadata: recomputed each time
        spoil.write_bytes(spoil.read_bytes()[: spoil.stat().st_size // 2])
        again, _ = trunk.cached_trunk(net, "w" * 64, images, "blocks.1", 8, cache=tmp_path)
        np.testing.assert_array_equal(again, first)
    assert len(calls) == 3 and leftovers(tmp_path) == []


def test_no_module_writes_a_file_except_through_the_io_layer() -> None:
    """Every write in src/kappalab goes through kappalab.atomic_io: no module but it calls a raw writer."""
    import re

    import kappalab

    raw = re.compile(r"np\.save|\.savefig\(|(?<!atomic_io)\.write_(text|bytes)\(|torch\.save\(|\.to_csv\(|"
                     r"shutil\.copy|\.tofile\(|\bopen\([^)]*['\"][wax]b?['\"]|json\.dump\(")
    package = Path(kappalab.__file__).parent
    found = [f"{path.relative_to(package)}:{number}: {line.strip()}" for path in sorted(package.rglob("*.py"))
             if path.name != "atomic_io.py"
             for number, line in enumerate(path.read_text().splitlines(), start=1) if raw.search(line)]
    assert found == []


def test_a_writer_that_turns_the_disks_error_into_its_own_still_fails_as_a_full_disk(tmp_path: Path) -> None:
    """torch.save on a real full disk raised "RuntimeError: [enforce fail at inline_container.cc:672] unexpected pos"
    (its zip writer's own error, from the __exit__ that followed our ENOSPC): the disk's error is what is reported."""
    def swallow(handle) -> None:
        try:
            handle.write(b"x" * 1000)
        except OSError:
            raise RuntimeError("unexpected pos 51840 vs 51768") from None

    path = tmp_path / "state.pt"
    with DiskFull(fail_at=1).installed(), pytest.raises(DiskWriteError, match=r"state\.pt: No space left on device"):
        atomic_io._atomic(path, swallow)
    assert not path.exists() and leftovers(tmp_path) == []
    with pytest.raises(RuntimeError, match="a bug"):  # an error of the writer itself stays what it is
        atomic_io._atomic(path, lambda handle: (_ for _ in ()).throw(RuntimeError("a bug")))
