"""Evidence written at test time: one JSON file per claim in ``$KAPPALAB_EVIDENCE_DIR``.

A test module creates ``EV = Evidence("T4.1.4")`` and, while it runs, calls

* :meth:`Evidence.case` once per executed example (with the family it came from), so that the case count is
  the number of examples actually executed, not the configured budget;
* :meth:`Evidence.counterexample` for a violation confirmed in exact or high precision;
* :meth:`Evidence.measure` for numbers a reader needs (bound vs. largest monotone step, margins, ...);
* :meth:`Evidence.note` for one-line findings.

``proofs_checks/conftest.py`` calls :func:`flush_all` when the session ends. The default directory is
``<tempdir>/kappalab-evidence``; :mod:`kappalab.verify` points the variable at its own directory.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

EVIDENCE_ENV = "KAPPALAB_EVIDENCE_DIR"
_REGISTRY: dict[str, "Evidence"] = {}


def evidence_dir() -> Path:
    """The directory evidence goes to (created on demand)."""
    path = Path(os.environ.get(EVIDENCE_ENV) or Path(tempfile.gettempdir()) / "kappalab-evidence")
    path.mkdir(parents=True, exist_ok=True)
    return path


def jsonable(x: Any) -> Any:
    """Matrices, mpmath numbers and sympy objects as JSON (numbers as floats or exact strings)."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (bool, int, str)) or x is None:
        return x
    if isinstance(x, (float, np.floating)):
        f = float(x)
        return f if np.isfinite(f) else str(f)
    if isinstance(x, np.integer):
        return int(x)
    if hasattr(x, "tolist"):  # torch tensors, sympy matrices
        return jsonable(x.tolist())
    return str(x)  # mpmath mpf (80 digits), sympy Rational/algebraic numbers


class Evidence:
    """Accumulates the evidence of one claim; one instance per claim ID (shared across its modules)."""

    def __new__(cls, claim_id: str) -> "Evidence":
        if claim_id not in _REGISTRY:
            inst = super().__new__(cls)
            inst.claim_id = claim_id
            inst.cases: Counter[str] = Counter()
            inst.counterexamples: list[dict[str, Any]] = []
            inst.measurements: dict[str, Any] = {}
            inst.notes: list[str] = []
            inst.samples: dict[str, list[float]] = {}
            inst.precision: set[str] = set()
            _REGISTRY[claim_id] = inst
        return _REGISTRY[claim_id]

    def case(self, family: str, precision: str = "float64") -> None:
        """Count one executed example of ``family``."""
        self.cases[family] += 1
        self.precision.add(precision)

    def counterexample(self, name: str, precision: str, **data: Any) -> None:
        """Record a violation confirmed in ``precision`` (e.g. ``"exact (sympy)"``, ``MP_LABEL``)."""
        self.precision.add(precision)
        entry = {"name": name, "precision": precision, **jsonable(data)}
        if entry not in self.counterexamples:
            self.counterexamples.append(entry)

    def measure(self, key: str, value: Any) -> None:
        """Store a named measurement (overwrites)."""
        self.measurements[key] = jsonable(value)

    def sample(self, key: str, value: float) -> None:
        """Append one value to the sample ``key`` (summarized as n/min/median/max in the evidence)."""
        self.samples.setdefault(key, []).append(float(value))

    def note(self, text: str) -> None:
        """A one-line finding."""
        if text not in self.notes:
            self.notes.append(text)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.claim_id,
            "cases_tried": sum(self.cases.values()),
            "families": dict(sorted(self.cases.items())),
            "precision": sorted(self.precision),
            "counterexamples": self.counterexamples,
            "measurements": {**self.measurements, **{k: summarize(v) for k, v in sorted(self.samples.items())}},
            "notes": self.notes,
        }


def summarize(values: list[float]) -> dict[str, Any]:
    """n, min, median, max, mean of a sample (inf allowed; the mean of a 0/1 sample is a share)."""
    a = np.asarray(values, dtype=float)
    return {"n": int(a.size), "min": jsonable(a.min()), "median": jsonable(np.median(a)), "max": jsonable(a.max()),
            "mean": jsonable(a.mean())}


def flush_all() -> list[Path]:
    """Write every claim's evidence (``<id>.json``); returns the files written."""
    out = evidence_dir()
    written = []
    for claim_id, ev in sorted(_REGISTRY.items()):
        path = out / f"{claim_id}.json"
        path.write_text(json.dumps(ev.as_dict(), indent=2, sort_keys=False) + "\n")
        written.append(path)
    return written
