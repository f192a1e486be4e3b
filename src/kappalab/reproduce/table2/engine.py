"""Which engine trains a Table 2 sweep's runs and the engine's place in a run's identity (the engines' workers:
:mod:`.run`).

Two engines train the same runs: ``single`` (:func:`kappalab.immunization.immunize`, one run per call, the sweep's
workers in parallel processes) and ``batched`` (:func:`kappalab.immunization.batched.immunize_batch`, runs of
equal config and data shapes stacked along a leading run dimension, at most ``--batch-size`` of them per batch,
in this process). Both start from :func:`.run.prepare` and end with :func:`.run.finish`, so a run's record is
the same but for its timings and the ``engine`` it names.

``--engine auto`` (the default) picks ``batched`` where it applies and pays: every method's config is one the
batched engine implements (the official protocol on the ``features`` route, with minibatches of fewer rows than
features, so not ``--pool 4``: :func:`kappalab.immunization.batched.unsupported`) AND the device is CUDA. On the
CPU it picks ``single``: torch's CPU batched matmul is not faster than one product per run (the measurements, by
``benchmarks/sweep_table2.py --check-single`` and ``scripts/gpu_check.sh``: docs/benchmarks.md, "The batched
engine"). The command prints which engine ran and why.

Identity (:func:`.plan.identity_options`): the single engine adds nothing to a run's identity (it is the reference:
its keys are those of earlier stores; no engine field means single); the batched engine adds ``engine: batched`` to
every run's, every method and device. The two engines compute the same formulas but do not round alike everywhere
(docs/engines.md), so a store never takes one engine's run for the other's: a sweep started with one
engine and resumed with the other trains the second engine's runs anew. The batch size and a batch's other runs
are not part of the identity: each run's slice is computed alone, whatever else shares its batch
(``tests/test_table2_engine.py``, ``tests/test_batched.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kappalab.cli_options import UsageError

from .constants import ENGINES

if TYPE_CHECKING:
    from .plan import Plan

DEFAULT_BATCH_SIZE = 64  #: runs per batch unless --batch-size says otherwise (bounds memory: R x N x D per tensor)


def on_cpu(device: str) -> bool:
    return device == "cpu"


def choose_engine(requested: str, plan: Plan) -> tuple[str, str]:
    """``(engine, why)`` for ``--engine requested`` on this plan (see the module docstring for the rule); a
    UsageError when ``batched`` is asked for a config it does not implement."""
    from kappalab.immunization.batched import unsupported

    features = (28 // plan.pool) ** 2  # D of the (pooled) 28 x 28 images
    reason = next((r for r in (unsupported(plan.config(m), features) for m in plan.methods) if r is not None),
                  None)
    if requested == "single":
        return "single", "--engine single"
    if requested == "batched":
        if reason is not None:
            raise UsageError(f"--engine batched: {reason}; use --engine single (or auto)")
        return "batched", "--engine batched"
    if requested != "auto":
        raise UsageError(f"--engine: must be one of {ENGINES}, got {requested!r}")
    if reason is not None:
        return "single", f"auto: {reason}"
    if on_cpu(plan.device):
        return "single", "auto: on the CPU the batched engine is slower than one run at a time"
    return "batched", f"auto: official protocol, features route, on {plan.device}"
