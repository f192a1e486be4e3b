"""The command line as a user meets it: every ``--help`` exits 0 at once; every user error exits 2 with ONE line on
stderr naming the argument, and no traceback; Ctrl-C during a sweep stops all workers and says in one line how to
resume.

The ``--help`` and user-error cases run in this process through :func:`kappalab.cli.main`, as a fresh process would
show them (:mod:`cli_run`); a few, one per command, run again in fresh processes, where the exit status and stderr
are the interpreter's own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_run import ROOT, in_process, in_processes

pytest.importorskip("torch")


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
                OMP_NUM_THREADS="1")


HELP = {
    "top": ["--help"], "verify": ["verify", "--help"], "reproduce": ["reproduce", "--help"],
    "table1": ["reproduce", "table1", "--help"], "table2": ["reproduce", "table2", "--help"],
    "table3": ["reproduce", "table3", "--help"], "main": ["main", "--help"], "main-h": ["main", "-h"],
}


#: the --help cases also run in fresh processes (all run in this process)
HELP_IN_PROCESSES = ("top", "table3")


def test_every_help_exits_0_and_starts_no_work(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    results = {name: in_process(argv, tmp_path, capfd) for name, argv in HELP.items()}
    fresh = in_processes({name: HELP[name] for name in HELP_IN_PROCESSES}, tmp_path)
    for name, r in [*results.items(), *((f"{n} (fresh process)", r) for n, r in fresh.items())]:
        assert r.code == 0 and "usage" in r.stdout.lower() and "Traceback" not in r.stderr, (name, r)
    assert list(tmp_path.iterdir()) == []  # nothing written: no results/, no store


def _error_cases(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, a text the one stderr line must contain)."""
    afile = tmp / "a_file"
    afile.write_text("x")
    bad_csv = tmp / "train.csv"
    bad_csv.write_text("not,a,house,prices\nfile,,,\n")
    idx = tmp / "idx"
    idx.mkdir()
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
        (idx / name).write_bytes(b"garbage")
    (tmp / "bad.json").write_text("{not json")
    t1, t2, t3 = ["reproduce", "table1", "--quick"], ["reproduce", "table2", "--quick"], \
        ["reproduce", "table3", "--proxy", "--quick"]
    return {
        "t2 seeds -1": (t2 + ["--seeds", "-1"], "--seeds"),
        "t3 seeds -1": (t3 + ["--seeds", "-1"], "--seeds"),
        "t1 seeds 0 0": (t1 + ["--seeds", "0", "0"], "--seeds"),
        "t2 seeds 0,0": (t2 + ["--seeds", "0,0"], "--seeds"),
        "t1 workers 0": (t1 + ["--workers", "0"], "--workers"),
        "t2 workers 0": (t2 + ["--workers", "0"], "--workers"),
        "t1 threads 0": (t1 + ["--threads", "0"], "--threads"),
        "t1 epochs 0": (t1 + ["--epochs", "0"], "--epochs"),
        "t1 device": (t1 + ["--device", "cuda:99"], "--device"),
        "t2 device": (t2 + ["--device", "cuda:99"], "--device"),
        "t3 device": (t3 + ["--device", "cuda:99"], "--device"),
        "t1 out under file": (t1 + ["--out", str(afile / "out")], "--out"),
        "t3 out under file": (t3 + ["--out", str(afile / "out")], "--out"),
        "verify out under file": (["verify", "--out-dir", str(afile / "v")], "--out-dir"),
        "t1 corrupt csv": (t1 + ["--data-csv", str(bad_csv), "--out", str(tmp / "o1")], "--data-csv"),
        "t2 corrupt idx": (t2 + ["--data", "mnist", "--data-dir", str(idx), "--out", str(tmp / "o2")],
                           "--data-dir"),
        "t2 pairs": (t2 + ["--pairs", "3-3"], "--pairs"),
        "t2 route on official": (t2 + ["--set", "extra.spectral_route=closed_form", "--out", str(tmp / "o4")], "--set"),
        "t2 route method": (t2 + ["--protocol", "paper", "--methods", "opt_kappa", "--set",
                                  "extra.spectral_route=closed_form", "--out", str(tmp / "o5")], "--set"),
        "t2 report without store": (t2 + ["--report-only", "--out", str(tmp / "none")], "--report-only"),
        "t2 compare-with no store": (t2 + ["--compare-with", str(tmp / "none"), "--out", str(tmp / "o6")],
                                     "--compare-with"),
        "t1 set unknown": (t1 + ["--set", "lamda_H=1"], "lamda_H"),
        "t1 set extra unknown": (t1 + ["--set", "extra.shfit=1"], "extra.shfit"),
        "t1 set bad value": (t1 + ["--set", "epochs=0"], "epochs"),
        "t3 set unknown": (t3 + ["--set", "nope=1"], "nope"),
        "t1 config missing": (t1 + ["--config", str(tmp / "missing.json")], "--config"),
        "t1 probe target": (t1 + ["--probe-target", "2"], "--probe-target"),
        "t3 quick without proxy": (["reproduce", "table3", "--quick", "--arch", "vit", "--harmful", "cars"],
                                   "--quick"),
        "t3 neither mode": (["reproduce", "table3"], "--proxy"),
        "t3 paper inputs missing": (["reproduce", "table3", "--arch", "resnet18", "--harmful", "cars", "--out",
                                     str(tmp / "o3")], "--"),
        "reproduce unknown": (["reproduce", "table4"], "NAME"),
        "unknown command": (["nope"], "nope"),
        "main with args": (["main", "--quick"], "--quick"),
        "verify profile": (["verify", "--profile", "x"], "--profile"),
    }


#: the user errors run in fresh processes (the rest in this process): one per command, through argparse's exit
#: (table2), the command wrapper's one line for a ConfigError (table1) and a UsageError (table3, verify)
ERRORS_IN_PROCESSES = ("t2 seeds -1", "t1 set unknown", "t3 device", "verify out under file")


def test_every_user_error_is_one_line_and_status_2(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    cases = _error_cases(tmp_path)
    results = in_processes({n: cases[n][0] for n in ERRORS_IN_PROCESSES}, tmp_path)
    results.update({n: in_process(argv, tmp_path, capfd) for n, (argv, _) in cases.items() if n not in results})
    assert results.keys() == cases.keys()
    for name, r in results.items():
        lines = r.stderr.strip().splitlines()
        assert r.code == 2, (name, r.code, r.stderr[-2000:])
        assert len(lines) == 1 and "Traceback" not in r.stderr, (name, r.stderr[-2000:])
        assert cases[name][1] in lines[0], (name, lines[0])
    assert not (tmp_path / "results").exists()  # no error case wrote results
    assert not (tmp_path / "o6").exists()  # a missing --compare-with store is refused before the sweep runs


def test_two_runs_on_one_store_are_refused(tmp_path: Path) -> None:
    from kappalab.results import RunStore

    out = tmp_path / "out"
    with RunStore(out / "runs_paper.jsonl").lock():  # another run holds the store
        second = in_processes({"second": ["reproduce", "table1", "--quick", "--out", str(out)]}, tmp_path)["second"]
    code, stderr = second.code, second.stderr
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and "in use by another run" in stderr, stderr


def _default_sigint() -> None:
    """In the child before exec: SIGINT's default disposition, as in a terminal. A test session started in the
    background by a non-interactive shell (``cmd &``, nohup) inherits SIGINT ignored, and a Python started with it
    ignored installs no KeyboardInterrupt handler: the sweep would then never see the Ctrl-C this test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_every_worker_and_says_how_to_resume(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "kappalab.cli", "reproduce", "table1", "--quick", "--out",
                             str(out), "--workers", "2", "--epochs", "200"], cwd=tmp_path, env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=_default_sigint)
    store = out / "runs_paper.jsonl"
    deadline = time.monotonic() + 120
    # the first run stored: the workers are up and training (each has made its tqdm bars, whose lock once left a
    # "leaked semaphore" warning after the last line when the pool terminated them)
    while not (store.exists() and store.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert "run the same command again to resume" in last and "runs are stored" in last, stderr
    assert all(line.startswith("table1/paper: ") for line in stderr.strip().splitlines()[:-1]), stderr
    deadline = time.monotonic() + 60  # no worker is left behind in the group (terminated, then reaped)
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
