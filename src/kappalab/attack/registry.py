"""The attacker registry: every attacker by name, whether it changes the extractor, how to start it, and its grid.

The grids, budgets and selection rule are read from the shipped config ``attack_grid.json``
(:mod:`kappalab.configs`), the one place they are set; :func:`registry` joins them with the functions of
:mod:`.probe_attackers` and :mod:`.extractor_attackers`.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kappalab.configs import ConfigError, read

from . import probe_attackers as pa
from .extractor_attackers import extractor_attack
from .problem import Factor

CONFIG = "attack_grid"


@dataclass(frozen=True)
class Model:
    """A model under attack on D_H: its features ``X theta`` (train / validation / test rows), and, for the
    extractor-changing attackers, the inputs and theta. ``factor`` is the SVD the probe attackers share."""

    features: Any  #: :class:`kappalab.attack.problem.Split` of ``X theta`` (or of given features)
    inputs: Any | None = None  #: Split of X (None: features only, probe attackers only)
    theta: np.ndarray | None = None
    #: a deep extractor (:class:`kappalab.attack.deep_attackers.DeepExtractor`; ``inputs`` its trunk activations)
    deep: Any | None = None
    #: D_P's rows and fixed probe (:class:`kappalab.attack.utility.DPProbe`, a deep extractor's
    #: :class:`~kappalab.attack.utility.DeepDPProbe`), where D_P's utility under the extractor's attackers is measured
    dp: Any | None = None

    @property
    def factor(self) -> Factor:
        return self.features.rotated.factor


Start = Callable[[Model, Mapping[str, Any], int, int], Iterator[np.ndarray]]


@dataclass(frozen=True)
class Attacker:
    """One attacker: ``start(model, params, seed, batch_size)`` yields the iterate after each step, to be evaluated
    on the features (``changes_extractor`` False) or on the inputs (True)."""

    name: str
    changes_extractor: bool
    grid: tuple[Mapping[str, Any], ...]  #: every hyper-parameter combination the attacker may choose
    start: Start


def _probe(fn: Callable[..., Iterator[np.ndarray]], **fixed: Any) -> Start:
    def start(model: Model, params: Mapping[str, Any], seed: int, batch_size: int) -> Iterator[np.ndarray]:
        return fn(model.features.rotated, **fixed, **params)
    return start


def _extractor(model: Model, params: Mapping[str, Any], seed: int, batch_size: int) -> Iterator[Any]:
    if model.inputs is None or (model.theta is None and model.deep is None):
        raise ValueError("an extractor-changing attacker needs the inputs X and theta (or a deep extractor), not "
                         "only features")
    X, Y = model.inputs.train
    if model.deep is not None:
        from .deep_attackers import deep_attack  # torch and peft: the deep environment

        return deep_attack(model.deep, X, Y, seed=seed, batch_size=batch_size, **params)
    return extractor_attack(X, Y, model.theta, seed=seed, batch_size=batch_size, **params)


#: name -> (changes the extractor, how it starts)
FUNCTIONS: dict[str, tuple[bool, Start]] = {
    "gd": (False, _probe(pa.gd, scale=1.0)),
    "gd_tuned": (False, _probe(pa.gd)),
    "momentum": (False, _probe(pa.momentum)),
    "adam": (False, _probe(pa.adam)),
    "lbfgs": (False, _probe(pa.lbfgs)),
    "solve": (False, _probe(pa.solve)),
    "finetune": (True, _extractor),
    "lora_r1": (True, _extractor),
    "lora_r4": (True, _extractor),
    "lora_r16": (True, _extractor),
}


@dataclass(frozen=True)
class Settings:
    """The config's budgets and selection rule."""

    budgets: tuple[int, ...]
    selection_budget: int
    reach_factor: int
    batch_size: int
    deep_curve_every: int  #: a deep attacker's curve stride (:func:`kappalab.attack.measures.attack`)


def _expand(grid: Mapping[str, list[Any]]) -> tuple[dict[str, Any], ...]:
    keys = sorted(grid)
    return tuple(dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys)))


@functools.lru_cache(maxsize=1)
def _config() -> tuple[Settings, dict[str, Attacker]]:
    raw, path = read(CONFIG)
    try:
        settings = Settings(tuple(raw["budgets"]["value"]), raw["selection_budget"]["value"],
                            raw["reach_factor"]["value"], raw["batch_size"]["value"], raw["deep_curve_every"]["value"])
        grids = {name: entry["grid"] for name, entry in raw["attackers"].items()}
    except (KeyError, TypeError) as error:
        raise ConfigError(f"config {path}: missing or malformed entry {error}") from None
    if set(grids) != set(FUNCTIONS):
        raise ConfigError(f"config {path}: attackers {sorted(grids)} differ from the registry's {sorted(FUNCTIONS)}")
    attackers = {name: Attacker(name, FUNCTIONS[name][0], _expand(grids[name]), FUNCTIONS[name][1])
                 for name in FUNCTIONS}
    return settings, attackers


def settings() -> Settings:
    return _config()[0]


def registry() -> dict[str, Attacker]:
    """Every attacker by name, in the registry's order (probe attackers first)."""
    return dict(_config()[1])


PROBE_ATTACKERS = tuple(name for name, (changes, _) in FUNCTIONS.items() if not changes)
