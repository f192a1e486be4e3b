"""The attacks' Table 2 scope: every attacker on the four methods' extractors of full-MNIST pairs, against theta = I,
the run's initial extractor and a random one, under one protocol.

theta_I is regenerated here from its run identity's parts (``table2_<protocol>_<method>`` config with the values
the table's runs used, :data:`TABLE_SETTINGS`, and any ``--set``; full MNIST, pair, seed):
:func:`kappalab.immunization.immunize` on :func:`kappalab.reproduce.table2.data.mnist_task`, what ``kappalab
reproduce table2`` trains (its store keeps spectra, not theta). Each record carries the regenerated run's RIR beside
the committed one of the table's stores (:data:`RUN_STORES`, same key prefix; None where the table did not run it),
so a difference would show. The RIR is the protocol's own (:data:`RIR_KAPPA`). The official extractor has
a bias: the model is ``[X 1] [theta; b^T]`` (:func:`kappalab.immunization.task.with_ones_column`); theta = I and the
random extractor have ``b = 0``. The harmful task is the one the table's probes use: digit b (+1) against the
other digits except a (-1), :func:`...data.one_vs_rest`. The four methods start from one initial extractor per
pair and seed (checked). D_P's utility under the extractor attackers (:mod:`.utility`) reads the mirror task:
digit a (+1) against the other digits except b (-1) (the immunization's own D_P rows carry no target to keep).

Pairs: ``--pairs extremes`` (the default) is the issue's rule, fixed before the runs: the :data:`EXTREMES` pairs
with the lowest and the :data:`EXTREMES` with the highest official-protocol RIR of Ours, mean over the committed
seeds (:func:`extreme_pairs`); or ``a-b,...``. A group is one (seed, pair); ``--shard K/N`` runs the groups whose
label ``<seed>/<pair>`` falls in shard K (:func:`kappalab.sweep.shard_jobs`), each shard into its own ``--out``
(join them with ``experiments/attack_merge_parts.py``).

Output: ``<out>/table2_<protocol>.jsonl`` and ``..._curves.npz``, a group appended as soon as it is finished; a
rerun skips the groups already stored whole (every method and reference x every attacker) and refuses a part of
one, so a stopped sweep resumes without losing or redoing a group. ``--slowdown-budgets`` other than the default
(1, 10, 100) runs each attack 10 x the largest and names the store ``table2_<protocol>_b<largest>``, so runs of
different lengths are never joined.

Usage: ``python -m kappalab.attack.table2 --protocol official --seeds 0,1,2 --out docs/attacks [--shard K/N]
[--slowdown-budgets 1,10,100,1000]``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from kappalab.cli_options import Parser
from kappalab.methods import PAPER_ORDER
from kappalab.provenance import git_state
from kappalab.sweep import parse_shard, shard_jobs

from .registry import registry
from .scope import (REFERENCES, SLOWDOWN_BUDGETS, Group, ModelSpec, add_slowdown_budgets, finish, random_extractor,
                    run_group)

STORES = Path("docs/reproduction/table2/full90")
#: the table's stores of each protocol's runs: Alg. 1's IMMA and Opt kappa (seed 0) are in a store of their own
RUN_STORES = {"official": ("official/runs_official.jsonl",),
              "paper": ("paper/runs_paper.jsonl", "paper_imma_optk/runs_paper.jsonl")}
#: config values the table's runs of a (protocol, method) were made with beyond its shipped config: Alg. 1's Ours
#: and R_ill Only took the closed-form step; its IMMA and Opt kappa the dense route, the config's (the only one the
#: paper protocol implements for them); the official runs the configs as shipped (tests/test_attack_cli.py checks
#: this against every committed record's ``spectral_route``)
TABLE_SETTINGS: dict[tuple[str, str], dict[str, Any]] = {
    ("paper", "ours"): {"extra.spectral_route": "closed_form"},
    ("paper", "rill_only"): {"extra.spectral_route": "closed_form"}}
#: how many pairs at each end of Ours' official RIR the default scope takes (the issue: 5 lowest and 5 highest)
EXTREMES = 5
#: the kappa each protocol's RIR uses: the official code's shifted kappa, Alg. 1's pinv kappa
RIR_KAPPA = {"official": "shifted", "paper": "pinv"}


def committed_rir(protocol: str, method: str, a: int, b: int, seed: int) -> float | None:
    """The table's stored RIR of that run (its first record with the key prefix in :data:`RUN_STORES`), or None."""
    prefix = f"{protocol}.{method}.{a}-{b}.s{seed}."
    for store in RUN_STORES[protocol]:
        for line in (STORES / store).read_text().splitlines():
            if f'"key": "{prefix}' in line:
                r = json.loads(line)
                if r["key"].startswith(prefix):
                    return r["result"]["evaluate"][RIR_KAPPA[protocol]]["rir"]
    return None


def extreme_pairs(k: int = EXTREMES) -> list[str]:
    """The ``k`` pairs with the lowest and the ``k`` with the highest mean official-protocol RIR (shifted kappa) of
    Ours over the committed seeds, lowest first (ties: the pair's name)."""
    rir: dict[str, list[float]] = {}
    for line in (STORES / "official" / "runs_official.jsonl").read_text().splitlines():
        if '"key": "official.ours.' in line:
            r = json.loads(line)
            rir.setdefault(r["key"].split(".")[2], []).append(r["result"]["evaluate"]["shifted"]["rir"])
    order = sorted(rir, key=lambda pair: (float(np.mean(rir[pair])), pair))
    return order[:k] + order[-k:]


def stored_groups(out: Path, stem: str, methods: tuple[str, ...], attackers: tuple[str, ...]
                  ) -> tuple[set[tuple[int, str]], set[tuple[int, str]]]:
    """(the groups ``(seed, pair)`` stored whole in ``out/<stem>.jsonl``, those stored in part)."""
    path = out / f"{stem}.jsonl"
    if not path.is_file():
        return set(), set()
    want = {(m, a) for m in (*methods, *REFERENCES) for a in attackers}
    have: dict[tuple[int, str], set[tuple[str, str]]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            have.setdefault((r["seed"], r["pair"]), set()).add((r["method"], r["attacker"]))
    whole = {g for g, got in have.items() if want <= got}
    return whole, set(have) - whole


def with_bias(theta: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """``[theta; b^T]``, the extractor with its bias as the last row; theta itself without a bias."""
    return theta if bias is None else np.vstack([theta, bias[None, :]])


def regenerate(protocol: str, method: str, overrides: dict[str, Any], task, seed: int, a: int, b: int, log
               ) -> tuple[np.ndarray, np.ndarray, bool, dict[str, Any]]:
    """theta_I of ``method`` on the pair (with its bias row), its initial extractor, whether the extractor has a
    bias, and the regeneration's record (both kappas' RIR and the table's stored one, ``committed_rir_<kappa>``)."""
    from kappalab.immunization import evaluate, immunize
    from kappalab.immunization.protocols import make_protocol
    from kappalab.reproduce.table2.data import table2_config

    cfg = table2_config(protocol, method, {**TABLE_SETTINGS.get((protocol, method), {}), **overrides})
    t0 = time.perf_counter()
    run = immunize(task, cfg, seed)
    ev = evaluate(run, task, sensitivity=("pinv",), endpoints=False)
    kappa = RIR_KAPPA[protocol]
    regenerated = {"rir_shifted": ev["shifted"]["rir"], "rir_pinv": ev["pinv"]["rir"],
                   f"committed_rir_{kappa}": committed_rir(protocol, method, a, b, seed),
                   "train_s": time.perf_counter() - t0}
    log(f"{protocol} {method} {a}-{b} s{seed}: regenerated in {regenerated['train_s']:.0f} s, {regenerated}")
    init = make_protocol(task, cfg, "cpu").init_params(seed, with_w_H=False)
    bias = None if run.bias is None else np.asarray(run.bias, dtype=np.float64)
    init_bias = None if init.bias is None else init.bias.detach().numpy()
    return (with_bias(np.asarray(run.theta_I, dtype=np.float64), bias),
            with_bias(init.theta.detach().numpy(), init_bias), bias is not None, regenerated)


def group(protocol: str, methods: tuple[str, ...], overrides: dict[str, Any], a: int, b: int, seed: int, log
          ) -> tuple[Group, dict[str, dict], str]:
    """The pair's group at ``seed``: each method's regenerated theta_I and the references; the regenerations by
    method."""
    import torch

    from kappalab.immunization.task import with_ones_column
    from kappalab.reproduce.table2.data import mnist_task, one_vs_rest

    torch.set_num_threads(1)
    task = mnist_task(a, b, seed, None, 1, "mnist")
    specs, regenerated, inits, biased = [], {}, [], set()
    for method in methods:
        theta_I, init, has_bias, regenerated[method] = regenerate(protocol, method, overrides, task, seed, a, b, log)
        specs.append(ModelSpec(method, theta_I, "immunized", f"{protocol}.{method}.{a}-{b}.s{seed}",
                               regenerated[method][f"rir_{RIR_KAPPA[protocol]}"]))
        inits.append(init)
        biased.add(has_bias)
    if len(biased) > 1 or any(not np.array_equal(init, inits[0]) for init in inits):
        raise RuntimeError(f"pair {a}-{b}, seed {seed}: the methods start from different extractors")
    has_bias, D = biased.pop(), task.dim
    zero = np.zeros(D) if has_bias else None
    specs += [ModelSpec("direct", with_bias(np.eye(D), zero), "reference"),
              ModelSpec("init", inits[0], "reference"),
              ModelSpec("random", with_bias(random_extractor(D, seed), zero), "reference")]
    X, y = one_vs_rest(b, a, seed, None, 1, "mnist")
    XP, yP = one_vs_rest(a, b, seed, None, 1, "mnist")
    dp = (with_ones_column(XP, has_bias), yP)
    return (Group("table2", seed, f"{a}-{b}", with_ones_column(X, has_bias), y, tuple(specs), dp=dp), regenerated,
            task.data_label)


def main(argv: list[str] | None = None) -> int:
    from kappalab.configs import read_overrides

    ap = Parser(prog="python -m kappalab.attack.table2", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", default="extremes",
                    help="'extremes' (Ours' 5 lowest and 5 highest official RIR; module docstring) or a-b,...")
    ap.add_argument("--protocol", choices=sorted(RIR_KAPPA), default="official")
    ap.add_argument("--methods", default=",".join(PAPER_ORDER), help="immunization methods (default: the four)")
    ap.add_argument("--seeds", default="0", help="seeds, e.g. 0,1,2")
    ap.add_argument("--shard", help="K/N: only the groups of shard K of N (module docstring)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                    help="a config value on top of the table's (TABLE_SETTINGS), for every method, e.g. epochs=5")
    ap.add_argument("--out", type=Path, default=Path("docs/attacks"))
    ap.add_argument("--attackers", default=",".join(registry()))
    add_slowdown_budgets(ap, " (into the store table2_<protocol>_b<largest>)")
    args = ap.parse_args(argv)
    git = git_state()  # the code this run imported (scope.write)
    attackers, methods = tuple(args.attackers.split(",")), tuple(args.methods.split(","))
    unknown = sorted(set(attackers) - set(registry())) + sorted(set(methods) - set(PAPER_ORDER))
    if unknown:
        ap.exit(2, f"--attackers/--methods: unknown {', '.join(unknown)}; attackers: {', '.join(registry())}; "
                   f"methods: {', '.join(PAPER_ORDER)}\n")
    try:
        pairs = extreme_pairs() if args.pairs == "extremes" else args.pairs.split(",")
        parsed = [tuple(int(x) for x in pair.split("-")) for pair in pairs]
        seeds = [int(s) for s in args.seeds.split(",")]
        shard = parse_shard(args.shard) if args.shard else None
    except ValueError as error:
        ap.exit(2, f"--pairs/--seeds/--shard: {error}; e.g. --pairs 7-9,1-0 --seeds 0,1,2 --shard 1/2\n")
    if any(len(p) != 2 or p[0] == p[1] or not all(0 <= d <= 9 for d in p) for p in parsed):
        ap.exit(2, f"--pairs: {args.pairs!r}: each pair is two different digits a-b\n")
    overrides = read_overrides(None, args.overrides)
    budgets = args.slowdown_budgets
    stem = f"table2_{args.protocol}" + ("" if budgets == SLOWDOWN_BUDGETS else f"_b{max(budgets)}")
    jobs = [(seed, pair) for seed in seeds for pair in pairs]
    if shard is not None:
        jobs = shard_jobs(jobs, *shard, label=lambda job: f"{job[0]}/{job[1]}")
    whole, partial = stored_groups(args.out, stem, methods, attackers)
    clash = sorted(set(jobs) & partial)
    if clash:
        ap.exit(2, f"--out: {args.out / (stem + '.jsonl')} holds part of seed {clash[0][0]}, pair {clash[0][1]} "
                   "(other methods or attackers): give another --out, or the methods and attackers it holds\n")
    todo = [job for job in jobs if job not in whole]
    print(f"{len(jobs)} groups (seed, pair) in scope, {len(jobs) - len(todo)} already stored whole in "
          f"{args.out / (stem + '.jsonl')}; running {len(todo)}", flush=True)
    config = {"attackers": list(attackers), "pairs": pairs, "protocol": args.protocol, "methods": list(methods),
              "seeds": seeds, "shard": args.shard, "set": overrides, "slowdown_budgets": list(budgets),
              "config": "kappalab/configs/attack_grid.json",
              "theta_I": f"immunize(table2_{args.protocol}_<method>)"}
    start = time.perf_counter()
    for seed, pair in todo:
        a, b = (int(x) for x in pair.split("-"))
        g, regenerated, label = group(args.protocol, methods, overrides, a, b, seed,
                                      lambda line: print(line, flush=True))
        recs, curves = run_group(g, attackers, log=lambda line: print(line, flush=True), budgets=budgets)
        recs = [{**r, "protocol": args.protocol,
                 "regenerated": regenerated.get(r["method"]) if r["role"] == "immunized" else None} for r in recs]
        finish(args.out, stem, recs, curves, config, label, start, append=True, git=git)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
