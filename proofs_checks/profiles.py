"""Hypothesis profiles of ``proofs_checks`` and the per-test example budget.

* ``ci`` (default): ``derandomize=True`` (every run draws the same examples), small budgets so that the whole
  ``pytest proofs_checks`` stays under five minutes on one core.
* ``deep``: ``derandomize=False`` and ``DEEP_FACTOR`` times more examples per test, for a local hunt for
  counterexamples: ``KAPPALAB_HYPOTHESIS_PROFILE=deep pytest proofs_checks``.

The profiles are applied per test through :func:`budget` (as a ``parent`` settings object) instead of
``settings.load_profile``, so that they never change the global profile that ``tests/`` loads.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILE_ENV = "KAPPALAB_HYPOTHESIS_PROFILE"
DEEP_FACTOR = 40

_COMMON = dict(deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow,
                                                                     HealthCheck.filter_too_much])
settings.register_profile("proofs_checks-ci", derandomize=True, database=None, **_COMMON)
settings.register_profile("proofs_checks-deep", derandomize=False, **_COMMON)


def profile_name() -> str:
    """``"ci"`` or ``"deep"`` from ``KAPPALAB_HYPOTHESIS_PROFILE`` (anything else is an error)."""
    name = os.environ.get(PROFILE_ENV, "ci")
    if name not in ("ci", "deep"):
        raise ValueError(f"{PROFILE_ENV} must be 'ci' or 'deep', got {name!r}")
    return name


def budget(n_ci: int) -> settings:
    """Settings for one property test: ``n_ci`` examples under ``ci``, ``DEEP_FACTOR * n_ci`` under ``deep``."""
    name = profile_name()
    n = n_ci if name == "ci" else DEEP_FACTOR * n_ci
    return settings(settings.get_profile(f"proofs_checks-{name}"), max_examples=n)
