"""How far a Table 2 official run's (i), (ii) and RIR move under rounding-level changes of its arithmetic, next to
how far stores of the same run differ: whether a difference between two stores is within the run's own rounding.

    python benchmarks/table2_rounding_spread.py imma.6-1.s0 rill_only.9-8.s0 [--store DIR ...] [--json OUT]

Each run (``method.a-b.sS``, embedded subset, the shipped config) is trained four ways that are equal in exact
arithmetic and differ in rounding: the closed-form step (the default), the autograd step (the reference of
tests/test_official_step.py), and each of them in the batched engine stacked with the run of seed S + 1 (at D = 784
the batched kernels round differently in the last bit). Reported per run: the four theta_I's largest relative
distance from the autograd one, each quantity's values and relative spread ``(max - min) / |min|``, and, per
``--store``, that store's value, whether it lies between the four's smallest and largest, and its largest
relative distance from them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from kappalab.immunization import immunize, official_step
from kappalab.immunization.batched import immunize_batch
from kappalab.reproduce.table2 import mnist_task, rir_from_spectra, run_spectra, table2_config
from kappalab.reproduce.table2.report import label_of, run_rows
from kappalab.reproduce.table2.spectra import data_spectra
from kappalab.results import RunStore
from kappalab.sweep import limit_threads

QUANTITIES = ("term_i", "term_ii", "rir")
RUN = re.compile(r"^(ours|rill_only|opt_kappa|imma)\.(\d)-(\d)\.s(\d+)$")


@contextmanager
def autograd_step() -> Iterator[None]:
    """Train with the autograd step (what tests/test_official_step.py checks the closed form against): the closed
    form declines every step; restored on exit."""
    applies = official_step.applies
    official_step.applies = lambda *args: False
    try:
        yield
    finally:
        official_step.applies = applies


def variants(method: str, a: int, b: int, seed: int) -> dict[str, tuple[np.ndarray, dict[str, float]]]:
    """theta_I and (i), (ii), RIR of the run trained the four ways (module docstring)."""
    cfg = table2_config("official", method)
    task, other = mnist_task(a, b, seed), mnist_task(a, b, seed + 1)
    spectra = data_spectra(a, b, seed, None, 1, "mnist-subset")
    numbers = lambda run: (run.theta_I, {k: float(v) for k, v in rir_from_spectra(
        run_spectra(task, run.theta_I, run.bias, spectra)).items() if k in QUANTITIES})
    out = {}
    for step in ("closed_form", "autograd"):
        with autograd_step() if step == "autograd" else nullcontext():
            out[f"{step}, single"] = numbers(immunize(task, cfg, seed))
            out[f"{step}, batched R=2"] = numbers(immunize_batch([task, other], cfg, [seed, seed + 1])[0])
    return out


def store_values(folder: Path) -> dict[str, dict[str, float]]:
    """(i), (ii), RIR of every official run of the store in ``folder``, by label (``official.method.a-b.sS.eE``),
    recomputed from its spectra."""
    rows = run_rows(RunStore(folder / "runs_official.jsonl").records(), folder)
    return {label_of(r["key"]): {q: float(r[q]) for q in QUANTITIES} for r in rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="method.a-b.sS, e.g. imma.6-1.s0")
    parser.add_argument("--store", type=Path, action="append", default=[],
                        help="a Table 2 official store folder to compare (repeatable)")
    parser.add_argument("--json", type=Path, default=None, help="write the measurements here")
    args = parser.parse_args(argv)
    for run in args.runs:
        match = RUN.match(run)
        if not match or match.group(2) == match.group(3):
            print(f"runs: {run!r} is not method.a-b.sS (method one of ours, rill_only, opt_kappa, imma; digits a != b)",
                  file=sys.stderr)
            return 2
    for folder in args.store:
        if not (folder / "runs_official.jsonl").is_file():
            print(f"--store: no {folder / 'runs_official.jsonl'}", file=sys.stderr)
            return 2
    limit_threads(1)
    stores = {str(folder): store_values(folder) for folder in args.store}
    report: dict[str, Any] = {}
    for run in args.runs:
        method, a, b, seed = RUN.match(run).groups()
        trained = variants(method, int(a), int(b), int(seed))
        reference = trained["autograd, single"][0]
        entry: dict[str, Any] = {
            "theta_rel_to_autograd": {k: float(np.abs(t - reference).max() / np.abs(reference).max())
                                      for k, (t, _) in trained.items()},
            "values": {k: v for k, (_, v) in trained.items()}}
        for q in QUANTITIES:
            values = [v[q] for _, v in trained.values()]
            entry[f"{q}_spread"] = (max(values) - min(values)) / abs(min(values))
        label = f"official.{run}.e30"
        for name, values in stores.items():
            if label in values:
                lo = {q: min(v[q] for _, v in trained.values()) for q in QUANTITIES}
                hi = {q: max(v[q] for _, v in trained.values()) for q in QUANTITIES}
                entry.setdefault("stores", {})[name] = {
                    "values": values[label],
                    "inside_spread": {q: bool(lo[q] <= values[label][q] <= hi[q]) for q in QUANTITIES},
                    "max_rel_to_variants": max(abs(values[label][q] - v[q]) / abs(v[q])
                                               for _, v in trained.values() for q in QUANTITIES)}
        report[run] = entry
        print(run, json.dumps({k: v for k, v in entry.items() if k != "values"}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
