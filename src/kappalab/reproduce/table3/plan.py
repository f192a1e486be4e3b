"""``kappalab reproduce table3``: what one call asks for (:class:`Plan`) and the records it makes (:class:`RunSpec`).

The command line (:mod:`.cli`) checks the arguments and builds a :class:`Plan`; nothing below it sees them.
:meth:`Plan.specs` lists the records of the call in the order the sweep (:mod:`.sweep`) makes them: per setting
(one, or every grid point of :mod:`.grid`) and seed, the ``init`` record (theta_0, its calibration) and then each
method's. A record's key is ``<config name>/seed<s>/<method>.<hash>`` (the real network's adds the protocol after
the name: ``<name>/<protocol>/seed<s>/...``), the hash that of its run identity (:mod:`kappalab.reproduce.identity`:
the resolved config, the data's identity, the options seed, method, device, dtype and the eigensolver).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..identity import device_options, identity
from .config import Table3Config, resolved
from .grid import grid_points, grid_points_of

#: the modes of the command: the CPU proxy, the paper's networks with random weights, the paper's networks on the
#: user's data and weights, and the real pretrained network on the CPU
MODES = ("proxy", "smoke", "paper", "real")
#: what a call does: run the missing records (then report), report from the records alone, print the calibration
#: at theta_0, or run the proxy's search of App. C.2
ACTIONS = ("run", "aggregate", "calibrate", "search")


@dataclass(frozen=True)
class PaperInputs:
    """The paper's networks' user-supplied inputs (``--imagenet``, ``--harmful-dir``, ``--weights``); None: not
    given (the task names what is missing)."""

    imagenet: str | None = None
    harmful_dir: str | None = None
    weights: str | None = None


@dataclass(frozen=True)
class RunSpec:
    """One record to make: its key and identity, seed, method, the config it runs (the call's at its setting),
    and the key of the ``init`` record of its setting and seed (theta_0's calibration)."""

    key: str
    identity: dict[str, Any]
    seed: int
    method: str
    cfg: Table3Config
    init_key: str


@dataclass(frozen=True)
class Plan:
    """One checked call of ``kappalab reproduce table3``.

    ``work``: the folder for checkpoints and kept features given with ``--work`` (None: the mode's default,
    :meth:`work_dir`); ``grid``: run every point of the selection grid (:mod:`.grid`)."""

    mode: str
    action: str
    cfg: Table3Config
    out: Path
    seeds: tuple[int, ...]
    methods: tuple[str, ...]
    title: str
    device: str = "cpu"
    work: Path | None = None
    grid: bool = False
    inputs: PaperInputs = PaperInputs()

    def __post_init__(self) -> None:
        if self.mode not in MODES or self.action not in ACTIONS:
            raise ValueError(f"Plan: mode {self.mode!r} / action {self.action!r}; choose from {MODES} / {ACTIONS}")

    @property
    def real(self) -> bool:
        return self.mode == "real"

    def options(self, seed: int, method: str) -> dict[str, Any]:
        """A record's identity options (the real network runs on the CPU in float64 whatever ``--device`` says)."""
        device = "cpu" if self.real else self.device
        return {"seed": seed, "method": method, **device_options(device)}

    def points(self) -> list[dict[str, float]]:
        """The settings of the call: every grid point the methods run at (``grid``), else the config's own."""
        return grid_points_of(list(self.methods)) if self.grid else [{}]

    def specs(self, data: dict[str, Any]) -> list[RunSpec]:
        """Every record of the call, in the order they are made (module docstring); ``data``: the data's identity."""
        out = []
        for point in self.points():
            cfg = dataclasses.replace(self.cfg, **point)
            prefix = f"{cfg.name}/{cfg.protocol}" if self.real else cfg.name
            init_key = ""
            for seed in self.seeds:
                for method in ["init", *(m for m in self.methods if not point or point in grid_points(m))]:
                    ident = identity(resolved(cfg), data, self.options(seed, method))
                    key = f"{prefix}/seed{seed}/{method}.{ident['hash']}"
                    init_key = key if method == "init" else init_key
                    out.append(RunSpec(key, ident, seed, method, cfg, init_key))
        return out

    def work_dir(self, data: dict[str, Any]) -> Path:
        """Checkpoints and kept features: ``--work``, else the real network's cache folder, else ``OUT/work`` under
        the hash of the config and the data (a changed config never resumes another config's checkpoint)."""
        if self.real:
            from ...data.fetch import cache_dir

            return self.work or cache_dir() / "table3-real" / "work"
        tag = identity(resolved(self.cfg), data, device_options(self.device))["hash"]
        return (self.work or self.out / "work") / tag
