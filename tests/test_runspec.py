"""The typed run specs (``RunSpec`` of Tables 1 and 2, ``TrajectorySpec``) write each record's ``params`` exactly as
the dict jobs did before them: a store's ``params`` is a file format.

The pinned digests are the sha256 of ``json.dumps([params of every job, "out" replaced by "<out>"],
sort_keys=True)`` (after :func:`kappalab.results.to_jsonable`) for each plan below, computed with the ORIGINAL code
(main at c52e468, where a Job carried the dict itself: ``[job.params for job in jobs]``) by the same plans and
``--out`` names as here, in an empty working folder; the refactored code gives them from ``job.record()``. A key,
value or type that changed (an int stored as a float, a Path not turned into a string, a field dropped or renamed)
changes a digest. The committed stores are compared field by field too, where the data they were made from is here.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path

import pytest

from kappalab.reproduce import table2
from kappalab.reproduce.table2 import selection
from kappalab.results import RunStore, to_jsonable
from kappalab.sweep import Job

ROOT = Path(__file__).resolve().parents[1]

#: Table 2 plans (``kappalab reproduce table2`` arguments, with ``--out out``) -> (engine, jobs, digest)
TABLE2 = {
    "official_subset_all": (["--data", "mnist-subset"], "single", 1080,
                            "1705ed15f142a9455049bbebe7b66937a6f1c1b3f1a5930990e95f621ada9cdd"),
    "paper_pool4_set": (["--protocol", "paper", "--data", "mnist-subset", "--pool", "4", "--pairs", "0-1,3-8",
                         "--seeds", "0,5", "--set", "ridge_P=1", "--epochs", "7", "--no-probe"], "single", 16,
                        "84aeca9caccc387c8e270bb35564478734b549adb762450bc84c6f25e5c1a1bd"),
    "official_batched": (["--data", "mnist-subset", "--pairs", "7-3,0-1", "--engine", "batched", "--methods",
                          "ours,imma"], "batched", 12,
                         "9fc7704c17acd7f35a4d0754a1891e652cc5e4e9a667493309a530567aaecd48"),
    "official_mnist_quick": (["--quick", "--data", "mnist"], "single", 8,
                             "46b63ea88bb5f8f707999a65e531da0993feb516010ebe1aa11a9a81b8caeb14"),
}
#: trajectory plans (pairs (0, 1), (4, 1); seeds 0, 2; etas 0.001, 0.01; 30 epochs, every 3; full MNIST)
TRAJECTORY = {"paper": ({"lambda_H": 3.0}, "97b91a6019a35618d21036430f3489052c085cccedb26cee71c113055af59d23"),
              "official": ({}, "534ab50c50b58e34ce9275eb2a54c6df0f7b6a18b8a3b377b7511b96bd0beeb2")}
#: Table 1 commands (with ``--out out1 --no-progress``): the jobs ``main`` hands to ``run_sweep``
TABLE1 = {
    "quick": (["--quick"], 4, "a80cde1503761890eee26bc3ec9009a23efe9d1fa2d09a652b99f5f99b4ed27a"),
    "official_ddp_lrs_traj": (["--protocol", "official", "--processes", "2", "--lrs", "0.001", "0.005",
                               "--trajectory", "--seeds", "0", "3", "--epochs", "4", "--set", "ours.lambda_H=2",
                               "--methods", "ours", "imma"], 8,
                              "31056b30ae4dea6c89ff12928275be9f0087655e4ddda7b22abdf20ff75044cd"),
}


def _digest(jobs: list[Job], out: str) -> str:
    rows = []
    for job in jobs:
        params = to_jsonable(job.record())
        assert params["out"] == out, params["out"]
        rows.append({**params, "out": "<out>"})
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("name", sorted(TABLE2))
def test_table2_records_keep_their_params(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv, engine, n, digest = TABLE2[name]
    monkeypatch.chdir(tmp_path)
    plan = table2.plan_from_args(table2.build_parser().parse_args([*argv, "--out", "out"]))
    jobs = plan.jobs()
    assert (plan.engine, len(jobs)) == (engine, n)
    assert all(isinstance(job.spec, table2.plan.RunSpec) for job in jobs)
    assert _digest(jobs, "out") == digest


@pytest.mark.parametrize("protocol", sorted(TRAJECTORY))
def test_trajectory_records_keep_their_params(protocol: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    overrides, digest = TRAJECTORY[protocol]
    monkeypatch.chdir(tmp_path)
    jobs = selection.TrajectoryPlan(protocol, table2.METHODS, ((0, 1), (4, 1)), (0, 2), (0.001, 0.01), 30, 3,
                                    Path("out"), "mnist", None, "cpu", overrides).jobs()
    assert len(jobs) == 32 and all(isinstance(job.spec, selection.TrajectorySpec) for job in jobs)
    assert _digest(jobs, "out") == digest


class _Stop(Exception):
    pass


@pytest.mark.parametrize("name", sorted(TABLE1))
def test_table1_records_keep_their_params(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kappalab.sweep
    from kappalab.reproduce.table1 import cli
    from kappalab.reproduce.table1.run import RunSpec

    argv, n, digest = TABLE1[name]
    seen: dict[str, list[Job]] = {}

    def stop(jobs, worker, store, **options):
        seen["jobs"] = list(jobs)
        raise _Stop

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(kappalab.sweep, "run_sweep", stop)
    with pytest.raises(_Stop):
        cli.main([*argv, "--out", "out1", "--no-progress"])
    assert len(seen["jobs"]) == n and all(isinstance(job.spec, RunSpec) for job in seen["jobs"])
    assert _digest(seen["jobs"], "out1") == digest


def _stored_plan(params: dict) -> table2.Plan:
    """The plan a stored Table 2 record was made by (its pairs and seeds: all of the store's)."""
    return table2.Plan(params["protocol"], table2.METHODS, table2.ALL_PAIRS, (0, 1, 2), params["epochs"],
                       Path(params["out"]), params["device"], params["data_dir"], params["pool"],
                       dataset=params["dataset"], overrides=params["overrides"])


@pytest.mark.parametrize("store", ["table2/full90/paper/runs_paper.jsonl",
                                   "table2/pair_4_1/paper_ridge_1/runs_paper.jsonl"])
def test_committed_table2_records_are_their_specs_records(store: str) -> None:
    """Every record of a committed store made with run identities is, field for field, the ``record()`` of the
    spec of its key in the plan that made it."""
    records = RunStore(ROOT / "docs" / "reproduction" / store).records()
    plan = _stored_plan(records[0]["params"])
    jobs = {job.key: job for job in plan.jobs()}
    for r in records:
        assert to_jsonable(jobs[r["key"]].record()) == r["params"], r["key"]


def test_committed_trajectory_records_are_their_specs_records() -> None:
    folder = ROOT / "docs" / "reproduction" / "table2" / "official_traj"
    records = RunStore(folder / selection.store_name("official")).records()
    p = records[0]["params"]
    pairs = tuple(dict.fromkeys((r["params"]["a"], r["params"]["b"]) for r in records))
    seeds = tuple(sorted({r["params"]["seed"] for r in records}))
    etas = tuple(sorted({r["params"]["eta"] for r in records}))
    plan = selection.TrajectoryPlan("official", table2.METHODS, pairs, seeds, etas, p["epochs"], p["every"],
                                    Path(p["out"]), p["dataset"], p["data_dir"], p["device"], p["overrides"])
    jobs = {job.key: job for job in plan.jobs()}
    for r in records:
        assert to_jsonable(jobs[r["key"]].record()) == r["params"], r["key"]


def test_a_spec_pickles_with_its_config_and_resolves_it_once(tmp_path: Path) -> None:
    """What the process pool sends a worker: the frozen spec, with its config once resolved."""
    plan = table2.plan_from_args(table2.build_parser().parse_args(
        ["--quick", "--pairs", "0-1", "--methods", "ours", "--out", str(tmp_path)]))
    spec = plan.jobs()[0].spec
    assert spec.config is spec.config and spec.config == plan.config("ours")
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec and again.record() == spec.record() and again.config == spec.config
    with pytest.raises(AttributeError):
        spec.seed = 1  # frozen: a worker cannot change its job


def test_specs_reach_spawned_workers_whole(tmp_path: Path) -> None:
    """Through the sweep's process pool (spawn): each worker gets its job's spec, typed, and the store keeps
    ``record()`` as ``params`` (here the worker returns the record it was given, so both sides must agree)."""
    import operator

    from kappalab.sweep import run_sweep

    plan = table2.plan_from_args(table2.build_parser().parse_args(
        ["--quick", "--pairs", "0-1", "--methods", "ours,imma", "--out", str(tmp_path)]))
    jobs = plan.jobs()
    summary = run_sweep(jobs, operator.methodcaller("record"), tmp_path / "runs.jsonl", workers=2, progress=False)
    assert summary.completed == len(jobs) == 2
    stored = {r["key"]: r for r in RunStore(tmp_path / "runs.jsonl").records()}
    for job in jobs:
        expected = to_jsonable(job.record())
        assert stored[job.key]["params"] == stored[job.key]["result"] == expected
    assert os.getpid() not in {r["pid"] for r in stored.values()}  # run in the pool, not here
