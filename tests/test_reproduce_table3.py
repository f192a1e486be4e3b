"""``kappalab reproduce table3``: configs match Table 4, the proxy's quick run writes records, table and figure,
and resumes; the paper's configuration fails with a clear message where its inputs are missing."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("mlxtend")

from kappalab.reproduce import table3, table3_cli  # noqa: E402

TABLE4 = {("resnet18", "cars"): (1e-5, 5e-5, 2e6, 3), ("resnet18", "country211"): (1e-5, 1e-4, 2e6, 3),
          ("vit", "cars"): (1e-5, 3e-6, 3e8, 2), ("vit", "country211"): (1e-5, 1e-6, 1e8, 2)}


@pytest.mark.parametrize("row", sorted(TABLE4))
def test_paper_configs_are_table4(row) -> None:
    cfg = table3.load_config(f"{row[0]}_{row[1]}")
    assert (cfg["eta"], cfg["lambda_P"], cfg["lambda_H"], cfg["epochs"]) == TABLE4[row]
    assert cfg["momentum"] == 0.9 and cfg["classifier_weight_decay"] == 2e-5 and cfg["extractor_weight_decay"] == 0
    assert (cfg["rir_groups"], cfg["rir_group_size"]) == (20, 100)
    assert all(k in cfg["reasons"] for k in ("trainable_modules", "lambda_kappa", "epoch_on"))


def test_the_command_line_knows_the_deep_methods() -> None:
    assert table3_cli.METHODS == tuple(table3.METHODS)


def test_proxy_quick_runs_records_and_resumes(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out, work = tmp_path / "out", tmp_path / "work"
    argv = ["--proxy", "--quick", "--out", str(out), "--work", str(work), "--methods", "ours"]
    assert table3_cli.main(argv) == 0
    records = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [r["method"] for r in records] == ["init", "ours"]
    ours = records[1]
    assert ours["provenance"]["seed"] == 0 and ours["provenance"]["dtype"] == "float64"
    assert ours["provenance"]["config"]["quick"] is True and "git" in ours["provenance"]
    assert ours["rir"]["groups"] == 4 and ours["rir"]["exact_rir"] > 0 and 0 <= ours["dp_test_acc"] <= 1
    assert len(ours["probe_curve"]) == 11
    assert {"task", "r_ill", "r_well"} <= set(records[0]["calibration"]["grad_norms"])
    for name in ("table.md", "figure3.png", "figure3.pdf"):
        assert (out / name).stat().st_size > 0
    assert "| Ours |" in (out / "table.md").read_text()
    assert table3_cli.main(argv) == 0  # everything recorded: nothing is rerun
    assert len((out / "runs.jsonl").read_text().splitlines()) == 2


def test_bad_arguments_and_missing_inputs(tmp_path) -> None:
    assert table3_cli.main([]) == 2
    assert table3_cli.main(["--quick", "--arch", "vit", "--harmful", "cars"]) == 2
    assert table3_cli.main(["--arch", "resnet18", "--harmful", "cars", "--out", str(tmp_path)]) == 2


def test_proxy_quick_search_selects_on_validation(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out, work = tmp_path / "out", tmp_path / "work"
    argv = ["--proxy", "--quick", "--search", "--out", str(out), "--work", str(work), "--methods", "ours"]
    assert table3_cli.main(argv) == 0
    records = [json.loads(line) for line in (out / "search.jsonl").read_text().splitlines()]
    assert records[0]["key"] == "search/init" and set(records[0]["scales"]) == {"task", "pair"}
    assert len(records) == 2 and records[1]["method"] == "ours"  # the stage-2 duplicate is not rerun
    assert len(records[1]["epochs"]) == 1 and {"est_rir", "val_dp_acc"} <= set(records[1]["epochs"][0])
    sel = json.loads((out / "search_selected.json").read_text())
    assert sel["selected"]["ours"]["epochs"] == 1 and "lambda_H" in sel["selected"]["ours"]
    assert "| ours_H | Ours **sel.** |" in (out / "search.md").read_text()
    assert not (out / "runs.jsonl").exists()  # the search never touches the test split or the final records
    assert table3_cli.main(["--search", "--arch", "vit", "--harmful", "cars"]) == 2
