"""Table 1 with ``--processes N``: the shipped config's data-parallel run through the CLI, official-protocol
trajectories, and the committed 2-process (and 1-process 1000-epoch) stores recomputed from their files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from envelope import evaluation_envelope, outside  # noqa: E402
from kappalab.cli import main as cli_main  # noqa: E402
from kappalab.immunization import LinearTask, evaluate, immunize, table1_config  # noqa: E402
from kappalab.immunization import data_parallel as dp  # noqa: E402
from kappalab.immunization.trajectory import TrajectoryRecorder  # noqa: E402
from kappalab.reproduce.table1.report import markdown, summarize  # noqa: E402
from kappalab.reproduce.table1.run import config_of, task_of  # noqa: E402
from kappalab.results import RunStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STORES = ROOT / "docs" / "reproduction" / "table1"
#: committed official-protocol stores: folder -> (processes, epochs); every method of the official protocol, 5 seeds
COMMITTED = {"official_ddp2": (2, 10), "official_ddp2_e1000": (2, 1000), "official_e1000_trajectory": (1, 1000)}


def _synthetic(n: int = 200, d: int = 9) -> LinearTask:
    rng = np.random.default_rng(11)
    X_P, X_H = rng.standard_normal((n, d)), rng.standard_normal((n, d)) + 0.3
    return LinearTask(X_P=X_P, y_P=X_P @ rng.standard_normal(d), X_H=X_H, y_H=X_H @ rng.standard_normal(d),
                      loss="mse", name="synthetic", data_label="synthetic")


def _stored_task(out: Path, data: dict) -> LinearTask:
    folder = out / "data" / data["sha256"][:12]
    X_P, y_P, X_H, y_H = (np.load(folder / f"{n}.npy") for n in ("features_P", "y_P", "features_H", "y_H"))
    return LinearTask(X_P, y_P, X_H, y_H, "mse", "files", "files")


# ---- the command line ------------------------------------------------------------------------------------------

def test_two_processes_through_the_cli_are_the_emulation_and_keep_their_own_keys(tmp_path):
    """``--processes 2`` trains each run with immunize_data_parallel (one step per epoch), records it, and lives
    next to the 1-process runs of the same --out under other keys; the 1-process runs' identity does not name
    processes (their keys are those of before the option)."""
    out = tmp_path / "t1"
    base = ["reproduce", "table1", "--protocol", "official", "--quick", "--epochs", "3", "--methods", "imma",
            "--out", str(out), "--no-progress", "--probe-iters", "20", "--trajectory"]
    assert cli_main(base + ["--processes", "2"]) == 0
    assert cli_main(base) == 0
    two = json.loads((out / "table1_official_ddp2.json").read_text())
    one = json.loads((out / "table1_official.json").read_text())
    assert two["meta"]["processes"] == 2 and one["meta"]["processes"] == 1
    store = {r["key"]: r for r in RunStore(out / "runs_official.jsonl").records()}
    assert len(store) == 2 and {r["key"] for r in two["runs"] + one["runs"]} == set(store)
    task = task_of("official", None, 200)
    for r in two["runs"]:
        assert r["processes"] == 2 and r["identity"]["options"]["processes"] == 2 and ".p2." in r["key"]
        assert r["emulation"]["world_size"] == 2 and r["emulation"]["steps_per_epoch"] == 1 and r["n_steps"] == 3
        expected = dp.immunize_data_parallel(task, config_of("official", r["method"], {}).replace(epochs=3),
                                             r["seed"], world_size=2)
        np.testing.assert_array_equal(np.load(out / r["files"]["theta_I"]), expected.theta_I)
        np.testing.assert_array_equal(np.load(out / r["files"]["bias"]), expected.bias)
    for r in one["runs"]:
        assert r["processes"] == 1 and r["emulation"] is None and r["n_steps"] == 9  # 3 minibatches per epoch
        assert "processes" not in r["identity"]["options"] and ".p" not in r["key"].rsplit(".", 1)[0]
    for stem in ("table1_official_ddp2", "selection_ddp2", "trajectories_ddp2_lr0.005", "figure1_official_ddp2"):
        assert any(out.glob(stem + ".*")), stem
    assert "2 processes" in (out / "table1_official_ddp2.md").read_text().splitlines()[0]
    assert cli_main(base + ["--processes", "2"]) == 0  # resumes: nothing new
    assert len(RunStore(out / "runs_official.jsonl").records()) == 2


def test_processes_with_the_paper_protocol_is_a_one_line_error_in_a_fresh_process(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    out = tmp_path / "never"
    done = subprocess.run([sys.executable, "-m", "kappalab.cli", "reproduce", "table1", "--protocol", "paper",
                           "--processes", "2", "--out", str(out)], env=env, text=True, capture_output=True,
                          timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == ("kappalab reproduce table1: error: --processes 2: the data-parallel run is the "
                                   "official protocol's shipped config (minibatches, paired rows); --protocol paper "
                                   "runs in one process")
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--processes", "2"], "--protocol paper runs in one process"),  # paper is the default protocol
    (["--processes", "4", "--protocol", "official"], "--processes 4: rill_only: batch_size 64 exceeds each rank's "
                                                      "shard (50 of 200 pairs)"),
    (["--processes", "0", "--protocol", "official"], "--processes"),
])
def test_unsupported_processes_are_one_line_errors(tmp_path, capsys, args, message):
    out = tmp_path / "never"
    try:
        status = cli_main(["reproduce", "table1", *args, "--out", str(out), "--quick"])
    except SystemExit as stop:  # argparse's own errors
        status = stop.code
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


# ---- official-protocol trajectories ----------------------------------------------------------------------------

@pytest.mark.parametrize("processes", [1, 2])
def test_official_trajectory_reads_each_epoch_end(processes):
    """Epoch k of a 4-epoch trajectory is the state of a k-epoch run (bit for bit the same steps), and the last
    epoch's RIR (features' SVD) equals evaluate's (the Hessian route, bias included) to 1e-9."""
    task = _synthetic()
    cfg = table1_config("official", "ours")
    train = (lambda c, obs: dp.immunize_data_parallel(task, c, 0, world_size=2, observer=obs)) if processes == 2 \
        else (lambda c, obs: immunize(task, c, 0, observer=obs))
    steps = 1 if processes == 2 else 3  # 200 pairs: shards of 100 -> one 64-row batch; one process: 200 // 64
    assert dp.steps_per_epoch(task, cfg, 2) == 1
    long = TrajectoryRecorder(task, steps, bias=True)
    train(cfg.replace(epochs=4), long)
    assert long.epochs == [0, 1, 2, 3, 4]
    for k in (1, 2):
        short = TrajectoryRecorder(task, steps, bias=True)
        run = train(cfg.replace(epochs=k), short)
        for name, values in short.values.items():
            assert long.values[name][k] == values[-1], (k, name)
        ev = evaluate(run, task, sensitivity=(), endpoints=False)["pinv"]
        for m in ("term_i", "term_ii", "rir"):
            assert short.values[f"full.{m}"][-1] == pytest.approx(ev[m], rel=1e-9), (k, m)


# ---- the committed stores --------------------------------------------------------------------------------------

@pytest.mark.parametrize("folder", sorted(COMMITTED))
def test_committed_store_rows_recompute_from_theta(folder):
    """Every run of the store: theta (+ bias) re-evaluated on the stored features gives the stored (i), (ii), RIR;
    the table's rows (both kappa definitions) are the mean and std of those runs; the store holds every official
    method x 5 seeds at the stated processes and epochs, and the last trajectory epoch is the final theta."""
    processes, epochs = COMMITTED[folder]
    out, stem = STORES / folder, f"table1_official{'_ddp2' if processes == 2 else ''}"
    report = json.loads((out / f"{stem}.json").read_text())
    store = {r["key"]: r for r in RunStore(out / "runs_official.jsonl").records()}
    task = _stored_task(out, report["meta"]["data"])
    assert {(r["result"]["method"], r["result"]["seed"]) for r in store.values()} == \
        {(m, s) for m in ("rill_only", "imma", "opt_kappa", "ours") for s in range(5)}
    for key, rec in store.items():
        r = rec["result"]
        assert (r["processes"], r["epochs"], r["protocol"]) == (processes, epochs, "official"), key
        assert rec["identity"]["options"].get("processes", 1) == processes and key.endswith(rec["identity"]["hash"])
        theta = np.load(out / r["files"]["theta_I"])
        bias = np.load(out / r["files"]["bias"])
        again = evaluate(theta, task, bias=bias, shift=r["evaluation"]["shift"], sensitivity=(), endpoints=False)
        # pinv only (the shifted kappa need not repeat under another LAPACK: test_table1_shifted_kappa), stored and
        # recomputed inside the rounding envelope of the stored theta (tests/envelope.py; the store was written
        # with OpenBLAS's SkylakeX kernels, and 1000 epochs of Ours / Opt kappa reach pinv kappas that other kernels
        # move beyond 1e-9)
        envelope = {("pinv",): evaluation_envelope(theta, bias, task.X_P, task.X_H, rtol=r["evaluation"]["rtol"],
                                                   shift=r["evaluation"]["shift"], factors=())[("pinv",)]}
        for record in (r["evaluation"], again):
            bad, count = outside(envelope, record)
            assert not bad and count == 7, (key, bad)
        with np.load(out / r["files"]["trajectory"]) as z:
            assert int(z["epoch"][-1]) == epochs and len(z["epoch"]) == epochs + 1
            assert float(z["full.rir"][-1]) == pytest.approx(again["pinv"]["rir"], rel=1e-6), key
    runs = [{**rec["result"], "key": key} for key, rec in store.items()]
    for method, s in report["summary"].items():
        rir = [r["evaluation"]["pinv"]["rir"] for r in runs if r["method"] == method]
        assert s["pinv"]["rir"][0] == pytest.approx(np.mean(rir), rel=1e-12)
        assert s["pinv"]["rir"][1] == pytest.approx(np.std(rir, ddof=1), rel=1e-12)
    md = (out / f"{stem}.md").read_text()
    tables = lambda text: text.split("## kappa definition", 1)[1].split("## Sensitivity")[0]  # both definitions' rows
    assert tables(markdown(summarize(runs), report["meta"])) == tables(md)


#: the side-by-side table of docs/reproduction/table1.md: (processes, epochs) -> committed store (the 1-process,
#: 10-epoch store is the earlier flat layout, runs.jsonl with the results at the top level)
SIDE_BY_SIDE = {(1, 10): ("official", "runs.jsonl"), (2, 10): ("official_ddp2", "runs_official.jsonl"),
                (1, 1000): ("official_e1000_trajectory", "runs_official.jsonl"),
                (2, 1000): ("official_ddp2_e1000", "runs_official.jsonl")}


def side_by_side_rows() -> list[str]:
    """The rows of table1.md's 1- vs 2-process table, recomputed from the stores' run records: per method, then
    per (epochs, processes), the pinv (i), (ii), RIR and the shifted RIR (mean ± std over the seeds)."""
    from kappalab.reproduce.table1.constants import LABELS, ORDER
    from kappalab.results import format_mean_std, mean_std

    runs = {}
    for cell, (folder, name) in SIDE_BY_SIDE.items():
        records = [json.loads(line) for line in (STORES / folder / name).open()]
        runs[cell] = [rec.get("result", rec) for rec in records]
    rows = []
    for method in ORDER:
        for processes, epochs in sorted(SIDE_BY_SIDE, key=lambda c: (c[1], c[0])):
            rs = sorted((r for r in runs[processes, epochs] if r["method"] == method), key=lambda r: r["seed"])
            assert [r["seed"] for r in rs] == [0, 1, 2, 3, 4] and {r["epochs"] for r in rs} == {epochs}
            cells = [mean_std([r["evaluation"][d][k] for r in rs]) for d, k in
                     (("pinv", "term_i"), ("pinv", "term_ii"), ("pinv", "rir"), ("shifted", "rir"))]
            rows.append(f"| {LABELS[method]} | {epochs} | {processes} | "
                        + " | ".join(format_mean_std(*c) for c in cells) + " |")
    return rows


def test_table1_md_side_by_side_rows_are_the_stores():
    text = (ROOT / "docs" / "reproduction" / "table1.md").read_text()
    for row in side_by_side_rows():
        assert row in text, row


def test_watched_runs_are_the_unwatched_ones():
    """--trajectory only watches: the 1-process 1000-epoch Ours runs with trajectories have exactly the numbers of
    the earlier store made without them, and epoch 10 of every 1000-epoch trajectory is the 10-epoch store's run
    (1 and 2 processes)."""
    earlier = {r["seed"]: r for r in map(json.loads, (STORES / "official_e1000" / "runs.jsonl").open())}
    watched = [json.loads(line)["result"] for line in (STORES / "official_e1000_trajectory" / "runs_official.jsonl").open()]
    ours = [r for r in watched if r["method"] == "ours"]
    assert len(ours) == 5
    for r in ours:
        assert r["evaluation"]["pinv"] == earlier[r["seed"]]["evaluation"]["pinv"], r["seed"]
    for long, short in (("official_e1000_trajectory", ("official", "runs.jsonl")),
                        ("official_ddp2_e1000", ("official_ddp2", "runs_official.jsonl"))):
        ten = {(r["method"], r["seed"]): r for r in
               (rec.get("result", rec) for rec in map(json.loads, (STORES / short[0] / short[1]).open()))}
        for rec in map(json.loads, (STORES / long / "runs_official.jsonl").open()):
            r = rec["result"]
            with np.load(STORES / long / r["files"]["trajectory"]) as z:
                assert int(z["epoch"][10]) == 10
                rir = float(z["full.rir"][10])
            assert rir == pytest.approx(ten[r["method"], r["seed"]]["evaluation"]["pinv"]["rir"], rel=1e-6), rec["key"]
