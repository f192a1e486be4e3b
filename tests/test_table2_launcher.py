"""``kappalab reproduce table2 --launcher local|submitit --parts N``: the ``--shard K/N`` parts run as one submitit
job array (here submitit's local executor: local processes) and are merged into ``--out``; the merged store holds
the unsharded sweep's runs and its report the same rows. Every misuse is one line and status 2.

Data: ``--quick`` (the embedded MNIST subset, pairs 0-1 and 7-3, seed 0, one epoch, pool 4), no probes, Ours and
R_ill Only: 4 runs.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("mlxtend")  # the report's Figure 2
pytest.importorskip("submitit")

from kappalab.reproduce import table2  # noqa: E402
from kappalab.reproduce.table2.launcher import part_argv  # noqa: E402
from kappalab.results import RunStore  # noqa: E402

QUICK = ["--quick", "--no-probe", "--no-progress", "--methods", "ours,rill_only"]
TIMING_COLUMNS = ("train_s", "total_s")


def _rows(out: Path) -> list[dict[str, str]]:
    with open(out / "table2_official.csv") as handle:
        handle.readline()  # the comment line
        return sorted(({k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in csv.DictReader(handle)),
                      key=str)


def _keys(out: Path) -> list[str]:
    return [r["key"] for r in RunStore(out / "runs_official.jsonl").records()]


def test_two_parts_through_submitit_merge_into_the_unsharded_rows(tmp_path: Path, capsys) -> None:
    whole, launched = tmp_path / "whole", tmp_path / "launched"
    assert table2.main(QUICK + ["--out", str(whole)]) == 0
    assert table2.main(QUICK + ["--launcher", "local", "--parts", "2", "--out", str(launched)]) == 0
    assert "2 parts submitted as one local job array" in capsys.readouterr().out
    parts = [_keys(launched / "shards" / str(k)) for k in (1, 2)]
    assert all(parts) and not set(parts[0]) & set(parts[1])  # two non-empty, disjoint shards
    assert sorted(parts[0] + parts[1]) == sorted(_keys(whole)) == sorted(_keys(launched))
    assert len(_keys(whole)) == 4
    assert _rows(launched) == _rows(whole)
    # launched again into the same folder: refused in one line, nothing rewritten
    before = (launched / "runs_official.jsonl").read_text()
    assert table2.main(QUICK + ["--launcher", "local", "--parts", "2", "--out", str(launched)]) == 2
    assert "already holds runs" in capsys.readouterr().err
    assert (launched / "runs_official.jsonl").read_text() == before


def test_a_part_runs_the_same_command_as_its_shard() -> None:
    argv = ["--quick", "--launcher=local", "--parts", "3", "--set", "lambda_H=1e7", "--out=x", "--slurm-time", "9",
            "--pairs", "0-1"]
    assert part_argv(argv, 2, 3, Path("x/shards/2")) == [
        "--quick", "--set", "lambda_H=1e7", "--pairs", "0-1", "--shard", "2/3", "--out", "x/shards/2"]


@pytest.mark.parametrize("argv, says", [
    (["--parts", "2"], "--parts: only with --launcher"),
    (["--slurm-partition", "gpu"], "--slurm-partition: only with --launcher"),
    (["--launcher", "local"], "needs --parts N"),
    (["--launcher", "local", "--parts", "2", "--shard", "1/2"], "cannot be combined with --shard"),
    (["--launcher", "submitit", "--parts", "2", "--report-only"], "cannot be combined with --report-only"),
    (["--launcher", "local", "--parts", "2", "--gpus-per-task", "1"], "--gpus-per-task: only with --launcher submitit"),
    (["--launcher", "slurm", "--parts", "2"], "--launcher"),
    (["--launcher", "local", "--parts", "0"], "--parts"),
])
def test_every_misuse_is_one_line_and_status_2(argv: list[str], says: str, tmp_path: Path, capsys) -> None:
    try:
        code = table2.main(QUICK + argv + ["--out", str(tmp_path / "out")])
    except SystemExit as stop:  # argparse's own errors
        code = stop.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and says in lines[0], lines
    assert not (tmp_path / "out" / "runs_official.jsonl").exists()


@pytest.mark.skipif(shutil.which("srun") is not None, reason="this machine has SLURM: the array would be submitted")
def test_submitit_without_slurm_is_one_line_and_status_2(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert table2.main(QUICK + ["--launcher", "submitit", "--parts", "2", "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "submitit could not submit the job array" in lines[0], lines
    assert not (out / "runs_official.jsonl").exists() and not (out / "shards").exists()
