"""Issue 39's cost measurement for the attackers that change the real network's tail (fine-tuning, LoRA): one step
of each, and one evaluation of the harmful training loss on the training rows (what the scope run computes at
the deep curve's points, :mod:`kappalab.attack.measures`), on one run of a powered Table 3 store.

A model's cost per attacker: the tuning grid's steps (``grid x selection_budget``, no curve, one validation loss
per grid value at about a third of a training evaluation: 20% of the rows against 60%), then the run's
``reach_factor x 100`` steps with the curve computed at steps 0-k, every k-th step and the budgets
(``k = deep_curve_every``).

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv-deep/bin/python experiments/attack_cost_deep_tail.py STORE_DIR [--steps N]

STORE_DIR: a powered store whose first Ours run (else its first method run) has ``theta_I.pt`` in the work folder.
Prints CPU seconds per step and per evaluation, and what a scope run of one model costs at them.
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

from kappalab.attack.deep_attackers import deep_attack
from kappalab.attack.problem import prediction_loss, split_rows
from kappalab.attack.registry import registry, settings
from kappalab.attack.table3 import Tails
from kappalab.data.fetch import cache_dir

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("store", type=Path)
ap.add_argument("--steps", type=int, default=10)
args = ap.parse_args()
work = cache_dir() / "table3-real" / "work"
records = [json.loads(line) for line in (args.store / "runs.jsonl").read_text().splitlines() if line.strip()]
runs = [r for r in records if r["method"] != "init" and (work / r["key"].replace("/", "_") / "theta_I.pt").is_file()]
run = next((r for r in runs if r["method"] == "ours"), runs[0])
tails = Tails(run)
extractor = tails.theta_I(run, work)
train, _, _ = split_rows(tails.trunk.shape[0], run["seed"])
X, Y = tails.trunk[train], np.eye(10)[tails.data.y["H", "heldout"].numpy()][train]
cfg, known = settings(), registry()
steps_per_model = {}
dtype = next(extractor.model.trainable.parameters()).dtype
print(f"run {run['key']}: {X.shape[0]} training rows, batch {cfg.batch_size}, tail in {dtype}, one thread")
for name in ("finetune", "lora_r1", "lora_r4", "lora_r16"):
    params = dict(known[name].grid[0])
    it = deep_attack(extractor, X, Y, seed=0, batch_size=cfg.batch_size, **params)
    t0 = time.process_time()
    snaps = [next(it) for _ in range(args.steps)]
    step = (time.process_time() - t0) / args.steps
    t0 = time.process_time()
    prediction_loss(snaps[-1].predict(X), Y)
    evaluation = time.process_time() - t0
    grid, run_steps, k = len(known[name].grid), cfg.reach_factor * 100, cfg.deep_curve_every
    n = grid * cfg.selection_budget + run_steps  # tuning, then the run
    points = len({t for t in range(run_steps + 1) if t <= k or t % k == 0} | set(cfg.budgets))
    steps_per_model[name] = n * step + (points + grid / 3) * evaluation
    print(f"{name} ({params}): {step:.3f} CPU-s per step, {evaluation:.2f} CPU-s per evaluation; {n} steps and "
          f"{points} curve points: {steps_per_model[name] / 3600:.2f} CPU-h per model")
print(f"one model, the four attackers: {sum(steps_per_model.values()) / 3600:.1f} CPU-h")
