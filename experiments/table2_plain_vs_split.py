"""The 10-pair selection studies against the 90-pair sweeps on the same runs: pairs (a, a+1 mod 10), epoch 30,
Table 4's MNIST lr 0.001, under both protocols.

Each selection study (docs/reproduction/table2/paper_alg1/, official_traj/) trains on a 90% part of each pair (App.
C.2's split); each sweep (docs/reproduction/table2/full90/paper/, official/) on all balanced rows. Per run found in
both: RIR (Eq. 15, pinv kappa from the features' spectra, ``result.gram``) in both stores and their ratio; per
protocol and method: the mean over the shared runs, the median ratio and its range, and the rank correlation of the
runs' log RIR. Writes docs/reproduction/table2/full90/plain_vs_split.json and prints the table that
docs/reproduction/table2.md quotes (:func:`markdown`).

    python experiments/table2_plain_vs_split.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kappalab.methods import DEEP_METHODS
from kappalab.reproduce.table2.constants import METHOD_LABELS

ROOT = Path(__file__).resolve().parents[1] / "docs" / "reproduction" / "table2"
STORES = {  #: protocol -> (selection study's store, the 90-pair sweep's merged stores)
    "paper": (ROOT / "paper_alg1" / "runs_paper_trajectory.jsonl",
              (ROOT / "full90" / "paper" / "runs_paper.jsonl", ROOT / "full90" / "paper_imma_optk" / "runs_paper.jsonl")),
    "official": (ROOT / "official_traj" / "runs_official_trajectory.jsonl",
                 (ROOT / "full90" / "official" / "runs_official.jsonl",)),
}
OUT = ROOT / "full90" / "plain_vs_split.json"
PAIRS = [(a, (a + 1) % 10) for a in range(10)]
ETA = 0.001  #: Table 4's MNIST learning rate (the selection studies also hold other rates)
METHODS = DEEP_METHODS  #: the rows' order


def _rir(paths: tuple[Path, ...], method: str) -> dict[tuple[int, int, int], float]:
    out = {}
    for r in (json.loads(line) for path in paths for line in path.read_text().splitlines()):
        p = r["params"]
        if p["method"] == method and (p["a"], p["b"]) in PAIRS and r["identity"]["config"]["eta"] == ETA:
            out[p["a"], p["b"], p["seed"]] = r["result"]["gram"]["rir"]
    return out


def _ranks(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x))


def compare(split_store: Path, plain_stores: tuple[Path, ...], method: str) -> dict[str, Any] | None:
    """One method's shared runs of the study and the sweep (None: no run in both)."""
    split, plain = _rir((split_store,), method), _rir(plain_stores, method)
    keys = sorted(set(split) & set(plain))
    if not keys:
        return None
    s, p = np.array([split[k] for k in keys]), np.array([plain[k] for k in keys])
    ratio = p / s
    return {"runs": len(keys), "seeds": sorted({k[2] for k in keys}), "split_mean": float(s.mean()),
            "plain_mean": float(p.mean()), "ratio_median": float(np.median(ratio)), "ratio_min": float(ratio.min()),
            "ratio_max": float(ratio.max()),
            "spearman_log_rir": float(np.corrcoef(_ranks(np.log(s)), _ranks(np.log(p)))[0, 1]),
            "per_run": [{"a": a, "b": b, "seed": seed, "split": split[a, b, seed], "plain": plain[a, b, seed]}
                        for a, b, seed in keys]}


def report() -> dict[str, Any]:
    out: dict[str, Any] = {"command": "python experiments/table2_plain_vs_split.py", "protocols": {}}
    for protocol, (split_store, plain_stores) in STORES.items():
        methods = {m: c for m in METHODS if (c := compare(split_store, plain_stores, m)) is not None}
        out["protocols"][protocol] = {"split_store": str(split_store.relative_to(ROOT)),
                                      "plain_stores": [str(p.relative_to(ROOT)) for p in plain_stores],
                                      "methods": methods}
    return out


def markdown(result: dict[str, Any]) -> str:
    """The table of table2.md's section "The 10-pair selection studies against this sweep"."""
    lines = ["| protocol | method | runs | seeds | RIR mean, 10-pair study (90% part) | RIR mean, this sweep (all rows) "
             "| median ratio sweep / study (range) | rank correlation of log RIR |",
             "|---|---|---|---|---|---|---|---|"]
    for protocol, block in result["protocols"].items():
        for method, m in block["methods"].items():
            lines.append(f"| {protocol} | {METHOD_LABELS[method]} | {m['runs']} | {', '.join(map(str, m['seeds']))} "
                         f"| {m['split_mean']:.4g} | {m['plain_mean']:.4g} | {m['ratio_median']:.2f} "
                         f"({m['ratio_min']:.2f}-{m['ratio_max']:.2f}) | {m['spearman_log_rir']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    result = report()
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result) + f"wrote {OUT}")


if __name__ == "__main__":
    main()
