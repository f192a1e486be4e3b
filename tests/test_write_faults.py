"""A full disk at every write of a command (issue 37, item 3): for each command below, the k-th write fails with
ENOSPC, for every k up to the number of writes the command makes (counted on an undisturbed run), injected at the I/O
layer (:mod:`diskfull`). Each case:

* ends with ONE line on stderr naming the file the write was for (never the temporary file) and what to do, exit
  status 2, no traceback;
* leaves every store line a whole JSON record, the records stored before the fault unchanged (none lost), and no
  temporary file behind;
* then the same command on a free disk exits 0 and ends with the records of the undisturbed run: the same keys and
  the same results (timings, process ids, the output folder's path and the provenance aside: :func:`comparable`).

The comparison is exact (tolerance zero), which is the derived tolerance here: a resumed run is the same
computation as the undisturbed one (same code, data, seed and thread count, in the same process), so its floats are
bit-identical; a run redone on other inputs or silently skipped would show as a difference.

The commands run in this process (:func:`diskfull.kappalab`) at their smallest sizes: one method, one seed, one
epoch. Drawing a figure is stubbed (``Figure.savefig`` writes a few bytes to the file it is given and
``tight_layout`` does nothing): the figure's file still goes through the same atomic write as every other file, and
drawing it for real would cost ~1 s per run, 2 runs per write (tests/test_atomic_io.py writes real figures). Nor
is a file ``fsync``-ed (~0.2 s per run here): the fault is injected at the write, before the fsync, and flushing
to the disk is not what these tests see. The git state of the provenance (volatile here) is read once.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from diskfull import kappalab, leftovers, store_lines

pytest.importorskip("torch")

#: keys whose values differ between two equal runs: timings, process ids, provenance, where a record was merged from
VOLATILE = re.compile(r"^(pid|provenance|merged_from|timestamp_utc)$|_s$")
ENOSPC = "No space left on device; free some disk space; then run the same command again: it resumes after the " \
    "runs already stored"


def comparable(value: Any, out: Path) -> Any:
    """``value`` without its :data:`VOLATILE` keys and with the output folder's path written ``OUT``."""
    if isinstance(value, dict):
        return {k: comparable(v, out) for k, v in value.items() if not VOLATILE.search(k)}
    if isinstance(value, list):
        return [comparable(v, out) for v in value]
    if isinstance(value, str):
        return value.replace(str(out), "OUT")
    return value


@dataclass(frozen=True)
class Command:
    """A command under test: its arguments for an output folder, and the files holding what it ends with (stores:
    ``*.jsonl``; a command without a store: its JSON report)."""

    argv: Callable[[Path], list[str]]
    results: tuple[str, ...]

    def outcome(self, out: Path) -> str:
        """What the command ended with, comparable across folders (records by key, as JSON text: NaN == NaN)."""
        ended = {}
        for name in self.results:
            if name.endswith(".jsonl"):
                ended[name] = {r["key"]: comparable(r, out) for r in store_lines(out / name)}
            else:
                ended[name] = comparable(json.loads((out / name).read_text()), out)
        return json.dumps(ended, sort_keys=True)


TABLE2 = ["reproduce", "table2", "--quick", "--methods", "rill_only", "--pairs", "0-1,2-5", "--no-probe",
          "--no-progress"]
TABLE3 = ["reproduce", "table3", "--proxy", "--quick", "--seeds", "0", "--methods", "rill_only", "--set", "width=2",
          "--set", "max_train_per_task=32", "--set", "test_fraction=0.02", "--set", "rir_groups=2", "--set",
          "rir_group_size=8", "--set", "probe_epochs=2"]


@pytest.fixture(autouse=True)
def cheaper(monkeypatch: pytest.MonkeyPatch) -> None:
    """Figures and progress bars are not drawn, files not fsync-ed and git asked once (module docstring); every file
    is still written, through the I/O layer."""
    from matplotlib.figure import Figure

    monkeypatch.setattr(Figure, "savefig", lambda self, file, **options: file.write(b"a figure"))
    monkeypatch.setattr(Figure, "tight_layout", lambda self, *args, **options: None)
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    from kappalab import provenance

    monkeypatch.setattr(provenance, "git_state", functools.cache(provenance.git_state))  # 2 git processes a run
    import tqdm.auto

    bar = tqdm.auto.tqdm  # Table 3's per-epoch bars (it has no --no-progress): not drawn
    monkeypatch.setattr(tqdm.auto, "tqdm", lambda *args, **options: bar(*args, **{**options, "disable": True}))


def _features(folder: Path) -> list[str]:
    """``--p0 --h0 --pi --hi`` of four small random feature files (written here, outside the I/O layer)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng, argv = np.random.default_rng(0), []
    for name in ("p0", "h0", "pi", "hi"):
        np.save(folder / f"{name}.npy", rng.standard_normal((24, 3)))
        argv += [f"--{name}", str(folder / f"{name}.npy")]
    return argv


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The two shards of TABLE2's sweep, to merge (one run each: ``shard_of`` puts 0-1 in the first, 2-5 in the
    second)."""
    root = tmp_path_factory.mktemp("shards")
    for k in (1, 2):
        assert kappalab([*TABLE2, "--shard", f"{k}/2", "--out", str(root / str(k))]).code == 0
    return [root / "1", root / "2"]


def commands(shards: list[Path], inputs: Path) -> dict[str, Command]:
    return {
        "table1": Command(lambda out: ["reproduce", "table1", "--quick", "--methods", "rill_only", "--seeds", "0",
                                       "--epochs", "1", "--probe-iters", "2", "--no-progress", "--out", str(out)],
                          ("runs_paper.jsonl",)),
        "table2": Command(lambda out: [*TABLE2, "--out", str(out)], ("runs_official.jsonl",)),
        "table3": Command(lambda out: [*TABLE3, "--out", str(out), "--work", str(out / "work")], ("runs.jsonl",)),
        "measure": Command(lambda out: ["measure", *_features(inputs), "--groups", "2", "--group-size", "6",
                                        "--n-boot", "20", "--n-boot-exact", "20", "--json", str(out / "m.json")],
                           ("m.json",)),
        "analyze": Command(lambda out: ["analyze", "monotonicity", "--out", str(out), "--table1-seeds", "0",
                                        "--table1-epochs", "1", "--skip-table2"], ("monotonicity.json",)),
        "merge": Command(lambda out: [*TABLE2, "--merge", *map(str, shards), "--out", str(out)],
                         ("runs_official.jsonl",)),
    }


def _target(write: str) -> str:
    """The file a write was for: the store itself, or the target of an atomic write's ``.NAME.PID.RANDOM.tmp``."""
    path = Path(write)
    match = re.fullmatch(r"\.(.+)\.\d+\.[0-9a-f]{8}\.tmp", path.name)
    return str(path.with_name(match.group(1))) if match else write


@dataclass(frozen=True)
class Tally:
    """What one command's cases showed (printed for docs/reliability.md)."""

    writes: int
    one_line_exits: int
    records_lost: int
    resumes_equal: int


@pytest.mark.parametrize("name", ["table1", "table2", "table3", "measure", "analyze", "merge"])
def test_a_full_disk_at_every_write_is_one_line_and_the_same_command_resumes(name: str, tmp_path: Path,
                                                                             request: pytest.FixtureRequest) -> None:
    command = commands(request.getfixturevalue("shards") if name == "merge" else [], tmp_path / "inputs")[name]
    clean = kappalab(command.argv(tmp_path / "clean"))
    assert clean.code == 0 and clean.stderr == "", clean.stderr
    undisturbed = command.outcome(tmp_path / "clean")
    one_line = lost = equal = 0
    for k, write in enumerate(clean.writes, start=1):
        out = tmp_path / f"k{k}"
        failed = kappalab(command.argv(out), fail_at=k)
        where = f"{name}, write {k} of {len(clean.writes)} ({write})"
        target = _target(failed.writes[k - 1])
        assert target.replace(str(out), "OUT") == _target(write).replace(str(tmp_path / "clean"), "OUT"), where
        assert failed.code == 2, where
        assert re.fullmatch(rf"kappalab [a-z0-9 ]+: error: {re.escape(target)}: {re.escape(ENOSPC)}",
                            failed.one_line()), (where, failed.stderr)
        one_line += 1
        assert leftovers(out) == [], where
        kept = {store: (out / store).read_bytes() if (out / store).exists() else b"" for store in command.results
                if store.endswith(".jsonl")}
        for store in kept:
            store_lines(out / store)  # every line a whole record
        resumed = kappalab(command.argv(out))
        assert resumed.code == 0 and resumed.stderr == "", (where, resumed.stderr)
        lost += sum(not (out / store).read_bytes().startswith(before) for store, before in kept.items())
        assert command.outcome(out) == undisturbed, where
        equal += 1
    print(f"\n{name}: {Tally(len(clean.writes), one_line, lost, equal)}")
    assert lost == 0 and one_line == equal == len(clean.writes)


@pytest.fixture
def tmpfs(tmp_path: Path):
    """``mount(size)``: a tmpfs of ``size`` bytes (rounded up to pages), unmounted at the end; the test is skipped,
    saying why, where mounting is not permitted (not root, or no CAP_SYS_ADMIN in a container)."""
    import subprocess

    mounted: list[Path] = []

    def mount(size: int) -> Path:
        folder = tmp_path / f"tmpfs{len(mounted)}"
        folder.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_real_small_disk_fills_then_a_copy_resumes_on_a_free_disk(tmp_path: Path, tmpfs) -> None:
    """Table 1 on real tmpfs disks of half the pages its undisturbed run takes on one, and of one page less: one
    line, status 2, a valid store; then the same command over a copy of that output on a free disk ends with the
    undisturbed run's records."""
    command = commands([], tmp_path / "inputs")["table1"]
    roomy = tmpfs(64 << 20)
    assert kappalab(command.argv(roomy / "out")).code == 0
    disk = os.statvfs(roomy)
    used = disk.f_blocks - disk.f_bfree  # pages, as tmpfs counts them
    undisturbed = command.outcome(roomy / "out")
    for pages in (used // 2, used - 1):
        small = tmpfs(pages * disk.f_frsize)
        failed = kappalab(command.argv(small / "out"))
        assert failed.code == 2 and failed.one_line().endswith(f": {ENOSPC}"), failed.stderr
        print(f"\n{pages} of {used} pages: {failed.one_line()}")
        store_lines(small / "out" / "runs_paper.jsonl")
        copy = tmp_path / f"copy{pages}"
        shutil.copytree(small / "out", copy)
        assert kappalab(command.argv(copy)).code == 0
        # the records stored on the small disk name the folder they were written to
        assert command.outcome(copy).replace(str(small / "out"), "OUT") == undisturbed
