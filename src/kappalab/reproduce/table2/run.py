"""One Table 2 run (prepare, immunize, finish) in each engine's worker (:func:`run_one`: the single engine's,
:func:`batched_runs`: the batched engine's, which shares prepare and finish) and the plan of a sweep: which runs,
under which keys."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

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
    """The readable part of a run's key (the key adds the identity hash; records written before run identities
    have this label alone as their key)."""
    return f"{protocol}.{method}.{a}-{b}.s{seed}.e{epochs}" + ("" if pool == 1 else f".p{pool}")


def config_of(params: dict[str, Any]) -> MethodConfig:
    """A job's resolved config (its protocol and method, the plan's overrides and epochs)."""
    return _config(params["protocol"], params["method"], tuple(sorted(params["overrides"].items(), key=str)),
                   int(params["epochs"]))


def prepare(params: dict[str, Any]) -> LinearTask:
    """What both engines train on: the job's :class:`~kappalab.immunization.LinearTask` (its pair and seed), checked
    against its config (:func:`config_of`)."""
    cfg = config_of(params)
    task = mnist_task(int(params["a"]), int(params["b"]), int(params["seed"]), params["data_dir"],
                      int(params["pool"]), params["dataset"])
    if cfg.extra.loss not in (None, task.loss):
        raise ValueError(f"config {cfg.source[-1]}: extra loss {cfg.extra.loss!r} but the MNIST task uses "
                         f"{task.loss!r}")
    return task


def finish(params: dict[str, Any], task: LinearTask, run: ImmunizationRun, train_s: float, engine: str
           ) -> dict[str, Any]:
    """What both engines do after training: store the run's spectra, evaluate it, probe it (when asked); returns
    the record's ``result``, which names the ``engine`` that trained it (``train_s``: its training time; a batch's
    time divided by its runs) and keeps its training ``history`` (the whole-task kappas at the config's
    ``monitor_every`` epochs and each term's value per epoch: :attr:`ImmunizationRun.history`) and the ``data`` it
    read (:meth:`kappalab.data.mnist.MnistData.identity`: name, split, IDX sha256, rows per digit; with the pooling
    and the balanced rows used per task)."""
    from kappalab.immunization import evaluate

    from .data import load_dataset

    start = time.perf_counter()
    a, b, seed = int(params["a"]), int(params["b"]), int(params["seed"])
    pool, dataset, directory = int(params["pool"]), params["dataset"], params["data_dir"]
    cfg = config_of(params)
    theta = np.asarray(run.theta_I, dtype=np.float64)
    spectra = run_spectra(task, theta, run.bias, data_spectra(a, b, seed, directory, pool, dataset))
    folder = Path(params["out"]) / "spectra"
    folder.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(folder / f"{params['key']}.npz", **spectra)
    evaluation = evaluate(run, task, sensitivity=("pinv",), endpoints=False)  # only what the report reads
    result: dict[str, Any] = {
        "gram": rir_from_spectra(spectra), "rtol_sensitivity": rtol_sensitivity(spectra),
        "evaluate": evaluation, "train_s": train_s, "n_steps": run.n_steps,
        "degenerate_count": run.degenerate_count, "spectra_file": f"spectra/{params['key']}.npz",
        "config_source": list(cfg.source), "data_label": task.data_label,
        "spectral_route": cfg.extra.spectral_route, "spectra": SPECTRA_METHOD,
        "engine": engine, "engine_notes": list(run.notes), "history": run.history,
        "data": {**load_dataset(dataset, directory).identity(), "pool": pool,
                 "rows_used": {"P": int(task.X_P.shape[0]), "H": int(task.X_H.shape[0])}},
    }
    if params["probe"]:
        result["probe"] = probe_measures(theta, run.bias, task.X_P, task.X_H, a, b, seed, directory, pool, dataset)
    result["total_s"] = train_s + time.perf_counter() - start
    return result


def run_one(params: dict[str, Any]) -> dict[str, Any]:
    """Sweep worker of the single engine: :func:`prepare`, immunize the one run, :func:`finish`."""
    from kappalab.immunization import immunize

    limit_threads(int(params.get("threads", 1)))
    task = prepare(params)
    start = time.perf_counter()
    run = immunize(task, config_of(params), int(params["seed"]), device=params["device"])
    return finish(params, task, run, time.perf_counter() - start, "single")


def batched_runs(device: str, batch_size: int):
    """A :data:`kappalab.sweep.BatchRunner` for :func:`kappalab.sweep.run_batched_sweep`: the jobs' params through
    :func:`kappalab.immunization.batched.run_batch` with :func:`prepare` and :func:`finish` (the batched
    engine's worker)."""
    from kappalab.immunization.batched import run_batch

    def runner(jobs: list[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        return run_batch(jobs, device, batch_size, task_of=prepare, config_of=config_of,
                         finish=lambda job, task, run, train_s: finish(job, task, run, train_s, "batched"))
    return runner


def identity_options(engine: str) -> dict[str, str]:
    """The engine's part of a run's identity options: none for the single engine (the reference: its keys are the
    ones written before the batched engine existed), ``{"engine": "batched"}`` for the batched one (:mod:`.engine`'s
    docstring)."""
    if engine not in ENGINES[1:]:
        raise ValueError(f"engine must be 'single' or 'batched', got {engine!r}")
    return {} if engine == "single" else {"engine": engine}


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
                    jobs.append(Job(key, {
                        "key": key, "identity": ident, "protocol": self.protocol, "method": method, "a": a,
                        "b": b, "seed": seed, "epochs": self.epochs, "pool": self.pool, "out": str(self.out),
                        "device": self.device, "dataset": self.dataset, "data_dir": self.data_dir,
                        "overrides": self.overrides, "probe": probe}))
        # seed-major, methods interleaved: a partial sweep covers every method on the same pairs
        order = {pair: i for i, pair in enumerate(self.pairs)}
        return sorted(jobs, key=lambda j: (j.params["seed"], order[(j.params["a"], j.params["b"])],
                                           self.methods.index(j.params["method"])))


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
