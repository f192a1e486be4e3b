"""Method configurations: one JSON file per Table 4 row plus one per (protocol, method), nothing hard-coded.

Layout of ``experiments/configs/``:

* ``linear_house_prices.json`` holds Table 4's HousePrice/Linear row (eta, lambda_P, lambda_H, epochs, loss): the
  single source of those numbers.
* ``table1_<protocol>_<method>.json`` names its ``"base"`` (a Table 4 row file) and adds the protocol/method
  settings; every value the paper leaves open is an entry of ``"extra"`` written as
  ``{"value": ..., "reason": "..."}`` so the reason travels with the number.

A file's keys override its base's keys (``extra`` is merged entry by entry). :func:`load_config` resolves the
chain and returns a frozen :class:`MethodConfig`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

Method = Literal["ours", "rill_only", "imma", "opt_kappa"]
Protocol = Literal["paper", "official"]
METHODS: tuple[str, ...] = ("ours", "rill_only", "imma", "opt_kappa")
PROTOCOLS: tuple[str, ...] = ("paper", "official")

#: ``experiments/configs`` of the source checkout (kappalab is installed editable from it).
CONFIG_DIR = Path(__file__).resolve().parents[3] / "experiments" / "configs"


@dataclass(frozen=True)
class MethodConfig:
    """Everything one immunization run needs.

    Attributes:
        method: "ours" (Eq. 11 / Alg. 1), "rill_only", "imma" or "opt_kappa".
        protocol: "paper" (Alg. 1 as stated) or "official" (what the authors' public code does).
        eta: Adam learning rate (Table 4's eta).
        lambda_P: weight of the R_well term (Table 4).
        lambda_H: weight of the R_ill term (Table 4).
        epochs: passes over the data.
        batch_size: minibatch size; None = full batch.
        ridge_P: ridge of the preconditioner (K_P + ridge_P I)^-1.
        ridge_H: ridge of the preconditioner (K_H + ridge_H I)^-1.
        extra: method-/protocol-specific named values (see the config files for the reason of each), e.g.
            ``spectral_route`` ("dense", the default; "gram": the official protocol's exact N x N Gram /
            Woodbury route for minibatches with N < D; "features": the same with theta's gradient assembled in
            feature space; see :mod:`kappalab.immunization.protocols`), ``monitor_every`` (measure the whole
            task's kappa every this many epochs and at the last; default 1), ``adam_fused`` (torch's fused Adam
            kernel; default false, the for-loop implementation every earlier run used).
        reasons: why each ``extra`` value is what it is (from the config files).
        source: the config files read, base first.
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
    extra: Mapping[str, Any] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)
    source: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        for name in ("eta",):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("lambda_P", "lambda_H", "ridge_P", "ridge_H"):
            if not float(getattr(self, name)) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if not (isinstance(self.epochs, int) and self.epochs >= 1):
            raise ValueError(f"epochs must be a positive int, got {self.epochs!r}")
        if self.batch_size is not None and not (isinstance(self.batch_size, int) and self.batch_size >= 1):
            raise ValueError(f"batch_size must be None or a positive int, got {self.batch_size!r}")

    def get(self, name: str, default: Any = None) -> Any:
        """``extra[name]``, or ``default`` when absent."""
        return self.extra.get(name, default)

    def replace(self, **changes: Any) -> "MethodConfig":
        """A copy with some fields changed (e.g. ``epochs`` from a command-line flag)."""
        from dataclasses import replace

        return replace(self, **changes)


FIELDS = ("method", "protocol", "eta", "lambda_P", "lambda_H", "epochs", "batch_size", "ridge_P", "ridge_H")


def config_path(path_or_name: str | Path) -> Path:
    """A config file's path: an existing path as given, else ``CONFIG_DIR/<name>.json``."""
    path = Path(path_or_name)
    if path.suffix == ".json" and path.is_file():
        return path
    candidate = CONFIG_DIR / (path.name if path.suffix == ".json" else f"{path.name}.json")
    if candidate.is_file():
        return candidate
    raise ValueError(f"path_or_name {str(path_or_name)!r}: no such config file (looked at {path} and {candidate})")


def _resolved(path: Path, seen: tuple[Path, ...] = ()) -> tuple[dict[str, Any], tuple[str, ...]]:
    if path in seen:
        raise ValueError(f"path_or_name: config base chain loops at {path}")
    raw = json.loads(path.read_text())
    base_name = raw.pop("base", None)
    merged: dict[str, Any] = {"extra": {}}
    sources: tuple[str, ...] = ()
    if base_name is not None:
        merged, sources = _resolved(config_path(base_name), seen + (path,))
    extra = {**merged.get("extra", {}), **raw.pop("extra", {})}
    merged.update(raw)
    merged["extra"] = extra
    return merged, sources + (str(path),)


def load_config(path_or_name: str | Path) -> MethodConfig:
    """Load a :class:`MethodConfig` from a JSON file (path, or name inside :data:`CONFIG_DIR`)."""
    merged, sources = _resolved(config_path(path_or_name))
    missing = [f for f in FIELDS if f not in merged]
    if missing:
        raise ValueError(f"path_or_name {str(path_or_name)!r}: config lacks {missing} (after resolving its base)")
    extra, reasons = {}, {}
    for name, entry in merged["extra"].items():
        if not (isinstance(entry, dict) and set(entry) == {"value", "reason"}):
            raise ValueError(f"path_or_name {str(path_or_name)!r}: extra[{name!r}] must be "
                             '{"value": ..., "reason": "..."}')
        extra[name], reasons[name] = entry["value"], entry["reason"]
    return MethodConfig(**{f: merged[f] for f in FIELDS}, extra=extra, reasons=reasons, source=sources)


def table1_config(protocol: str, method: str) -> MethodConfig:
    """The Table 1 config of one (protocol, method) pair: ``table1_<protocol>_<method>.json``."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return load_config(f"table1_{protocol}_{method}")
