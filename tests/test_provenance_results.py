"""Provenance record and the resumable RunStore."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import platform
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from kappalab import provenance as prov
from kappalab.atomic_io import DiskWriteError
from kappalab.results import Repair, RunStore, StoreCorruptError, StoreNotice, save_array, \
    to_jsonable


def test_to_jsonable_converts_numpy_and_containers() -> None:
    @dataclasses.dataclass
    class Point:
        x: float

    value = {
        "a": np.float64(1.5), "b": np.int32(3), "c": np.bool_(True), "d": np.arange(3),
        "e": (1, np.float32(2.0)), "f": {3, 1}, "g": Path("/x/y"), "h": Point(np.float64(0.5)),
        np.int64(7): None, "nan": float("nan"),
    }
    out = to_jsonable(value)
    assert out["a"] == 1.5 and type(out["b"]) is int and out["c"] is True
    assert out["d"] == [0, 1, 2] and out["e"] == [1, 2.0] and out["f"] == [1, 3]
    assert out["g"] == "/x/y" and out["h"] == {"x": 0.5} and out["7"] is None
    json.dumps(out)
    with pytest.raises(TypeError, match="object is not JSON-serializable"):
        to_jsonable(object())


def test_append_and_resume(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "runs.jsonl"
    store = RunStore(path)
    assert store.records() == [] and store.done_keys() == set()
    store.append({"key": "seed0", "kappa": np.float64(2.0)})
    store.append({"key": "seed1", "theta": np.eye(2)})
    resumed = RunStore(path)
    assert resumed.done_keys() == {"seed0", "seed1"}
    assert resumed.records() == [{"key": "seed0", "kappa": 2.0}, {"key": "seed1", "theta": [[1.0, 0.0], [0.0, 1.0]]}]
    with pytest.raises(ValueError, match="already stored"):
        resumed.append({"key": "seed0"})
    with pytest.raises(ValueError, match="non-empty string 'key'"):
        resumed.append({"value": 1})


def test_torn_last_line_is_moved_to_a_backup_once(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    store = RunStore(path)
    store.append({"key": "a"})
    with open(path, "ab") as handle:
        handle.write(b'{"key": "b", "val')
    with pytest.warns(StoreNotice, match=r"moved a torn last line \(17 bytes.*to runs\.jsonl\.torn-"):
        assert store.done_keys() == {"a"}
    [backup] = tmp_path.glob("runs.jsonl.torn-*")
    assert backup.read_bytes() == b'{"key": "b", "val'
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # set aside once: no second notice
        store.append({"key": "b", "val": 1})
    assert path.read_text().splitlines() == ['{"key": "a"}', '{"key": "b", "val": 1}']


def test_torn_last_line_is_left_alone_while_another_process_holds_the_lock(tmp_path: Path) -> None:
    """The tail may be a write in flight: a reader that cannot take the lock skips it and leaves the file."""
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b'{"key": "a"}\n{"key": "b"')
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; h = open(sys.argv[1], 'a'); "
                               "fcntl.flock(h, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)",
                               str(path) + ".lock"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert RunStore(path).done_keys() == {"a"}
        assert path.read_bytes() == b'{"key": "a"}\n{"key": "b"' and not list(tmp_path.glob("*.torn-*"))
    finally:
        holder.kill()
        holder.wait()


def test_corrupt_complete_line_names_file_and_line_and_repair_moves_it_out(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text('{"key": "a"}\nnot json\n[1, 2]\n{"key": "d"}\n{"key": "e"')
    with pytest.raises(StoreCorruptError, match=r"runs\.jsonl: line 2 is not a stored run: not valid JSON.*"
                                                 r"\(and 1 more line\(s\)\).*kappalab repair-store") as caught:
        RunStore(path).records()
    assert caught.value.line == 2 and isinstance(caught.value, ValueError)
    done = RunStore(path).repair()
    assert (done.kept, done.rejected) == (2, (2, 3, 5))
    assert done.backup.read_text() == 'not json\n[1, 2]\n{"key": "e"\n'
    assert path.read_text() == '{"key": "a"}\n{"key": "d"}\n'
    assert RunStore(path).repair() == Repair(2, (), None)


def test_a_failed_append_leaves_the_store_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk during an append (a short write, then ENOSPC) leaves no half record: the file is cut back."""
    path = tmp_path / "runs.jsonl"
    store = RunStore(path)
    store.append({"key": "a"})
    before = path.read_bytes()
    real_write, calls = os.write, []

    def full_disk(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data)[:5])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(DiskWriteError, match=r"runs\.jsonl: No space left on device; free some disk space"):
        store.append({"key": "b", "value": 1.5})
    monkeypatch.undo()
    assert calls[0] > 5 and len(calls) == 2 and path.read_bytes() == before
    store.append({"key": "b"})
    assert store.done_keys() == {"a", "b"}
    path.unlink()  # the store vanishes during the run: its next append says so rather than start a new file
    with pytest.raises(DiskWriteError, match="runs.jsonl: the store or its folder vanished during the run"):
        store.append({"key": "c"})
    assert not path.exists()


def test_save_array(tmp_path: Path) -> None:
    array = np.arange(12.0).reshape(3, 4)
    path = save_array(tmp_path / "arrays", "theta_seed0", array)
    assert path == tmp_path / "arrays" / "theta_seed0.npz"
    with np.load(path) as stored:
        np.testing.assert_array_equal(stored["theta_seed0"], array)
    with pytest.raises(ValueError, match="name must match"):
        save_array(tmp_path, "../evil", array)


def test_provenance_fields() -> None:
    torch_loaded_before = "torch" in sys.modules
    record = prov.provenance(3, {"lr": np.float64(0.005)}, data_label="MNIST subset (500/digit)")
    json.dumps(record)
    assert record["seed"] == 3 and record["config"] == {"lr": 0.005}
    assert (record["device"], record["dtype"], record["data_label"]) == ("cpu", "float64", "MNIST subset (500/digit)")
    assert record["versions"]["numpy"] == np.__version__ and record["versions"]["python"]
    assert record["machine"]["cpu_count"] >= 1
    assert record["timestamp_utc"].endswith("+00:00")
    assert isinstance(record["linear_algebra"]["threadpools"], list)
    commit = record["git"]["commit"]
    assert commit == "unknown" or len(commit) == 40
    assert ("torch" in sys.modules) == torch_loaded_before


def _forced_provenance(env: dict[str, str]) -> tuple[str | None, dict]:
    """(cpu_model, linear_algebra) of a provenance record made in a subprocess with torch loaded, under ``env``."""
    code = ("import json, numpy, torch; from kappalab.provenance import provenance; p = provenance(0, {}); "
            "print(json.dumps([p['machine']['cpu_model'], p['linear_algebra']]))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         check=True).stdout
    model, la = json.loads(out)
    return model, la


def test_provenance_names_the_kernels_a_run_rounded_with() -> None:
    """torch's vector kernels forced to the generic ones are recorded as such, and so is the CPU's model on Linux;
    on x86-64, two OpenBLAS kernels forced in turn (both run on any CPU with SSE4.2) are recorded as two different
    ``architecture`` values (OpenBLAS' own names: it may report a kernel by its family's). A run's rounding
    depends on all three."""
    model, la = _forced_provenance({"ATEN_CPU_CAPABILITY": "default"})
    assert la["torch_cpu_capability"] == "DEFAULT", la
    assert (model is not None) == (sys.platform == "linux"), model
    if platform.machine() in ("x86_64", "AMD64"):  # OPENBLAS_CORETYPE's names are per architecture
        seen = [[p["architecture"] for p in _forced_provenance({"OPENBLAS_CORETYPE": core})[1]["threadpools"]
                 if p["internal_api"] == "openblas"][:1] for core in ("Prescott", "Nehalem")]
        assert seen[1] == ["Nehalem"] and seen[0] and seen[0][0] and seen[0] != seen[1], seen


def test_provenance_outside_git(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prov, "_git", lambda *args: None)
    assert prov.git_state() == {"commit": "unknown", "dirty": "unknown"}
