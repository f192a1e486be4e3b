"""Where a batch-statistics run's D_P accuracy went: its weights, or the tail's BatchNorm running statistics.

Under the authors' code's BatchNorm (``norm_statistics: "batch"``) every minibatch the objective forwards in training
mode moves the tail's running statistics (momentum 0.1), D_H's as well as D_P's; theta_0's were D_P's alone
(``theta0_statistics: "d_p"``). For each method and control run of a powered store whose ``theta_I.pt`` is in the
work folder, this measures the model's own D_P head on D_P's test and validation parts twice: as trained (the
record's ``utility.dp_test_acc``, recomputed here and checked against it) and after re-estimating the tail's running
statistics on D_P's training activations, the weights unchanged
(:meth:`kappalab.deep.ImmunizableModel.estimate_norm_statistics`, the rule theta_0's statistics came from). A drop
that the re-estimation undoes came from the statistics.

Usage (the deep environment):
    PYTHONPATH=src .venv-deep/bin/python experiments/table3_norm_statistics.py STORE_DIR [--work DIR] [--write]
writes ``STORE_DIR/norm_statistics.json`` (one entry per run, with provenance; a second call measures only the runs
added to the store since) and prints its table; ``--write`` then rewrites table3.md's ``table3-norm-statistics``
block from the JSON files of :data:`BLOCK`'s stores.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from kappalab.atomic_io import write_json, write_text
from kappalab.doc_blocks import replace_block
from kappalab.data.fetch import cache_dir
from kappalab.deep import accuracy
from kappalab.estimators import estimate_all
from kappalab.provenance import provenance
from kappalab.reproduce.table3.constants import VALIDATION
from kappalab.reproduce.table3.real import kept_model, part_features, rebuilt

#: the group estimator's bootstrap resamples (its interval; the records' use 1000)
N_BOOT = 1000
PAGE = Path(__file__).resolve().parents[1] / "docs" / "reproduction" / "table3.md"
#: the stores table3.md's block quotes (under ``table3/powered/``), in its order, with their titles
BLOCK = {"grid/mnist_vs_fmnist/paper_f32": "D_P MNIST / D_H Fashion-MNIST",
         "grid/fmnist_vs_mnist/paper_f32": "D_P Fashion-MNIST / D_H MNIST"}


def measure(store: Path, work: Path, done: set[str]) -> list[dict]:
    """The entries of the store's runs not in ``done`` (keys measured before)."""
    records = [json.loads(line) for line in (store / "runs.jsonl").read_text().splitlines() if line.strip()]
    runs = [r for r in records if r["method"] != "init" and "diverged" not in r and r["key"] not in done
            and (work / r["key"].replace("/", "_") / "theta_I.pt").is_file()]
    if not runs:
        if done:
            return []
        sys.exit(f"{store}: no run with its theta_I.pt under {work}; rerun the store's command to regenerate them")
    data, task = rebuilt(runs[0])
    parts = {"test": (data.X["P", "test"], data.y["P", "test"]),
             VALIDATION: (data.X["P", VALIDATION], data.y["P", VALIDATION])}
    out = []
    for r in runs:
        if r["identity"]["data"] != runs[0]["identity"]["data"]:
            raise SystemExit(f"{r['key']}: another data draw than {runs[0]['key']}'s; one store, one draw")
        model = kept_model(task, data, r, work)  # checked against the features the run kept
        trained = {p: accuracy(model, xy) for p, xy in parts.items()}
        if trained["test"] != r["utility"]["dp_test_acc"]:
            raise SystemExit(f"{r['key']}: theta_I.pt gives D_P test accuracy {trained['test']}, its record "
                             f"{r['utility']['dp_test_acc']}: not this run's weights")
        with np.load(work / r["key"].replace("/", "_") / "features.npz") as kept:
            F0 = {t: kept[f"{t}_0"] for t in ("P", "H")}
        model.estimate_norm_statistics(data.X["P", "train"])
        refit = {p: accuracy(model, xy) for p, xy in parts.items()}
        config = r["identity"]["config"]
        groups = estimate_all(F0["P"], F0["H"], *part_features(model, data).values(), seed=r["seed"],
                              groups=config["rir_groups"], group_size=config["rir_group_size"], n_boot=N_BOOT,
                              rtol=r["rank_rtol"], exact=False)["groups"]
        out.append({"key": r["key"], "method": r["method"], "seed": r["seed"], "eta": config["eta"],
                    "lambda_multiple": config.get("lambda_multiple", 1.0), "dp_acc_as_trained": trained,
                    "dp_acc_statistics_reestimated": refit, "dp_probe_acc": r["utility"]["dp_probe_acc"],
                    "rir_groups_as_trained": r["estimates"]["groups"]["rir"],
                    "rir_groups_statistics_reestimated": groups.rir, "rir_groups_reestimated_ci": groups.ci95})
    return out


def table(entries: list[dict], theta0: float) -> str:
    lines = ["| method | seed | eta | lambda multiple | D_P test acc.: as trained | statistics re-estimated on D_P | "
             "a fresh D_P probe (record) | group RIR: as trained (record) | statistics re-estimated [interval] |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        lo, hi = e["rir_groups_reestimated_ci"]
        lines.append(f"| {e['method']} | {e['seed']} | {e['eta']:g} | {e['lambda_multiple']:g} | "
                     f"{100 * e['dp_acc_as_trained']['test']:.1f}% | "
                     f"{100 * e['dp_acc_statistics_reestimated']['test']:.1f}% | {100 * e['dp_probe_acc']:.1f}% | "
                     f"{e['rir_groups_as_trained']:.3g} | {e['rir_groups_statistics_reestimated']:.3g} "
                     f"[{lo:.3g}, {hi:.3g}] |")
    return f"theta_0's D_P test accuracy: {100 * theta0:.1f}%\n\n" + "\n".join(lines)


def block() -> str:
    """The page's block: each of :data:`BLOCK`'s stores under its title, its table from its JSON file."""
    out = []
    for folder, title in BLOCK.items():
        saved = json.loads((PAGE.parent / "table3" / "powered" / folder / "norm_statistics.json").read_text())
        out.append(f"{title}:\n\n{table(saved['runs'], saved['theta0_dp_test_acc'])}\n")
    return "\n".join(out)


def write_block(page: Path = PAGE) -> None:
    """Rewrite ``page``'s ``table3-norm-statistics`` block with :func:`block`."""
    write_text(page, replace_block(page.read_text(), "table3-norm-statistics", block(), str(page)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", type=Path, help="a powered store's folder (its runs.jsonl)")
    ap.add_argument("--work", type=Path, default=cache_dir() / "table3-real" / "work")
    ap.add_argument("--write", action="store_true", help="then rewrite table3.md's block (module docstring)")
    args = ap.parse_args()
    if not (args.store / "runs.jsonl").is_file():
        ap.exit(2, f"store: {args.store / 'runs.jsonl'} does not exist; give a powered store's folder\n")
    out = args.store / "norm_statistics.json"
    before = json.loads(out.read_text()) if out.is_file() else {"runs": []}  # resumes: measured runs are kept
    entries = before["runs"] + measure(args.store, args.work, {e["key"] for e in before["runs"]})
    records = [json.loads(line) for line in (args.store / "runs.jsonl").read_text().splitlines() if line.strip()]
    order = {r["key"]: i for i, r in enumerate(records)}
    entries.sort(key=lambda e: order[e["key"]])
    theta0 = next(r["utility"]["dp_test_acc"] for r in records if r["method"] == "init")
    write_json(out, {"runs": entries, "theta0_dp_test_acc": theta0,
                     "provenance": provenance(None, {"store": str(args.store)},
                                              data_label="D_P test / validation parts")}, indent=1)
    print(table(entries, theta0))
    if args.write:
        write_block()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
