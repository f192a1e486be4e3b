"""The 10-pair selection study against the 90-pair sweep on the same runs: Alg. 1 (paper protocol), Ours and R_ill
Only, pairs (a, a+1 mod 10), seeds 0-2, epoch 30.

The selection study (docs/reproduction/table2/paper_alg1/) trains on a 90% part of each pair (App. C.2's split,
dense route); the sweep (docs/reproduction/table2/full90/paper/) on all balanced rows (closed-form route, the same
step). Per run: RIR (Eq. 15, pinv kappa from the features' spectra, ``result.gram``) in both stores and their ratio;
per method: the mean over the 30 runs, the median ratio and its range, and the rank correlation of the runs' log RIR.
Writes docs/reproduction/table2/full90/plain_vs_split.json and prints the table.

    python experiments/table2_plain_vs_split.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1] / "docs" / "reproduction" / "table2"
SPLIT = ROOT / "paper_alg1" / "runs_paper_trajectory.jsonl"
PLAIN = ROOT / "full90" / "paper" / "runs_paper.jsonl"
OUT = ROOT / "full90" / "plain_vs_split.json"
PAIRS = [(a, (a + 1) % 10) for a in range(10)]


def _rir(path: Path, method: str, eta: float | None) -> dict[tuple[int, int, int], float]:
    out = {}
    for r in map(json.loads, path.read_text().splitlines()):
        p = r["params"]
        if p["method"] == method and (p["a"], p["b"]) in PAIRS and (eta is None or p.get("eta") == eta):
            out[p["a"], p["b"], p["seed"]] = r["result"]["gram"]["rir"]
    return out


def _ranks(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x))


def main() -> None:
    report = {"command": "python experiments/table2_plain_vs_split.py", "split_store": str(SPLIT.relative_to(ROOT)),
              "plain_store": str(PLAIN.relative_to(ROOT)), "methods": {}}
    print(f"{'method':<10} {'runs':>4} {'split mean':>10} {'plain mean':>10} {'median plain/split':>18} "
          f"{'range':>15} {'Spearman':>8}")
    for method in ("ours", "rill_only"):
        split, plain = _rir(SPLIT, method, 0.001), _rir(PLAIN, method, None)
        keys = sorted(set(split) & set(plain))
        s, p = np.array([split[k] for k in keys]), np.array([plain[k] for k in keys])
        ratio = p / s
        rho = float(np.corrcoef(_ranks(np.log(s)), _ranks(np.log(p)))[0, 1])
        report["methods"][method] = {
            "runs": len(keys), "split_mean": float(s.mean()), "plain_mean": float(p.mean()),
            "ratio_median": float(np.median(ratio)), "ratio_min": float(ratio.min()), "ratio_max": float(ratio.max()),
            "spearman_log_rir": rho,
            "per_run": [{"a": a, "b": b, "seed": seed, "split": split[a, b, seed], "plain": plain[a, b, seed]}
                        for a, b, seed in keys]}
        m = report["methods"][method]
        print(f"{method:<10} {m['runs']:>4} {m['split_mean']:>10.4g} {m['plain_mean']:>10.4g} "
              f"{m['ratio_median']:>18.3f} {m['ratio_min']:>7.3f}-{m['ratio_max']:<7.3f} {rho:>8.3f}")
    OUT.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
