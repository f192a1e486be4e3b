"""Method configurations: the schema of a linear-immunization run (Tables 1 and 2) and its one loader.

The files are shipped in :mod:`kappalab.configs`:

* ``linear_house_prices.json`` / ``table2_mnist_linear.json`` hold Table 4's HousePrice/Linear and MNIST/Linear
  rows (eta, lambda_P, lambda_H, epochs, loss): the single source of those numbers.
* ``table{1,2}_<protocol>[_<method>].json`` name their ``"base"`` and add the protocol/method settings.

A file may hold the fields of :class:`MethodConfig`, ``"base"``, ``"_comment"``, ``"reasons"`` (why a top-level
value is what it is: ``{"epochs": "..."}``) and ``"extra"``: values of the fields of :class:`Extras`, each written
as ``{"value": ..., "reason": "..."}`` so the reason travels with the number. Anything else is a
:class:`~kappalab.configs.ConfigError` naming the key and the file. A file's keys override its base's (``extra``
and ``reasons`` entry by entry); overrides (``--set KEY=VALUE``: ``lambda_H=3e7``, ``extra.shift=1e-5``) are
applied last. :func:`load_config` resolves the chain and returns a frozen :class:`MethodConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import cache
from pathlib import Path
from typing import Any, Literal, Mapping, get_type_hints

from kappalab.configs import CONFIG_DIR, PROTOCOLS, ConfigError, conforms, described, read, set_dotted
from kappalab.kappa import DEFAULT_SHIFT
from kappalab.methods import LINEAR_METHODS

Method = Literal[LINEAR_METHODS]  # type: ignore[valid-type]  # the registry's names, checked by conforms()
Protocol = Literal["paper", "official"]
METHODS: tuple[str, ...] = LINEAR_METHODS

__all__ = ["CONFIG_DIR", "EXTRA_NAMES", "IDENTITY_WHEN_SET", "Extras", "FIELDS", "METHODS", "PROTOCOLS", "MethodConfig",
           "load_config", "table1_config"]


def _extra(default: Any, reason: str, identity_when_set: bool = False) -> Any:
    """A field of :class:`Extras`: its default (when a config omits it) and what it means. ``identity_when_set``:
    the value enters a run's identity (:meth:`MethodConfig.resolved`) only when it differs from the default, so
    runs that keep the default keep their identity."""
    return field(default=default, metadata={"reason": reason, "identity_when_set": identity_when_set})


@dataclass(frozen=True)
class Extras:
    """Every ``extra`` value a run may read, each declared once here with its type, its default (when a config
    omits it) and its reason (``Extras.reason(name)``). The types are checked at construction (an int where a
    float is declared is kept as given, so a run's identity stays what its config file says); a config file naming
    any other key is a :class:`~kappalab.configs.ConfigError`."""

    loss: str | None = _extra(None, "the task's loss ('mse' House Prices, 'bce' MNIST); None: the task's own; "
                                    "runners check it")
    adam_betas: tuple[float, float] = _extra((0.9, 0.999), "Adam's (beta1, beta2)")
    adam_eps: float = _extra(1e-8, "Adam's eps")
    adam_fused: bool = _extra(False, "torch's fused Adam kernel (same update as the for-loop implementation)")
    monitor_every: int = _extra(1, "measure the whole task's kappa every this many epochs and at the last")
    supervised_loss: bool = _extra(True, "include L(D_P, omega, theta) in the objective")
    precondition: bool = _extra(True, "precondition the regularizer gradients by (K + ridge I)^-1 (Alg. 1)")
    kappa_weight_P: float = _extra(1.0, "Opt kappa: weight of kappa(H_P)")
    kappa_weight_H: float = _extra(1.0, "Opt kappa: weight of kappa(H_H)")
    inner_steps: int = _extra(1, "IMMA: differentiable inner steps on L(D_H)")
    inner_lr: float | None = _extra(None, "IMMA: inner step size; None: eta (read it as MethodConfig.inner_lr)")
    shift: float = _extra(DEFAULT_SHIFT, "the official code's shifted kappa: eigvalsh(S + shift I), eigenvalues > "
                                         "shift kept")
    rank_rtol: float | None = _extra(None, "eigenvalues <= rtol * lambda_max count as zero; None: n * eps")
    on_degenerate: str = _extra("warn", "a non-unique extreme eigenvalue: 'warn' (count it) or 'raise'")
    spectral_route: str = _extra("dense", "'dense', 'gram' or 'features' (official protocol), 'dense' or "
                                          "'closed_form' (paper protocol); kappalab.immunization.protocols")
    theta_init: Literal["torch_linear", "identity"] = _extra("torch_linear", "'torch_linear' (nn.Linear's default) "
                                                                             "or 'identity'")
    head_init: Literal["standard_normal", "zeros"] = _extra("standard_normal", "'standard_normal' or 'zeros'")
    logits_order: Literal["features_first", "head_first"] = _extra(
        "features_first", "the task loss's logits: 'features_first' ((X theta) w, the features formed) or "
        "'head_first' (X (theta w): two matrix-vector products, the same number up to rounding; paper protocol, "
        "for full-batch steps with N >> D)")
    shuffle: bool = _extra(True, "shuffle the minibatches every epoch")
    n_rows: int = _extra(200, "official protocol: rows of each House Prices split used")
    bias: bool = _extra(True, "official protocol: features X theta + 1 b^T with the bias b of the authors' "
                              "nn.Linear; false: X theta, no bias (as Alg. 1's theta); the paper protocol has none",
                        identity_when_set=True)
    precondition_side: str | None = _extra(
        None, "the side of theta the regularizer gradients are preconditioned on: 'input' ((K + ridge I)^-1 "
              "grad_theta, Alg. 1) or 'output' (grad_theta (K + ridge I)^-1, the authors' code on nn.Linear's "
              "W = theta^T); None: the protocol's own (paper 'input', official 'output')", identity_when_set=True)
    walk_step: str | None = _extra(None, "a name the run carries in its identity and record (Table 2's protocol "
                                         "walk: the step's name); read by nothing in training",
                                   identity_when_set=True)

    def __post_init__(self) -> None:
        for name, declared in _hints().items():
            value = getattr(self, name)
            if not conforms(value, declared):
                raise ValueError(f"extra.{name} must be {described(declared)}, got {value!r}")
        if isinstance(self.adam_betas, list):  # a JSON array; the same JSON as the tuple, so the same identity
            object.__setattr__(self, "adam_betas", tuple(self.adam_betas))
        if self.monitor_every < 1:
            raise ValueError(f"extra.monitor_every must be a positive int, got {self.monitor_every!r}")
        if self.precondition_side not in (None, "input", "output"):
            raise ValueError(f"extra.precondition_side must be 'input', 'output' or null, got "
                             f"{self.precondition_side!r}")

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> "Extras":
        """The extras named in ``values`` (a config's ``extra`` values), every other one at its default; a name
        not declared here is a ValueError listing the declared ones."""
        unknown = sorted(set(values) - set(EXTRA_NAMES))
        if unknown:
            raise ValueError(f"extra: unknown key(s) {unknown} (known: {', '.join(sorted(EXTRA_NAMES))})")
        return cls(**values)

    @staticmethod
    def reason(name: str) -> str:
        """What the extra ``name`` means (its declaration's reason)."""
        return _FIELDS[name].metadata["reason"]


@cache
def _hints() -> dict[str, Any]:
    return get_type_hints(Extras)


_FIELDS = {f.name: f for f in fields(Extras)}
#: the names of the :class:`Extras` a config file may set
EXTRA_NAMES: tuple[str, ...] = tuple(_FIELDS)
#: the extras that enter a run's identity only when set away from their default (:func:`_extra`)
IDENTITY_WHEN_SET: tuple[str, ...] = tuple(n for n, f in _FIELDS.items() if f.metadata["identity_when_set"])


@dataclass(frozen=True)
class MethodConfig:
    """Everything one immunization run needs.

    Attributes:
        method: one of :data:`METHODS` (:mod:`kappalab.methods`; ``ours``: Eq. 11 / Alg. 1).
        protocol: "paper" (Alg. 1 as stated) or "official" (what the authors' public code does).
        eta: Adam learning rate (Table 4's eta).
        lambda_P: weight of the R_well term (Table 4).
        lambda_H: weight of the R_ill term (Table 4).
        epochs: passes over the data.
        batch_size: minibatch size; None = full batch.
        ridge_P: ridge of the preconditioner (K_P + ridge_P I)^-1.
        ridge_H: ridge of the preconditioner (K_H + ridge_H I)^-1.
        extra: the :class:`Extras` (set by the config files, the others at their defaults).
        reasons: why each value is what it is (from the config files).
        source: the config files read, base first (and ``--set`` when overrides were applied).
    """

    method: Method
    protocol: Protocol
    eta: float
    lambda_P: float
    lambda_H: float
    epochs: int
    batch_size: int | None
    ridge_P: float
    ridge_H: float
    extra: Extras = field(default_factory=Extras)
    reasons: Mapping[str, str] = field(default_factory=dict)
    source: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        for name in ("eta",):
            if not (isinstance(getattr(self, name), (int, float)) and float(getattr(self, name)) > 0):
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("lambda_P", "lambda_H", "ridge_P", "ridge_H"):
            if not (isinstance(getattr(self, name), (int, float)) and float(getattr(self, name)) >= 0):
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if not (isinstance(self.epochs, int) and not isinstance(self.epochs, bool) and self.epochs >= 1):
            raise ValueError(f"epochs must be a positive int, got {self.epochs!r}")
        if self.batch_size is not None and not (isinstance(self.batch_size, int) and self.batch_size >= 1):
            raise ValueError(f"batch_size must be None or a positive int, got {self.batch_size!r}")
        if not isinstance(self.extra, Extras):
            raise ValueError(f"extra must be an Extras (Extras.of(mapping) builds one), got "
                             f"{type(self.extra).__name__}")

    @property
    def inner_lr(self) -> float:
        """IMMA's inner step size: ``extra.inner_lr``, or ``eta`` when that is None (its declared default)."""
        return self.eta if self.extra.inner_lr is None else self.extra.inner_lr

    def replace(self, **changes: Any) -> "MethodConfig":
        """A copy with some fields changed (e.g. ``epochs`` from a command-line flag)."""
        return replace(self, **changes)

    def with_extra(self, **changes: Any) -> "MethodConfig":
        """A copy with some :class:`Extras` changed (``cfg.with_extra(shuffle=False)``)."""
        return replace(self, extra=replace(self.extra, **changes))

    def resolved(self) -> dict[str, Any]:
        """Every value the run reads (fields and every :class:`Extras` entry, defaults filled in, ``inner_lr`` as
        :attr:`inner_lr`; an entry of :data:`IDENTITY_WHEN_SET` only when it is not its default): the config part
        of a run's identity. Reasons and file names are not part of it."""
        out = {f: getattr(self, f) for f in FIELDS}
        out["extra"] = {name: self.inner_lr if name == "inner_lr" else getattr(self.extra, name)
                        for name in sorted(EXTRA_NAMES)
                        if not (name in IDENTITY_WHEN_SET and getattr(self.extra, name) == _FIELDS[name].default)}
        return out


FIELDS = ("method", "protocol", "eta", "lambda_P", "lambda_H", "epochs", "batch_size", "ridge_P", "ridge_H")
_FILE_KEYS = set(FIELDS) | {"base", "extra", "reasons", "_comment"}
#: the keys ``--set`` may name: every field and ``extra.<name>``
OVERRIDABLE: dict[str, Any] = {**{f: None for f in FIELDS}, "extra": {name: None for name in EXTRA_NAMES}}


def _resolved(name: str | Path, seen: tuple[Path, ...] = ()) -> tuple[dict[str, Any], tuple[str, ...]]:
    raw, path = read(name)
    if path in seen:
        raise ConfigError(f"config {path}: the base chain loops")
    unknown = sorted(set(raw) - _FILE_KEYS)
    if unknown:
        raise ConfigError(f"config {path}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(_FILE_KEYS))})")
    raw = dict(raw)
    raw.pop("_comment", None)
    base_name = raw.pop("base", None)
    merged: dict[str, Any] = {"extra": {}, "reasons": {}}
    sources: tuple[str, ...] = ()
    if base_name is not None:
        merged, sources = _resolved(base_name, seen + (path,))
    for name, entry in raw.get("extra", {}).items():
        if name not in EXTRA_NAMES:
            raise ConfigError(f"config {path}: unknown key 'extra.{name}' (known: "
                              f"{', '.join(sorted(EXTRA_NAMES))})")
        if not (isinstance(entry, dict) and set(entry) == {"value", "reason"}):
            raise ConfigError(f'config {path}: extra.{name} must be {{"value": ..., "reason": "..."}}')
    for name in raw.get("reasons", {}):
        if name not in FIELDS:
            raise ConfigError(f"config {path}: unknown key 'reasons.{name}' (a reason names a field: {FIELDS})")
    extra = {**merged["extra"], **raw.pop("extra", {})}
    reasons = {**merged["reasons"], **raw.pop("reasons", {})}
    merged.update(raw)
    merged["extra"], merged["reasons"] = extra, reasons
    return merged, sources + (_shown(path),)


def _shown(path: Path) -> str:
    """A config file as recorded: ``kappalab/configs/<name>.json`` for a shipped one (no machine path)."""
    try:
        return f"kappalab/configs/{path.resolve().relative_to(CONFIG_DIR.resolve())}"
    except ValueError:
        return str(path)


def load_config(path_or_name: str | Path, overrides: Mapping[str, Any] | None = None) -> MethodConfig:
    """Load a :class:`MethodConfig` from a JSON file (path, or name of a shipped config), then apply
    ``overrides`` (``{"lambda_H": 3e7, "extra.shift": 1e-5}``, e.g. from ``--set``)."""
    merged, sources = _resolved(path_or_name)
    if overrides:
        for key, value in overrides.items():
            target = {"extra": {}}
            set_dotted(target, key, value, OVERRIDABLE, f"--set {key}")
            if key.startswith("extra."):
                name = key.split(".", 1)[1]
                merged["extra"][name] = {"value": value, "reason": "set on the command line (--set)"}
            else:
                merged[key] = value
        sources += ("--set " + " ".join(f"{k}={v!r}" for k, v in overrides.items()),)
    missing = [f for f in FIELDS if f not in merged]
    if missing:
        raise ConfigError(f"config {sources[-1]}: lacks {missing} (after resolving its base)")
    extra = {name: entry["value"] for name, entry in merged["extra"].items()}
    reasons = {**merged["reasons"], **{name: entry["reason"] for name, entry in merged["extra"].items()}}
    try:
        return MethodConfig(**{f: merged[f] for f in FIELDS}, extra=Extras.of(extra), reasons=reasons,
                            source=sources)
    except ValueError as error:
        raise ConfigError(f"config {sources[-1]}: {error}") from None


def table1_config(protocol: str, method: str, overrides: Mapping[str, Any] | None = None) -> MethodConfig:
    """The Table 1 config of one (protocol, method) pair: ``table1_<protocol>_<method>.json``."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return load_config(f"table1_{protocol}_{method}", overrides)
