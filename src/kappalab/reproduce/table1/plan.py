"""``kappalab reproduce table1``: what one call asks for (:class:`Plan`), the runs it makes (:class:`RunSpec`, in
the plan's order) and their keys and identities (:mod:`kappalab.reproduce.identity`)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappalab.methods import LINEAR_METHODS
from kappalab.reproduce.identity import (
    data_identity,
    device_options,
    identity,
    run_key,
    table1_options,
)

from .constants import ALL

if TYPE_CHECKING:
    from kappalab.immunization import LinearTask, MethodConfig


def method_overrides(overrides: Mapping[str, Any], method: str) -> dict[str, Any]:
    """The overrides that apply to ``method``: unscoped keys, and ``<method>.<key>`` with the prefix removed."""
    scopes = set(LINEAR_METHODS) | set(ALL)
    out = {k: v for k, v in overrides.items() if k.split(".")[0] not in scopes}
    out.update({k.split(".", 1)[1]: v for k, v in overrides.items() if k.split(".")[0] == method})
    return out


@dataclass(frozen=True)
class RunSpec:
    """One Table 1 run, as its worker reads it (typed fields); :meth:`record` is the record's ``params`` (the keys
    and values its stores have always held)."""

    key: str  #: the run's key (its label and the identity's hash)
    identity: Mapping[str, Any]  #: its identity (:func:`kappalab.reproduce.identity.identity`)
    protocol: str
    method: str  #: a method of Table 1 or a hint baseline (:func:`.run.config_of`)
    seed: int
    overrides: Mapping[str, Any]  #: the method's overrides (``--set``, ``--epochs``, the learning rate of ``--lrs``)
    data_csv: str | None  #: House Prices' train.csv (None: the cached download)
    device: str
    probe_iters: int  #: Eq. 16's gradient-descent iterations
    probe_target: float  #: ... and the relative error counted to
    out: Path  #: the command's output folder (the run's arrays go under ``out/runs/<key>``)
    trajectory: bool  #: record the trajectory (:class:`kappalab.immunization.trajectory.TrajectoryRecorder`)
    data: Mapping[str, Any]  #: the data's identity and rows (the record's ``data``)
    processes: int  #: > 1: the data-parallel emulation of that many processes

    def record(self) -> dict[str, Any]:
        return {"key": self.key, "identity": self.identity, "protocol": self.protocol, "method": self.method,
                "seed": self.seed, "overrides": self.overrides, "data_csv": self.data_csv, "device": self.device,
                "probe_iters": self.probe_iters, "probe_target": self.probe_target, "out": str(self.out),
                "trajectory": self.trajectory, "data": self.data, "processes": self.processes}


@dataclass(frozen=True)
class Plan:
    """One call of ``kappalab reproduce table1``: every value checked, each method's config loaded, the data read."""

    protocol: str  #: "paper" or "official"
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    lrs: tuple[float, ...] | None  #: ``--lrs``: one run per lr x method x seed (None: each config's eta)
    overrides: Mapping[str, Any]  #: ``--config`` and ``--set`` as read (``<method>.<key>`` for one method)
    epochs: int | None  #: ``--epochs`` (or ``--quick``'s); None: each config's
    configs: Mapping[str, MethodConfig]  #: each method's config, its overrides and ``epochs`` applied
    task: LinearTask = field(compare=False)  #: the data every run reads
    out: Path
    processes: int  #: > 1: the official protocol's data-parallel run, emulated
    trajectory: bool  #: record each run's trajectory (``--trajectory``, implied by ``--selection``)
    selection: str  #: App. C.2's selection variant listed first ("none": no selection)
    probe_iters: int
    probe_target: float
    device: str
    data_csv: str | None
    threads: int  #: torch / BLAS threads per worker
    workers: int  #: runs in parallel processes
    progress: bool

    @functools.cached_property
    def data(self) -> dict[str, Any]:
        """The data's identity (its name and the sha256 of the four arrays a run reads) and rows: each record's
        ``data``."""
        task = self.task
        ident = data_identity(task.name, {"X_P": task.X_P, "y_P": task.y_P, "X_H": task.X_H, "y_H": task.y_H})
        return {**ident, "rows": {"P": int(task.X_P.shape[0]), "H": int(task.X_H.shape[0])}}

    @property
    def identity_data(self) -> dict[str, str]:
        """The data part of each run's identity."""
        return {k: self.data[k] for k in ("name", "sha256")}

    @functools.cached_property
    def identity_options(self) -> dict[str, Any]:
        """Every run's identity options but its seed."""
        return {**device_options(self.device), "probe_iters": self.probe_iters, "probe_target": self.probe_target,
                **table1_options(self.trajectory, self.processes)}

    @property
    def tag(self) -> str:
        """The reports' name part of an N-process plan: ``_ddp<N>`` (none for one process)."""
        return f"_ddp{self.processes}" if self.processes > 1 else ""

    def config(self, method: str, lr: float | None) -> MethodConfig:
        """The config of ``method``'s runs at ``lr`` (None: the config's eta): the config their identity holds."""
        return self.configs[method] if lr is None else self.configs[method].replace(eta=lr)

    def runs(self) -> list[tuple[RunSpec, MethodConfig]]:
        """Every run of the plan (lr, then method, then seed) with its config."""
        out = []
        for lr in self.lrs or (None,):
            for method in self.methods:
                cfg = self.config(method, lr)
                overrides = {**method_overrides(self.overrides, method),
                             **({"epochs": self.epochs} if self.epochs is not None else {}),
                             **({"eta": lr} if lr is not None else {})}
                for s in self.seeds:
                    ident = identity(cfg.resolved(), self.identity_data, {"seed": s, **self.identity_options})
                    key = run_key(f"{self.protocol}.{method}.s{s}.e{cfg.epochs}" + (f".lr{lr:g}" if lr else "")
                                  + (f".p{self.processes}" if self.processes > 1 else ""), ident)
                    out.append((RunSpec(key, ident, self.protocol, method, s, overrides, self.data_csv, self.device,
                                        self.probe_iters, self.probe_target, self.out, self.trajectory, self.data,
                                        self.processes), cfg))
        return out

    def same_settings(self, stored: Mapping[str, Any]) -> bool:
        """Whether a stored record was made with this plan's protocol, data, options and epochs (a run of an earlier
        call into the same ``--out`` counts): the runs an lr's report and the selection cover."""
        return (stored["result"]["protocol"] == self.protocol and stored["identity"]["data"] == self.identity_data
                and {k: v for k, v in stored["identity"]["options"].items() if k != "seed"} == self.identity_options
                and stored["result"]["epochs"] in {c.epochs for c in self.configs.values()})
