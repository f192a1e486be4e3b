"""The attacks' Table 3 scope: the probe attackers on the real network's runs with power (ImageNet
EfficientNet-Lite0, tail trained), from the D_H features each run keeps.

A powered store (``docs/reproduction/table3/powered/<set>/<direction>/<protocol>/runs.jsonl``) records each run;
its held-out features (theta_0's and theta_I's, float64, 2560 x 1280 per task) are kept in the run's work folder
(``<work>/<key>/features.npz``, written by ``kappalab reproduce table3 --arch efficientnet_lite0``), not committed.
The harmful task is D_H's 10-class labels on those held-out images (one-hot targets, the l2 probe of Eq. 4), the
images drawn again from the record's identity (``per_class``, ``split_seed_real``) and checked against the
recorded rows' sha256. Models per seed: each method's and control's theta_I (controls with role ``control``), and
the references ``init`` (theta_0's features: what RIR_theta0 compares with), ``direct`` (the images' pixels in
[0, 1], theta = I on the inputs) and ``random`` (the pixels through a Gaussian extractor). The tail is not kept,
so the attackers that change the extractor (fine-tuning, LoRA) are not run here.

Usage: ``python -m kappalab.attack.table3 --store STORE_DIR [--work DIR] [--out docs/attacks]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from kappalab.deep.methods import CONTROLS

from .registry import PROBE_ATTACKERS
from .scope import Group, ModelSpec, finish, random_extractor, run_groups

DEFAULT_STORE = Path("docs/reproduction/table3/powered/pilot/fmnist_vs_mnist/paper")


def harmful_heldout(config: dict, recorded_rows_sha256: str) -> tuple[np.ndarray, np.ndarray]:
    """D_H's held-out images (N x 784 pixels in [0, 1]) and labels, drawn as the run drew them; a draw whose rows
    differ from the record's is refused."""
    from kappalab.reproduce.table3.real_data import draw_parts

    parts = draw_parts(config["harmful"], config["per_class"], config["split_seed_real"])
    rows = parts.rows["heldout"].astype(np.int64)
    if hashlib.sha256(rows.tobytes()).hexdigest() != recorded_rows_sha256:
        raise SystemExit(f"{config['harmful']}: the held-out rows drawn here differ from the record's; the data "
                         "files changed since the run")
    return parts.images["heldout"].reshape(len(rows), -1) / 255.0, parts.labels["heldout"]


def groups(store: Path, work: Path) -> tuple[list[Group], str]:
    """One group per seed of the store: every method and control run of that seed, and the references."""
    records = [json.loads(line) for line in (store / "runs.jsonl").read_text().splitlines() if line.strip()]
    out, label = [], ""
    for seed in sorted({r["seed"] for r in records}):
        runs = [r for r in records if r["seed"] == seed and r["method"] != "init"]
        identity = runs[0]["identity"]
        pixels, labels = harmful_heldout(identity["config"], identity["data"]["H"]["rows_sha256"]["heldout"])
        targets = np.eye(10)[labels]
        specs, theta0 = [], None
        for r in runs:
            path = work / r["key"].replace("/", "_") / "features.npz"
            if not path.is_file():
                raise SystemExit(f"--work: {path} is missing; rerun the store's command to regenerate it")
            with np.load(path) as z:
                theta0 = z["H_0"] if theta0 is None else theta0
                specs.append(ModelSpec(r["method"], None, "control" if r["method"] in CONTROLS else "immunized",
                                       r["key"], r["estimates"]["groups"]["rir"], features=z["H_I"]))
        dim = pixels.shape[1]
        specs += [ModelSpec("direct", np.eye(dim), "reference"),
                  ModelSpec("init", None, "reference", features=theta0),
                  ModelSpec("random", random_extractor(dim, seed), "reference")]
        out.append(Group("table3", seed, runs[0]["task"].removeprefix("efficientnet_lite0_"), pixels, targets,
                         tuple(specs)))
        label = (f"EfficientNet-Lite0 {runs[0]['task']} ({runs[0]['protocol']} protocol): D_H held-out features, "
                 f"{len(labels)} images")
    return out, label


def main(argv: list[str] | None = None) -> int:
    from kappalab.data.fetch import cache_dir

    ap = argparse.ArgumentParser(prog="python -m kappalab.attack.table3", description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, default=DEFAULT_STORE, help="a powered store's folder (its runs.jsonl)")
    ap.add_argument("--work", type=Path, help="the runs' work folder (default: the cache's table3-real/work)")
    ap.add_argument("--out", type=Path, default=Path("docs/attacks"))
    ap.add_argument("--attackers", default=",".join(PROBE_ATTACKERS))
    args = ap.parse_args(argv)
    attackers = tuple(args.attackers.split(","))
    if not (args.store / "runs.jsonl").is_file():
        ap.exit(2, f"--store: {args.store / 'runs.jsonl'} does not exist; give a powered store's folder (its "
                   "runs.jsonl), e.g. the default\n")
    start = time.perf_counter()
    found, label = groups(args.store, args.work or cache_dir() / "table3-real" / "work")
    records, curves = run_groups(found, attackers)
    config = {"attackers": list(attackers), "store": str(args.store), "config": "kappalab/configs/attack_grid.json",
              "theta_I": "the features kept by kappalab reproduce table3 --arch efficientnet_lite0"}
    return finish(args.out, "table3", records, curves, config, label, start)


if __name__ == "__main__":
    raise SystemExit(main())
