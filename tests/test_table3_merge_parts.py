"""experiments/table3_merge_parts.py: every record once by key; a key two parts hold must agree but for timings,
provenance, the trunk cache's making and floats' rounding, else nothing is written."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("merge_parts", ROOT / "experiments" / "table3_merge_parts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _init(cpu: float, trunk_cpu: float, acc: float = 0.8) -> dict:
    return {"key": "x/seed1/init.abc", "method": "init", "cpu_s": cpu, "utility": {"dp_test_acc": acc},
            "trunk": {"P": {"key": "images", "array_sha256": "f00", "cpu_s": trunk_cpu, "wall_s": 2 * trunk_cpu,
                            "threads": 1}}}


def _part(folder: Path, *records: dict) -> Path:
    folder.mkdir()
    (folder / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_a_shared_record_made_twice_is_kept_once_and_its_timings_and_rounding_may_differ(tmp_path: Path) -> None:
    run = {"key": "x/seed1/ours.def", "method": "ours", "cpu_s": 500.0}
    other_machine = _init(9.0, 11.3, acc=0.8 * (1 + 2e-5))  # another machine's rounding
    other_machine["trunk"]["P"].update(array_sha256="ba5", threads=2)  # its float32 activations, made its way
    a = _part(tmp_path / "a", _init(30.0, 11.5))
    b = _part(tmp_path / "b", other_machine, run)
    assert _script().main(tmp_path, [a, b]) == 0
    merged = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [r["key"] for r in merged] == ["x/seed1/init.abc", "x/seed1/ours.def"] and merged[0]["cpu_s"] == 30.0


def test_parts_that_disagree_on_a_measured_field_write_nothing(tmp_path: Path, capsys) -> None:
    a = _part(tmp_path / "a", _init(30.0, 11.5, acc=0.8))
    b = _part(tmp_path / "b", _init(30.0, 11.5, acc=0.8 * (1 + 1e-3)))  # 10x the tolerance
    changed = _init(30.0, 11.5)
    changed["trunk"]["P"]["key"] = "other images"  # another cache: not how one was made
    c = _part(tmp_path / "c", changed)
    out = tmp_path / "out"
    out.mkdir()
    assert _script().main(out, [a, b]) == 2 and "['utility']" in capsys.readouterr().err
    assert _script().main(out, [a, c]) == 2 and "['trunk']" in capsys.readouterr().err
    assert not (out / "runs.jsonl").exists()
