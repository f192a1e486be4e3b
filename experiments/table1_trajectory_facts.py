"""Facts about Table 1's committed per-epoch trajectories that docs/reproduction/table1.md quotes, computed from the
stored trajectory files alone (NumPy only) and written to docs/reproduction/table1/trajectory_facts.json.

    python experiments/table1_trajectory_facts.py [--out FILE]

Per store (lr_grid, hints: paper protocol; official_e1000_trajectory, official_ddp2_e1000, official_ddp2: the
official protocol), per method and learning rate, over the seeds, on all rows (``full.*``):

* ``argmax_epoch``: the epoch of each run's largest RIR; ``increasing_share``: the share of epoch-to-epoch steps that
  raise RIR; ``rir_epoch1`` / ``rir_max``: RIR after the first epoch and its largest value;
* ``term_ii_min``: the smallest (ii) over epochs >= 1; ``term_ii_at_most_1_share``: the share of epochs >= 1 with
  (ii) <= 1;
* ``first_reaching_paper``: the first epoch with RIR >= the paper's 356.2 and (ii) there (None: never);
* ``loss_P_min`` and ``loss_P_last``: the trained head's D_P loss, its minimum over epochs >= 1 and at the last epoch;
* ``at_epoch``: mean, std and min of (i), (ii), RIR over seeds at epochs 0 (theta_0), 100 and 1000 (when the run
  has them);
* ``kappa_H_identity``: kappa(X_H^T X_H) on each view (full, val, test).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1] / "docs" / "reproduction" / "table1"
STORES = {"lr_grid": "runs_paper.jsonl", "hints": "runs_paper.jsonl",
          "official_e1000_trajectory": "runs_official.jsonl", "official_ddp2_e1000": "runs_official.jsonl",
          "official_ddp2": "runs_official.jsonl"}
PAPER_OURS_RIR = 356.2


def run_facts(z: np.lib.npyio.NpzFile) -> dict:
    epoch, rir, ii, loss = z["epoch"], z["full.rir"], z["full.term_ii"], z["full.loss_P"]
    later = epoch >= 1
    hit = np.flatnonzero(rir >= PAPER_OURS_RIR)
    return {
        "epochs": int(epoch[-1]),
        "argmax_epoch": int(epoch[np.argmax(rir)]),
        "increasing_share": float(np.mean(np.diff(rir) > 0)),
        "rir_epoch1": float(rir[epoch == 1][0]), "rir_max": float(rir.max()),
        "term_ii_min": float(ii[later].min()), "term_ii_at_most_1_share": float(np.mean(ii[later] <= 1)),
        "first_reaching_paper": None if not len(hit) else {"epoch": int(epoch[hit[0]]),
                                                           "term_ii": float(ii[hit[0]])},
        "loss_P_min": float(loss[later].min()), "loss_P_last": float(loss[-1]),
        "at_epoch": {str(e): {t: float(z[f"full.{t}"][epoch == e][0]) for t in ("term_i", "term_ii", "rir")}
                     for e in (0, 100, 1000) if e in set(epoch.tolist())},
        "kappa_H_identity": {v: float(z[f"{v}.kappa_H_identity"]) for v in ("full", "val", "test")
                             if f"{v}.kappa_H_identity" in z.files},
    }


def span(values: list[float]) -> list[float]:
    return [min(values), max(values)]


def group_facts(runs: list[dict]) -> dict:
    out = {"seeds": [r["seed"] for r in runs],
           "argmax_epoch": [r["argmax_epoch"] for r in runs],
           "increasing_share": [round(r["increasing_share"], 4) for r in runs],
           "rir_epoch1": span([r["rir_epoch1"] for r in runs]), "rir_max": span([r["rir_max"] for r in runs]),
           "term_ii_min": min(r["term_ii_min"] for r in runs),
           "term_ii_at_most_1_share": span([r["term_ii_at_most_1_share"] for r in runs]),
           "first_reaching_paper": [r["first_reaching_paper"] for r in runs],
           "loss_P_min": min(r["loss_P_min"] for r in runs),
           "loss_P_last": [float(np.mean([r["loss_P_last"] for r in runs])),
                           float(np.std([r["loss_P_last"] for r in runs], ddof=1))],
           "at_epoch": {}}
    for e in runs[0]["at_epoch"]:
        vals = {t: [r["at_epoch"][e][t] for r in runs] for t in ("term_i", "term_ii", "rir")}
        out["at_epoch"][e] = {t: {"mean": float(np.mean(v)), "std": float(np.std(v, ddof=1)), "min": min(v)}
                              for t, v in vals.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "trajectory_facts.json")
    args = ap.parse_args()
    facts = {"command": "python experiments/table1_trajectory_facts.py", "stores": {}}
    for store, runs_file in STORES.items():
        groups: dict[str, list[dict]] = {}
        kappa_identity = None
        for line in (ROOT / store / runs_file).read_text().splitlines():
            r = json.loads(line)["result"]
            with np.load(ROOT / store / r["files"]["trajectory"]) as z:
                f = run_facts(z)
            kappa_identity = f.pop("kappa_H_identity")
            groups.setdefault(f"{r['method']}/lr{r['eta']:g}", []).append({"seed": r["seed"], **f})
        facts["stores"][store] = {"kappa_H_identity": kappa_identity,
                                  **{k: group_facts(sorted(v, key=lambda x: x["seed"]))
                                     for k, v in sorted(groups.items())}}
    args.out.write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
