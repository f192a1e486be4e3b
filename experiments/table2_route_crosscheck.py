"""Cross-check of Table 2's stored runs: rerun some keys on the older engine and compare Eq. 15 run by run.

The sweep's runs use the "features" spectral route with torch's fused Adam (the shipped config table2_official.json).
This script reruns chosen keys with ``spectral_route = "gram"`` and the for-loop Adam (the engine of every run
made before 2026-11-30), evaluates both extractors the same way (spectra by SVD of the features,
:func:`kappalab.reproduce.table2.feature_spectrum`), and writes the relative differences of (i), (ii) and
RIR. The two engines are equal in exact arithmetic, so the differences measure how much rounding-level changes
move each number.

    python experiments/table2_route_crosscheck.py --store docs/reproduction/table2/features \
        --keys official.imma.4-1.s0.e30,official.opt_kappa.4-1.s0.e30
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


from kappalab.immunization import immunize
from kappalab.provenance import provenance
from kappalab.reproduce.table2 import METHOD_LABELS, mnist_task, rir_from_spectra, run_spectra, table2_config
from kappalab.results import RunStore, to_jsonable
from kappalab.sweep import limit_threads


def crosscheck(record: dict) -> dict:
    """Rerun one stored record on the gram route with the for-loop Adam; both evaluated from SVD spectra."""
    p = record["params"]
    task = mnist_task(p["a"], p["b"], p["seed"], p.get("data_dir"), p.get("pool", 1),
                      p.get("dataset", "mnist-subset"))
    cfg = table2_config(p["protocol"], p["method"], p.get("overrides")).replace(epochs=p["epochs"])
    cfg = cfg.with_extra(spectral_route="gram", adam_fused=False, monitor_every=1)
    run = immunize(task, cfg, p["seed"])
    rerun = rir_from_spectra(run_spectra(task, run.theta_I, run.bias))
    stored = record["result"]["gram"]
    rel = {c: abs(rerun[c] - stored[c]) / abs(stored[c]) for c in ("term_i", "term_ii", "rir")}
    return {"key": record["key"], "stored": {c: stored[c] for c in rel}, "rerun": {c: rerun[c] for c in rel},
            "rel_diff": rel, "kappa_H_H": stored["kappa_H_H"], "kappa_H_P": stored["kappa_H_P"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="a table2 output folder (runs_official.jsonl)")
    parser.add_argument("--keys", required=True, help="comma-separated run keys")
    args = parser.parse_args()
    limit_threads(1)
    records = {r["key"]: r for r in RunStore(args.store / "runs_official.jsonl").records()}
    keys = args.keys.split(",")
    missing = [k for k in keys if k not in records]
    if missing:
        raise SystemExit(f"--keys: not in the store: {missing}")
    rows = [crosscheck(records[k]) for k in keys]
    lines = ["| run | kappa(H_H) | RIR stored | RIR rerun | rel. diff (i) | (ii) | RIR |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        method = r["key"].split(".")[1]
        lines.append(f"| {METHOD_LABELS[method]} {r['key'].split('.', 2)[2]} | {r['kappa_H_H']:.3g} | "
                     f"{r['stored']['rir']:.6g} | {r['rerun']['rir']:.6g} | " +
                     " | ".join(f"{r['rel_diff'][c]:.1e}" for c in ("term_i", "term_ii", "rir")) + " |")
    out = args.store / "crosscheck_official"
    out.with_suffix(".json").write_text(json.dumps(to_jsonable(
        {"rows": rows, "provenance": provenance(None, {"keys": keys, "store": str(args.store)})}), indent=1))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
