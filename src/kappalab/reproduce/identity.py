"""Run identity: what a run's numbers depend on, and the short stable hash that names it.

A run's identity is the triple

* ``config``: every value the run reads (a resolved config, defaults filled in),
* ``data``: the dataset's name and the sha256 of the arrays it read (:func:`data_identity`),
* ``options``: the code-relevant options outside the config (seed, device, dtype, pooling, ...),

written as canonical JSON (sorted keys, floats by ``repr``) and hashed with sha256; :func:`run_key` prefixes the
first 12 hex digits with a readable label. Two runs share a key only if all three agree, so a store never reuses a
run made with other settings or other data: the new run gets its own key (both are kept), and its artifacts live
under ``OUT/runs/<key>/``.

The compatibility rules (the last section) say which options and config fields are left out of an identity where
they hold their reference value: every such rule is listed there.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

import numpy as np

from kappalab.extremes import auto_method
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


# Compatibility rules. An option or config field equal to its reference value is left out of a run's identity, so
# the runs recorded before the option or field existed keep their keys; each rule says which runs it keeps.

#: Table 1's options: one process and no trajectory (runs recorded before --processes and --trajectory existed)
TABLE1_OPTION_REFERENCES: dict[str, Any] = {"trajectory": False, "processes": 1}
#: Table 2's engine: the single engine (runs recorded before the batched engine existed)
ENGINE_REFERENCES: dict[str, Any] = {"engine": "single"}
#: Table 3's config fields of the protocols and the real-network rows (records made before these fields existed;
#: kappalab.reproduce.table3.config.resolved applies them)
TABLE3_CONFIG_REFERENCES: dict[str, Any] = {
    "protocol": "paper", "transforms": "timm_eval", "pretrain_data": None, "trunk_cut": None, "image_size": None,
    "per_class": None, "split_seed_real": None, "head_l2": None, "probe_target_loss": None, "probe_max_iter": None,
    "norm_statistics": "batch", "lambda_multiple": 1.0, "lambda_oracle": None, "spectral_route": "dense",
    "features_precision": "float64", "theta0_statistics": "imagenet", "tail_precision": "float64"}
# The eigensolver: LAPACK adds nothing (runs recorded before the tensor eigensolver existed): eigensolver_option.
# One rule is computed in the core, which imports nothing from kappalab.reproduce:
# * the linear configs' extras declared identity_when_set (bias, precondition_side, walk_step) at their defaults
#   (runs recorded before those extras existed): kappalab.immunization.config.IDENTITY_WHEN_SET, applied by
#   MethodConfig.resolved.


def without_references(values: Mapping[str, Any], references: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` less every entry equal to its reference value in ``references``."""
    return {k: v for k, v in values.items() if not (k in references and v == references[k])}


def eigensolver_option(device: str) -> dict[str, str]:
    """The eigensolver's part of a run's identity options: none where ``"auto"`` runs LAPACK on ``device`` (the
    reference), ``{"eigensolver": "tensor"}`` where it runs the tensor path (CUDA, or anywhere under
    :func:`kappalab.extremes.forced_method`): the two agree to ~1e-14 per eigenpair, not to the bit, so their runs
    are different runs."""
    method = auto_method(device)
    return {} if method == "lapack" else {"eigensolver": method}


def device_options(device: str) -> dict[str, Any]:
    """The device part of a run's identity options: the device, float64, and the eigensolver where ``"auto"`` runs
    the tensor path on ``device``."""
    return {"device": device, "dtype": "float64", **eigensolver_option(device)}


def table1_options(trajectory: bool, processes: int) -> dict[str, Any]:
    """Table 1's ``trajectory`` and ``processes`` options, less their references."""
    return without_references({"trajectory": trajectory, "processes": processes}, TABLE1_OPTION_REFERENCES)


def engine_option(engine: str) -> dict[str, Any]:
    """Table 2's engine option, less its reference."""
    return without_references({"engine": engine}, ENGINE_REFERENCES)
