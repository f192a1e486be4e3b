"""Run identity: what a run's numbers depend on, and the short stable hash that names it.

A run's identity is the triple

* ``config``: every value the run reads (a resolved config, defaults filled in),
* ``data``: the dataset's name and the sha256 of the arrays it read (:func:`data_identity`),
* ``options``: the code-relevant options outside the config (seed, device, dtype, pooling, ...),

written as canonical JSON (sorted keys, floats by ``repr``) and hashed with sha256; :func:`run_key` prefixes the
first 12 hex digits with a readable label. Two runs share a key only if all three agree, so a store never reuses a
run made with other settings or other data: the new run gets its own key (both are kept), and its artifacts live
under ``OUT/runs/<key>/``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

import numpy as np

from kappalab.results import to_jsonable

HASH_DIGITS = 12


def canonical(value: Any) -> str:
    """Canonical JSON of ``value``: sorted keys, no spaces, floats as Python's shortest round-trip ``repr``."""
    return json.dumps(to_jsonable(value), sort_keys=True, separators=(",", ":"), allow_nan=True)


def sha256_arrays(arrays: Mapping[str, np.ndarray]) -> str:
    """sha256 over the arrays' names, dtypes, shapes and bytes (C order), in name order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def data_identity(name: str, arrays: Mapping[str, np.ndarray]) -> dict[str, str]:
    """``{"name": name, "sha256": ...}`` of the data a run read."""
    return {"name": name, "sha256": sha256_arrays(arrays)}


def identity(config: Any, data: Mapping[str, str], options: Mapping[str, Any]) -> dict[str, Any]:
    """The identity record ``{"hash", "config", "data", "options"}`` of one run."""
    body = {"config": to_jsonable(config), "data": dict(data), "options": to_jsonable(dict(options))}
    return {"hash": hashlib.sha256(canonical(body).encode()).hexdigest()[:HASH_DIGITS], **body}


def run_key(label: str, ident: Mapping[str, Any]) -> str:
    """The stored key of a run: ``<label>.<hash>`` (the label is for people, the hash for identity)."""
    return f"{label}.{ident['hash']}"


def differences(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths where two identity records (or any nested dicts) differ, e.g. ``["config.lambda_H"]``."""
    out = []
    for key in sorted(set(a) | set(b)):
        if key == "hash":
            continue
        path = f"{prefix}{key}"
        va, vb = a.get(key), b.get(key)
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            out += differences(va, vb, path + ".")
        elif canonical(va) != canonical(vb):
            out.append(path)
    return out
