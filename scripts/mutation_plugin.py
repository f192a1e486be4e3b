"""pytest plugin for the mutation runs of scripts/mutation.sh (loaded with ``-p mutation_plugin``; never in CI).

It changes how fast a mutant is decided, not which tests decide it:

* the hypothesis profile ``mutation``: derandomized like ``ci`` (every mutant sees the same examples), 10 examples
  per property instead of 25 (the mutation score is measured with it; docs/mutation.md says so);
* the tests of a mutant run fastest first, by the durations mutmut measured on the clean code
  (``mutmut-stats.json``): mutmut stops at the first failure (``-x``), so a killed mutant costs its cheapest
  failing test, not the sum of the tests before it in file order;
* a guard: the session fails at once unless ``kappalab`` is imported from mutmut's copy (``mutants/src``), so a
  stale installed copy can never answer for the mutants.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "mutation", derandomize=True, deadline=None, max_examples=10, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def pytest_configure(config: pytest.Config) -> None:
    import kappalab

    where = Path(kappalab.__file__).resolve()
    if "mutants" not in where.parts:
        raise pytest.UsageError(f"mutation run imports kappalab from {where}, not from mutmut's mutants/src")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    stats = Path("mutmut-stats.json")
    if not stats.exists():  # mutmut's first (stats) run: it measures these durations
        return
    duration = json.loads(stats.read_text())["duration_by_test"]
    items.sort(key=lambda item: duration.get(item.nodeid, 0.0))
