"""``kappalab attack``, the features form: how much slower does each probe attacker learn the harmful task on
theta_I's features than on theta_0's?

``kappalab attack --h0 F --hi F --yh Y [--p0 F --pi F --yp Y] [--attackers a,b,...] [--budget N] [--json FILE]``:
``--h0`` / ``--hi`` are ``N x D`` ``.npy`` features of theta_0 / theta_I on the same D_H rows (row n the same sample),
``--yh`` their targets (length N, or ``N x C``). D_H's rows are split train / validation / test from ``--seed``;
each attacker (default: every probe attacker of :mod:`kappalab.attack.registry`) tunes itself on the validation rows
for each model, then runs ``reach_factor x N`` steps; printed and written per attacker: theta_0's loss at the budget,
the steps theta_I needs to reach it, ``reached`` and the slowdown (:mod:`kappalab.attack.measures`). With ``--p0 --pi
--yp`` (D_P's features and targets) the D_P utility is reported: the least-squares probe's test loss on each model's
D_P features (a probe attacker leaves the extractor, hence D_P, unchanged). Bad input (a missing or unreadable file,
mismatched rows, NaN/Inf, an unknown attacker) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from kappalab.atomic_io import write_text
from kappalab.cli_options import Parser, UsageError, command, positive_int, seed as seed_type
from kappalab.data.fetch import digest_of
from kappalab.measure import json_output_path, load_array, load_features
from kappalab.provenance import provenance
from kappalab.results import to_jsonable

from .measures import attack, slowdown
from .problem import Factor, Split, loss
from .registry import PROBE_ATTACKERS, Model, registry, settings

FEATURES = (("h0", "theta_0 on D_H"), ("hi", "theta_I on D_H"), ("p0", "theta_0 on D_P"), ("pi", "theta_I on D_P"))
TARGETS = (("yh", "D_H"), ("yp", "D_P"))


#: what --help prints above the options (the module docstring and docs/attacks.md hold the long account)
HELP = """The features form: how much slower does each probe attacker learn the harmful task on theta_I's features than
on theta_0's?

--h0 / --hi are N x D .npy features of theta_0 / theta_I on the same D_H rows (row n the same sample), --yh their
targets (length N, or N x C). The rows are split train / validation / test from --seed; each attacker (default:
every probe attacker) tunes itself on the validation rows for each model. Printed and written per attacker:
theta_0's loss at the budget, the steps theta_I needs to reach it, whether it did, and the slowdown. With --p0
--pi --yp (D_P's features and targets) the D_P utility is reported: the least-squares probe's test loss on each
model's D_P features. Details: docs/attacks.md."""

EXAMPLES = """examples:
  kappalab attack --h0 H0.npy --hi HI.npy --yh YH.npy
  kappalab attack --h0 H0.npy --hi HI.npy --yh YH.npy --p0 P0.npy --pi PI.npy --yp YP.npy --json attack.json
  kappalab attack --h0 H0.npy --hi HI.npy --yh YH.npy --attackers gd,adam,solve --budget 200"""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="kappalab attack", description=HELP, epilog=EXAMPLES,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, what in FEATURES:
        p.add_argument(f"--{name}", metavar="F.npy", help=f"features of {what} (N x D .npy)")
    for name, what in TARGETS:
        p.add_argument(f"--{name}", metavar="Y.npy", help=f"{what} targets (length N or N x C .npy)")
    p.add_argument("--attackers", default=",".join(PROBE_ATTACKERS),
                   help=f"comma-separated probe attackers (default all: {','.join(PROBE_ATTACKERS)})")
    p.add_argument("--budget", type=positive_int, default=settings().selection_budget,
                   help=f"steps of theta_0 the slowdown is measured at (default {settings().selection_budget}); "
                        f"theta_I gets up to {settings().reach_factor}x as many")
    p.add_argument("--seed", type=seed_type, default=0, help="seed of the train/validation/test split (default 0)")
    p.add_argument("--json", metavar="FILE", help="write {'attackers': {NAME: {...}}}, inputs and provenance here")
    return p


def parse_attackers(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    known = registry()
    if not names:
        raise UsageError("--attackers: empty list")
    for name in names:
        if name not in known:
            raise UsageError(f"--attackers: unknown attacker {name!r} (known: {', '.join(PROBE_ATTACKERS)})")
        if known[name].changes_extractor:
            raise UsageError(f"--attackers: {name} changes the extractor; the features form runs probe attackers "
                             f"only ({', '.join(PROBE_ATTACKERS)})")
    if len(set(names)) != len(names):
        raise UsageError(f"--attackers: repeated names in {text!r}")
    return names


def _load(args: argparse.Namespace) -> dict[str, np.ndarray]:
    if args.h0 is None or args.hi is None or args.yh is None:
        raise UsageError("missing " + " ".join(f"--{n}" for n in ("h0", "hi", "yh") if getattr(args, n) is None)
                         + " (features of theta_0 and theta_I on D_H and their targets)")
    given = [n for n in ("p0", "pi", "yp") if getattr(args, n) is not None]
    if given and len(given) != 3:
        raise UsageError(f"D_P utility needs --p0 --pi --yp together, got only {' '.join('--' + n for n in given)}")
    out = {n: load_features(getattr(args, n), f"--{n}") for n, _ in FEATURES if getattr(args, n) is not None}
    for n, task in TARGETS:
        if getattr(args, n) is not None:
            out[n] = load_array(getattr(args, n), f"--{n}", f"{task} targets (length N or N x C)", (1, 2))
    for a, b, y, task in (("h0", "hi", "yh", "D_H"), ("p0", "pi", "yp", "D_P")):
        if a in out:
            rows = {f"--{k}": out[k].shape[0] for k in (a, b, y)}
            if len(set(rows.values())) != 1:
                raise UsageError(f"{task}: --{a}, --{b} and --{y} must have one row per sample, got "
                                 + ", ".join(f"{k} {r}" for k, r in rows.items()))
            if rows[f"--{a}"] < 10:
                raise UsageError(f"--{a}: {rows[f'--{a}']} rows; the train/validation/test split needs at least 10")
    return out


def utility(F: np.ndarray, y: np.ndarray, seed: int) -> float:
    """D_P's least-squares probe (fit on the training rows) and its test loss."""
    split = Split.of(F, y, seed)
    return loss(*split.test, Factor.of(split.train[0]).solve(split.train[1]))


@command("kappalab attack")
def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    names = parse_attackers(args.attackers)
    json_path = None if args.json is None else json_output_path(args.json)
    data = _load(args)
    cfg, known = settings(), registry()
    budget = args.budget
    budgets = tuple(sorted({b for b in cfg.budgets if b <= budget} | {budget}))
    steps = cfg.reach_factor * budget
    try:
        models = {m: Model(Split.of(data[f"h{m}"], data["yh"], args.seed)) for m in ("0", "i")}
        for m, model in models.items():
            model.factor  # the shared SVD, once per model; refuses zero training features
    except ValueError as error:
        raise UsageError(f"--h0/--hi: {str(error).splitlines()[0]}") from None
    results: dict[str, Any] = {}
    print("| attacker | theta_0 choice | theta_I choice | theta_0 loss at budget | theta_I steps | slowdown |")
    print("|---|---|---|---|---|---|")
    for name in names:
        runs = {m: attack(model, known[name], args.seed, budgets=budgets, steps=steps, batch_size=cfg.batch_size,
                          selection_budget=budget) for m, model in models.items()}
        slack = runs["0"].slack + runs["i"].slack
        by_budget = {b: slowdown(runs["i"].curve, runs["0"].curve, b, slack, cfg.reach_factor) for b in budgets}
        head = by_budget[budget]
        results[name] = {"slowdown": head.slowdown, "reached": head.reached, "steps": head.steps,
                         "budget": budget, "target": head.target, "slack": slack,
                         "by_budget": {str(b): s.as_dict() for b, s in by_budget.items()},
                         **{f"theta_{'0' if m == '0' else 'I'}": _run_summary(r) for m, r in runs.items()}}
        shown = "not reached" if not head.reached else f"{head.slowdown:.3g}"
        print(f"| {name} | {runs['0'].params} | {runs['i'].params} | {head.target:.6g} | "
              f"{head.steps if head.reached else f'> {head.limit}'} | {shown} |")
    record: dict[str, Any] = {"attackers": results, "budget": budget, "budgets": list(budgets), "steps": steps,
                              "kappa_H": {"theta_0": models["0"].factor.kappa, "theta_I": models["i"].factor.kappa}}
    print(f"kappa of the training features' H: theta_0 {models['0'].factor.kappa:.4g}, "
          f"theta_I {models['i'].factor.kappa:.4g}")
    if "p0" in data:
        record["utility_P"] = {"theta_0": utility(data["p0"], data["yp"], args.seed),
                               "theta_I": utility(data["pi"], data["yp"], args.seed)}
        print(f"D_P utility (least-squares probe test loss): theta_0 {record['utility_P']['theta_0']:.6g}, "
              f"theta_I {record['utility_P']['theta_I']:.6g}")
    if json_path is not None:
        record["inputs"] = {n: {"path": getattr(args, n), "sha256": digest_of(Path(getattr(args, n))),
                                "shape": list(data[n].shape)} for n in data}
        record["provenance"] = provenance(args.seed, {"attackers": list(names), "budget": budget, "seed": args.seed,
                                                     "config": "attack_grid"}, data_label="kappalab attack (features)")
        try:
            write_text(json_path, json.dumps(to_jsonable(record), indent=1) + "\n")
        except OSError as error:
            raise UsageError(f"--json: cannot write {json_path} ({error.strerror})") from None
        print(f"wrote {json_path}")
    return 0


def _run_summary(run) -> dict[str, Any]:
    return {"params": dict(run.params), "wall_s": run.wall_s, "slack": run.slack,
            "at_budget": {str(b): v for b, v in run.at_budget.items()},
            "tuning": None if run.tuning is None else {"val_losses": list(run.tuning.val_losses),
                                                       "grid": list(map(dict, registry()[run.attacker].grid))}}


if __name__ == "__main__":
    sys.exit(main())
