"""One Table 2 :class:`~.plan.RunSpec` -> one record's ``result`` (prepare, immunize, finish), in each engine's
worker (:func:`run_one`: the single engine's, :func:`batched_runs`: the batched engine's, which shares prepare and
finish)."""

from __future__ import annotations

import operator
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from kappalab.atomic_io import save_npz
from kappalab.sweep import limit_threads

from .data import mnist_task
from .probe import probe_measures
from .spectra import SPECTRA_METHOD, data_spectra, rir_from_spectra, rtol_sensitivity, run_spectra

if TYPE_CHECKING:
    from kappalab.immunization import ImmunizationRun, LinearTask

    from .plan import RunSpec


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
