"""``pytest proofs_checks``: one module per claim of docs/claims.md.

Hypothesis profiles (see :mod:`proofs_checks.profiles`): ``ci`` (default, derandomized, small budgets) and
``deep`` (``KAPPALAB_HYPOTHESIS_PROFILE=deep``, randomized, 40x the examples). Evidence (case counts, families,
counterexamples, measurements) is written to ``$KAPPALAB_EVIDENCE_DIR`` when the session ends.
"""

from __future__ import annotations

from proofs_checks import profiles  # noqa: F401  (registers the hypothesis profiles)
from proofs_checks.evidence import flush_all


def pytest_sessionfinish(session, exitstatus) -> None:  # noqa: ARG001
    """Write the evidence of every claim that ran."""
    flush_all()
