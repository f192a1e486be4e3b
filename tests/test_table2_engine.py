"""``kappalab reproduce table2 --engine / --batch-size / --shard / --merge``: the two engines give the same records
where the identity says so, a batched sweep is resumable run by run, shards partition a sweep, and a merge of
shard stores reproduces the unsharded report; every misuse is one line and status 2.

Data: the embedded MNIST subset, Table 2's official configs, ``--quick`` (pairs 0-1 and 7-3, seed 0, one epoch)
at ``--pool 2`` (D = 196: the batched engine needs minibatches of fewer rows than features; ``--pool 4`` has
D = 49 < 64), without probes: 8 runs per store, about a second each.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kappalab.results import RunStore
from kappalab.sweep import Job, SweepError, run_batched_sweep, shard_jobs, shard_of

pytest.importorskip("torch")
pytest.importorskip("mlxtend")  # the report's Figure 2

from kappalab.reproduce import table2  # noqa: E402
from kappalab.reproduce.table2.merge import VOLATILE  # noqa: E402
from kappalab.reproduce.table2.report import label_of  # noqa: E402
from cli_run import in_processes  # noqa: E402  (fresh processes, as a user meets the command)

QUICK = ["--quick", "--pool", "2", "--no-probe", "--no-progress"]
TIMING_COLUMNS = ("train_s", "total_s")


def _store(out: Path) -> dict[str, dict[str, Any]]:
    return {r["key"]: r for r in RunStore(out / "runs_official.jsonl").records()}


def _stable(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record["result"].items() if k not in VOLATILE}


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    """The quick sweep by the single engine, by the batched engine (batches of <= 3 runs), and as shards 1/2 and
    2/2 (auto engine: single on the CPU)."""
    root = tmp_path_factory.mktemp("engines")
    out = {name: root / name for name in ("single", "batched", "shard1", "shard2")}
    assert table2.main(QUICK + ["--engine", "single", "--out", str(out["single"])]) == 0
    assert table2.main(QUICK + ["--engine", "batched", "--batch-size", "3", "--out", str(out["batched"])]) == 0
    for k in (1, 2):
        assert table2.main(QUICK + ["--shard", f"{k}/2", "--out", str(out[f"shard{k}"])]) == 0
    return out


def test_engines_give_the_same_records_under_their_own_keys(stores) -> None:
    """On the CPU: every batched run carries the engine in its identity (so a store never takes it for the single
    engine's run), and both engines' records agree on Eq. 15 to 1e-10 (at this size, D = 49, Ours, Opt kappa and
    R_ill Only even agree to the last bit; at D = 784 they do not, see the engine module)."""
    single, batched = _store(stores["single"]), _store(stores["batched"])
    assert len(single) == len(batched) == 8
    by_label = {label_of(k): r for k, r in batched.items()}
    for key, one in single.items():
        many = by_label[label_of(key)]
        assert (one["result"]["engine"], many["result"]["engine"]) == ("single", "batched")
        assert many["result"]["engine_notes"] == ["batched engine: 2 runs in one batch; wall_time_s = batch time / 2"]
        assert many["key"] != key
        assert many["identity"]["options"]["engine"] == "batched" and "engine" not in one["identity"]["options"]
        for name in ("term_i", "term_ii", "rir"):
            a, b = many["result"]["gram"][name], one["result"]["gram"][name]
            assert abs(a - b) <= 1e-10 * abs(b), (key, name, a, b)


def test_the_auto_rule_and_the_identity_rule() -> None:
    """auto: batched only for the official protocol on CUDA with fewer batch rows than features; the engine enters
    every batched run's identity."""
    from kappalab.reproduce.table2.engine import choose_engine
    from kappalab.reproduce.table2.plan import identity_options

    parse = table2.build_parser().parse_args
    plan = lambda *args: table2.plan_from_args(parse(["--data", "mnist-subset", *args]))
    assert plan("--device", "cuda").engine == "batched"  # the rule only; no CUDA is needed to plan
    for args in ((), ("--protocol", "paper", "--device", "cuda"), ("--pool", "4", "--device", "cuda")):
        assert plan(*args).engine == "single", args
    assert choose_engine("auto", plan("--pool", "4", "--device", "cuda"))[1].endswith("batch_size 64 >= D = 49")
    assert identity_options("single") == {} and identity_options("batched") == {"engine": "batched"}
    with pytest.raises(ValueError, match="engine must be 'single' or 'batched'"):
        identity_options("auto")


#: a key the single engine wrote: full-MNIST sweep of 2026-12-01 (Alg. 1, closed-form route), pair 0-1, seed 0,
#: with its data identity (the sha256 of full MNIST's training split)
STORED_KEY = "paper.ours.0-1.s0.e30.d08c1c432dcb"
STORED_DATA = {"name": "mnist", "sha256": "0722f7df248c3c69ff5697f984f1a007a4239c58f3a23c2fd7505f11828b9480"}


def test_single_engine_keys_are_the_stored_ones_and_every_batched_key_names_its_engine(monkeypatch) -> None:
    """The single engine's identities stay byte for byte those its stores hold (no engine field: the reference);
    every method's batched run carries ``engine: batched`` (the issue said the rule left the engine out of Ours',
    R_ill Only's and Opt kappa's identities on the CPU: not so since 27379c6, checked here for all four methods
    and both devices' plans)."""
    from kappalab.reproduce.table2 import plan as plan_module

    monkeypatch.setattr(plan_module, "data_identity", lambda dataset, directory, pool: dict(STORED_DATA))
    parse = table2.build_parser().parse_args
    paper = table2.plan_from_args(parse(["--data", "mnist", "--protocol", "paper", "--methods", "ours", "--pairs",
                                         "0-1", "--seeds", "0", "--set", "extra.spectral_route=closed_form"]))
    assert paper.engine == "single" and [job.key for job in paper.jobs()] == [STORED_KEY]
    for device in ("cpu", "cuda"):
        args = ["--data", "mnist", "--pairs", "0-1", "--seeds", "0", "--device", device]
        single = table2.plan_from_args(parse(args + ["--engine", "single"])).jobs()
        batched = table2.plan_from_args(parse(args + ["--engine", "batched"])).jobs()
        assert len(single) == len(batched) == 4
        for one, many in zip(single, batched):
            assert "engine" not in one.spec.identity["options"]
            assert many.spec.identity["options"] == {**one.spec.identity["options"], "engine": "batched"}
            assert label_of(one.key) == label_of(many.key) and one.key != many.key


def test_a_run_on_the_tensor_eigensolver_names_it_in_its_identity(monkeypatch) -> None:
    """Where ``method="auto"`` runs the tensor-op eigensolver (CUDA, or anywhere under ``forced_method``), the run's
    identity says so; where it runs LAPACK (the CPU) the key is the stored one."""
    from kappalab.extremes import forced_method
    from kappalab.reproduce.table2 import plan as plan_module

    monkeypatch.setattr(plan_module, "data_identity", lambda dataset, directory, pool: dict(STORED_DATA))
    parse = table2.build_parser().parse_args
    args = ["--data", "mnist", "--protocol", "paper", "--methods", "ours", "--pairs", "0-1", "--seeds", "0", "--set",
            "extra.spectral_route=closed_form"]
    options = lambda *more: table2.plan_from_args(parse(args + list(more))).jobs()[0].spec.identity["options"]
    assert "eigensolver" not in options()
    assert options("--device", "cuda")["eigensolver"] == "tensor"
    assert options("--device", "cuda:1")["eigensolver"] == "tensor"
    with forced_method("tensor"):
        assert options()["eigensolver"] == "tensor"
    with forced_method("lapack"):
        assert "eigensolver" not in options("--device", "cuda")


@pytest.mark.parametrize("method", ["imma", "ours"])
def test_the_batch_size_changes_no_bit(method: str) -> None:
    """Why the batch size is not part of a run's identity: a run trained alone (R = 1) and in a batch of 3 (other
    pairs and seeds beside it) gives the same theta_I, bias and head, bit for bit, on the CPU; IMMA included, whose
    batched runs differ from its single ones by rounding."""
    from kappalab.immunization.batched import immunize_batch

    cfg = table2.table2_config("official", method).replace(epochs=1)
    jobs = (((0, 1), 0), ((7, 3), 1), ((0, 1), 2))
    tasks = [table2.mnist_task(a, b, seed, None, 2, "mnist-subset") for (a, b), seed in jobs]
    seeds = [seed for _, seed in jobs]
    together = immunize_batch(tasks, cfg, seeds)
    for task, seed, many in zip(tasks, seeds, together):
        alone = immunize_batch([task], cfg, [seed])[0]
        for name in ("theta_I", "bias", "head"):
            assert np.array_equal(getattr(alone, name), getattr(many, name)), (seed, name)


def test_a_sweep_resumed_by_the_other_engine_keeps_what_it_has(stores, tmp_path: Path) -> None:
    """A store of the single engine, resumed by the batched engine, never rewrites a stored run and adds the
    batched engine's eight runs under their own keys (another identity); run again, it adds nothing."""
    out = tmp_path / "resumed"
    shutil.copytree(stores["single"], out)
    before = _store(out)
    assert table2.main(QUICK + ["--engine", "batched", "--out", str(out)]) == 0
    after = _store(out)
    assert set(before) <= set(after) and len(after) == 16
    assert all(after[k] == before[k] for k in before)  # never rewritten
    assert all(r["result"]["engine"] == "batched" for k, r in after.items() if k not in before)
    assert table2.main(QUICK + ["--engine", "batched", "--out", str(out)]) == 0
    assert _store(out) == after


def test_a_killed_batch_loses_only_the_runs_in_flight(tmp_path: Path) -> None:
    """The batched sweep stores each run as the runner yields it: a runner that fails after two of five runs leaves
    those two stored and names the third; run again, it gets only the three others."""
    jobs = [Job(f"job{i}", {"i": i}) for i in range(5)]
    store = RunStore(tmp_path / "runs.jsonl")

    def failing(params: list[dict[str, Any]]):
        for index, p in enumerate(params[:2]):
            yield index, {"value": p["i"]}
        raise RuntimeError("killed")

    with pytest.raises(SweepError, match="job2"):
        run_batched_sweep(jobs, failing, store, progress=False)
    assert [r["key"] for r in store.records()] == ["job0", "job1"]
    seen: list[int] = []

    def runner(params: list[dict[str, Any]]):
        for index, p in reversed(list(enumerate(params))):  # any order: each result names its job
            seen.append(p["i"])
            yield index, {"value": p["i"]}

    summary = run_batched_sweep(jobs, runner, store, progress=False)
    assert (summary.skipped, summary.completed, sorted(seen)) == (2, 3, [2, 3, 4])
    assert {r["key"]: r["result"]["value"] for r in store.records()} == {f"job{i}": i for i in range(5)}


def test_shards_partition_the_sweep() -> None:
    """Table 2's whole sweep (1080 runs) split into N shards, N = 1..7: the union is every job, the shards are
    pairwise disjoint; a job's shard depends on its label alone (here: the same label on another device)."""
    parse = table2.build_parser().parse_args
    jobs = table2.plan_from_args(parse(["--data", "mnist-subset"])).jobs()
    assert len(jobs) == 1080
    keys = [job.key for job in jobs]
    for n in range(1, 8):
        parts = [{job.key for job in shard_jobs(jobs, k, n, label=lambda job: label_of(job.key))}
                 for k in range(1, n + 1)]
        assert sum(len(p) for p in parts) == len(jobs) and set().union(*parts) == set(keys), n
        assert all(len(p) > 0 for p in parts), n
    other = table2.plan_from_args(parse(["--data", "mnist-subset", "--device", "cuda"])).jobs()
    assert [label_of(j.key) for j in other] == [label_of(k) for k in keys] and other[0].key != keys[0]
    assert shard_of(label_of(other[0].key), 5) == shard_of(label_of(keys[0]), 5)


def _rows(out: Path) -> list[dict[str, str]]:
    with open(out / "table2_official.csv") as handle:
        handle.readline()  # the comment line
        return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in csv.DictReader(handle)]


def _table(out: Path) -> dict[str, Any]:
    table = json.loads((out / "table2_official.json").read_text())["table"]
    return {m: {k: v for k, v in t.items() if k != "total_s"} for m, t in table.items()}


def test_merge_of_the_shards_equals_the_unsharded_report(stores, tmp_path: Path) -> None:
    shards = [stores["shard1"], stores["shard2"]]
    assert [len(_store(s)) for s in shards] == [4, 4]
    merged = tmp_path / "merged"
    assert table2.main(QUICK + ["--merge", *map(str, shards), "--out", str(merged)]) == 0
    assert set(_store(merged)) == set(_store(stores["single"]))
    assert _table(merged) == _table(stores["single"])
    assert sorted(_rows(merged), key=str) == sorted(_rows(stores["single"]), key=str)
    report = json.loads((merged / "merge_official.json").read_text())
    assert (report["merged"], report["expected"]) == (8, 8)
    # an agreeing duplicate (the whole unsharded store next to its shards) is kept once
    again = tmp_path / "again"
    assert table2.main(QUICK + ["--merge", *map(str, shards), str(stores["single"]), "--out", str(again)]) == 0
    assert len(_store(again)) == 8
    assert json.loads((again / "merge_official.json").read_text())["sources"][2]["duplicates"] == 8


def _edited_copy(source: Path, target: Path, edit) -> Path:
    """A copy of a store folder with ``edit(record)`` applied to its first record."""
    shutil.copytree(source, target)
    store = target / "runs_official.jsonl"
    records = [json.loads(line) for line in store.read_text().splitlines()]
    edit(records[0])
    store.write_text("".join(json.dumps(r) + "\n" for r in records))
    return target


FRESH = ("merge conflict",)  #: cases run in a fresh process (the rest: main() in this one; the others exit in
#: argparse or before any work, as tests/test_cli_errors.py checks for every command)


def test_every_misuse_is_one_line_and_status_2(stores, tmp_path: Path, capsys) -> None:
    def bump_rir(r):
        r["result"]["gram"]["rir"] *= 1 + 1e-6

    def bump_lambda(r):
        r["identity"]["config"]["lambda_H"] *= 2

    def drop_pair(r):
        del r["params"]["a"]

    conflict = _edited_copy(stores["shard1"], tmp_path / "conflict", bump_rir)
    mismatch = _edited_copy(stores["shard1"], tmp_path / "mismatch", bump_lambda)
    incomplete = _edited_copy(stores["shard1"], tmp_path / "incomplete", drop_pair)
    corrupt = _edited_copy(stores["shard1"], tmp_path / "corrupt", lambda r: None)
    with open(corrupt / "runs_official.jsonl", "a") as handle:
        handle.write("{not json\n")
    foreign = tmp_path / "foreign"  # another sweep: 2 epochs
    assert table2.main(QUICK + ["--methods", "ours", "--pairs", "0-1", "--epochs", "2", "--out", str(foreign)]) == 0
    t2 = ["reproduce", "table2", *QUICK]
    merge = t2 + ["--merge", str(stores["shard1"])]
    cases = {
        "shard 0/2": (t2 + ["--shard", "0/2"], "--shard"),
        "shard 3/2": (t2 + ["--shard", "3/2"], "--shard"),
        "shard a/b": (t2 + ["--shard", "a/b"], "--shard"),
        "shard 1/0": (t2 + ["--shard", "1/0"], "--shard"),
        "batch-size with single": (t2 + ["--engine", "single", "--batch-size", "4"], "--batch-size"),
        "batch-size 0": (t2 + ["--engine", "batched", "--batch-size", "0"], "--batch-size"),
        "workers with batched": (t2 + ["--engine", "batched", "--workers", "2"], "--workers"),
        "batched on pool 4": (t2 + ["--engine", "batched", "--pool", "4"], "--engine batched"),
        "batched on paper": (t2 + ["--engine", "batched", "--protocol", "paper"], "--engine batched"),
        "merge missing dir": (t2 + ["--merge", str(tmp_path / "nowhere"), "--out", str(tmp_path / "m1")],
                              "--merge"),
        "merge and shard": (merge + ["--shard", "1/2", "--out", str(tmp_path / "m2")], "--merge"),
        "merge conflict": (merge + [str(conflict), "--out", str(tmp_path / "m3")], "conflicting duplicate"),
        "merge mismatch": (t2 + ["--merge", str(mismatch), "--out", str(tmp_path / "m4")], "does not match"),
        "merge foreign": (merge + [str(foreign), "--out", str(tmp_path / "m5")], "foreign identity"),
        "merge incomplete": (t2 + ["--merge", str(incomplete), "--out", str(tmp_path / "m6")], "incomplete record"),
        "merge corrupt": (t2 + ["--merge", str(corrupt), "--out", str(tmp_path / "m7")], "not valid JSON"),
        "merge into a store": (merge + ["--out", str(stores["shard2"])], "--out"),
    }
    in_process = {name: case for name, case in cases.items() if name not in FRESH}
    for name, (argv, text) in in_process.items():
        capsys.readouterr()
        try:
            code = table2.main(argv[2:])
        except SystemExit as stop:  # argparse's own errors (e.g. --batch-size 0)
            code = stop.code
        assert code == 2, name
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and text in lines[0], (name, lines)
    results = in_processes({name: cases[name][0] for name in FRESH}, tmp_path)  # and a few as a user meets them
    for name, (code, _, stderr) in results.items():
        lines = stderr.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in stderr, (name, code, stderr[-2000:])
        assert cases[name][1] in lines[0], (name, lines[0])
    for name in ("m1", "m2", "m3", "m4", "m5", "m6", "m7"):  # refused before anything was written
        assert not (tmp_path / name / "runs_official.jsonl").exists(), name
    assert len(_store(stores["shard2"])) == 4
