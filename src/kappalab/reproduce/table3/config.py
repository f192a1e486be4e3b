"""The schema of a Table 3 config (deep nets, and the CPU proxy) and its loader.

A file (shipped ``table3_<name>.json`` or a path) holds the fields of :class:`Table3Config` at the top level or
under ``"choices"`` as ``{"value": ..., "reason": "..."}``, a ``"reasons"`` block (why a top-level value is what it
is), an optional ``"search"`` block (Appendix C.2's lambda / epoch search, keys :data:`SEARCH_KEYS`), an optional
``"official"`` block (the values of ``--protocol official``: what the authors' public code does, each with its
reason, in the same ``choices`` / ``reasons`` form) and an optional ``"quick"`` block of overrides for ``--quick``.
Any other key is a :class:`~kappalab.configs.ConfigError` naming the key and the file. The layers apply in that
order: top level, ``official`` (``--protocol official`` only), ``quick`` (``--quick`` only), then ``--set
KEY=VALUE`` (dotted keys: ``lambda_H=5e3``, ``search.max_epochs=2``). The protocol itself is not a file or
``--set`` value: the loader records the one it applied in the field ``protocol``. The loaded config is the frozen
:class:`Table3Config` (what :mod:`kappalab.reproduce.table3` and :mod:`kappalab.deep` read, attribute by attribute):
every field present with its declared default, and the loader's own three (:data:`LOADER_FIELDS`: the reasons, the
file read, ``--quick``), which no file or ``--set`` names.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from functools import cache
from typing import Any, Mapping, get_type_hints

from kappalab.configs import CONFIG_DIR, PROTOCOLS, ConfigError, conforms, described, read, set_dotted
from kappalab.reproduce.identity import TABLE3_CONFIG_REFERENCES
from kappalab.reproduce.table3.constants import PARTS, VALIDATION

#: the reason recorded for a value given with ``--set``
SET_REASON = "set on the command line (--set)"

@dataclass(frozen=True)
class SearchConfig:
    """Appendix C.2's lambda / epoch search (the ``search`` block; :func:`kappalab.reproduce.table3.search.run_search`
    reads it). Every key is required once the block exists (a file's, merged with ``quick.search`` and ``--set``)."""

    seed: int  #: the candidates' seed
    val_fraction: float  #: the validation split of the proxy's training rows
    max_epochs: int  #: epochs per candidate (the epoch is selected among them)
    acc_tolerance: float  #: a candidate may lose at most this D_P validation accuracy
    multipliers: list[float]  #: the grid around each scale: scale * m * 10^offset
    readings: list[str]  #: the gradient-norm readings that set the lambda scales
    lambda_H_offsets: list[int]
    lambda_H_extra_offsets: list[int]  #: stronger pulls of R_ill: scale_H * 10^e
    lambda_P_offsets: list[int]
    lambda_kappa_offsets: list[int]
    lambda_imma_offsets: list[int]
    rir_groups: int  #: the RIR groups estimator's groups during the search
    rir_group_size: int


#: the keys of the ``search`` block
SEARCH_KEYS = tuple(f.name for f in fields(SearchConfig))


@dataclass(frozen=True)
class Table3Config:
    """Every value a Table 3 run reads; see the shipped files for the reason of each value."""

    name: str  #: the task's name (run keys, default folders)
    description: str
    arch: str  #: "small_cnn" (proxy), "resnet18" or "vit"
    seeds: list[int]
    methods: list[str]
    eta: float  #: SGD learning rate
    lambda_P: float | None  #: None: balanced at theta_0 (lambda_multiple)
    lambda_H: float | None
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
    lambda_oracle: float | None = None  #: the oracle control's weight (None: balanced at theta_0)
    label: str | None = None
    #: a lambda left null in the file is the balanced scale at theta_0 (Appendix C.2's gradient-norm rule, the
    #: ``init`` record) times this multiple (the real network's lambda grid); a number (file or ``--set``) is used
    lambda_multiple: float = 1.0
    search: SearchConfig | None = None
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
    # the smoke configuration of the deep-net path (``--smoke``)
    random_weights: bool = False  #: timm's random init (pretrained=False, no hub) instead of ``--weights``
    smoke_per_class: dict[str, int] | None = None  #: images per digit class in the made train/ and test/ folders
    # the real network (--arch efficientnet_lite0: kappalab.reproduce.table3.real)
    pretrain_data: str | None = None  #: D_P's dataset ("fashion-mnist" or "mnist"); ``harmful`` is D_H's
    trunk_cut: str | None = None  #: "blocks.k": the trunk (cached) ends before blocks[k]
    image_size: int | None = None  #: the 28 x 28 images are resized to image_size x image_size
    per_class: dict[str, int] | None = None  #: images per class in each part (train, heldout, test)
    split_seed_real: int | None = None  #: the draw of the parts (one for every seed, method and protocol)
    head_l2: float | None = None  #: L2 weight of the linear heads / probes fitted by L-BFGS
    probe_target_loss: float | None = None  #: Figure 3's measure: D_H probe iterations to this training loss
    probe_max_iter: int | None = None  #: ... at most this many iterations
    #: the tail's BatchNorm in training: "batch" (batch statistics, running statistics updated: the paper's
    #: training) or "frozen" (theta_0's running statistics, never updated): kappalab.deep.ImmunizableModel
    norm_statistics: str = "batch"
    #: "dense" (H~ formed, D_hid x D_hid) or "gram" (the N x N minibatch Gram matrix): kappalab.deep.methods
    spectral_route: str = "dense"
    #: the precision of the data the real network's features are computed from, for the exact estimator's rank rule
    #: ("float32": the trunk activations', kappalab.reproduce.table3.measures.features_rtol; "float64": float64's)
    features_precision: str = "float64"
    #: the real network's tail (trainable blocks and neck) and its trunk-activation inputs: "float64", or "float32"
    #: (the trunk activations' own precision; ~5x faster convolutions on the CPU); the pooled features are cast to
    #: float64 before the dummy layer, the heads and every spectral computation (kappalab.deep.ImmunizableModel)
    tail_precision: str = "float64"
    #: theta_0's tail BatchNorm statistics: "imagenet" (the pretrained ones) or "d_p" (re-estimated on D_P's
    #: training activations before the D_P head is fitted; kappalab.reproduce.table3.real.build_task)
    theta0_statistics: str = "imagenet"
    # the protocol (kappalab.deep.official): "paper" (the paper's text) or "official" (the authors' code)
    protocol: str = "paper"
    transforms: str = "timm_eval"  #: image folders: "timm_eval" (every split) or "authors" (see imagefolder)
    #: official protocol: what of the authors' code this config does not follow, each with its reason
    unfollowed: dict[str, str] | None = None
    # the loader's (:data:`LOADER_FIELDS`): not in a file, not settable, not part of a run's identity
    reasons: dict[str, str] = field(default_factory=dict)  #: why each value is what it is (the file's reasons)
    config_file: str = ""  #: the file read (``kappalab/configs/<name>.json`` for a shipped one)
    quick: bool = False  #: the ``quick`` block was applied (``--quick``)


#: the fields :func:`load_table3_config` fills in itself (not a file's or ``--set``'s keys)
LOADER_FIELDS = ("reasons", "config_file", "quick")


#: the fields a config file (or ``--set``) gives
FIELD_NAMES = tuple(f.name for f in fields(Table3Config) if f.name not in LOADER_FIELDS)
_REQUIRED = tuple(f.name for f in fields(Table3Config) if f.default is MISSING and f.default_factory is MISSING)
#: what ``--set`` may name (the protocol is chosen with ``--protocol``)
OVERRIDABLE: dict[str, Any] = {**{n: None for n in FIELD_NAMES if n != "protocol"},
                               "search": {k: None for k in SEARCH_KEYS},
                               "per_class": {k: None for k in (*PARTS, VALIDATION)}}
#: fields of the protocols and the real-network rows left out of a run's identity where equal to these values
#: (:mod:`kappalab.reproduce.identity`'s compatibility rules)
IDENTITY_DEFAULTS: dict[str, Any] = TABLE3_CONFIG_REFERENCES
_BLOCK = set(FIELD_NAMES) - {"protocol"}
#: the accepted values of the fields that name a choice
CHOICES: dict[str, tuple[str, ...]] = {
    "norm_statistics": ("batch", "frozen"),  # kappalab.deep.ImmunizableModel
    "spectral_route": ("dense", "gram"),  # kappalab.deep.methods
    "features_precision": ("float64", "float32"),  # kappalab.reproduce.table3.measures
    "tail_precision": ("float64", "float32"),  # kappalab.reproduce.table3.real
    "theta0_statistics": ("imagenet", "d_p"),  # kappalab.reproduce.table3.real
    "dummy_side": ("input", "output"),  # kappalab.dummy_layer
    "on_degenerate": ("raise", "warn", "ignore"),  # kappalab.spectral
    "protocol": PROTOCOLS,
}
#: fields that must be > 0, and fields that must be >= 0 (when not null)
POSITIVE = ("eta", "epochs", "batch_size", "probe_epochs", "rir_groups", "rir_group_size", "calibration_batches",
            "imma_inner_steps", "lambda_multiple", "image_size", "probe_max_iter", "pretrain_epochs", "pretrain_lr",
            "pretrain_batch_size", "width")
NON_NEGATIVE = ("lambda_P", "lambda_H", "lambda_kappa", "lambda_imma", "lambda_oracle", "momentum",
                "extractor_weight_decay", "classifier_weight_decay", "imma_inner_lr", "label_smoothing", "reg_rtol",
                "dummy_ridge", "head_l2", "probe_target_loss", "num_workers")


def _check_values(cfg: "Table3Config", where: str) -> None:
    """Every field of its declared type, every rate and size in range, every choice known: else a ConfigError
    naming the key and the file (and ``--set`` where the value came from the command line)."""
    def fail(name: str, what: str) -> None:
        origin = " (from --set)" if cfg.reasons.get(name) == SET_REASON else ""
        raise ConfigError(f"config {where}: {name} must be {what}, got {getattr(cfg, name)!r}{origin}")

    for name, declared in _hints().items():
        if name not in LOADER_FIELDS and not conforms(getattr(cfg, name), declared):
            fail(name, described(declared))
    for name in POSITIVE:
        if getattr(cfg, name) is not None and not getattr(cfg, name) > 0:
            fail(name, "> 0")
    for name in NON_NEGATIVE:
        if getattr(cfg, name) is not None and not getattr(cfg, name) >= 0:
            fail(name, ">= 0")
    for name, allowed in CHOICES.items():
        if getattr(cfg, name) not in allowed:
            fail(name, "one of " + ", ".join(map(repr, allowed)))
    if not cfg.momentum < 1:
        fail("momentum", "< 1")
    if cfg.tail_precision == "float32" and cfg.pretrain_data is None:
        fail("tail_precision", "'float64' outside the real network (--arch efficientnet_lite0)")
    if cfg.tail_precision == "float32" and cfg.features_precision != "float32":
        fail("features_precision", "'float32' with tail_precision 'float32' (features computed in float32)")
    for name, epochs in (cfg.method_epochs or {}).items():
        if not epochs >= 1:
            raise ConfigError(f"config {where}: method_epochs.{name} must be >= 1, got {epochs!r}")
    for part, count in (cfg.per_class or {}).items():
        if not count >= 1:
            raise ConfigError(f"config {where}: per_class.{part} must be >= 1, got {count!r}")
    if cfg.per_class is not None and not set(PARTS) <= set(cfg.per_class):
        raise ConfigError(f"config {where}: per_class must give {', '.join(PARTS)} (and may give {VALIDATION})")


@cache
def _hints() -> dict[str, Any]:
    return get_type_hints(Table3Config)


def _check_keys(where: str, keys, allowed, prefix: str = "") -> None:
    unknown = sorted(set(keys) - set(allowed))
    if unknown:
        raise ConfigError(f"config {where}: unknown key {prefix + unknown[0]!r} "
                          f"(allowed: {', '.join(sorted(allowed))})")


def _choices(where: str, prefix: str, block: Mapping[str, Any], values: dict[str, Any], reasons: dict[str, str]
             ) -> None:
    """Enter a block's ``choices`` (``{"value": ..., "reason": ...}`` each) into ``values`` (the file's values being
    merged, before the :class:`Table3Config` exists) and ``reasons``."""
    for key, entry in block.get("choices", {}).items():
        if not (isinstance(entry, dict) and set(entry) == {"value", "reason"}):
            raise ConfigError(f'config {where}: {prefix}choices.{key} must be {{"value": ..., "reason": "..."}}')
        values[key], reasons[key] = entry["value"], entry["reason"]


def load_table3_config(name: str, quick: bool = False, overrides: Mapping[str, Any] | None = None,
                       protocol: str = "paper") -> Table3Config:
    """A Table 3 config (shipped ``table3_<name>.json`` or a path) under ``protocol``: every field of
    :class:`Table3Config`, with the loader's ``reasons``, ``config_file`` and ``quick``."""
    raw, path = read(name if name.endswith(".json") else f"table3_{name}")
    where = str(path)
    if protocol not in PROTOCOLS:
        raise ConfigError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    official = raw.get("official", {})
    _check_keys(where, raw, _BLOCK | {"choices", "quick", "reasons", "official"})
    for prefix, block in (("", raw), ("official.", official)):
        _check_keys(where, block.get("choices", {}), _BLOCK, prefix + "choices.")
        _check_keys(where, block.get("reasons", {}), _BLOCK, prefix + "reasons.")
    _check_keys(where, official, _BLOCK | {"choices", "reasons"}, "official.")
    _check_keys(where, raw.get("search") or {}, SEARCH_KEYS, "search.")
    _check_keys(where, raw.get("quick", {}), _BLOCK | {"choices"}, "quick.")
    _check_keys(where, raw.get("quick", {}).get("choices", {}), _BLOCK, "quick.choices.")
    _check_keys(where, raw.get("quick", {}).get("search", {}), SEARCH_KEYS, "quick.search.")
    values = {k: v for k, v in raw.items() if k not in ("choices", "quick", "reasons", "official")}
    reasons = dict(raw.get("reasons", {}))
    _choices(where, "", raw, values, reasons)
    if protocol == "official":
        if not official:
            raise ConfigError(f"--protocol official: config {where} has no 'official' block (the authors' "
                              "settings for this task); it runs under --protocol paper only")
        values.update({k: v for k, v in official.items() if k not in ("choices", "reasons")})
        reasons.update(official.get("reasons", {}))
        _choices(where, "official.", official, values, reasons)
    values["protocol"] = protocol
    if quick:
        over = dict(raw.get("quick", {}))
        values.update(over.pop("choices", {}))
        if "search" in over and "search" in values:
            values["search"] = {**values["search"], **over.pop("search")}
        values.update(over)
    for key, value in (overrides or {}).items():
        set_dotted(values, key, value, OVERRIDABLE, f"--set {key}")
        reasons[key] = SET_REASON
    missing = [k for k in _REQUIRED if k not in values]
    if missing:
        raise ConfigError(f"config {where}: lacks {missing}")
    try:
        shown = f"kappalab/configs/{path.resolve().relative_to(CONFIG_DIR.resolve())}"
    except ValueError:
        shown = str(path)
    if values.get("search") is not None:
        lacking = [k for k in SEARCH_KEYS if k not in values["search"]]
        if lacking:
            raise ConfigError(f"config {where}: the search block lacks {lacking}")
        values["search"] = SearchConfig(**values["search"])
    loaded = Table3Config(**values, reasons=reasons, config_file=shown, quick=quick)
    _check_values(loaded, where)
    return loaded


def resolved(cfg: Table3Config) -> dict[str, Any]:
    """The part of a loaded config that a run's numbers depend on (its identity's config): every field except
    the descriptive ones and the run list (seeds and methods are part of each run's own options); the fields of
    :data:`IDENTITY_DEFAULTS` only where they differ from those values."""
    descriptive = ("description", "label", "seeds", "methods", "unfollowed")
    out = {k: getattr(cfg, k) for k in FIELD_NAMES if k not in descriptive
           and not (k in IDENTITY_DEFAULTS and getattr(cfg, k) == IDENTITY_DEFAULTS[k])}
    if cfg.search is not None:
        out["search"] = asdict(cfg.search)
    return out


def config_of_record(record: Mapping[str, Any]) -> Table3Config:
    """A recorded real-network run's config: the shipped config of its arch and D_H under its protocol, with every
    field its identity records (what the run resolved to, ``--set`` included)."""
    recorded = record["identity"]["config"]
    base = load_table3_config(f"{recorded['arch']}_{recorded['harmful']}", protocol=record["protocol"])
    return replace(base, **{k: v for k, v in recorded.items() if k in FIELD_NAMES})
