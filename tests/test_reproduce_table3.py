"""``kappalab reproduce table3``: configs match Table 4, the proxy's quick run writes records, table and figure,
and resumes; the paper's configuration fails with a clear message where its inputs are missing."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("mlxtend")

from kappalab.reproduce.table3 import cli as table3_cli  # noqa: E402
from kappalab.reproduce.table3 import run as table3_run  # noqa: E402
from kappalab.reproduce.table3.config import load_table3_config  # noqa: E402

TABLE4 = {("resnet18", "cars"): (1e-5, 5e-5, 2e6, 3), ("resnet18", "country211"): (1e-5, 1e-4, 2e6, 3),
          ("vit", "cars"): (1e-5, 3e-6, 3e8, 2), ("vit", "country211"): (1e-5, 1e-6, 1e8, 2)}


@pytest.mark.parametrize("row", sorted(TABLE4))
def test_paper_configs_are_table4(row) -> None:
    cfg = table3_run.load_config(f"{row[0]}_{row[1]}")
    assert (cfg.eta, cfg.lambda_P, cfg.lambda_H, cfg.epochs) == TABLE4[row]
    assert cfg.momentum == 0.9 and cfg.classifier_weight_decay == 2e-5 and cfg.extractor_weight_decay == 0
    assert (cfg.rir_groups, cfg.rir_group_size) == (20, 100)
    assert all(k in cfg.reasons for k in ("trainable_modules", "lambda_kappa", "epoch_on"))


def test_the_command_line_parses_the_deep_methods_without_torch() -> None:
    """--methods offers what the training loop runs (both from kappalab.methods), and parsing imports no torch."""
    assert table3_cli.METHODS == tuple(table3_run.METHODS + table3_run.CONTROLS)
    code = ("import sys; from kappalab.reproduce.table3 import cli; "
            "a = cli.build_parser().parse_args(['--proxy', '--methods', *cli.METHODS]); "
            "print(a.methods == list(cli.METHODS), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False"]


def test_proxy_quick_runs_records_and_resumes(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out, work = tmp_path / "out", tmp_path / "work"
    argv = ["--proxy", "--quick", "--out", str(out), "--work", str(work), "--methods", "ours"]
    # the checkout the process started from, not the one at each write (a commit made during a long sweep)
    from kappalab.reproduce.table3 import sweep as sweep_module
    states = iter([{"commit": "at-start", "dirty": False}])
    monkeypatch.setattr(sweep_module, "git_state", lambda: next(states, {"commit": "later", "dirty": True}))
    assert table3_cli.main(argv) == 0
    records = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert all(r["provenance"]["git"] == {"commit": "at-start", "dirty": False} for r in records)
    assert [r["method"] for r in records] == ["init", "ours"]
    ours = records[1]
    assert ours["provenance"]["seed"] == 0 and ours["provenance"]["dtype"] == "float64"
    assert ours["provenance"]["config"]["quick"] is True and "git" in ours["provenance"]
    # the quick config's 4 groups of 50 held-out rows, the three estimators, one checkpoint at the last epoch
    assert [len(ours["group_spectra"][k]) for k in ("H_0", "H_I", "P_0", "P_I")] == [4] * 4
    assert ours["estimates"]["exact"]["rir"] > 0 and 0 <= ours["utility"]["dp_test_acc"] <= 1
    assert [c["step"] for c in ours["checkpoints"]] == [ours["n_steps"]] and ours["n_steps"] > 0
    assert len(ours["utility"]["probe_curve"]) == 11 and set(ours["displacement"]) >= {"classifier"}
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
    assert table3_cli.main(["--proxy", "--smoke"]) == 2  # --smoke is a mode of --arch


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


# ------------------------------------------------------------------- defects of issue 18 (tests failed before)
def _bn_model(seed: int):
    """A tiny ImmunizableModel with BatchNorm in the frozen and in the immunized layers (like ResNet18's)."""
    import torch
    from torch import nn

    from kappalab.deep import ImmunizableModel

    torch.manual_seed(seed)
    frozen = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
    trainable = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
    model = ImmunizableModel(frozen, trainable, nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()),
                             nn.Linear(8, 3), 8).to(torch.float64)
    for bn in (frozen[1], trainable[1]):  # theta_0's statistics, not the defaults
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    return model


def _tiny_task():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from kappalab.deep.task import Task

    g = torch.Generator().manual_seed(0)

    def data(n: int, classes: int):
        return torch.randn(n, 1, 8, 8, generator=g, dtype=torch.float64), torch.randint(0, classes, (n,), generator=g)

    P, H, P_test, H_test = data(16, 3), data(16, 2), data(8, 3), data(8, 2)
    loaders = lambda seed: tuple(DataLoader(TensorDataset(*d), batch_size=8, shuffle=True,  # noqa: E731
                                            generator=torch.Generator().manual_seed(seed)) for d in (P, H))
    return Task(name="tiny", theta0=_bn_model, loaders=loaders, rir_P=P[0], rir_H=H[0], test_P=P_test,
                probe=(H, H_test), harmful_classes=2, device="cpu", data_label="random 8x8 images")


#: the proxy's config with the tiny task's values (what the run loop, calibrate and evaluate read)
TINY_CFG = dataclasses.replace(
    load_table3_config("proxy"), name="tiny", method_epochs=None, lambda_P=1e-6, lambda_H=1.0, lambda_kappa=1e-6,
    lambda_imma=0.1, imma_inner_steps=1, imma_inner_lr=1.0, label_smoothing=0.1, reg_rtol=1e-10, on_degenerate="warn",
    eta=1e-3, momentum=0.9, extractor_weight_decay=0.0, classifier_weight_decay=2e-5, epochs=1, epoch_on="harmful",
    calibration_batches=2, probe_epochs=3, probe_step="1/smax", rir_groups=2, rir_group_size=6)


def test_calibration_leaves_theta0_batchnorm_statistics_untouched() -> None:
    """Before the fix, calibrate ran theta_0 in training mode and moved its BatchNorm running statistics."""
    import torch

    task = _tiny_task()
    model = task.theta0(0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    calib = table3_run.calibrate(task, model, TINY_CFG, 0)
    assert calib["grad_norms"]["task"] > 0
    for name, value in model.state_dict().items():
        assert torch.equal(before[name], value), f"{name} changed during calibration"


def _run_tiny(store, work) -> int:
    """The one run loop on the tiny task, seed 0, Ours, under the run keys the command would give it; returns the
    process's rank."""
    from kappalab.reproduce.table3.plan import Plan
    from kappalab.reproduce.table3.run import NetBench
    from kappalab.reproduce.table3.sweep import sweep

    task = _tiny_task()
    plan = Plan("proxy", "run", TINY_CFG, work.parent, (0,), ("ours",), "tiny")
    return sweep(plan.specs({"name": task.data_label, "sha256": "made by the test"}), NetBench(task, work), store)


@pytest.mark.parametrize("rank", [0, 1])
def test_only_rank_0_records(rank: int, tmp_path, monkeypatch) -> None:
    """Under torchrun every rank runs the loop; before the fix every rank appended to the store (a second rank
    died on 'already stored' and the others hung in all_reduce)."""
    import torch.distributed as dist

    from kappalab.results import RunStore

    # this process plays rank ``rank`` of 2 (all_reduce of a lone process: the identity)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: rank)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(dist, "all_reduce", lambda tensor, op=None, group=None, async_op=False: None)
    monkeypatch.setattr(dist, "barrier", lambda group=None, async_op=False, device_ids=None: None)
    monkeypatch.setattr(dist, "destroy_process_group", lambda group=None: None)
    store = RunStore(tmp_path / "runs.jsonl")
    _run_tiny(store, tmp_path / "work")
    keys = [r["key"].split(".")[0] for r in store.records()] if store.path.exists() else []
    assert keys == (["tiny/seed0/init", "tiny/seed0/ours"] if rank == 0 else [])
    assert (tmp_path / "work" / "seed0" / "ours.pt").exists() == (rank == 0), "checkpoints: rank 0 only"


def test_a_method_record_carries_the_three_estimators(tmp_path) -> None:
    from kappalab.results import RunStore

    store = RunStore(tmp_path / "runs.jsonl")
    _run_tiny(store, tmp_path / "work")
    ours = next(r for r in store.records() if r["method"] == "ours")
    assert set(ours["estimates"]) == {"exact", "groups", "authors"}
    assert all(e["rir"] > 0 for e in ours["estimates"].values())


def _rank_of_two(rank: int, init_method: str, out: str) -> None:
    """One rank of a 2-process gloo job (what ``torchrun --nproc_per_node 2`` starts) running the tiny task."""
    from pathlib import Path

    import torch
    import torch.distributed as dist

    from kappalab.results import RunStore

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=2)
    assert _run_tiny(RunStore(Path(out) / "runs.jsonl"), Path(out) / "work") == rank
    assert not dist.is_initialized(), "the process group is torn down"


def test_two_ranks_share_one_store(tmp_path) -> None:
    """Two real processes (gloo) run the task into one --out: rank 0 records each run once. Before the fix every
    rank took the store's lock, so the second rank failed at once with StoreBusyError and rank 0 hung in
    all_reduce (the deadline below turns a hang into a failure)."""
    import time

    import torch.multiprocessing as mp

    context = mp.spawn(_rank_of_two, args=(f"file://{tmp_path / 'rendezvous'}", str(tmp_path)), nprocs=2,
                       join=False)
    deadline = time.monotonic() + 300
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("the two ranks did not finish within 300 s")
    records = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [r["key"].split(".")[0] for r in records] == ["tiny/seed0/init", "tiny/seed0/ours"]
