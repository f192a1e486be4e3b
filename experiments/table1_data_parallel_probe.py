"""Table 1, official protocol: the 1-process engine against the shipped 2-process data-parallel config.

For each seed, Ours (or ``--method``) is trained on House Prices' official task (200 paired rows) by
:func:`kappalab.immunization.immunize` (1 process: 3 minibatches of 64 per epoch) and by
:func:`kappalab.immunization.data_parallel.immunize_data_parallel` (2 processes: one 64-row batch per process
and epoch, averaged gradients, float32 inputs), and both are evaluated with :func:`kappalab.immunization.evaluate`
(RIR under the pinv and shifted kappas). Prints a markdown table; nothing is stored.

    OMP_NUM_THREADS=1 python experiments/table1_data_parallel_probe.py --epochs 10 --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse

from kappalab.immunization import evaluate, house_prices_task, immunize, table1_config
from kappalab.immunization.data_parallel import immunize_data_parallel
from kappalab.methods import PAPER_ORDER
from kappalab.sweep import limit_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--method", default="ours", choices=PAPER_ORDER)
    args = parser.parse_args()
    limit_threads(1)
    task = house_prices_task("official")
    cfg = table1_config("official", args.method).replace(epochs=args.epochs)
    print("| seed | steps 1 / 2 processes | RIR pinv, 1 process | RIR pinv, 2 processes | RIR shifted, 1 process | "
          "RIR shifted, 2 processes |\n|---|---|---|---|---|---|")
    for seed in args.seeds:
        one, two = immunize(task, cfg, seed), immunize_data_parallel(task, cfg, seed)
        e1, e2 = (evaluate(run, task, sensitivity=(), endpoints=False) for run in (one, two))
        print(f"| {seed} | {one.n_steps} / {two.n_steps} | {e1['pinv']['rir']:.4g} | {e2['pinv']['rir']:.4g} | "
              f"{e1['shifted']['rir']:.4g} | {e2['shifted']['rir']:.4g} |")


if __name__ == "__main__":
    main()
