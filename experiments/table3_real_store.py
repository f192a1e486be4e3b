"""Build the committed store of Table 3's real-network rows from the runs.

Reads every ``docs/reproduction/table3/real/<direction>/<protocol>/runs.jsonl`` (written by ``kappalab reproduce
table3 --arch efficientnet_lite0 --harmful H --protocol P --out docs/reproduction/table3/real/<direction>/<P>``),
writes ``docs/reproduction/table3/real/tables.md`` (one table per direction and protocol, from the records alone)
and ``docs/reproduction/table3/real/features.npz`` (float64 1280 x 1280 triangular QR factors R of theta_0's held-out
features of both datasets and of theta_I's of the runs named with ``--theta-i``, compressed, from the work folder's
per-run ``features.npz``: they give the singular values and the exact estimator, not the group estimators, which need
the features' rows; :func:`kappalab.reproduce.table3.measures.write_feature_store`).
``--scale-test`` then runs the scale test on theta_0's float64 held-out features (D_P Fashion-MNIST, D_H MNIST:
D_H's features x 2, and D_H's weakest half of the spectrum x 0.2, through the three estimators;
:func:`kappalab.estimators.scale_test`) and writes ``scale_test.json``.

Usage (the deep environment):
    PYTHONPATH=src .venv-deep/bin/python experiments/table3_real_store.py [--theta-i KEY ...] [--work DIR]
        [--scale-test]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kappalab.data.fetch import cache_dir
from kappalab.estimators import scale_test
from kappalab.reproduce.table3.config import load_table3_config
from kappalab.reproduce.table3.real import build_task, part_features, load_real_data
from kappalab.reproduce.table3.measures import write_feature_store
from kappalab.reproduce.table3.report import estimator_table

STORE = Path(__file__).resolve().parents[1] / "docs" / "reproduction" / "table3" / "real"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--theta-i", nargs="*", default=[], help="run keys whose theta_I features are committed")
    parser.add_argument("--work", default=str(cache_dir() / "table3-real" / "work"))
    parser.add_argument("--scale-test", action="store_true", help="also the scale test on theta_0's features")
    parser.add_argument("--only-scale-test", action="store_true", help="the scale test alone")
    args = parser.parse_args()
    if not args.only_scale_test:
        build(args)
    if args.scale_test or args.only_scale_test:
        run_scale_test()


def build(args: argparse.Namespace) -> None:
    tables, records = [], []
    for path in sorted(STORE.glob("*/*/runs.jsonl")):
        recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        records += recs
        first = recs[0]
        config = first["identity"]["config"]
        frozen = ", the tail's BatchNorm statistics frozen at theta_0" if config.get("norm_statistics") == "frozen" \
            else ""
        title = (f"{first['task']}: D_P {config['pretrain_data']} vs D_H {config['harmful']}, protocol "
                 f"{first['protocol']}{frozen}")
        tables.append(estimator_table(recs, title))
    (STORE / "tables.md").write_text("\n".join(tables))
    path = write_feature_store(records, Path(args.work), STORE, args.theta_i)
    print(f"{STORE / 'tables.md'}; {path} ({path.stat().st_size / 1e6:.1f} MB)")


def run_scale_test() -> None:
    """The scale test on theta_0's float64 held-out features; writes scale_test.json."""
    cfg = load_table3_config("efficientnet_lite0_mnist")
    net, data = load_real_data(cfg)
    base = build_task(net, data, cfg).theta0(0)
    features = part_features(base, data)  # float64, D_P Fashion-MNIST, D_H MNIST
    test = scale_test(features["P"], features["H"], seed=0)
    result = {"p0": "theta0/fashion-mnist", "h0": "theta0/mnist", "scale": test.scale, "shrink": test.shrink,
              "expected_doubled": test.expected_doubled, "expected_weak_half": test.expected_weak_half,
              **{case: {k: e.as_dict() for k, e in getattr(test, case).items()} for case in ("doubled",
                                                                                         "weak_half")}}
    (STORE / "scale_test.json").write_text(json.dumps(result, indent=1) + "\n")
    for case in ("doubled", "weak_half"):
        print(case, {k: round(e.rir, 4) for k, e in getattr(test, case).items()})


if __name__ == "__main__":
    main()
