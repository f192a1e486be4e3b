"""CPU seconds of one immunization step on the real network's trained tail, per method, protocol and spectral route:
the measured basis of Table 3's run plan.

The tail is ImageNet EfficientNet-Lite0's (``blocks.6`` + ``conv_head`` + ``bn2`` -> 1280 pooled features, the
verified weights of :func:`kappalab.deep.efficientnet.load_efficientnet_lite0`), as Table 3 trains it (float64, one
thread), on a 64-row batch pair of trunk-shaped activations (192 x 4 x 4: the cut ``blocks.6`` at 112 px; random
values, the cost does not depend on them). Each entry is the smallest of two timed steps after one warm-up step
(``time.process_time``: CPU time, less sensitive than wall time to other load on the machine).

Usage (the deep environment, scripts/setup_deep.sh):
    .venv-deep/bin/python experiments/table3_step_cost.py docs/reproduction/table3/cost/step_cost.json
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time

import torch
from torch import nn

from kappalab.deep import ImmunizableModel, ObjectiveConfig, objective_terms, weighted_loss
from kappalab.deep.efficientnet import load_efficientnet_lite0
from kappalab.deep.methods import CONTROLS, METHODS
from kappalab.deep.train import TrainConfig, make_optimizer
from kappalab.deep.trunk import split_tail

BATCH, CUT, SIDE, WIDTH, FEATURES = 64, "blocks.6", 4, 192, 1280


def step_seconds(net: nn.Module, method: str, protocol: str, route: str, batches) -> float:
    trainable, neck = split_tail(copy.deepcopy(net), CUT)
    model = ImmunizableModel(nn.Identity(), trainable, neck, nn.Linear(FEATURES, 10, dtype=torch.float64), FEATURES,
                             dummy=protocol == "paper", ridge=1e-6)
    cfg = ObjectiveConfig(lambda_P=1e-3, lambda_H=1e-3, lambda_kappa=1e-6, lambda_imma=1.0, lambda_oracle=0.1,
                          harmful_classes=10, protocol=protocol, official_k=112, spectral_route=route,
                          on_degenerate="ignore", reg_rtol=1e-10)
    opt = make_optimizer(model, TrainConfig(lr=1e-4))
    times = []
    for _ in range(3):
        start = time.process_time()
        opt.zero_grad(set_to_none=True)
        weighted_loss(objective_terms(model, method, *batches, cfg), cfg).backward()
        opt.step()
        times.append(time.process_time() - start)
    return min(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the JSON file to write")
    args = parser.parse_args()
    torch.set_num_threads(1)
    net = load_efficientnet_lite0(dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(BATCH, WIDTH, SIDE, SIDE, generator=g, dtype=torch.float64),
                torch.randint(0, 10, (BATCH,), generator=g)) for _ in range(2)]
    seconds = {}
    for protocol in ("paper", "official"):
        for method in METHODS + CONTROLS:
            for route in ("dense", "gram") if method != "task_only" else ("dense",):
                seconds[f"{protocol}/{method}/{route}"] = step_seconds(net, method, protocol, route, batches)
                print(f"{protocol} {method} {route}: {seconds[f'{protocol}/{method}/{route}']:.3f} CPU-s", flush=True)
    with open(args.out, "w") as f:
        json.dump({"cpu_s_per_step": seconds, "batch": BATCH, "cut": CUT, "features": FEATURES, "threads": 1,
                   "torch": torch.__version__, "machine": platform.processor() or platform.machine()}, f, indent=1)


if __name__ == "__main__":
    main()
