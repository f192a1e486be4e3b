"""The attacks' Table 3 scope: the probe attackers on the real network's runs with power (ImageNet
EfficientNet-Lite0, tail trained), from the D_H features each run keeps.

A powered store (``docs/reproduction/table3/powered/<set>/<direction>/<protocol>/runs.jsonl``) records each run;
its held-out features (theta_0's and theta_I's, float64, 2560 x 1280 per task) are kept in the run's work folder
(``<work>/<key>/features.npz``, written by ``kappalab reproduce table3 --arch efficientnet_lite0``), not committed.
The harmful task is D_H's 10-class labels on those held-out images (one-hot targets, the l2 probe of Eq. 4), the
images drawn again from the record's identity (``per_class``, ``split_seed_real``) and checked against the
recorded rows' sha256. Models per seed: each method's and control's theta_I (controls with role ``control``), and
the references ``init`` (theta_0's features: what RIR_theta0 compares with), ``direct`` (the images' pixels in
[0, 1], theta = I on the inputs) and ``random`` (the pixels through a Gaussian extractor).

The attackers that change the extractor (fine-tuning, LoRA: :mod:`.deep_attackers`) need the deep environment
(timm, peft) and each run's ``theta_I.pt`` in the work folder: the tail is rebuilt from the run's record, its
weights loaded, and its held-out features checked against the run's ``features.npz`` before any attack
(:func:`kappalab.reproduce.table3.real.kept_model`), so that they attack the extractor the probe attackers see.
theta_0's tail is theta_0 as the runs built it; ``direct`` and ``random`` are attacked on the pixels, as in Tables 1
and 2. D_P's utility under those attackers (:mod:`.utility`) is read on D_P's held-out images, drawn and checked
like D_H's: the tails' on their trunk activations, ``direct``'s and ``random``'s on the pixels.

Usage: ``python -m kappalab.attack.table3 --store STORE_DIR [STORE_DIR ...] [--work DIR] [--out docs/attacks]
[--attackers ...] [--seeds 1,2] [--methods ours,...]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from kappalab.deep.methods import CONTROLS, METHODS
from kappalab.provenance import git_state

from .registry import PROBE_ATTACKERS, registry
from .scope import Group, ModelSpec, finish, random_extractor, run_groups, stored_twice

#: the paper protocol's selection grids, both directions (each method at its selected setting)
DEFAULT_STORES = [Path(f"docs/reproduction/table3/powered/grid/{direction}/paper_f32")
                  for direction in ("fmnist_vs_mnist", "mnist_vs_fmnist")]


def heldout(identity: dict, task: str) -> tuple[np.ndarray, np.ndarray]:
    """The held-out images (N x 784 pixels in [0, 1]) and labels of D_H (``task`` "H") or D_P ("P"), drawn as the
    run drew them; a draw whose rows differ from the record's is refused."""
    from kappalab.reproduce.table3.real_data import draw_parts

    config = identity["config"]
    name = config["harmful"] if task == "H" else config["pretrain_data"]
    parts = draw_parts(name, config["per_class"], config["split_seed_real"])
    rows = parts.rows["heldout"].astype(np.int64)
    if hashlib.sha256(rows.tobytes()).hexdigest() != identity["data"][task]["rows_sha256"]["heldout"]:
        raise SystemExit(f"{name}: the held-out rows drawn here differ from the record's; the data files changed "
                         "since the run")
    return parts.images["heldout"].reshape(len(rows), -1) / 255.0, parts.labels["heldout"]


class Tails:
    """The deep extractors of one store's runs (the deep environment): the data and task rebuilt once from the first
    run's record (:func:`kappalab.reproduce.table3.real.rebuilt`), theta_0's model per seed, theta_I's from each
    run's kept weights (:func:`kappalab.reproduce.table3.real.kept_model`)."""

    def __init__(self, first: dict, device: str = "cpu") -> None:
        from kappalab.reproduce.table3.real import rebuilt

        self.device = device
        self.data, self.task = rebuilt(first)
        acts = self.data.X["H", "heldout"]
        self.shape = tuple(acts.shape[1:])
        self.trunk = self.flat("H")

    def flat(self, task: str) -> np.ndarray:
        """The held-out trunk activations of D_H (``task`` "H") or D_P ("P"), float64, one flattened row each."""
        acts = self.data.X[task, "heldout"]
        return acts.double().numpy().reshape(acts.shape[0], -1)

    def theta_I(self, record: dict, work: Path):
        from kappalab.reproduce.table3.real import kept_model

        from .deep_attackers import DeepExtractor

        return DeepExtractor(kept_model(self.task, self.data, record, work).to(self.device), self.shape)

    def theta_0(self, seed: int, kept: np.ndarray):
        """theta_0's model of ``seed``, refused unless it gives the runs' kept D_H features of theta_0."""
        from kappalab.deep import extract_features
        from kappalab.reproduce.table3.measures import same_features

        from .deep_attackers import DeepExtractor

        model = self.task.theta0(seed)
        if not same_features(extract_features(model, self.data.X["H", "heldout"]).numpy(), kept):
            raise SystemExit(f"theta_0 of seed {seed}: the rebuilt tail's D_H features differ from the runs' kept ones")
        return DeepExtractor(model.to(self.device), self.shape)


def groups(store: Path, work: Path, deep: bool = False, device: str = "cpu", seeds: set[int] | None = None,
           methods: set[str] | None = None) -> tuple[list[Group], str]:
    """One group per seed of the store (those in ``seeds``; None: all): every method and control run of that seed
    (those in ``methods``; a gridded method at its selected setting), and the references; with ``deep``, each run's
    tail and theta_0's for the attackers that change the extractor (module docstring)."""
    from kappalab.reproduce.table3.grid import selected

    # a grid store: each method at its selected setting (none where no setting kept utility)
    records, _ = selected([json.loads(line) for line in (store / "runs.jsonl").read_text().splitlines()
                           if line.strip()])
    out, label = [], ""
    tails = None
    for seed in sorted({r["seed"] for r in records} & (seeds if seeds is not None else {r["seed"] for r in records})):
        runs = [r for r in records if r["seed"] == seed and r["method"] != "init" and "diverged" not in r
                and (methods is None or r["method"] in methods)]
        if not runs:  # no method or control of this seed has a selected setting that trained to the end
            continue
        identity = runs[0]["identity"]
        (pixels, labels), (dp_pixels, dp_labels) = heldout(identity, "H"), heldout(identity, "P")
        targets = np.eye(10)[labels]
        if deep and tails is None:
            tails = Tails(runs[0], device)
            if not (np.array_equal(tails.data.y["H", "heldout"].numpy(), labels)
                    and np.array_equal(tails.data.y["P", "heldout"].numpy(), dp_labels)):
                raise SystemExit(f"{store}: the trunk activations' labels differ from the held-out draw's")
        specs, theta0 = [], None
        for r in runs:
            folder = work / r["key"].replace("/", "_")
            if not (folder / "features.npz").is_file():
                raise SystemExit(f"--work: {folder / 'features.npz'} is missing; rerun the store's command to "
                                 "regenerate it")
            with np.load(folder / "features.npz") as z:
                theta0 = z["H_0"] if theta0 is None else theta0
                H_I = z["H_I"]
            tail = tails.theta_I(r, work) if tails else None
            specs.append(ModelSpec(r["method"], None, "control" if r["method"] in CONTROLS else "immunized",
                                   r["key"], r["estimates"]["groups"]["rir"], features=H_I, deep=tail))
        dim = pixels.shape[1]
        specs += [ModelSpec("direct", np.eye(dim), "reference"),
                  ModelSpec("init", None, "reference", features=theta0,
                            deep=tails.theta_0(seed, theta0) if tails else None),
                  ModelSpec("random", random_extractor(dim, seed), "reference")]
        dp_targets = np.eye(10)[dp_labels]
        out.append(Group("table3", seed, runs[0]["task"].removeprefix("efficientnet_lite0_"), pixels, targets,
                         tuple(specs), trunk=None if tails is None else tails.trunk, dp=(dp_pixels, dp_targets),
                         dp_trunk=None if tails is None else (tails.flat("P"), dp_targets)))
        label = (f"EfficientNet-Lite0 {runs[0]['task']} ({runs[0]['protocol']} protocol): D_H held-out features, "
                 f"{len(labels)} images")
    return out, label


def main(argv: list[str] | None = None) -> int:
    from kappalab.data.fetch import cache_dir

    ap = argparse.ArgumentParser(prog="python -m kappalab.attack.table3", description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, nargs="+", default=DEFAULT_STORES,
                    help="one or more powered stores' folders (their runs.jsonl; default: the paper protocol's "
                         "selection grids, both directions)")
    ap.add_argument("--work", type=Path, help="the runs' work folder (default: the cache's table3-real/work)")
    ap.add_argument("--out", type=Path, default=Path("docs/attacks"))
    ap.add_argument("--device", default="cpu", help="where finetune and LoRA train the tail (cpu, cuda, cuda:N)")
    ap.add_argument("--attackers", default=",".join(PROBE_ATTACKERS),
                    help="comma-separated; finetune and lora_r* need the deep environment and the runs' theta_I.pt")
    ap.add_argument("--seeds", help="comma-separated seeds of the store to attack (default: all)")
    ap.add_argument("--append", action="store_true",
                    help="add to the table3.jsonl and curves already in --out (other attackers or models) instead of "
                         "replacing them")
    ap.add_argument("--methods", help="comma-separated methods and controls to attack (default: all; the references "
                                      "are always attacked)")
    args = ap.parse_args(argv)
    git = git_state()  # the code this run imported (scope.write)
    attackers = tuple(args.attackers.split(","))
    known = registry()
    unknown = [a for a in attackers if a not in known]
    if unknown:
        ap.exit(2, f"--attackers: unknown {', '.join(unknown)}; choose from {', '.join(known)}\n")
    try:
        seeds = None if args.seeds is None else {int(s) for s in args.seeds.split(",")}
    except ValueError:
        ap.exit(2, f"--seeds: {args.seeds!r} is not a comma-separated list of integers, e.g. 1,2\n")
    methods = None if args.methods is None else set(args.methods.split(","))
    names = (*CONTROLS, *METHODS)
    if methods is not None and methods - set(names):
        ap.exit(2, f"--methods: unknown {', '.join(sorted(methods - set(names)))}; choose from {', '.join(names)}\n")
    for store in args.store:
        if not (store / "runs.jsonl").is_file():
            ap.exit(2, f"--store: {store / 'runs.jsonl'} does not exist; give a powered store's folder (its "
                       "runs.jsonl), e.g. the default\n")
    start = time.perf_counter()
    deep = any(known[a].changes_extractor for a in attackers)
    if deep:
        import importlib.util

        lacking = [name for name in ("timm", "peft") if importlib.util.find_spec(name) is None]
        if lacking:
            ap.exit(2, f"--attackers: finetune and lora_r* need {' and '.join(lacking)}: run it in the deep "
                       "environment (bash scripts/setup_deep.sh, then .venv-deep/bin/python)\n")
    found, labels = [], []
    for store in args.store:
        store_groups, label = groups(store, args.work or cache_dir() / "table3-real" / "work", deep, args.device,
                                     seeds, methods)
        found += store_groups
        labels += [label] if label else []
    if not found:
        stores = ", ".join(map(str, args.store))
        ap.exit(2, f"--seeds/--methods: no run of {stores} left to attack; see its runs.jsonl for the seeds and "
                   "methods it holds\n")
    twice = stored_twice(args.out, "table3", found, attackers) if args.append else []
    if twice:
        ap.exit(2, f"--append: {args.out / 'table3_curves.npz'} already holds {twice[0]} ({len(twice)} of these "
                   "attacks); leave those attackers, seeds or methods out\n")
    records, curves = run_groups(found, attackers)
    config = {"attackers": list(attackers), "store": [str(p) for p in args.store],
              "config": "kappalab/configs/attack_grid.json",
              "seeds": None if seeds is None else sorted(seeds),
              "methods": None if methods is None else sorted(methods),
              "theta_I": "the features (and, for finetune and LoRA, the theta_I.pt) kept by kappalab reproduce "
                         "table3 --arch efficientnet_lite0"}
    try:
        return finish(args.out, "table3", records, curves, config, "; ".join(labels), start, args.append, git=git)
    except ValueError as error:
        ap.exit(2, f"--append: {error}\n")


if __name__ == "__main__":
    raise SystemExit(main())
