"""Table 2 under App. C.2's selection: runs with trajectories (either protocol), and the selection over them.

``kappalab reproduce table2 --protocol P --trajectory [--etas 0.0005,0.001,0.005,0.01] [--every E] ...`` runs, for
each (method, pair, seed, learning rate), the shipped ``table2_<P>_<method>`` configs (``paper``: Alg. 1, full
batch, 30 steps; ``official``: the authors' code, 64-row minibatches, its regularizers, a bias, 30 epochs)
on the ``train`` part of :func:`kappalab.data.mnist.pair_splits` (90% of the balanced training digits; the other
10% are ``validation``; ``test`` is MNIST's t10k digits, balanced), records (i), (ii), RIR on all three parts every
``every`` epochs (:class:`.trajectory.PairTrajectory`, at epoch boundaries), and stores per run
``trajectories/<key>.npz`` and ``spectra/<key>.npz`` (the final spectra on the train part: the record's (i), (ii),
RIR recompute from them). Both protocols are evaluated as every Table 2 record is (:func:`.spectra.run_spectra`,
:func:`.spectra.rir_from_spectra`: the official bias in ``H(theta)``, none in K). Each protocol has its own store
file (:func:`store_name`) and report (``selection_<protocol>.{md,json}``), so both can share one ``--out``.

The selection (:func:`selection_records`) applies :mod:`kappalab.immunization.selection` unchanged:

* rules :data:`RULES`: per run, among the recorded epochs >= 1 (headline) or those with (ii) <= 1 (Table 1's
  headline rule), the one with the largest RIR; per method, the learning rate with the largest mean selected RIR
  among those where every run has such an epoch. Neither has Table 1's D_P-loss condition: Table 2's D_P labels are
  all 0 in the authors' code, so there is no "test accuracy" to hold, and "early stopping using RIR" alone is the
  largest RIR. (ii) <= 1 is kept as the second rule: at the random initialization (ii) is already ~2-3.4, so only
  a method that conditions H_P (Ours) can meet it;
* variants :data:`VARIANTS`: ``paper`` selects and reports on the training rows (what App. C.2 describes: the
  selection sees the data it reports), ``validation`` selects on the validation part and reports on MNIST's test
  digits;
* grids: ``lr_grid``: the (pair, seed) cells that hold every learning rate of the store (learning rate and epoch
  selected); ``epoch_only``: every run at the configs' learning rate (Table 4's 0.001; the epoch alone selected);
  and ``none``: the last epoch (Table 4's 30) of every run, per learning rate.

Every number of the report is recomputed from the stored trajectories and spectra (``tests/test_table2_store.py``).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from kappalab.atomic_io import save_npz
from kappalab.immunization.selection import REPORTED, Rule, select
from kappalab.reproduce.identity import device_options, identity, run_key
from kappalab.results import MEAN_STD_CONVENTION, RunStore, format_mean_std, mean_std, to_jsonable, write_report
from kappalab.sweep import Job, limit_threads

from .constants import METHOD_LABELS, METHODS, PAPER_TABLE2, SUCCESS_THRESHOLD
from .data import load_dataset, table2_config
from .figure import figure2
from .plan import PairRun
from .spectra import rir_from_spectra, rtol_sensitivity, run_spectra
from .trajectory import PARTS, PairTrajectory, reduce_parts

if TYPE_CHECKING:
    from kappalab.immunization import MethodConfig

ETAS = (0.0005, 0.001, 0.005, 0.01)  #: App. C.2's learning-rate grid for linear models
#: the selection rules, the headline first (module docstring)
RULES = (Rule(max_term_ii=math.inf, loss_slack=math.inf, stopping="max_rir"),
         Rule(max_term_ii=1.0, loss_slack=math.inf, stopping="max_rir"))
#: variant -> (part selected on, part reported on)
VARIANTS = {"paper": ("train", "train"), "validation": ("validation", "test")}
#: the report's title per protocol
TITLES = {"paper": "paper protocol (Alg. 1)",
          "official": "official protocol (the authors' code: 64-row minibatches, its regularizers, a bias)"}


def store_name(protocol: str) -> str:
    """The store file of a protocol's trajectory runs."""
    if protocol not in TITLES:
        raise ValueError(f"protocol must be one of {tuple(TITLES)}, got {protocol!r}")
    return f"runs_{protocol}_trajectory.jsonl"


def traj_label(protocol: str, method: str, a: int, b: int, seed: int, eta: float, epochs: int) -> str:
    """The readable part of a trajectory run's key."""
    return f"{protocol}.traj.{method}.{a}-{b}.s{seed}.lr{eta:g}.e{epochs}"


def pair_parts(dataset: str, directory: str | None, a: int, b: int, seed: int):
    """The :class:`~kappalab.data.mnist.PairSplits` of a pair (needs full MNIST: the subset has no test split)."""
    from kappalab.data.mnist import load_digits, pair_splits

    if dataset != "mnist":
        raise ValueError(f"--trajectory needs --data mnist (validation and MNIST's test split), got {dataset!r}")
    return pair_splits(load_dataset(dataset, directory), load_digits(dataset, directory, split="test"), a, b, seed)


@functools.lru_cache(maxsize=1)
def pair_data(dataset: str, directory: str | None, a: int, b: int, seed: int, bias: bool = False):
    """The pair's splits and :func:`.trajectory.reduce_parts` of its parts (D_P labels 0; ``bias``: the runs'
    features have one; cached: the jobs of one pair and seed are consecutive)."""
    splits = pair_parts(dataset, directory, a, b, seed)
    parts = {}
    for part in PARTS:
        X_P, X_H = splits.arrays(part)
        parts[part] = (X_P, np.zeros(len(X_P)), X_H)
    return splits, reduce_parts(parts, bias)


def data_record(dataset: str, directory: str | None, splits=None) -> dict[str, Any]:
    """The records' ``data``: the dataset's name, the sha256 of its training and test splits (IDX bytes), rows per
    digit of each split, and (given the pair's splits) the rows per digit of each part."""
    from kappalab.data.mnist import load_digits

    train, test = load_dataset(dataset, directory), load_digits(dataset, directory, split="test")
    out: dict[str, Any] = {"name": dataset, "sha256": train.sha256, "test_sha256": test.sha256,
                           "rows_per_digit": list(train.rows_per_digit),
                           "test_rows_per_digit": list(test.rows_per_digit)}
    if splits is not None:
        out["pair_rows"] = splits.sizes()
    return out


@dataclass(frozen=True)
class TrajectorySpec(PairRun):
    """One run of ``--trajectory``, as its worker reads it (typed fields); :meth:`record` is the record's
    ``params`` (the keys and values its stores have always held) and :attr:`config` its resolved config, built
    once per run."""

    eta: float  #: the learning rate (a value of ``--etas``)
    epochs: int
    every: int  #: the trajectory's epochs between records
    out: Path  #: the sweep's output folder (``out/spectra``, ``out/trajectories``)
    dataset: str
    data_dir: str | None
    device: str
    overrides: Mapping[str, Any]  #: the plan's ``--set`` overrides

    @functools.cached_property
    def config(self) -> MethodConfig:
        """The run's resolved config: the shipped ``table2_<protocol>_<method>``, the overrides, its epochs and
        learning rate."""
        return table2_config(self.protocol, self.method, self.overrides).replace(epochs=self.epochs, eta=self.eta)

    def record(self) -> dict[str, Any]:
        return {**self.head(), "eta": self.eta, "epochs": self.epochs, "every": self.every, "out": str(self.out),
                "dataset": self.dataset, "data_dir": self.data_dir, "device": self.device, "overrides": self.overrides}


def trajectory_run(spec: TrajectorySpec) -> dict[str, Any]:
    """Sweep worker (one BLAS/torch thread per run): one run of the spec's protocol on the pair's train part, with
    its trajectory at epoch boundaries; stores trajectory and spectra."""
    from kappalab.immunization import LinearTask, immunize
    from kappalab.immunization.protocols import PROTOCOL_CLASSES
    from kappalab.reproduce.table1.run import steps_per_epoch

    limit_threads(1)
    a, b, seed, cfg = spec.a, spec.b, spec.seed, spec.config
    splits, reduced = pair_data(spec.dataset, spec.data_dir, a, b, seed, PROTOCOL_CLASSES[cfg.protocol].has_bias and cfg.extra.bias)
    start = time.perf_counter()
    X_P, X_H = splits.arrays("train")
    task = LinearTask(X_P, np.zeros(len(X_P)), X_H, np.ones(len(X_H)), "bce", f"mnist/{a}-{b}/train",
                      f"{spec.dataset} pair {a}-{b} train part (seed {seed})")
    steps = steps_per_epoch(task, cfg, 1)
    recorder = PairTrajectory(reduced, spec.every, steps)
    run = immunize(task, cfg, seed, device=spec.device, observer=recorder)
    train_s = time.perf_counter() - start
    if recorder.epochs[-1] * steps != run.n_steps:
        raise ValueError(f"the trajectory's last epoch ({recorder.epochs[-1]} x {steps} steps) is not the run's end "
                         f"({run.n_steps} steps): --every {spec.every} must divide the epochs")
    r = recorder.reduced["train"]
    spectra = run_spectra(task, run.theta_I, run.bias, {"K_P": r["K_P"], "K_H": r["K_H"]})
    files = {"spectra": f"spectra/{spec.key}.npz", "trajectory": f"trajectories/{spec.key}.npz"}
    for name, arrays in (("spectra", spectra), ("trajectory", recorder.arrays())):
        (spec.out / files[name]).parent.mkdir(parents=True, exist_ok=True)
        save_npz(spec.out / files[name], compressed=True, **arrays)
    return {"gram": rir_from_spectra(spectra), "rtol_sensitivity": rtol_sensitivity(spectra), "files": files,
            "data": data_record(spec.dataset, spec.data_dir, splits), "train_s": train_s,
            "n_steps": run.n_steps, "steps_per_epoch": steps, "degenerate_count": run.degenerate_count,
            "eigensolver_fallbacks": run.eigensolver_fallbacks, "config_source": list(cfg.source),
            "total_s": time.perf_counter() - start}


@dataclass(frozen=True)
class TrajectoryPlan:
    """The runs of ``--trajectory``: methods x pairs x seeds x learning rates of one protocol."""

    protocol: str
    methods: tuple[str, ...]
    pairs: tuple[tuple[int, int], ...]
    seeds: tuple[int, ...]
    etas: tuple[float, ...]
    epochs: int
    every: int
    out: Path
    dataset: str = "mnist"
    data_dir: str | None = None
    device: str = "cpu"
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def store_path(self) -> Path:
        return self.out / store_name(self.protocol)

    def jobs(self) -> list[Job]:
        """Learning-rate-major (one grid value finishes before the next), then seed, pair, method."""
        data = {k: v for k, v in data_record(self.dataset, self.data_dir).items() if k in ("name", "sha256",
                                                                                            "test_sha256")}
        jobs = []
        for eta in self.etas:
            for seed in self.seeds:
                for a, b in self.pairs:
                    for method in self.methods:
                        cfg = table2_config(self.protocol, method, self.overrides).replace(epochs=self.epochs,
                                                                                           eta=eta)
                        ident = identity(cfg.resolved(), data, {"a": a, "b": b, "seed": seed, "every": self.every,
                                                                "parts": "pair_splits", **device_options(self.device)})
                        key = run_key(traj_label(self.protocol, method, a, b, seed, eta, self.epochs), ident)
                        jobs.append(Job(key, TrajectorySpec(key, ident, self.protocol, method, a, b, seed, eta,
                                                            self.epochs, self.every, self.out, self.dataset,
                                                            self.data_dir, self.device, self.overrides)))
        return jobs


# -- the selection, from the store alone --------------------------------------------------------------------------

def load_runs(out: Path, records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One dict per record: method, pair, seed, eta, its trajectory arrays and its (i), (ii), RIR recomputed from
    its stored spectra (``final``)."""
    runs = []
    for r in records:
        p, res = r["params"], r["result"]
        with np.load(out / res["files"]["trajectory"]) as z:
            traj = {k: z[k] for k in z.files}
        with np.load(out / res["files"]["spectra"]) as z:
            final = rir_from_spectra({k: z[k] for k in z.files})
        runs.append({"key": r["key"], "method": p["method"], "pair": (int(p["a"]), int(p["b"])),
                     "seed": int(p["seed"]), "eta": float(p["eta"]), "traj": traj, "final": final,
                     "data": res["data"]})
    return runs


def _cells(runs: Sequence[Mapping[str, Any]]) -> dict[tuple, set[float]]:
    cells: dict[tuple, set[float]] = {}
    for r in runs:
        cells.setdefault((r["method"], r["pair"], r["seed"]), set()).add(r["eta"])
    return cells


def grid_runs(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The runs of the (method, pair, seed) cells that hold every learning rate of the store, restricted to the
    (pair, seed) cells complete for every method (one comparable set of runs per learning rate)."""
    etas = {r["eta"] for r in runs}
    methods = {r["method"] for r in runs}
    cells = _cells(runs)
    full = {(pair, seed) for (_, pair, seed) in cells
            if all(cells.get((m, pair, seed)) == etas for m in methods)}
    return [dict(r) for r in runs if (r["pair"], r["seed"]) in full] if len(etas) > 1 else []


def _summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out = {m: mean_std([row[m] for row in rows]) for m in ("term_i", "term_ii", "rir")}
    out["median_rir"] = float(np.median([row["rir"] for row in rows]))
    out["median_epoch"] = float(np.median([row["epoch"] for row in rows]))
    out[f"pairs_rir>{SUCCESS_THRESHOLD:g}"] = int(sum(row["rir"] > SUCCESS_THRESHOLD for row in rows))
    return out


def _select(runs: Sequence[Mapping[str, Any]], method: str, variant: str, rule: Rule) -> dict[str, Any]:
    """:func:`kappalab.immunization.selection.select` over one method's runs, every (pair, seed) one "seed" of the
    rule (an index; mapped back)."""
    mine = sorted((r for r in runs if r["method"] == method), key=lambda r: (r["pair"], r["seed"], r["eta"]))
    index = {cell: i for i, cell in enumerate(dict.fromkeys((r["pair"], r["seed"]) for r in mine))}
    select_on, report_on = VARIANTS[variant]
    s = select([{"eta": r["eta"], "seed": index[(r["pair"], r["seed"])], "traj": r["traj"]} for r in mine], rule,
               select_on, report_on, math.inf)  # no D_P-loss reference: every rule's loss_slack is inf
    cell_of = {i: cell for cell, i in index.items()}
    rows = [{**{k: v for k, v in row.items() if k != "seed"}, "pair": list(cell_of[row["seed"]][0]),
             "seed": cell_of[row["seed"]][1]} for row in s["per_seed"]]
    return {"lr": s["lr"], "candidates": s["candidates"], "rule": s["rule"], "select_on": select_on,
            "report_on": report_on, "per_run": rows, "summary": _summary(rows) if rows else None,
            "run_keys": sorted(r["key"] for r in mine if r["eta"] == s["lr"])}


def selection_records(runs: Sequence[Mapping[str, Any]], default_eta: float) -> list[dict[str, Any]]:
    """Every row of the report (see the module docstring), each with ``selection`` and ``data`` keys."""
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    data = {k: v for k, v in runs[0]["data"].items() if k != "pair_rows"} if runs else {}
    out = []
    grids = {"lr_grid": grid_runs(runs), "epoch_only": [r for r in runs if r["eta"] == default_eta]}
    for grid, rs in grids.items():
        if not rs:
            continue
        cells = sorted({(r["pair"], r["seed"]) for r in rs})
        for variant in VARIANTS:
            for rule in RULES:
                for method in methods:
                    out.append({"selection": variant, "grid": grid, "data": data, "method": method,
                                "n_cells": len(cells), "etas": sorted({r["eta"] for r in rs}),
                                "rule_text": rule.describe(), **_select(rs, method, variant, rule)})
    for eta in sorted({r["eta"] for r in runs}):
        for method in methods:
            mine = [r for r in runs if r["method"] == method and r["eta"] == eta]
            if not mine:
                continue
            for part in ("train", "test"):
                rows = [{"pair": list(r["pair"]), "seed": r["seed"], "epoch": int(r["traj"]["epoch"][-1]),
                         **{m: float(r["traj"][f"{part}.{m}"][-1]) for m in REPORTED}} for r in mine]
                out.append({"selection": "none", "grid": f"lr{eta:g}", "data": data, "method": method, "lr": eta,
                            "report_on": part, "per_run": rows, "summary": _summary(rows),
                            "run_keys": sorted(r["key"] for r in mine)})
    return out


def store_table(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per (learning rate, method): (i), (ii), RIR of the final epoch recomputed from the stored spectra (train
    part), mean +- std over pairs and seeds, and the run count."""
    out: dict[str, dict[str, Any]] = {}
    for eta in sorted({r["eta"] for r in runs}):
        for method in METHODS:
            mine = [r["final"] for r in runs if r["method"] == method and r["eta"] == eta]
            if mine:
                out[f"lr{eta:g}/{method}"] = {"n_runs": len(mine), **{m: mean_std([f[m] for f in mine])
                                                                      for m in ("term_i", "term_ii", "rir")},
                                               "median_rir": float(np.median([f["rir"] for f in mine]))}
    return out


def _terms(s: Mapping[str, Any]) -> str:
    """The ``(i) | (ii) | RIR | median RIR`` cells of a summary."""
    return " | ".join([*(format_mean_std(*s[m]) for m in ("term_i", "term_ii", "rir")), f"{s['median_rir']:.3g}"])


def _selected_row(r: Mapping[str, Any], paper_rir: Mapping[str, str]) -> str:
    s = r["summary"]
    if s is None:
        return f"| {METHOD_LABELS[r['method']]} | none admissible | | | | | | | | {paper_rir[r['method']]} |"
    return (f"| {METHOD_LABELS[r['method']]} | {r['lr']:g} | {len(r['per_run'])} | {s['median_epoch']:g} | "
            f"{_terms(s)} | {s[f'pairs_rir>{SUCCESS_THRESHOLD:g}']} | {paper_rir[r['method']]} |")


def markdown(rows: Sequence[Mapping[str, Any]], table: Mapping[str, Mapping[str, Any]], n_runs: int,
             protocol: str = "paper") -> str:
    """selection_<protocol>.md."""
    paper_rir = {m: format_mean_std(*PAPER_TABLE2[m][2]) for m in METHODS}
    bias = (" H(theta) of the features X theta + 1 b^T (the official bias), K = X^T X without it, as in every "
            "official Table 2 record." if protocol == "official" else "")
    lines = [f"# Table 2, {TITLES[protocol]} on full MNIST, under App. C.2's selection", "",
             f"{n_runs} runs. Numbers: {MEAN_STD_CONVENTION}, over the runs (pairs x seeds). (i), (ii), RIR: Table "
             "2's rule (rank decided on each part's K at n eps, pseudo-inverse kappa, from singular values)." + bias
             + " A rule's \"seed\" is one run, a (pair, seed) cell. Paper: Table 2 (reference only).", "",
             "## Final epoch, recomputed from the stored spectra (train part)", "",
             "| lr / Method | runs | (i) | (ii) | RIR | median RIR | paper RIR |", "|---|---|---|---|---|---|---|"]
    for name, t in table.items():
        lr, method = name.split("/")
        lines.append(f"| {lr} {METHOD_LABELS[method]} | {t['n_runs']} | {_terms(t)} | {paper_rir[method]} |")
    head = ("| Method | lr | runs | median epoch | (i) | (ii) | RIR | median RIR | "
            f"runs RIR>{SUCCESS_THRESHOLD:g} | paper RIR |")
    for grid, title in (("lr_grid", "learning rate and epoch selected"),
                        ("epoch_only", "epoch selected at the configs' learning rate")):
        for variant, (sel, rep) in VARIANTS.items():
            mine = [r for r in rows if r.get("grid") == grid and r["selection"] == variant]
            if not mine:
                continue
            lines += ["", f"## `{variant}` selection, {title}: selected on `{sel}`, reported on `{rep}` "
                      f"({mine[0]['n_cells']} (pair, seed) cells, learning rates {mine[0]['etas']})"]
            for rule in RULES:
                lines += ["", f"Rule: {rule.describe()}.", "", head, "|---|---|---|---|---|---|---|---|---|---|"]
                lines += [_selected_row(r, paper_rir) for r in mine if r["rule_text"] == rule.describe()]
    lines += ["", "## No selection: the last epoch, per learning rate, on the train part and on MNIST's test digits",
              "", "| Method | lr | part | runs | (i) | (ii) | RIR | median RIR | paper RIR |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["selection"] == "none":
            s = r["summary"]
            lines.append(f"| {METHOD_LABELS[r['method']]} | {r['lr']:g} | {r['report_on']} | {len(r['per_run'])} | "
                         f"{_terms(s)} | {paper_rir[r['method']]} |")
    return "\n".join(lines) + "\n"


def report(out: Path, default_eta: float, protocol: str = "paper") -> dict[str, Any]:
    """Rebuild ``selection_<protocol>.{json,md}`` from the protocol's store in ``out``; returns the JSON body."""
    records = RunStore(out / store_name(protocol)).records()
    runs = load_runs(out, records)
    rows = selection_records(runs, default_eta)
    table = store_table(runs)
    body = to_jsonable({"n_runs": len(runs), "rules": [rule.describe() for rule in RULES], "variants": VARIANTS,
                        "table": table, "records": rows})
    write_report(out, f"selection_{protocol}", body, markdown(rows, table, len(runs), protocol))
    final = [{"method": r["method"], "a": r["pair"][0], "b": r["pair"][1], "rir": r["final"]["rir"]}
             for r in runs if r["eta"] == default_eta]
    if final:
        epochs = sorted({int(r["traj"]["epoch"][-1]) for r in runs if r["eta"] == default_eta})
        figure2(final, out, "paper_alg1" if protocol == "paper" else f"{protocol}_trajectory",
                f"Figure 2, {TITLES[protocol]} on full MNIST, lr {default_eta:g}, epoch "
                f"{','.join(map(str, epochs))}, train part; {len(final)} runs (seed-averaged log10 RIR)")
    return body
