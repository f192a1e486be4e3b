"""Run identity: the hash changes with the config, the data and the options, and with nothing else; a Table 2 plan
on other data or another config gets other keys (a store never reuses a run)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from kappalab.reproduce import identity as ident
from kappalab.reproduce import table2
from kappalab.reproduce.table2 import data as table2_data


def test_hash_depends_on_config_data_and_options_only() -> None:
    data = ident.data_identity("d", {"X": np.arange(6.0).reshape(2, 3)})
    a = ident.identity({"lambda_H": 1e7, "extra": {"shift": 1e-6}}, data, {"seed": 0})
    assert a == ident.identity({"extra": {"shift": 1e-6}, "lambda_H": 1e7}, dict(data), {"seed": 0})  # key order
    b = ident.identity({"lambda_H": 3e7, "extra": {"shift": 1e-6}}, data, {"seed": 0})
    c = ident.identity(a["config"], ident.data_identity("d", {"X": np.arange(6.0).reshape(3, 2)}), {"seed": 0})
    d = ident.identity(a["config"], data, {"seed": 1})
    assert len({a["hash"], b["hash"], c["hash"], d["hash"]}) == 4
    assert ident.differences(a, b) == ["config.lambda_H"] and ident.differences(a, c) == ["data.sha256"]
    assert ident.run_key("paper.ours.s0", a) == f"paper.ours.s0.{a['hash']}" and len(a["hash"]) == 12
    # dtype and shape are part of the data's hash, not only the bytes
    same_bytes = ident.sha256_arrays({"X": np.zeros(4, dtype=np.float64)})
    assert same_bytes != ident.sha256_arrays({"X": np.zeros(8, dtype=np.float32)})


def test_table2_keys_change_with_data_and_config(monkeypatch: pytest.MonkeyPatch) -> None:
    parse = table2.build_parser().parse_args
    plan = table2.plan_from_args(parse(["--quick", "--pairs", "0-1", "--no-probe"]))
    keys = {j.key for j in plan.jobs()}
    assert len(keys) == 4 and all(k.startswith("official.") for k in keys)
    changed = table2.plan_from_args(parse(["--quick", "--pairs", "0-1", "--no-probe", "--set", "lambda_H=1e8"]))
    assert not keys & {j.key for j in changed.jobs()}
    fake = SimpleNamespace(images=np.zeros((10, 28, 28), dtype=np.uint8), labels=np.arange(10), source_label="x")
    monkeypatch.setattr(table2_data, "load_dataset", lambda dataset, directory: fake)
    other = table2.plan_from_args(parse(["--quick", "--pairs", "0-1", "--no-probe", "--data", "mnist",
                                         "--data-dir", "somewhere"]))
    other_keys = {j.key for j in other.jobs()}
    assert len(other_keys) == 4 and not keys & other_keys
    assert {j.spec.identity["data"]["name"] for j in other.jobs()} == {"mnist/pool4"}
