"""Issue 39's cost measurement before a scope run: every attacker of kappalab.attack on ONE model, 1000 steps each,
as the scope run does (kappalab.attack.scope). Prints per-attacker wall time and the total wall and CPU time.

    nice -n 10 .venv/bin/python experiments/attack_cost_one_model.py            # Table 1: Ours, seed 0
    nice -n 10 .venv/bin/python experiments/attack_cost_one_model.py --mnist    # Table 2's size (see below)

Table 1: the committed paper-protocol theta_I of Ours, seed 0 (docs/reproduction/table1/paper). ``--mnist``: a
Table 2-sized model, full MNIST, the harmful task digit 9 against the rest (``one_vs_rest(9, 7, ...)``, the pair
7-9's labelled D_H, 11,898 x 784) and a random 784 x 784 extractor drawn like the runs' start (U(+-1/sqrt(784)));
the attackers' cost depends on the shapes, not on theta's values.
"""

import os
import sys
import time

import numpy as np

from kappalab.attack.measures import attack
from kappalab.attack.problem import Split
from kappalab.attack.registry import Model, registry, settings
from kappalab.provenance import git_state

if "--mnist" in sys.argv:
    from kappalab.reproduce.table2.data import one_vs_rest

    X, y = one_vs_rest(9, 7, 0, None, 1, "mnist")
    theta = np.random.default_rng(0).uniform(-1, 1, (784, 784)) / np.sqrt(784)
else:
    d = "docs/reproduction/table1/paper/"
    X, y = np.load(d + "features_H.npy"), np.load(d + "y_H.npy")
    theta = np.load(d + "theta_ours_seed0.npy")
load = " ".join(f"{x:.2f}" for x in os.getloadavg())
print(f"# {' '.join(sys.argv)}  ({time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, load average: {load}, "
      f"{os.cpu_count()} CPUs, commit {git_state()['commit'][:7]})", flush=True)
m = Model(Split.of(X @ theta, y, 0), Split.of(X, y, 0), theta)
s = settings()
total, cpu = time.perf_counter(), time.process_time()
for name, a in registry().items():
    t = time.perf_counter()
    attack(m, a, 0, budgets=s.budgets, steps=1000, batch_size=s.batch_size, selection_budget=s.selection_budget)
    print(f"{name:10s} {time.perf_counter() - t:6.2f}s", flush=True)
print(f"one model {X.shape}, all {len(registry())} attackers, 1000 steps: wall {time.perf_counter() - total:.1f} s, "
      f"CPU {time.process_time() - cpu:.1f} s")
