"""How far Table 2's two engines agree, run by run: every number two stores hold for the same runs (one written with
``--engine single``, one with ``--engine batched``), grouped by what it is, and the stored spectra.

    python experiments/engine_agreement.py SINGLE_DIR BATCHED_DIR --out FILE.json

Runs are matched by label (protocol, method, pair, seed, epochs, pool; the keys differ: the batched engine is part of
the identity). For each method and group the largest relative difference ``|a - b| / |b|`` over the runs and the
numbers of the group (0 where both are 0); the spectra relative to their largest value. Groups: ``eq15`` (Table 2's
(i), (ii), RIR from the features' SVD), ``kappa_data`` (kappa of the data's own K_P, K_H), ``kappa_features``
(kappa(H_P), kappa(H_H) of the trained features), ``rtol_sensitivity`` (Eq. 15 at other rank tolerances),
``evaluate`` (the D x D evaluation block: pinv and shifted kappas), ``evaluate_sensitivity`` (that block at
rtol x 0.1 and x 10), ``history`` (training history), ``probe`` (linear probing), ``spectra`` (the stored arrays).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from kappalab.reproduce.table2.report import label_of
from kappalab.results import RunStore

GROUPS = {  # a number's group by the path of its field in the record's result
    "gram.term_i": "eq15", "gram.term_ii": "eq15", "gram.rir": "eq15",
    "gram.kappa_K_P": "kappa_data", "gram.kappa_K_H": "kappa_data",
    "gram.kappa_H_P": "kappa_features", "gram.kappa_H_H": "kappa_features",
}
PREFIXES = (("rtol_sensitivity.", "rtol_sensitivity"), ("evaluate.sensitivity.", "evaluate_sensitivity"),
            ("evaluate.", "evaluate"), ("history.", "history"), ("probe.", "probe"))


def group_of(path: str) -> str | None:
    if path in GROUPS:
        return GROUPS[path]
    return next((group for prefix, group in PREFIXES if path.startswith(prefix)), None)


def numbers(value: Any, path: str = "") -> dict[str, float]:
    """Every number of a JSON value by its dotted path (list items by index)."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in numbers(item, f"{path}.{key}" if path else key).items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in numbers(item, f"{path}[{i}]").items()}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {path: float(value)}
    return {}


def rel(a: float, b: float) -> float:
    if a == b or (math.isnan(a) and math.isnan(b)):
        return 0.0
    return abs(a - b) / abs(b) if b != 0 else math.inf


def compare(single: Path, batched: Path) -> dict[str, Any]:
    stores = [{label_of(r["key"]): r for r in RunStore(next(folder.glob("runs_*.jsonl"))).records()}
              for folder in (single, batched)]
    common = sorted(set(stores[0]) & set(stores[1]))
    worst: dict[str, dict[str, float]] = {}
    for label in common:
        one, many = stores[0][label], stores[1][label]
        method = one["params"]["method"]
        if (one["result"]["engine"], many["result"]["engine"]) != ("single", "batched"):
            raise ValueError(f"{label}: expected a single and a batched run")
        entry = worst.setdefault(method, {})
        x, y = numbers(many["result"]), numbers(one["result"])
        for path in sorted(set(x) & set(y)):
            group = group_of(path)
            if group is not None:
                entry[group] = max(entry.get(group, 0.0), rel(x[path], y[path]))
        with np.load(single / one["result"]["spectra_file"]) as s, np.load(batched / many["result"]["spectra_file"]) as b:
            for name in s.files:
                scale = float(np.max(np.abs(s[name])))
                entry["spectra"] = max(entry.get("spectra", 0.0),
                                       float(np.max(np.abs(b[name] - s[name]))) / scale if scale else 0.0)
    return {"single": str(single), "batched": str(batched), "runs": len(common), "max_relative_difference": worst}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("single", type=Path)
    parser.add_argument("batched", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        result = compare(args.single, args.batched)
    except (OSError, StopIteration, ValueError, KeyError) as error:
        print(f"engine_agreement: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for method, groups in result["max_relative_difference"].items():
        print(method, " ".join(f"{g}={v:.1e}" for g, v in sorted(groups.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
