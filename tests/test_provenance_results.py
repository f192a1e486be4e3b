"""Provenance record and the resumable RunStore."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from kappalab import provenance as prov
from kappalab.results import RunStore, save_array, to_jsonable


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


def test_torn_last_line_is_ignored_then_cut(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    store = RunStore(path)
    store.append({"key": "a"})
    with open(path, "ab") as handle:
        handle.write(b'{"key": "b", "val')
    with pytest.warns(UserWarning, match="torn last line of 17 bytes"):
        assert store.done_keys() == {"a"}
    with pytest.warns(UserWarning, match="cutting a torn last line"):
        store.append({"key": "b", "val": 1})
    assert path.read_text().splitlines() == ['{"key": "a"}', '{"key": "b", "val": 1}']


def test_corrupt_complete_line_raises(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text('{"key": "a"}\nnot json\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        RunStore(path).records()


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


def test_provenance_outside_git(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prov, "_git", lambda *args: None)
    assert prov.git_state() == {"commit": "unknown", "dirty": "unknown"}
