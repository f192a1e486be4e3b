"""Table 2 and Figure 2: immunize a 784 x 784 linear extractor on every ordered MNIST digit pair.

``kappalab reproduce table2 [--protocol paper|official] [--pairs a-b,...] [--seeds 0,1,2] [--methods ...]
[--workers N] [--device cpu|cuda] [--data mnist-subset|mnist] [--out DIR] [--epochs E] [--quick]
[--report-only] [--engine auto|single|batched] [--batch-size R] [--shard K/N] [--merge DIR ...] [--config FILE]
[--set KEY=VALUE ...] [--trajectory [--etas 0.0005,0.001,...] [--every E]]``

One run = (protocol, method, pair (a, b), seed): D_P = images of digit ``a``, D_H = images of digit ``b``
(:func:`kappalab.data.mnist.digit_pair`, capped at the smaller count by seeded sampling). Labels: D_P all 0 (the
authors' code: a degenerate pre-training task, only the covariances matter for RIR), D_H all 1 (Appendix C.2's
``BinaryDataset`` maps one digit to 0 and the other to 1; only IMMA reads D_H's labels). Hyper-parameters come
from the shipped ``table2_<protocol>_<method>.json`` (Table 4's MNIST row is ``table2_mnist_linear.json``).

The sweep is resumable (:mod:`kappalab.sweep`): one JSONL record per finished run in ``OUT/runs_<protocol>.jsonl``,
keyed by a readable label and the run identity's hash (config, data sha256, options), and per run
``OUT/spectra/<key>.npz`` with its spectra (:mod:`.spectra`), enough to recompute (i), (ii) and RIR without the
model. The report (markdown, CSV, JSON, Figure 2 PNG+PDF) is rebuilt from the records alone (:mod:`.report`).

Modules, each with one job (the shape every table package has: ``cli`` -> ``plan`` -> ``sweep`` -> ``run`` ->
``report``):

* :mod:`.cli`: the parser, its checks, and ``main``: builds the typed :class:`.plan.Plan` and hands it to the sweep,
  the merge or the job array, then to the report (the only module that sees ``argparse.Namespace``);
* :mod:`.plan`: :class:`~.plan.Plan` (what one call asks for) and the :class:`~.plan.RunSpec` of each run it lists,
  keyed by its run identity; the ``--pairs`` / ``--seeds`` parsers; each run's resolved config;
* :mod:`.sweep`: the plan's runs not yet stored, run against the store (done keys skipped, resume, one progress
  display, the store's lock), the store's checks, and the plan's stored records;
* :mod:`.run`: one run spec -> one record's result (prepare, immunize, finish) in each engine's worker, and the
  engine's part of a run's identity;
* :mod:`.report`: records -> Table 2 (markdown, CSV, JSON), Figure 2, and the run-by-run comparison of two stores.

Table-specific modules: :mod:`.constants` (names, pairs, the paper's reference numbers), :mod:`.data` (MNIST pairs,
configs, data identity), :mod:`.spectra` (spectra and kappa / Eq. 15 from them), :mod:`.probe` (the independent
probing measure), :mod:`.engine` (which engine trains a plan's runs: the rule), :mod:`.merge` (shard stores checked and
merged), :mod:`.launcher` (the shards as one submitit job array), :mod:`.tally` / :mod:`.figure` (Figure 2),
:mod:`.headline` (the headline numbers of the full sweeps), :mod:`.trajectory` and :mod:`.selection`
(``--trajectory``: paper-protocol runs on full MNIST with per-epoch (i), (ii), RIR on the train, validation and test
parts of each pair, and App. C.2's learning-rate x epoch selection over them).
"""

from .cli import build_parser, main, plan_from_args, spectral_route
from .constants import (ALL_PAIRS, METHOD_LABELS, METHODS, PAPER_FIG2_SUCCESS, PAPER_TABLE2, PROBE_PAIRS,
                        QUICK_EPOCHS, QUICK_PAIRS, SUCCESS_THRESHOLD)
from .data import data_label, mnist_task, pool_images, table2_config
from .plan import Plan, parse_ints, parse_pairs, run_label
from .report import PROBE_COLUMNS, record_route, run_rows, table, write_report
from .run import run_one
from .spectra import (SPECTRA, SPECTRA_METHOD, kappa_at_rank, rank_of, rir_from_spectra, rtol_sensitivity,
                      run_spectra, stored_spectrum)
from .sweep import check_store, select_records
from .tally import pair_log_rir, success_counts
from kappalab.sweep import run_sweep

__all__ = ["ALL_PAIRS", "METHODS", "METHOD_LABELS", "PAPER_FIG2_SUCCESS", "PAPER_TABLE2", "PROBE_COLUMNS",
           "PROBE_PAIRS", "QUICK_EPOCHS", "QUICK_PAIRS", "SPECTRA", "SPECTRA_METHOD", "SUCCESS_THRESHOLD",
           "Plan", "build_parser", "check_store", "data_label", "kappa_at_rank",
           "main", "mnist_task", "rank_of", "pair_log_rir", "parse_ints",
           "parse_pairs", "plan_from_args", "pool_images", "record_route", "rir_from_spectra", "rtol_sensitivity",
           "run_label", "run_one", "run_rows", "run_spectra", "run_sweep", "select_records", "spectral_route",
           "stored_spectrum", "success_counts", "table", "table2_config", "write_report"]
