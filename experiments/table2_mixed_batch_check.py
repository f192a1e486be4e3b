"""Full MNIST, one mixed-pair batch (pairs 0-1, 1-2, 7-3, seed 0: 5923, 5958 and 6131 rows a task, 92, 93 and 95
steps per epoch) against the single engine, Ours, one epoch: each run's step count, and theta_I, bias and history
relative to the single run's largest entry.

    python experiments/table2_mixed_batch_check.py > docs/engines/full_mnist_mixed_batch_cpu.json

(the timings are those of whatever machine runs it; not a benchmark).
"""

from __future__ import annotations

import json
import time

import numpy as np

from kappalab.immunization import immunize
from kappalab.immunization.batched import immunize_batch
from kappalab.reproduce.table2 import mnist_task, table2_config

JOBS = (((0, 1), 0), ((1, 2), 0), ((7, 3), 0))


def rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def main() -> None:
    cfg = table2_config("official", "ours").replace(epochs=1)
    tasks = [mnist_task(a, b, seed, None, 1, "mnist") for (a, b), seed in JOBS]
    start = time.perf_counter()
    batched = immunize_batch(tasks, cfg, [seed for _, seed in JOBS])
    out = {"rows": [[int(t.X_P.shape[0]), int(t.X_H.shape[0])] for t in tasks],
           "batched_s": time.perf_counter() - start, "runs": []}
    for task, (pair, seed), many in zip(tasks, JOBS, batched):
        start = time.perf_counter()
        one = immunize(task, cfg, seed)
        out["runs"].append({"pair": pair, "steps": [many.n_steps, one.n_steps], "single_s": time.perf_counter() - start,
                            "theta_rel": rel(many.theta_I, one.theta_I), "bias_rel": rel(many.bias, one.bias),
                            "history_rel": max(rel(many.history[k], one.history[k]) for k in one.history)})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
