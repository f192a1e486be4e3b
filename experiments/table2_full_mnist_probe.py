"""Full MNIST for Table 2: the rank rule's spectral gap per digit, and the time of one official-protocol run.

Two measurements for the 10-pair study (nothing here is a committed result; the numbers go to docs/data.md):

* ``gap``: for each digit, the spectrum of K = X^T X (squared singular values of the normalized images,
  :func:`kappalab.kappa.feature_spectrum`) on full MNIST's training split (all images of the digit)
  and on the 500/digit subset: the rank at Table 2's rule (eigenvalues above ``rtol * lambda_max``,
  ``rtol = min(N, D) eps``) and at 0.1x / 10x that rtol, the number of constant pixels, and the eigenvalue ratio
  lambda_k / lambda_{k+1} across the cut (the gap the threshold falls in).
* ``time``: one official-protocol run, wall and CPU seconds (Table 2's runner code: ``mnist_task``, ``table2_config``, ``immunize``,
  ``run_spectra``, ``rir_from_spectra``) on full MNIST for one pair, seed and method; its wall time and Eq. 15.

    OMP_NUM_THREADS=1 nice -n 10 python experiments/table2_full_mnist_probe.py gap
    OMP_NUM_THREADS=1 nice -n 10 python experiments/table2_full_mnist_probe.py time --pair 4-1 --method ours
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from kappalab.data.mnist import fetch_mnist, load_digits, normalize_images
from kappalab.immunization import immunize
from kappalab.kappa import default_rtol, feature_spectrum
from kappalab.methods import PAPER_ORDER
from kappalab.reproduce.table2 import mnist_task, rank_of, rir_from_spectra, run_spectra, table2_config
from kappalab.sweep import limit_threads


def gap_row(images: np.ndarray) -> dict[str, float | int]:
    """Rank of K at Table 2's rtol and 0.1x / 10x, constant pixels, eigenvalues either side of the cut."""
    lam = np.asarray(feature_spectrum(normalize_images(images)))  # descending
    rtol = default_rtol(lam)
    ranks = {f: rank_of(lam, rtol * f) for f in (0.1, 1.0, 10.0)}
    k = ranks[1.0]
    constant = int(np.sum(np.ptp(images.reshape(len(images), -1), axis=0) == 0))
    below = float(lam[k] / lam[0]) if k < len(lam) else 0.0
    return {"N": len(images), "constant_pixels": constant, "rank": k, "rank_0.1x": ranks[0.1],
            "rank_10x": ranks[10.0], "D_minus_constant_plus_1": 784 - constant + (constant > 0),
            "rtol": rtol, "lambda_k_rel": float(lam[k - 1] / lam[0]), "lambda_k+1_rel": below,
            "gap_ratio": float(lam[k - 1] / lam[k]) if k < len(lam) and lam[k] > 0 else float("inf"),
            "rank_stable_0.1x_10x": ranks[0.1] == k == ranks[10.0]}


def gap() -> dict[str, dict[str, dict]]:
    out = {}
    for name in ("mnist", "mnist-subset"):
        data = load_digits(name)
        out[name] = {str(d): gap_row(data.images[data.labels == d]) for d in range(10)}
    return out


def one_run(a: int, b: int, seed: int, method: str) -> dict[str, object]:
    task = mnist_task(a, b, seed, str(fetch_mnist()))
    cfg = table2_config("official", method)
    start, cpu_start = time.perf_counter(), time.process_time()
    run = immunize(task, cfg, seed)
    train_s, train_cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    eq15 = rir_from_spectra(run_spectra(task, np.asarray(run.theta_I, dtype=np.float64), run.bias))
    return {"pair": f"{a}-{b}", "seed": seed, "method": method, "rows_per_digit": len(task.X_P),
            "data": task.data_label, "n_steps": run.n_steps, "train_s": train_s,
            "train_cpu_s": train_cpu_s, "total_s": time.perf_counter() - start,
            "total_cpu_s": time.process_time() - cpu_start, "eq15": eq15}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("gap", "time"))
    parser.add_argument("--pair", default="4-1", help="a-b: D_P = digit a, D_H = digit b")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--method", default="ours", choices=PAPER_ORDER)
    args = parser.parse_args()
    limit_threads(1)
    if args.what == "gap":
        result = gap()
    else:
        a, b = (int(x) for x in args.pair.split("-"))
        result = one_run(a, b, args.seed, args.method)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
