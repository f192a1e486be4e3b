"""The scope runs for a linear extractor: every attacker on every model of one table, against references.

A *group* is one seed (and pair) of a table: the harmful task's rows ``X_H, y_H`` split once by the seed
(:func:`kappalab.attack.problem.split_rows`), the immunized extractors of the four methods made with that seed, and
three references on the same rows: ``direct`` (theta = I, Eq. 15's reference and Table 1's), ``init`` (the run's
initial theta, what the immunization started from) and ``random`` (an independent Gaussian extractor, entries
``N(0, 1/D)``, a null control). Each attacker runs ``reach_factor x`` the largest slowdown budget steps on each
model (by default :data:`SLOWDOWN_BUDGETS`, 1, 10, 100: 10 x 100 steps); the slowdown of every model against each
reference is taken at each slowdown budget, the losses at 1, 10, 100 and 1000 steps. A budget-1000 slowdown
(``budgets`` 1, 10, 100, 1000) takes 10,000 steps per run: run for Table 1 and for the probe attackers of one
Table 2 seed (cost, see docs/attacks.md).

Output (:func:`write`): ``<table>.jsonl``, one record per model x attacker (``table``, ``method``, ``attacker``,
``seed``, ``pair``, provenance), and ``<table>_curves.npz``, each run's training-loss curve (steps 0 to 10 x the
largest slowdown budget) under ``<model id>|<attacker>``, from which the slowdowns are recomputed
(tests/test_attack_docs.py).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kappalab.atomic_io import save_npz, write_text
from kappalab.provenance import provenance
from kappalab.results import to_jsonable

from .measures import Run, attack, slowdown
from .problem import Split
from .registry import Model, registry, settings
from .utility import DeepDPProbe, DPProbe

#: the budgets the slowdowns are taken at by default; the runs are reach_factor x the largest long
SLOWDOWN_BUDGETS = (1, 10, 100)
REFERENCES = ("direct", "init", "random")


def slowdown_budgets(text: str) -> tuple[int, ...]:
    """An argparse type: comma-separated budgets of the config's (``attack_grid.json``'s ``budgets``), e.g.
    ``1,10,100,1000``; each run is then ``reach_factor`` x the largest long."""
    allowed = settings().budgets
    try:
        values = tuple(sorted({int(x) for x in text.split(",")}))
    except ValueError:
        values = ()
    if not values or not set(values) <= set(allowed):
        raise argparse.ArgumentTypeError(f"expected budgets among {','.join(map(str, allowed))}, got {text!r}")
    return values


def add_slowdown_budgets(ap: argparse.ArgumentParser, note: str = "") -> None:
    """A scope runner's ``--slowdown-budgets`` (:func:`slowdown_budgets`; ``note``: what else the runner does with
    them)."""
    ap.add_argument("--slowdown-budgets", type=slowdown_budgets, default=SLOWDOWN_BUDGETS, metavar="B,B,...",
                    help="the budgets the slowdowns are taken at (default 1,10,100); each run is 10 x the largest "
                         f"long, so 1,10,100,1000 takes 10,000 steps a run{note}")


@dataclass(frozen=True)
class ModelSpec:
    """One extractor of a group: an immunized theta_I (``role`` "immunized") or a reference; a linear one
    (``theta``: its features are ``X theta``) or a deep one given by its D_H features alone (``features``, the rows
    of ``X``; the probe attackers only)."""

    method: str  #: a method of the table, or a reference name of :data:`REFERENCES`
    theta: np.ndarray | None
    role: str  #: "immunized" or "reference"
    run_key: str | None = None  #: the run identity theta_I was regenerated from
    rir: float | None = None  #: its recorded RIR (Eq. 15 / 17), for the rank correlation
    features: np.ndarray | None = None  #: the D_H features of a deep extractor (``theta`` None)
    #: the deep extractor itself (:class:`kappalab.attack.deep_attackers.DeepExtractor`), for the attackers that
    #: change it (None: its features alone, the probe attackers only)
    deep: Any | None = None

    @property
    def id(self) -> str:
        return self.method


@dataclass(frozen=True)
class Group:
    table: str
    seed: int
    pair: str | None
    X: np.ndarray  #: D_H inputs
    y: np.ndarray  #: D_H targets
    models: tuple[ModelSpec, ...]
    trunk: np.ndarray | None = None  #: the deep extractors' inputs for the same rows (flattened trunk activations)
    #: D_P's inputs and targets, where D_P's utility under the linear extractors' attackers is measured (:mod:`.utility`)
    dp: tuple[np.ndarray, np.ndarray] | None = None
    #: D_P's trunk rows (flattened) and targets, the same for the deep extractors' attackers
    dp_trunk: tuple[np.ndarray, np.ndarray] | None = None

    def model_id(self, spec: ModelSpec) -> str:
        return f"{self.table}/{spec.id}/s{self.seed}" + (f"/{self.pair}" if self.pair else "")

    def curve_key(self, spec: ModelSpec, attacker: str) -> str:
        """The key of that attack's curve in ``<table>_curves.npz`` (and its record's ``curve``)."""
        return f"{self.model_id(spec)}|{attacker}"


def stored_twice(out: Path, table: str, groups: Sequence[Group], attackers: Sequence[str]) -> list[str]:
    """The curve keys these groups' attacks would add that ``out/<table>_curves.npz`` already holds."""
    npz = out / f"{table}_curves.npz"
    if not npz.is_file():
        return []
    with np.load(npz) as kept:
        stored = set(kept.files)
    return [key for g in groups for spec in g.models for a in attackers if (key := g.curve_key(spec, a)) in stored]


def random_extractor(dim: int, seed: int) -> np.ndarray:
    """The null-control extractor: i.i.d. ``N(0, 1/D)`` entries from ``seed``."""
    return np.random.default_rng([seed, 39]).standard_normal((dim, dim)) / np.sqrt(dim)


def run_group(group: Group, attackers: Sequence[str], log: Callable[[str], None] = print,
              budgets: Sequence[int] = SLOWDOWN_BUDGETS) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """Every attacker on every model of the group, ``reach_factor x max(budgets)`` steps each; records (without
    provenance, the slowdowns at ``budgets``) and curves."""
    cfg, known = settings(), registry()
    steps = cfg.reach_factor * max(budgets)
    inputs = Split.of(group.X, group.y, group.seed)
    trunk = None if group.trunk is None else Split.of(group.trunk, group.y, group.seed)
    changes = any(known[name].changes_extractor for name in attackers)
    measure_dp, measure_deep_dp = changes and group.dp is not None, changes and group.dp_trunk is not None
    # one Model per extractor, so its probe attackers share one SVD (Model.factor) and its extractor attackers one
    # fixed D_P probe
    models = {spec.id: Model(Split.of(group.X @ spec.theta, group.y, group.seed), inputs, spec.theta,
                             dp=DPProbe.of(*group.dp, spec.theta) if measure_dp else None)
              if spec.features is None else Model(Split.of(spec.features, group.y, group.seed),
                                                  trunk if spec.deep is not None else None, deep=spec.deep,
                                                  dp=DeepDPProbe.of(*group.dp_trunk, spec.deep)
                                                  if measure_deep_dp and spec.deep is not None else None)
              for spec in group.models}
    bare = [spec.id for spec in group.models if spec.features is not None and spec.deep is None]
    changing = [name for name in attackers if known[name].changes_extractor]
    if bare and changing:
        raise ValueError(f"{', '.join(changing)} change the extractor: not for the feature-only models {bare}")
    if trunk is None and any(spec.deep is not None for spec in group.models):
        raise ValueError("a deep extractor needs the group's trunk activations (Group.trunk)")
    records, curves = [], {}
    for name in attackers:
        runs: dict[str, Run] = {}
        for spec in group.models:
            t0 = time.perf_counter()
            deep = spec.deep is not None and known[name].changes_extractor
            runs[spec.id] = attack(models[spec.id], known[name], group.seed, budgets=cfg.budgets, steps=steps,
                                   batch_size=cfg.batch_size, selection_budget=cfg.selection_budget,
                                   curve_every=cfg.deep_curve_every if deep else 1)
            log(f"{group.model_id(spec)} {name}: {time.perf_counter() - t0:.1f} s, chose {runs[spec.id].params}")
        for spec in group.models:
            run = runs[spec.id]
            key = group.curve_key(spec, name)
            curves[key] = run.curve
            refs = [r for r in REFERENCES if r in runs and r != spec.id]
            records.append({
                "table": group.table, "method": spec.method, "attacker": name, "seed": group.seed,
                "pair": group.pair, "role": spec.role, "run_key": spec.run_key, "rir": spec.rir,
                "changes_extractor": known[name].changes_extractor, "kappa_H_train": models[spec.id].factor.kappa,
                "params": dict(run.params), "tuning": None if run.tuning is None else {
                    "grid": [dict(g) for g in known[name].grid], "val_losses": list(run.tuning.val_losses),
                    "selection_budget": run.tuning.selection_budget},
                "at_budget": {str(b): v for b, v in run.at_budget.items()}, "wall_s": run.wall_s,
                "slack": run.slack, "steps": run.steps, "curve": key, "curve_every": run.curve_every,
                "dp_utility": None if run.dp is None else run.dp.as_dict(),
                "slowdown": {ref: {str(b): slowdown(run.curve, runs[ref].curve, b, run.slack + runs[ref].slack,
                                                    cfg.reach_factor).as_dict() for b in budgets}
                             for ref in refs},
            })
    return records, curves


def run_groups(groups: Sequence[Group], attackers: Sequence[str], budgets: Sequence[int] = SLOWDOWN_BUDGETS,
               ) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """:func:`run_group` on each group, logging to stdout; all records and curves."""
    records, curves = [], {}
    for group in groups:
        recs, cs = run_group(group, attackers, log=lambda line: print(line, flush=True), budgets=budgets)
        records += recs
        curves.update(cs)
    return records, curves


def finish(out: Path, table: str, records: list[dict[str, Any]], curves: dict[str, np.ndarray],
           config: dict[str, Any], data_label: str, started: float, append: bool = False,
           git: dict[str, Any] | None = None) -> int:
    """:func:`write` the table's records and curves and say so (with the wall time since ``started``); exit 0."""
    jsonl, npz = write(out, table, records, curves, config, data_label, append, git)
    print(f"wrote {jsonl} ({len(records)} records{' added' if append else ''}) and {npz} in "
          f"{time.perf_counter() - started:.0f} s")
    return 0


def write(out: Path, table: str, records: list[dict[str, Any]], curves: dict[str, np.ndarray],
          config: dict[str, Any], data_label: str, append: bool = False,
          git: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """``out/<table>.jsonl`` (each record with the provenance) and ``out/<table>_curves.npz``; with ``append``, the
    records and curves already there are kept and these added (a curve key already there is refused: an attack is
    stored once). ``git``: the checkout's state when the run started (:func:`kappalab.provenance.git_state`, read
    by the runner before it imports or runs anything else), which a long run's records name rather than the
    state at the write."""
    out.mkdir(parents=True, exist_ok=True)
    jsonl, npz = out / f"{table}.jsonl", out / f"{table}_curves.npz"
    common = provenance(None, config, data_label=data_label)  # one git / machine read; the seed per record
    if git is not None:
        common["git"] = git
    lines = [json.dumps(to_jsonable({**r, "provenance": {**common, "seed": r["seed"]}}), sort_keys=True) + "\n"
             for r in records]
    if append and jsonl.is_file():
        with np.load(npz) as kept:
            curves = _joined({k: kept[k] for k in kept.files}, curves, npz)
        lines = [jsonl.read_text()] + lines
    write_text(jsonl, "".join(lines))
    save_npz(npz, compressed=True, **curves)
    return jsonl, npz


def _joined(kept: dict[str, np.ndarray], added: dict[str, np.ndarray], source: Path) -> dict[str, np.ndarray]:
    """Both sets of curves; an attack (curve key) in both is refused, naming ``source``."""
    twice = sorted(set(kept) & set(added))
    if twice:
        raise ValueError(f"{source} and the curves joined with it both hold {twice[0]} ({len(twice)} such attacks): "
                         "an attack is stored once; leave out what is stored")
    return {**kept, **added}


def merge(out: Path, table: str, parts: Sequence[Path]) -> tuple[Path, Path]:
    """``out/<table>.jsonl`` and ``out/<table>_curves.npz`` joined from the parts' own (folders written by separate
    runs, e.g. one attacker each): records kept verbatim, each with its run's provenance; an attack (curve key) in
    two parts is refused, and so is a part without its table."""
    lines, curves = [], {}
    for part in parts:
        jsonl, npz = part / f"{table}.jsonl", part / f"{table}_curves.npz"
        if not (jsonl.is_file() and npz.is_file()):
            raise ValueError(f"{part}: no {jsonl.name} and {npz.name} to merge")
        with np.load(npz) as z:
            curves = _joined(curves, {k: z[k] for k in z.files}, npz)
        lines += [line + "\n" for line in jsonl.read_text().splitlines() if line.strip()]
    keys = [json.loads(line)["curve"] for line in lines]
    if sorted(keys) != sorted(curves):
        raise ValueError("the parts' records and curves do not match one to one")
    out.mkdir(parents=True, exist_ok=True)
    jsonl, npz = out / f"{table}.jsonl", out / f"{table}_curves.npz"
    write_text(jsonl, "".join(lines))
    save_npz(npz, compressed=True, **curves)
    return jsonl, npz
