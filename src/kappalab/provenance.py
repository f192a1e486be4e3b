"""Provenance record stored with every result: code version, software, machine, run settings.

No hostname or user name is recorded; the machine is described by platform and CPU count.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from kappalab.results import to_jsonable

UNKNOWN = "unknown"


def _git(*args: str) -> str | None:
    """Output of a git command run in this package's folder, or None if it fails."""
    try:
        result = subprocess.run(["git", *args], cwd=Path(__file__).resolve().parent,
                                capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def git_state() -> dict[str, Any]:
    """Commit hash and whether tracked files differ from it; "unknown" outside a git checkout."""
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": UNKNOWN, "dirty": UNKNOWN}
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": UNKNOWN if status is None else bool(status)}


def package_version(name: str) -> str | None:
    """Installed version of a distribution without importing it; None if not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _kappalab_version() -> str:
    """Installed kappalab version, or "unknown (not installed)" when run from a source tree."""
    return package_version("kappalab") or f"{UNKNOWN} (not installed)"


def versions() -> dict[str, str | None]:
    """Versions of python, numpy, scipy, torch (None if absent) and kappalab."""
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": package_version("scipy"),
        "torch": package_version("torch") if importlib.util.find_spec("torch") else None,
        "kappalab": _kappalab_version(),
    }


def linear_algebra() -> dict[str, Any]:
    """numpy's BLAS/LAPACK build and the thread pools loaded now (threadpoolctl), each with the kernel it picked
    for this CPU (``architecture``, e.g. OpenBLAS' "Haswell" or "SkylakeX"): the same code and data round
    differently under another kernel, which a rounding-sensitive run (Table 2's Opt kappa) shows."""
    from threadpoolctl import threadpool_info

    info: dict[str, Any] = {}
    try:
        build = np.show_config(mode="dicts")["Build Dependencies"]
        info["numpy_blas"] = {k: build["blas"].get(k) for k in ("name", "version")}
        info["numpy_lapack"] = {k: build["lapack"].get(k) for k in ("name", "version")}
    except (TypeError, KeyError):
        info["numpy_blas"] = info["numpy_lapack"] = UNKNOWN
    info["threadpools"] = [
        {k: pool.get(k) for k in ("user_api", "internal_api", "version", "num_threads", "threading_layer",
                                      "architecture")}
        for pool in threadpool_info()
    ]
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_num_threads"] = torch.get_num_threads()
        info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()  # its vector kernels: AVX2, ...
    return info


def cpu_model() -> str | None:
    """The CPU's model name (Linux' /proc/cpuinfo), or None where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        return None


def machine() -> dict[str, Any]:
    """Platform and CPU description without hostname."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "cpu_model": cpu_model(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python_implementation": platform.python_implementation(),
        "cpu_count": os.cpu_count(),
        "cpus_available": affinity,
    }


def provenance(
    seed: int | None,
    config: Any,
    device: str = "cpu",
    dtype: str = "float64",
    data_label: str | None = None,
) -> dict[str, Any]:
    """JSON-serializable provenance of one run.

    Args:
        seed: the run's random seed.
        config: the run's settings (anything :func:`kappalab.results.to_jsonable` accepts).
        device: compute device, e.g. "cpu" or "cuda:0".
        dtype: floating-point type of the computation.
        data_label: what data was used, e.g. "MNIST subset (500/digit)".
    """
    return {
        "git": git_state(),
        "versions": versions(),
        "linear_algebra": linear_algebra(),
        "machine": machine(),
        "timestamp_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seed": seed,
        "config": to_jsonable(config),
        "device": device,
        "dtype": dtype,
        "data_label": data_label,
    }
