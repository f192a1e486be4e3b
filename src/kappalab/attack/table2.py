"""The attacks' Table 2 scope, a PARTIAL SAMPLE: every attacker on Ours' official-protocol extractor of a few full-MNIST
pairs (seed 0), against theta = I and the run's initial extractor.

theta_I is regenerated here from its run identity's parts (``table2_official_<method>`` config, full MNIST, pair,
seed: :func:`kappalab.immunization.immunize` on :func:`kappalab.reproduce.table2.data.mnist_task`, what
``kappalab reproduce table2`` trains; its store keeps spectra, not theta); each record carries the regenerated
run's RIR beside the committed one of ``docs/reproduction/table2/full90/official/runs_official.jsonl`` (same key
prefix), so a difference would show. The official extractor has a bias: the model is ``[X 1] [theta; b^T]``
(:func:`kappalab.immunization.task.with_ones_column`), theta = I has ``b = 0``. The harmful task is the one the
table's probes use: digit b (+1) against the other digits except a (-1), :func:`...data.one_vs_rest`.

Usage: ``python -m kappalab.attack.table2 --pairs 1-0 --attackers gd,adam,lbfgs,solve,finetune,lora_r4 --out
docs/attacks`` (the committed sample; writes ``table2.jsonl`` and
``table2_curves.npz``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from .registry import registry
from .scope import Group, ModelSpec, finish, run_group

COMMITTED = Path("docs/reproduction/table2/full90/official/runs_official.jsonl")
PROTOCOL = "official"


def committed_rir(method: str, a: int, b: int, seed: int) -> float | None:
    prefix = f"{PROTOCOL}.{method}.{a}-{b}.s{seed}."
    for line in COMMITTED.read_text().splitlines():
        if f'"key": "{prefix}' in line:
            r = json.loads(line)
            if r["key"].startswith(prefix):
                return r["result"]["evaluate"]["shifted"]["rir"]
    return None


def group(method: str, a: int, b: int, seed: int, log) -> tuple[Group, dict, str]:
    import torch

    from kappalab.immunization import evaluate, immunize
    from kappalab.immunization.protocols import make_protocol
    from kappalab.immunization.task import with_ones_column
    from kappalab.reproduce.table2.data import mnist_task, one_vs_rest, table2_config

    torch.set_num_threads(1)
    task = mnist_task(a, b, seed, None, 1, "mnist")
    cfg = table2_config(PROTOCOL, method)
    t0 = time.perf_counter()
    run = immunize(task, cfg, seed)
    ev = evaluate(run, task, sensitivity=("pinv",), endpoints=False)
    regenerated = {"rir_shifted": ev["shifted"]["rir"], "rir_pinv": ev["pinv"]["rir"],
                   "committed_rir_shifted": committed_rir(method, a, b, seed), "train_s": time.perf_counter() - t0}
    log(f"{method} {a}-{b} s{seed}: regenerated in {regenerated['train_s']:.0f} s, {regenerated}")
    aug = lambda theta, bias: np.vstack([theta, bias[None, :]])  # noqa: E731  [theta; b^T]
    init = make_protocol(task, cfg, "cpu").init_params(seed, with_w_H=False)
    D = task.dim
    X, y = one_vs_rest(b, a, seed, None, 1, "mnist")
    specs = (ModelSpec(method, aug(np.asarray(run.theta_I, dtype=np.float64), np.asarray(run.bias, dtype=np.float64)),
                       "immunized", f"{PROTOCOL}.{method}.{a}-{b}.s{seed}", regenerated["rir_shifted"]),
             ModelSpec("direct", aug(np.eye(D), np.zeros(D)), "reference"),
             ModelSpec("init", aug(init.theta.detach().numpy(), init.bias.detach().numpy()), "reference"))
    return Group("table2", seed, f"{a}-{b}", with_ones_column(X, True), y, specs), regenerated, task.data_label


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kappalab.attack.table2", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", default="7-9,1-0", help="a-b,... (default: Ours' lowest and highest official RIR)")
    ap.add_argument("--method", default="ours")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("docs/attacks"))
    ap.add_argument("--attackers", default=",".join(registry()))
    args = ap.parse_args(argv)
    attackers = tuple(args.attackers.split(","))
    start = time.perf_counter()
    records, curves, label = [], {}, ""
    for pair in args.pairs.split(","):
        a, b = (int(x) for x in pair.split("-"))
        g, regenerated, label = group(args.method, a, b, args.seed, lambda line: print(line, flush=True))
        recs, cs = run_group(g, attackers, log=lambda line: print(line, flush=True))
        records += [{**r, "regenerated": regenerated if r["role"] == "immunized" else None} for r in recs]
        curves.update(cs)
    config = {"attackers": list(attackers), "pairs": args.pairs, "method": args.method, "seed": args.seed,
              "config": "kappalab/configs/attack_grid.json", "theta_I": f"immunize(table2_{PROTOCOL}_{args.method})",
              "sample": "partial: one method, two pairs, one seed"}
    return finish(args.out, "table2", records, curves, config, label, start)


if __name__ == "__main__":
    raise SystemExit(main())
