"""Issue 39's cost measurement before the Table 1 scope run: every attacker of kappalab.attack on ONE model (Ours,
seed 0, the committed paper-protocol theta_I of docs/reproduction/table1/paper), 1000 steps each, as the scope run
does (kappalab.attack.scope). Prints per-attacker wall time and the total wall and CPU time.

    nice -n 10 .venv/bin/python experiments/attack_cost_one_model.py
"""

import time

import numpy as np

from kappalab.attack.measures import attack
from kappalab.attack.problem import Split
from kappalab.attack.registry import Model, registry, settings

d = "docs/reproduction/table1/paper/"
X, y = np.load(d + "features_H.npy"), np.load(d + "y_H.npy")
theta = np.load(d + "theta_ours_seed0.npy")
m = Model(Split.of(X @ theta, y, 0), Split.of(X, y, 0), theta)
s = settings()
total, cpu = time.perf_counter(), time.process_time()
for name, a in registry().items():
    t = time.perf_counter()
    attack(m, a, 0, budgets=s.budgets, steps=1000, batch_size=s.batch_size, selection_budget=s.selection_budget)
    print(f"{name:10s} {time.perf_counter() - t:6.2f}s", flush=True)
print(f"one model, all {len(registry())} attackers, 1000 steps: wall {time.perf_counter() - total:.1f} s, "
      f"CPU {time.process_time() - cpu:.1f} s")
