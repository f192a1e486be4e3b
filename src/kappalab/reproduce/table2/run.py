"""One Table 2 run (prepare, immunize, finish) in each engine's worker (:func:`run_one`: the single engine's,
:func:`batched_runs`: the batched engine's, which shares prepare and finish) and the plan of a sweep: which runs,
under which keys."""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kappalab.atomic_io import save_npz
from kappalab.extremes import eigensolver_option
from kappalab.reproduce.identity import identity, run_key
from kappalab.sweep import Job, limit_threads

from .constants import ALL_PAIRS, ENGINES, PROBE_PAIRS, PROBE_SEED
from .data import data_identity, mnist_task, table2_config
from .probe import probe_measures
from .spectra import SPECTRA_METHOD, data_spectra, rir_from_spectra, rtol_sensitivity, run_spectra

if TYPE_CHECKING:
    from kappalab.immunization import ImmunizationRun, LinearTask, MethodConfig


def run_label(protocol: str, method: str, a: int, b: int, seed: int, epochs: int, pool: int = 1) -> str:
    """The readable part of a run's key (the key adds the identity hash; a record without a run identity has this
    label alone as its key)."""
    return f"{protocol}.{method}.{a}-{b}.s{seed}.e{epochs}" + ("" if pool == 1 else f".p{pool}")


@dataclass(frozen=True)
class PairRun:
    """What every Table 2 run spec starts with (the sweep's :class:`RunSpec`, App. C.2's
    :class:`~kappalab.reproduce.table2.selection.TrajectorySpec`): its key and identity, protocol, method, ordered
    digit pair and seed; :meth:`head` is the start of its record's ``params``."""

    key: str  #: the run's key (its label and the identity's hash)
    identity: Mapping[str, Any]  #: its identity (:func:`kappalab.reproduce.identity.identity`)
    protocol: str
    method: str
    a: int  #: D_P's digit
    b: int  #: D_H's digit
    seed: int

    def head(self) -> dict[str, Any]:
        return {"key": self.key, "identity": self.identity, "protocol": self.protocol, "method": self.method,
                "a": self.a, "b": self.b, "seed": self.seed}


@dataclass(frozen=True)
class RunSpec(PairRun):
    """One run of a Table 2 sweep, as its worker reads it (typed fields); :meth:`record` is the record's
    ``params`` (a file format: the keys and values stores have always held) and :attr:`config` its resolved
    config, built once per run."""

    epochs: int
    pool: int  #: average pooling of the 28 x 28 images (1: none)
    out: Path  #: the sweep's output folder (the run's spectra go under ``out/spectra``)
    device: str
    dataset: str
    data_dir: str | None
    overrides: Mapping[str, Any]  #: the plan's ``--set`` overrides
    probe: bool  #: measure the independent (probing) measures too

    @functools.cached_property
    def config(self) -> MethodConfig:
        """The run's resolved config: its protocol and method, the plan's overrides and epochs."""
        return _config(self.protocol, self.method, tuple(sorted(self.overrides.items(), key=str)), self.epochs)

    def record(self) -> dict[str, Any]:
        return {**self.head(), "epochs": self.epochs, "pool": self.pool, "out": str(self.out), "device": self.device,
                "dataset": self.dataset, "data_dir": self.data_dir, "overrides": self.overrides, "probe": self.probe}


def prepare(spec: RunSpec) -> LinearTask:
    """What both engines train on: the run's :class:`~kappalab.immunization.LinearTask` (its pair and seed), checked
    against its config."""
    cfg = spec.config
    task = mnist_task(spec.a, spec.b, spec.seed, spec.data_dir, spec.pool, spec.dataset)
    if cfg.extra.loss not in (None, task.loss):
        raise ValueError(f"config {cfg.source[-1]}: extra loss {cfg.extra.loss!r} but the MNIST task uses "
                         f"{task.loss!r}")
    return task


def finish(spec: RunSpec, task: LinearTask, run: ImmunizationRun, train_s: float, engine: str) -> dict[str, Any]:
    """What both engines do after training: store the run's spectra, evaluate it, probe it (when asked); returns
    the record's ``result``, which names the ``engine`` that trained it (``train_s``: its training time; a batch's
    time divided by its runs) and keeps its training ``history`` (the whole-task kappas at the config's
    ``monitor_every`` epochs and each term's value per epoch: :attr:`ImmunizationRun.history`) and the ``data`` it
    read (:meth:`kappalab.data.mnist.MnistData.identity`: name, split, IDX sha256, rows per digit; with the pooling
    and the balanced rows used per task)."""
    from kappalab.immunization import evaluate

    from .data import load_dataset

    start = time.perf_counter()
    cfg = spec.config
    theta = np.asarray(run.theta_I, dtype=np.float64)
    spectra = run_spectra(task, theta, run.bias, data_spectra(spec.a, spec.b, spec.seed, spec.data_dir, spec.pool,
                                                              spec.dataset))
    folder = spec.out / "spectra"
    folder.mkdir(parents=True, exist_ok=True)
    save_npz(folder / f"{spec.key}.npz", compressed=True, **spectra)
    evaluation = evaluate(run, task, sensitivity=("pinv",), endpoints=False)  # only what the report reads
    result: dict[str, Any] = {
        "gram": rir_from_spectra(spectra), "rtol_sensitivity": rtol_sensitivity(spectra),
        "evaluate": evaluation, "train_s": train_s, "n_steps": run.n_steps,
        "degenerate_count": run.degenerate_count, "eigensolver_fallbacks": run.eigensolver_fallbacks,
        "spectra_file": f"spectra/{spec.key}.npz",
        "config_source": list(cfg.source), "data_label": task.data_label,
        "spectral_route": cfg.extra.spectral_route, "spectra": SPECTRA_METHOD,
        "engine": engine, "engine_notes": list(run.notes), "history": run.history,
        "data": {**load_dataset(spec.dataset, spec.data_dir).identity(), "pool": spec.pool,
                 "rows_used": {"P": int(task.X_P.shape[0]), "H": int(task.X_H.shape[0])}},
    }
    if spec.probe:
        result["probe"] = probe_measures(theta, run.bias, task.X_P, task.X_H, spec.a, spec.b, spec.seed,
                                         spec.data_dir, spec.pool, spec.dataset)
    result["total_s"] = train_s + time.perf_counter() - start
    return result


def run_one(spec: RunSpec) -> dict[str, Any]:
    """Sweep worker of the single engine (one BLAS/torch thread per run: the sweep's processes are its
    parallelism): :func:`prepare`, immunize the one run, :func:`finish`."""
    from kappalab.immunization import immunize

    limit_threads(1)
    task = prepare(spec)
    start = time.perf_counter()
    run = immunize(task, spec.config, spec.seed, device=spec.device)
    return finish(spec, task, run, time.perf_counter() - start, "single")


def batched_runs(device: str, batch_size: int):
    """A :data:`kappalab.sweep.BatchRunner` for :func:`kappalab.sweep.run_batched_sweep`: the jobs' specs through
    :func:`kappalab.immunization.batched.run_batch` with :func:`prepare` and :func:`finish` (the batched
    engine's worker)."""
    from kappalab.immunization.batched import run_batch

    def runner(specs: list[RunSpec]) -> Iterator[tuple[int, dict[str, Any]]]:
        return run_batch(specs, device, batch_size, task_of=prepare, config_of=operator.attrgetter("config"),
                         finish=lambda spec, task, run, train_s: finish(spec, task, run, train_s, "batched"))
    return runner


def identity_options(engine: str) -> dict[str, str]:
    """The engine's part of a run's identity options (:func:`kappalab.reproduce.identity.engine_option`: none for
    the single engine, ``{"engine": "batched"}`` for the batched one; :mod:`.engine`'s docstring)."""
    from kappalab.reproduce.identity import engine_option

    if engine not in ENGINES[1:]:
        raise ValueError(f"engine must be 'single' or 'batched', got {engine!r}")
    return engine_option(engine)


@dataclass(frozen=True)
class SweepPlan:
    """What ``main`` runs: protocol, methods, pairs, seeds, epochs, output folder, data, config overrides."""

    protocol: str
    methods: tuple[str, ...]
    pairs: tuple[tuple[int, int], ...]
    seeds: tuple[int, ...]
    epochs: int
    out: Path
    device: str = "cpu"
    data_dir: str | None = None
    pool: int = 1
    probe_pairs: tuple[tuple[int, int], ...] = PROBE_PAIRS
    dataset: str = "mnist-subset"
    overrides: dict[str, Any] = field(default_factory=dict)
    engine: str = "single"  #: "single" or "batched" (:func:`identity_options`: its part of the identity)

    @property
    def store_path(self) -> Path:
        return self.out / f"runs_{self.protocol}.jsonl"

    def config(self, method: str):
        """The method's resolved config (overrides applied, epochs from the plan)."""
        return _config(self.protocol, method, tuple(sorted(self.overrides.items(), key=str)), self.epochs)

    def jobs(self) -> list[Job]:
        data = data_identity(self.dataset, self.data_dir, self.pool)
        jobs = []
        for method in self.methods:
            resolved = self.config(method).resolved()
            for a, b in self.pairs:
                for seed in self.seeds:
                    probe = (a, b) in self.probe_pairs and seed == PROBE_SEED
                    ident = identity(resolved, data, {"a": a, "b": b, "seed": seed, "pool": self.pool,
                                                      "device": self.device, "dtype": "float64", "probe": probe,
                                                      **identity_options(self.engine),
                                                      **eigensolver_option(self.device)})
                    key = run_key(run_label(self.protocol, method, a, b, seed, self.epochs, self.pool), ident)
                    jobs.append(Job(key, RunSpec(key, ident, self.protocol, method, a, b, seed, self.epochs,
                                                 self.pool, self.out, self.device, self.dataset, self.data_dir,
                                                 self.overrides, probe)))
        # seed-major, methods interleaved: a partial sweep covers every method on the same pairs
        order = {pair: i for i, pair in enumerate(self.pairs)}
        return sorted(jobs, key=lambda j: (j.spec.seed, order[(j.spec.a, j.spec.b)],
                                           self.methods.index(j.spec.method)))


@functools.lru_cache(maxsize=16)
def _config(protocol: str, method: str, overrides: tuple[tuple[str, Any], ...], epochs: int):
    return table2_config(protocol, method, dict(overrides)).replace(epochs=epochs)


def parse_pairs(text: str) -> tuple[tuple[int, int], ...]:
    """``"0-1,3-8"`` -> ((0, 1), (3, 8)); ``"all"`` -> the 90 ordered pairs."""
    if text == "all":
        return ALL_PAIRS
    pairs = []
    for item in text.split(","):
        try:
            a, b = (int(x) for x in item.strip().split("-"))
        except ValueError:
            raise ValueError(f"--pairs: {item!r} is not of the form a-b (digits)") from None
        if not (0 <= a <= 9 and 0 <= b <= 9 and a != b):
            raise ValueError(f"--pairs: {item!r} must name two different digits 0..9")
        pairs.append((a, b))
    if len(set(pairs)) != len(pairs):
        raise ValueError(f"--pairs: a pair is repeated in {text!r}")
    return tuple(pairs)


def parse_ints(text: str, name: str) -> tuple[int, ...]:
    """Comma-separated integers >= 0, none repeated (``--seeds 0,1,2``)."""
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"{name}: expected comma-separated integers, got {text!r}") from None
    if any(v < 0 for v in values):
        raise ValueError(f"{name}: must be >= 0, got {text!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"{name}: repeated value in {text!r}")
    return values
