"""``kappalab reproduce table2 --merge DIR...``: the stores of a sweep's shards (or any stores of its runs), checked
and merged into one store and one report.

Each source ``DIR`` holds ``runs_<protocol>.jsonl`` and its ``spectra/`` (what ``--shard K/N --out DIR`` wrote).
Every record is checked before anything is written:

* its identity: the hash recomputed from the record's config, data and options, and the key recomputed from its
  label (protocol, method, pair, seed, epochs, pool) and that hash, equal the stored ones;
* it is one of this sweep's runs: its key is among the plan's jobs (the shards' arguments without ``--shard``); a
  run of another config, data, device, epochs or seed is a foreign identity;
* its spectra were computed the way this version computes them, and its spectra file exists;
* a key found in two sources: both records agree, every number of the result to :data:`REL_TOL` relative and the
  spectra to :data:`REL_TOL` of their largest value, timings and the engine aside (:data:`VOLATILE`); an agreeing
  duplicate is kept once, a conflicting one is refused.

A refusal is one line naming the source and the run (status 2), and nothing is written. Then ``OUT`` (which must
hold no store yet, or only the records of the same merge cut short, e.g. by a full disk: the merge resumes after
them) gets the merged store (records in the plan's order, each with ``merged_from``), the spectra
files, the Table 2 report, and ``merge_<protocol>.{json,md}`` (each source's counts).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kappalab.atomic_io import copy_file
from kappalab.cli_options import UsageError
from kappalab.reproduce.identity import identity, run_key
from kappalab.results import RunStore, to_jsonable, write_report as write_files
from kappalab.sweep import Job

from .plan import run_label
from .spectra import SPECTRA_METHOD

if TYPE_CHECKING:
    from .plan import Plan

REL_TOL = 1e-10  #: duplicates (one run in two stores) agree to this: the same identity on another device may round otherwise
VOLATILE = ("train_s", "total_s", "engine", "engine_notes")  #: result fields that differ between equal runs


def recomputed_key(record: dict[str, Any]) -> str:
    """The key a record should have: its label from ``params`` and the hash of its stored identity's body."""
    ident, p = record["identity"], record["params"]
    again = identity(ident["config"], ident["data"], ident["options"])
    if again["hash"] != ident.get("hash"):
        return f"(identity hash {again['hash']}, stored {ident.get('hash')})"
    return run_key(run_label(p["protocol"], p["method"], p["a"], p["b"], p["seed"], p["epochs"], p.get("pool", 1)),
                   again)


def difference(a: Any, b: Any, path: str = "result") -> str | None:
    """The first path where two JSON values differ (numbers beyond :data:`REL_TOL` relative), or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{path} (fields {sorted(set(a) ^ set(b))})"
        return next((d for k in sorted(a) if (d := difference(a[k], b[k], f"{path}.{k}")) is not None), None)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} (length {len(a)} vs {len(b)})"
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := difference(x, y, f"{path}[{i}]")) is not None),
                    None)
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        if a == b or (math.isnan(a) and math.isnan(b)):
            return None
        return None if abs(a - b) <= REL_TOL * max(abs(a), abs(b)) else f"{path} ({a!r} vs {b!r})"
    return None if a == b else f"{path} ({a!r} vs {b!r})"


def spectra_difference(first: Path, second: Path) -> str | None:
    """Where two runs' spectra files differ beyond :data:`REL_TOL` of the largest value, or None."""
    with np.load(first) as x, np.load(second) as y:
        if set(x.files) != set(y.files):
            return f"spectra arrays {sorted(set(x.files) ^ set(y.files))}"
        for name in sorted(x.files):
            u, v = x[name], y[name]
            if u.shape != v.shape:
                return f"spectra {name} shape {u.shape} vs {v.shape}"
            scale = max(float(np.max(np.abs(u), initial=0.0)), float(np.max(np.abs(v), initial=0.0)))
            if float(np.max(np.abs(u - v), initial=0.0)) > REL_TOL * scale:
                return f"spectra {name}"
    return None


def _check(record: dict[str, Any], store: Path, keys: set[str]) -> None:
    """Refuse (one line) a record of ``store`` whose identity, membership or spectra do not hold up."""
    key = record.get("key")
    where = f"--merge: {store}: run {key}"
    if "identity" not in record:
        raise UsageError(f"{where} was written before run identities; such stores cannot be merged")
    try:
        _check_complete(record, store, keys, where)
    except (KeyError, TypeError, AttributeError) as error:
        raise UsageError(f"{where}: an incomplete record ({type(error).__name__}: {error})") from None


def _check_complete(record: dict[str, Any], store: Path, keys: set[str], where: str) -> None:
    key = record["key"]
    again = recomputed_key(record)
    if again != key:
        raise UsageError(f"{where}: its key does not match its identity (recomputed {again})")
    if key not in keys:
        raise UsageError(f"{where} is not one of this sweep's runs (a foreign identity: another config, data, "
                         "device, engine or option; merge with the arguments the shards ran with, minus --shard)")
    method = (record.get("result") or {}).get("spectra")
    if method != SPECTRA_METHOD:
        raise UsageError(f"{where} has spectra computed by {method!r}, this version stores {SPECTRA_METHOD!r}")
    if not (store.parent / record["result"]["spectra_file"]).is_file():
        raise UsageError(f"{where}: its spectra file {store.parent / record['result']['spectra_file']} is missing")


def _merged(record: dict[str, Any], store: Path, out: Path) -> dict[str, Any]:
    """A source's record as the merged store keeps it: its ``out`` this merge's, and ``merged_from`` its store."""
    return {**record, "params": {**record["params"], "out": str(out)}, "merged_from": str(store)}


def _line(record: dict[str, Any]) -> str:
    """A record as its store line (NaN compares equal to itself here, unlike in a dict)."""
    return json.dumps(to_jsonable(record), sort_keys=True)


def merge_stores(plan: Plan, jobs: list[Job], sources: list[Path]) -> list[dict[str, Any]]:
    """Check every record of the sources' stores (module docstring), then write the merged store, its spectra and
    ``merge_<protocol>.{json,md}`` under ``plan.out``; returns the merged records in the plan's order."""
    keys = {job.key for job in jobs}
    chosen: dict[str, tuple[dict[str, Any], Path]] = {}
    counts = []
    for source in sources:
        store = source / plan.store_path.name
        if not source.is_dir():
            raise UsageError(f"--merge: {source} is not a folder")
        if not store.is_file():
            raise UsageError(f"--merge: no store {store}")
        try:
            records = RunStore(store).records()
        except ValueError as error:  # a line that is not JSON
            raise UsageError(f"--merge: {error}") from None
        duplicates = 0
        for record in records:
            _check(record, store, keys)
            key = record["key"]
            if key in chosen:
                first, first_store = chosen[key]
                strip = lambda r: {k: v for k, v in r["result"].items() if k not in VOLATILE}
                path = lambda r, at: at.parent / r["result"]["spectra_file"]
                diff = difference(strip(first), strip(record)) or spectra_difference(path(first, first_store),
                                                                                     path(record, store))
                if diff is not None:
                    raise UsageError(f"--merge: run {key} is in {first_store} and {store} with different results "
                                     f"(first at {diff}): a conflicting duplicate")
                duplicates += 1
            else:
                chosen[key] = (record, store)
        counts.append({"source": str(source), "records": len(records), "duplicates": duplicates})
    target = RunStore(plan.store_path)
    wanted = {key: _merged(record, store, plan.out) for key, (record, store) in chosen.items()}
    done = {r["key"]: r for r in target.records()}  # a merge cut short (a full disk) resumes after them
    foreign = next((key for key, r in done.items() if key not in wanted or _line(r) != _line(wanted[key])), None)
    if foreign is not None:
        raise UsageError(f"--out: {plan.store_path} already holds runs of another merge (first: {foreign}); merge "
                         "into a new folder")
    merged = []
    with target.lock():
        (plan.out / "spectra").mkdir(parents=True, exist_ok=True)
        for job in jobs:
            if job.key in wanted and job.key not in done:
                record, store = chosen[job.key]
                spectra = record["result"]["spectra_file"]
                copy_file(store.parent / spectra, plan.out / spectra)
                target.append(wanted[job.key])
            if job.key in wanted:
                merged.append(wanted[job.key])
    summary = {"sources": counts, "merged": len(merged), "expected": len(jobs), "rel_tol": REL_TOL,
               "volatile": VOLATILE}
    lines = [f"### Merged store `{plan.store_path}`", "",
             f"{len(merged)} of {len(jobs)} runs of the sweep; every record's identity recomputed; duplicates agree "
             f"to {REL_TOL:g} relative (timings and engine aside).", "",
             "| source | records | duplicates (agreeing, kept once) |", "|---|---|---|"]
    lines += [f"| `{c['source']}` | {c['records']} | {c['duplicates']} |" for c in counts]
    write_files(plan.out, f"merge_{plan.protocol}", summary, "\n".join(lines) + "\n")
    return merged
