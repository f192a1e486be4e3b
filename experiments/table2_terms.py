"""Eq. 15's two terms on all 90 pairs, under both kappa definitions: per protocol and method of the merged full-MNIST
stores, the paper's statistic (per seed the mean over the 90 pairs, then mean ± std over the seeds that have all 90)
of term (i) = kappa(H_H(theta)) / kappa(H_H(I)), term (ii) = kappa(H_P(theta)) / kappa(H_P(I)) and RIR = (i) / (ii),
with the paper's pinv kappa (``result.gram``) and the official code's shifted kappa (``result.evaluate.shifted``).
Writes docs/reproduction/table2/full90/terms.json and prints the table.

    python experiments/table2_terms.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1] / "docs" / "reproduction" / "table2" / "full90"
#: protocol -> its merged stores (Alg. 1's Ours + R_ill Only, and its IMMA + Opt kappa, merged apart)
STORES = {"paper": (ROOT / "paper" / "runs_paper.jsonl", ROOT / "paper_imma_optk" / "runs_paper.jsonl"),
          "official": (ROOT / "official" / "runs_official.jsonl",)}
OUT = ROOT / "terms.json"
KAPPAS = {"pinv": lambda result: result["gram"], "shifted": lambda result: result["evaluate"]["shifted"]}
TERMS = ("term_i", "term_ii", "rir")
N_PAIRS = 90


def statistic(records: list[dict[str, Any]], kappa: str, term: str) -> dict[str, Any]:
    """Per complete seed the mean of ``term`` over its pairs; their mean and sample std (None with one seed)."""
    seeds = sorted({r["params"]["seed"] for r in records})
    means = {s: [KAPPAS[kappa](r["result"])[term] for r in records if r["params"]["seed"] == s] for s in seeds}
    per_seed = [float(np.mean(v)) for s, v in means.items() if len(v) == N_PAIRS]
    return {"seeds": [s for s, v in means.items() if len(v) == N_PAIRS], "seed_means": per_seed,
            "mean": float(np.mean(per_seed)), "std": float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else None}


def report() -> dict[str, Any]:
    out: dict[str, Any] = {"command": "python experiments/table2_terms.py", "stores": {}, "rows": []}
    for protocol, stores in STORES.items():
        out["stores"][protocol] = [str(store.relative_to(ROOT)) for store in stores]
        records = [json.loads(line) for store in stores for line in store.read_text().splitlines()]
        for method in sorted({r["params"]["method"] for r in records}):
            mine = [r for r in records if r["params"]["method"] == method]
            for kappa in KAPPAS:
                out["rows"].append({"protocol": protocol, "method": method, "kappa": kappa,
                                    **{term: statistic(mine, kappa, term) for term in TERMS}})
    return out


def main() -> None:
    result = report()
    print(f"{'protocol':<9} {'method':<10} {'kappa':<8} {'seeds':<8} {'(i)':>22} {'(ii)':>22} {'RIR':>22}")
    for row in result["rows"]:
        cells = [f"{row[t]['mean']:.4g}" + (f" ± {row[t]['std']:.3g}" if row[t]["std"] is not None else "")
                 for t in TERMS]
        print(f"{row['protocol']:<9} {row['method']:<10} {row['kappa']:<8} "
              f"{','.join(map(str, row['rir']['seeds'])):<8} {cells[0]:>22} {cells[1]:>22} {cells[2]:>22}")
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
