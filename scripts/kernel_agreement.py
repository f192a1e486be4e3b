"""How far the committed Table 1 evaluations move between OpenBLAS kernels: the evidence behind docs/core/kappa.md's
"Across builds and kernels".

Each kernel (``OPENBLAS_CORETYPE`` = SkylakeX, Haswell, Zen) recomputes, in its own process, the evaluation of the 40
committed Table 1 runs (docs/reproduction/table1/{paper,official}) from their stored theta and data through
``kappalab.immunization.evaluate``; this script then reports, per method, kappa definition and quantity, the largest
relative difference between any two kernels and between a kernel and the stored value. Writes
docs/core/kernel_agreement.json (or ``--out``) and prints the table. ~1 CPU-minute per kernel.

    python scripts/kernel_agreement.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "docs" / "reproduction" / "table1"
KERNELS = ("SkylakeX", "Haswell", "Zen")
DEFINITIONS = ("pinv", "shifted")


def _runs():
    for protocol in ("paper", "official"):
        folder = STORE / protocol
        for line in (folder / "runs.jsonl").read_text().splitlines():
            yield folder, json.loads(line)


def recompute() -> dict[str, dict[str, dict[str, float]]]:
    """key -> definition -> quantity -> value, recomputed in this process (this process's kernel)."""
    import numpy as np

    from kappalab.immunization import LinearTask, evaluate

    out = {}
    for folder, r in _runs():
        task = LinearTask(np.load(folder / "features_P.npy"), np.load(folder / "y_P.npy"),
                          np.load(folder / "features_H.npy"), np.load(folder / "y_H.npy"), "mse", "files", "files")
        bias = np.load(folder / r["files"]["bias"]) if r["files"]["bias"] else None
        ev = evaluate(np.load(folder / r["files"]["theta_I"]), task, bias=bias, shift=r["evaluation"]["shift"],
                      endpoints=False)
        out[r["key"]] = {d: dict(ev[d]) for d in DEFINITIONS}
    return out


def _group(key: str, quantity: str) -> tuple[str, str]:
    """(method, quantity group): the data's own kappas ("identity": theta = I), the immunized kappas, Eq. 15's terms."""
    method = key.split("/")[1]
    group = ("kappa of the data" if quantity.endswith("identity") else
             "kappa immunized" if quantity.startswith("kappa") else "(i), (ii), RIR")
    return method, group


def _rel(a: float, b: float) -> float:
    return 0.0 if a == b else abs(a - b) / max(abs(a), abs(b))


def compare(by_kernel: dict[str, dict], stored: dict[str, dict]) -> list[dict]:
    rows: dict[tuple[str, str, str], dict] = {}
    for key, definitions in stored.items():
        for d in DEFINITIONS:
            for quantity, value in definitions[d].items():
                method, group = _group(key, quantity)
                row = rows.setdefault((method, d, group), {"method": method, "definition": d, "quantity": group,
                                                           "between_kernels": 0.0, "kernel_vs_stored": 0.0, "n": 0})
                got = [by_kernel[k][key][d][quantity] for k in KERNELS]
                row["between_kernels"] = max(row["between_kernels"], *(_rel(a, b) for a in got for b in got))
                row["kernel_vs_stored"] = max(row["kernel_vs_stored"], *(_rel(a, value) for a in got))
                row["n"] += 1
    return [rows[k] for k in sorted(rows)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "core" / "kernel_agreement.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        json.dump(recompute(), sys.stdout)
        return 0
    by_kernel = {}
    for kernel in KERNELS:
        env = {**os.environ, "OPENBLAS_CORETYPE": kernel, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        done = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True,
                              check=True)
        by_kernel[kernel] = json.loads(done.stdout)
    stored = {r["key"]: {d: r["evaluation"][d] for d in DEFINITIONS} for _, r in _runs()}
    rows = compare(by_kernel, stored)
    import numpy as np

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    config = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    record = {"command": "python scripts/kernel_agreement.py", "commit": commit, "kernels": list(KERNELS),
              "numpy": np.__version__, "blas": {k: config.get(k) for k in ("name", "version")},
              "store": str(STORE.relative_to(ROOT)), "runs": len(stored), "rows": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{'method':<10} {'kappa':<8} {'quantity':<18} {'between kernels':>16} {'kernel vs stored':>17}")
    for r in rows:
        print(f"{r['method']:<10} {r['definition']:<8} {r['quantity']:<18} {r['between_kernels']:>16.2e} "
              f"{r['kernel_vs_stored']:>17.2e}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
