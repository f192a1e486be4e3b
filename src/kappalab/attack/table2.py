"""The attacks' Table 2 scope, a PARTIAL SAMPLE: every attacker on the four methods' official-protocol extractors of
a few full-MNIST pairs (one seed), against theta = I, the run's initial extractor and a random one.

theta_I is regenerated here from its run identity's parts (``table2_official_<method>`` config, full MNIST, pair,
seed: :func:`kappalab.immunization.immunize` on :func:`kappalab.reproduce.table2.data.mnist_task`, what
``kappalab reproduce table2`` trains; its store keeps spectra, not theta); each record carries the regenerated
run's RIR beside the committed one of ``docs/reproduction/table2/full90/official/runs_official.jsonl`` (same key
prefix), so a difference would show. The official extractor has a bias: the model is ``[X 1] [theta; b^T]``
(:func:`kappalab.immunization.task.with_ones_column`); theta = I and the random extractor have ``b = 0``. The
harmful task is the one the table's probes use: digit b (+1) against the other digits except a (-1),
:func:`...data.one_vs_rest`. The four methods start from one initial extractor per pair and seed (checked).

Usage: ``python -m kappalab.attack.table2 --pairs 7-9,1-0 --out docs/attacks`` (the committed sample; writes
``table2.jsonl`` and ``table2_curves.npz`` after each pair, so a stopped run keeps the pairs it finished).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from kappalab.methods import PAPER_ORDER

from .registry import registry
from .scope import Group, ModelSpec, finish, random_extractor, run_group

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


def regenerate(method: str, task, seed: int, a: int, b: int, log):
    """theta_I of ``method`` on the pair (with its bias row), its initial extractor, and the regeneration's record."""
    from kappalab.immunization import evaluate, immunize
    from kappalab.immunization.protocols import make_protocol
    from kappalab.reproduce.table2.data import table2_config

    cfg = table2_config(PROTOCOL, method)
    t0 = time.perf_counter()
    run = immunize(task, cfg, seed)
    ev = evaluate(run, task, sensitivity=("pinv",), endpoints=False)
    regenerated = {"rir_shifted": ev["shifted"]["rir"], "rir_pinv": ev["pinv"]["rir"],
                   "committed_rir_shifted": committed_rir(method, a, b, seed), "train_s": time.perf_counter() - t0}
    log(f"{method} {a}-{b} s{seed}: regenerated in {regenerated['train_s']:.0f} s, {regenerated}")
    init = make_protocol(task, cfg, "cpu").init_params(seed, with_w_H=False)
    theta_I = augmented(np.asarray(run.theta_I, dtype=np.float64), np.asarray(run.bias, dtype=np.float64))
    return theta_I, augmented(init.theta.detach().numpy(), init.bias.detach().numpy()), regenerated


def augmented(theta: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``[theta; b^T]``: the official extractor with its bias as the last row."""
    return np.vstack([theta, bias[None, :]])


def group(methods: tuple[str, ...], a: int, b: int, seed: int, log) -> tuple[Group, dict[str, dict], str]:
    """The pair's group: each method's regenerated theta_I and the references; the regenerations by method."""
    import torch

    from kappalab.immunization.task import with_ones_column
    from kappalab.reproduce.table2.data import mnist_task, one_vs_rest

    torch.set_num_threads(1)
    task = mnist_task(a, b, seed, None, 1, "mnist")
    specs, regenerated, inits = [], {}, []
    for method in methods:
        theta_I, init, regenerated[method] = regenerate(method, task, seed, a, b, log)
        specs.append(ModelSpec(method, theta_I, "immunized", f"{PROTOCOL}.{method}.{a}-{b}.s{seed}",
                               regenerated[method]["rir_shifted"]))
        inits.append(init)
    if any(not np.array_equal(init, inits[0]) for init in inits):
        raise RuntimeError(f"pair {a}-{b}, seed {seed}: the methods start from different extractors")
    D = task.dim
    specs += [ModelSpec("direct", augmented(np.eye(D), np.zeros(D)), "reference"),
              ModelSpec("init", inits[0], "reference"),
              ModelSpec("random", augmented(random_extractor(D, seed), np.zeros(D)), "reference")]
    X, y = one_vs_rest(b, a, seed, None, 1, "mnist")
    return Group("table2", seed, f"{a}-{b}", with_ones_column(X, True), y, tuple(specs)), regenerated, task.data_label


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kappalab.attack.table2", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", default="7-9,1-0", help="a-b,... (default: Ours' lowest and highest official RIR)")
    ap.add_argument("--methods", default=",".join(PAPER_ORDER), help="immunization methods (default: the four)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("docs/attacks"))
    ap.add_argument("--attackers", default=",".join(registry()))
    args = ap.parse_args(argv)
    attackers, methods = tuple(args.attackers.split(",")), tuple(args.methods.split(","))
    config = {"attackers": list(attackers), "pairs": args.pairs, "methods": list(methods), "seed": args.seed,
              "config": "kappalab/configs/attack_grid.json", "theta_I": f"immunize(table2_{PROTOCOL}_<method>)",
              "sample": "partial: the pairs given, one seed, the official protocol"}
    start = time.perf_counter()
    records, curves = [], {}
    for pair in args.pairs.split(","):
        a, b = (int(x) for x in pair.split("-"))
        g, regenerated, label = group(methods, a, b, args.seed, lambda line: print(line, flush=True))
        recs, cs = run_group(g, attackers, log=lambda line: print(line, flush=True))
        records += [{**r, "regenerated": regenerated.get(r["method"]) if r["role"] == "immunized" else None}
                    for r in recs]
        curves.update(cs)
        finish(args.out, "table2", records, curves, config, label, start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
