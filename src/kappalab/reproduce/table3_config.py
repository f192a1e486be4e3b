"""The schema of a Table 3 config (deep nets, and the CPU proxy) and its loader.

A file (shipped ``table3_<name>.json`` or a path) holds the fields of :class:`Table3Config` at the top level or
under ``"choices"`` as ``{"value": ..., "reason": "..."}``, a ``"reasons"`` block (why a top-level value is what it
is), an optional ``"search"`` block (Appendix C.2's lambda / epoch search, keys :data:`SEARCH_KEYS`) and an optional
``"quick"`` block of overrides for ``--quick``. Any other key is a :class:`~kappalab.configs.ConfigError` naming
the key and the file. ``--set KEY=VALUE`` (dotted keys: ``lambda_H=5e3``, ``search.max_epochs=2``) is applied
last. The loaded config is a flat dict (what :mod:`kappalab.deep` reads) built from the dataclass, so every key
is present with its declared default.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from kappalab.configs import CONFIG_DIR, ConfigError, read, set_dotted

#: the keys of the ``search`` block (kappalab.reproduce.table3.run_search reads them)
SEARCH_KEYS = ("seed", "val_fraction", "max_epochs", "acc_tolerance", "multipliers", "readings", "lambda_H_offsets",
               "lambda_H_extra_offsets", "lambda_P_offsets", "lambda_kappa_offsets", "lambda_imma_offsets",
               "rir_groups", "rir_group_size")


@dataclass(frozen=True)
class Table3Config:
    """Every value a Table 3 run reads; see the shipped files for the reason of each value."""

    name: str  #: the task's name (run keys, default folders)
    description: str
    arch: str  #: "small_cnn" (proxy), "resnet18" or "vit"
    seeds: list[int]
    methods: list[str]
    eta: float  #: SGD learning rate
    lambda_P: float
    lambda_H: float
    lambda_kappa: float | None  #: Opt kappa's weight (None: not in the paper; --calibrate)
    lambda_imma: float | None  #: IMMA's weight (None: not in the paper; --calibrate)
    epochs: int
    batch_size: int
    momentum: float
    extractor_weight_decay: float
    classifier_weight_decay: float
    imma_inner_steps: int
    imma_inner_lr: float
    label_smoothing: float
    reg_rtol: float
    on_degenerate: str
    epoch_on: str
    dummy_ridge: float
    dummy_side: str
    probe_epochs: int
    probe_step: str
    rir_groups: int
    rir_group_size: int
    method_epochs: dict[str, int] | None = None  #: per-method epochs (early stopping of the search)
    calibration_batches: int = 5
    label: str | None = None
    lambda_rule: str | None = None
    search: dict[str, Any] | None = None
    # the CPU proxy (MNIST digits)
    width: int | None = None
    pretrain_digits: list[int] | None = None
    harmful_digits: list[int] | None = None
    pretrain_epochs: int | None = None
    pretrain_lr: float | None = None
    pretrain_batch_size: int | None = None
    test_fraction: float | None = None
    split_seed: int | None = None
    max_train_per_task: int | None = None
    # the paper's deep nets
    harmful: str | None = None
    timm_name: str | None = None
    trainable_modules: list[str] | None = None
    num_workers: int = 0
    dp_test_limit: int | None = None


FIELD_NAMES = tuple(f.name for f in fields(Table3Config))
_REQUIRED = tuple(f.name for f in fields(Table3Config) if f.default is MISSING and f.default_factory is MISSING)
#: what ``--set`` may name
OVERRIDABLE: dict[str, Any] = {**{n: None for n in FIELD_NAMES}, "search": {k: None for k in SEARCH_KEYS}}


def _check_keys(where: str, keys, allowed, prefix: str = "") -> None:
    unknown = sorted(set(keys) - set(allowed))
    if unknown:
        raise ConfigError(f"config {where}: unknown key {prefix + unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")


def load_table3_config(name: str, quick: bool = False, overrides: Mapping[str, Any] | None = None
                       ) -> dict[str, Any]:
    """A Table 3 config (shipped ``table3_<name>.json`` or a path) as one flat dict: every field of
    :class:`Table3Config`, plus ``reasons``, ``config_file`` and ``quick``."""
    raw, path = read(name if name.endswith(".json") else f"table3_{name}")
    where = str(path)
    _check_keys(where, raw, set(FIELD_NAMES) | {"choices", "quick", "reasons"})
    _check_keys(where, raw.get("choices", {}), FIELD_NAMES, "choices.")
    _check_keys(where, raw.get("reasons", {}), FIELD_NAMES, "reasons.")
    _check_keys(where, raw.get("search") or {}, SEARCH_KEYS, "search.")
    _check_keys(where, raw.get("quick", {}), set(FIELD_NAMES) | {"choices"}, "quick.")
    _check_keys(where, raw.get("quick", {}).get("choices", {}), FIELD_NAMES, "quick.choices.")
    _check_keys(where, raw.get("quick", {}).get("search", {}), SEARCH_KEYS, "quick.search.")
    cfg = {k: v for k, v in raw.items() if k not in ("choices", "quick", "reasons")}
    reasons = dict(raw.get("reasons", {}))
    for key, entry in raw.get("choices", {}).items():
        if not (isinstance(entry, dict) and set(entry) == {"value", "reason"}):
            raise ConfigError(f'config {where}: choices.{key} must be {{"value": ..., "reason": "..."}}')
        cfg[key], reasons[key] = entry["value"], entry["reason"]
    if quick:
        over = dict(raw.get("quick", {}))
        cfg.update(over.pop("choices", {}))
        if "search" in over and "search" in cfg:
            cfg["search"] = {**cfg["search"], **over.pop("search")}
        cfg.update(over)
    for key, value in (overrides or {}).items():
        set_dotted(cfg, key, value, OVERRIDABLE, f"--set {key}")
        reasons[key] = "set on the command line (--set)"
    missing = [k for k in _REQUIRED if k not in cfg]
    if missing:
        raise ConfigError(f"config {where}: lacks {missing}")
    out = asdict(Table3Config(**cfg))
    try:
        shown = f"kappalab/configs/{path.resolve().relative_to(CONFIG_DIR.resolve())}"
    except ValueError:
        shown = str(path)
    out.update(reasons=reasons, config_file=shown, quick=quick)
    return out


def resolved(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a loaded config that a run's numbers depend on (its identity's config): every field except
    the descriptive ones and the run list (seeds and methods are part of each run's own options)."""
    return {k: cfg[k] for k in FIELD_NAMES if k not in ("description", "label", "seeds", "methods", "lambda_rule")}
