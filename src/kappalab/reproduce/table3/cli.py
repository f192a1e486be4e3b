"""``kappalab reproduce table3``: Table 3 and Figure 3 (immunizing deep nets), and their CPU-scale analogue.

Modes:

* ``--proxy`` (runs here): :class:`~kappalab.deep.model.SmallCNN` pre-trained on MNIST digits 0-4 (D_P) and
  immunized against digits 5-9 (D_H) on the embedded MNIST subset; config ``table3_proxy.json`` (shipped in
  :mod:`kappalab.configs`);
  writes ``runs.jsonl``, ``table.md``, ``figure3.png``/``.pdf`` under ``--out`` (default
  ``results/table3``). ``--quick`` shrinks it to a CI smoke run (< 1 min; default ``--out``
  ``results/table3_quick``). ``--calibrate`` prints the gradient norms at theta_0 behind the lambdas.
  ``--search`` runs Appendix C.2's selection of the lambdas and epochs on a train/validation split of the training
  data (config block ``search``;
  :func:`kappalab.reproduce.table3.search.run_search`, :mod:`kappalab.deep.search`), writing ``search.jsonl``,
  ``search.md`` and ``search_selected.json``; the selected values are then entered in the config by hand.
* ``--arch resnet18|vit --smoke``: the paper's code path (timm model, dummy layer, CombinedLoader, checkpoints,
  both RIR estimators, Figure 3's probe) with random weights on MNIST digits at 224 x 224, on the CPU (needs
  ``kappalab[deep]``: ``scripts/setup_deep.sh``); config ``table3_<arch>_smoke.json``.
* ``--arch resnet18|vit --harmful cars|country211 --imagenet DIR --harmful-dir DIR --weights FILE`` (the paper's
  configuration; needs ``kappalab[deep]``, the data, the weights and a GPU; under ``torchrun`` the training is
  data-parallel). Config ``table3_<arch>_<harmful>.json``; outputs under ``results/table3/<arch>_<harmful>``.
* ``--arch efficientnet_lite0 --harmful mnist|fashion-mnist`` (runs here, on the CPU, with ``scripts/setup_deep.sh``):
  Table 3 on a real pretrained network, ImageNet EfficientNet-Lite0 with a frozen cached trunk, D_P the other of
  Fashion-MNIST / MNIST (:mod:`kappalab.reproduce.table3.real`); weights and data are fetched and verified by
  kappalab. Config ``table3_efficientnet_lite0_<harmful>.json``; ``table_<name>_<protocol>.md`` under ``--out``.

``--protocol paper|official`` (default ``paper``): ``paper`` follows the paper's text (Eq. 11 with Eq. 18's ``H~``,
the dummy layer's ``K^-1`` preconditioning, pseudo-inverse kappa); ``official`` follows the authors' public code as
read (their r1 / r2 with ``k = p`` = the input width, shifted kappa, no dummy layer, their ViT and trainable set,
augmentation, batch sizes and constant lr; :mod:`kappalab.deep.official`), from the config's ``official`` block,
which names with a reason whatever of their code the config does not follow. The protocol is part of every run's
identity, so both protocols can share one ``--out`` (the official protocol's table and figure are
``table_official.md`` and ``figure3_official.png``/``.pdf``); every record carries both RIR estimators.

Configs are the shipped ``table3_<name>.json`` (schema: :mod:`kappalab.reproduce.table3.config`) or ``--config
FILE``; ``--set KEY=VALUE`` overrides any value. Every (seed, method) is one record with provenance in an
append-only ``runs.jsonl``, keyed ``<task>/seed<s>/<method>.<hash>`` by its run identity (resolved config, data
identity, options: :mod:`kappalab.reproduce.identity`); finished records are never redone, and an interrupted
training resumes from its last epoch checkpoint, kept under ``--work``/``<config and data hash>`` (default
``OUT/work``) so a changed config never resumes another config's checkpoint. Tables and the figure are rebuilt
from the records alone (``--aggregate-only``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kappalab.cli_options import (RESULTS, Parser, UsageError, check_device, check_out, command, seed as seed_type,
                                  unique)
from kappalab.configs import PROTOCOLS
from kappalab.methods import CONTROLS, DEEP_METHODS
from kappalab.reproduce.table3.constants import VALIDATION
from kappalab.reproduce.table3.plan import PaperInputs, Plan

#: the method and control names (kappalab.deep.METHODS + CONTROLS, from the registry that needs no torch)
METHODS = DEEP_METHODS + CONTROLS


#: what ``--help`` prints above the options (the module docstring is the long account; docs/reproduction/table3.md)
HELP = """Table 3 and Figure 3 (immunizing deep nets): the paper's networks, a real pretrained network on the CPU,
and a CPU-scale analogue. Every (seed, method) is one record with provenance in OUT/runs.jsonl; finished records
are never redone and an interrupted training resumes from its last epoch.

Modes: --proxy, a small CNN on MNIST digits (runs anywhere; --quick: a one-minute smoke run); --arch
efficientnet_lite0 --harmful mnist|fashion-mnist, ImageNet EfficientNet-Lite0 with its trunk cached, on the CPU
(scripts/setup_deep.sh); --arch resnet18|vit --harmful cars|country211 with --imagenet, --harmful-dir and
--weights, the paper's setting (data, weights and a GPU); --arch resnet18|vit --smoke, that code path with random
weights. --protocol: the paper's text or the authors' code. Methods: ours, rill_only, imma, opt_kappa, and the
controls oracle and task_only. Details: docs/reproduction/table3.md."""

EXAMPLES = """examples:
  kappalab reproduce table3 --proxy --quick
  kappalab reproduce table3 --proxy --protocol official --seeds 0 1
  .venv-deep/bin/kappalab reproduce table3 --arch efficientnet_lite0 --harmful mnist --methods oracle task_only ours \\
      --set spectral_route=gram --out results/table3_real"""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="kappalab reproduce table3", description=HELP, epilog=EXAMPLES,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--proxy", action="store_true", help="the CPU-scale MNIST analogue (runs here)")
    p.add_argument("--quick", action="store_true", help="with --proxy: a < 1 min smoke run")
    p.add_argument("--calibrate", action="store_true", help="print gradient norms at theta_0 and balanced lambdas")
    p.add_argument("--search", action="store_true",
                   help="with --proxy: Appendix C.2's lambda/epoch search on a validation split (config 'search')")
    p.add_argument("--aggregate-only", action="store_true", help="rebuild table and figure from the records")
    p.add_argument("--grid", action="store_true",
                   help="with --arch efficientnet_lite0: run every setting of the selection grid (eta x lambda "
                        "multiple; needs --set per_class.validation=N); the table reads each method at the setting "
                        "chosen on the validation part")
    p.add_argument("--arch", choices=["resnet18", "vit", "efficientnet_lite0"])
    p.add_argument("--harmful", choices=["cars", "country211", "mnist", "fashion-mnist"],
                   help="D_H: cars or country211 (resnet18, vit); mnist or fashion-mnist (efficientnet_lite0, whose "
                        "D_P is then the other one)")
    p.add_argument("--smoke", action="store_true",
                   help="with --arch: the paper's code path on CPU, random weights, MNIST digits as 224x224 images "
                        "(config table3_<arch>_smoke.json; no --harmful, data or weights needed)")
    p.add_argument("--imagenet", help="ImageNet-1k root with train/ and val/ class folders")
    p.add_argument("--harmful-dir", help="Stanford Cars or Country211 root with train/ and test/ class folders")
    p.add_argument("--weights", help="local timm state dict (.safetensors or .pth/.bin) of the model")
    p.add_argument("--protocol", choices=PROTOCOLS, default="paper",
                   help="paper: the paper's text (default); official: the authors' public code as read "
                        "(the config's 'official' block)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--config", help="config name or path (default: from the mode)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override one config value (repeatable; dotted keys, e.g. lambda_H=5e3, search.max_epochs=2)")
    p.add_argument("--seeds", type=seed_type, nargs="+", help="override the config's seeds")
    p.add_argument("--methods", nargs="+", choices=METHODS, help="override the config's methods")
    p.add_argument("--out", help="folder for runs.jsonl, table.md, figure3.png/pdf (default under results/)")
    p.add_argument("--work", help="folder for checkpoints (default: OUT/work)")
    return p



def prepare(argv: list[str]) -> Plan:
    """Parse and check the command line, load the config and build the call's :class:`~.plan.Plan` (a UsageError /
    ConfigError names the argument)."""
    from kappalab.configs import parse_set
    from kappalab.reproduce.table3.config import load_table3_config

    args = build_parser().parse_args(argv)
    if args.proxy == bool(args.arch):
        raise UsageError("--proxy / --arch: give either --proxy or --arch/--harmful (see --help)")
    if args.quick and not args.proxy:
        raise UsageError("--quick: needs --proxy")
    if args.smoke and not args.arch:
        raise UsageError("--smoke: needs --arch")
    if args.arch and not args.smoke and not args.harmful:
        raise UsageError("--arch: needs --harmful (or --smoke)")
    real = args.arch == "efficientnet_lite0"
    if args.harmful and real != (args.harmful in ("mnist", "fashion-mnist")):
        raise UsageError(f"--harmful {args.harmful}: --arch efficientnet_lite0 takes --harmful mnist or "
                         "fashion-mnist; resnet18 and vit take cars or country211")
    if real and (args.smoke or args.imagenet or args.harmful_dir or args.weights or args.calibrate):
        raise UsageError("--arch efficientnet_lite0: its weights and data are fetched and verified by kappalab "
                         "(no --smoke, --imagenet, --harmful-dir, --weights or --calibrate; the lambdas are "
                         "calibrated in every seed's init record)")
    if args.grid and not real:
        raise UsageError("--grid: needs --arch efficientnet_lite0 (the proxy's selection is --proxy --search)")
    if args.search and not args.proxy:
        raise UsageError("--search: needs --proxy")
    if args.search and args.protocol != "paper":
        raise UsageError("--search: Appendix C.2's search is the paper protocol's (the authors' lambdas are "
                         "Table 4's); use --protocol paper")
    check_device(args.device)
    overrides = parse_set(args.overrides)
    if "protocol" in overrides:
        raise UsageError("--set protocol: choose the protocol with --protocol paper|official")
    protocol = args.protocol
    if args.proxy:
        cfg = load_table3_config(args.config or "proxy", quick=args.quick, overrides=overrides, protocol=protocol)
        default_out = RESULTS / ("table3_quick" if args.quick else "table3")
        title = ("CPU-scale analogue (SmallCNN, MNIST subset 0-4 vs 5-9)" + (" [quick]" if args.quick else "")
                 + (f", {cfg.label}" if cfg.label else "") + "\nnot the paper's experiment")
    elif args.smoke:
        cfg = load_table3_config(args.config or f"{args.arch}_smoke", overrides=overrides, protocol=protocol)
        default_out = RESULTS / "table3" / cfg.name
        title = f"{cfg.timm_name} (random weights), MNIST digits 0-4 vs 5-9 at 224x224 [smoke]"
    else:
        cfg = load_table3_config(args.config or f"{args.arch}_{args.harmful}", overrides=overrides,
                                 protocol=protocol)
        default_out = RESULTS / "table3" / cfg.name
        title = (f"{cfg.timm_name} (ImageNet weights, trunk cut {cfg.trunk_cut}), D_P {cfg.pretrain_data} "
                 f"vs D_H {cfg.harmful} at {cfg.image_size} px" if real
                 else f"{cfg.timm_name}, ImageNet-1k vs {args.harmful}")
    title += f"\nprotocol: {protocol} (" + ("the paper's text" if protocol == "paper" else
                                         "the authors' public code as read") + ")"
    if args.grid and VALIDATION not in (cfg.per_class or {}):
        raise UsageError(f"--grid: the selection reads a validation part; add --set per_class.{VALIDATION}=N "
                         "(images per class, e.g. 50)")
    out = check_out(Path(args.out) if args.out else default_out)
    seeds = unique(args.seeds or cfg.seeds, "--seeds")
    methods = unique(args.methods or cfg.methods, "--methods")
    unknown = [m for m in cfg.methods + list(methods) if m not in METHODS]
    if unknown:
        raise UsageError(f"config {cfg.config_file}: unknown methods {unknown}; choose from {list(METHODS)}")
    mode = "proxy" if args.proxy else "smoke" if args.smoke else "real" if real else "paper"
    action = ("aggregate" if args.aggregate_only else "search" if args.search else "calibrate" if args.calibrate
              else "run")
    return Plan(mode, action, cfg, out, seeds, methods, title, device=args.device,
                work=Path(args.work) if args.work else None, grid=args.grid,
                inputs=PaperInputs(args.imagenet, args.harmful_dir, args.weights))


@command("kappalab reproduce table3")
def main(argv: list[str]) -> int:
    """Command-line entry point (see the module docstring)."""
    plan = prepare(argv)
    from kappalab.reproduce.table3.sweep import execute

    return execute(plan)
