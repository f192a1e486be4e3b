"""Table 2's answer at a glance: per protocol and method, the paper's statistic over the 90 ordered pairs, the median
pair, how many pairs are immunized (RIR > 10) or made worse (RIR < 1), the paper's value, and what a run costs.

The paper's statistic ("computed over 3 random seeds and averaged over all digit pairs"): per seed, the mean RIR over
the pairs; then mean ± std of those seed means. A seed counts only when all its pairs are stored (``complete``);
the statistic of a partial sweep is over the complete seeds, and the row says how many pairs each seed has. Pair
counts and the median pair use the seed-averaged log10 RIR of each pair (:func:`.tally.pair_log_rir`, Figure 2's
reading); the pair counts are also given by each pair's mean RIR over its seeds (the two averages differ on pairs
whose seeds straddle the threshold).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kappalab.atomic_io import write_text
from kappalab.results import format_mean_std

from .constants import ALL_PAIRS, METHOD_LABELS, METHODS, PAPER_TABLE2, SUCCESS_THRESHOLD
from .tally import pair_log_rir


@dataclass(frozen=True)
class Headline:
    """One method under one protocol (fields in the paper's notation: RIR of Eq. 15)."""

    protocol: str
    method: str
    n_runs: int
    pairs_per_seed: dict[int, int]  #: seed -> pairs stored
    complete_seeds: tuple[int, ...]  #: seeds with every one of the 90 pairs
    seed_means: tuple[float, ...]  #: mean RIR over the pairs of each complete seed
    statistic: tuple[float, float] | None  #: mean ± std of seed_means (None: no complete seed)
    n_pairs: int  #: pairs with at least one run
    median_pair: float  #: 10 ** median over pairs of the seed-averaged log10 RIR
    pairs_above: int  #: pairs whose seeds' mean of log10 RIR is > log10 SUCCESS_THRESHOLD
    pairs_below_one: int  #: pairs whose seeds' mean of log10 RIR is < 0
    pairs_above_mean_rir: int  #: pairs whose mean RIR over their seeds is > SUCCESS_THRESHOLD
    pairs_below_one_mean_rir: int  #: pairs whose mean RIR over their seeds is < 1
    train_s: float  #: median training seconds per run
    total_s: float  #: median seconds per run, training and finish (spectra, evaluation, probes)
    paper: tuple[float, float]  #: the paper's Table 2 RIR, mean ± std

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def headlines(rows: list[dict[str, Any]], protocol: str) -> list[Headline]:
    """One :class:`Headline` per method with runs, from :func:`.report.run_rows` of one protocol's store."""
    out = []
    for method in METHODS:
        mine = [r for r in rows if r["method"] == method and r["protocol"] == protocol]
        if not mine:
            continue
        seeds = sorted({r["seed"] for r in mine})
        per_seed = {s: [r["rir"] for r in mine if r["seed"] == s] for s in seeds}
        pairs_per_seed = {s: len({(r["a"], r["b"]) for r in mine if r["seed"] == s}) for s in seeds}
        complete = tuple(s for s in seeds if pairs_per_seed[s] == len(ALL_PAIRS))
        seed_means = tuple(float(np.mean(per_seed[s])) for s in complete)
        statistic = (float(np.mean(seed_means)), float(np.std(seed_means, ddof=1)) if len(seed_means) > 1
                     else float("nan")) if seed_means else None
        logs = pair_log_rir(mine, method)
        logs = logs[np.isfinite(logs)]
        pair_rir = [[r["rir"] for r in mine if (r["a"], r["b"]) == pair] for pair in ALL_PAIRS]
        means = np.array([np.mean(v) for v in pair_rir if v and np.all(np.isfinite(v))])
        out.append(Headline(
            protocol=protocol, method=method, n_runs=len(mine), pairs_per_seed=pairs_per_seed,
            complete_seeds=complete, seed_means=seed_means, statistic=statistic, n_pairs=int(logs.size),
            median_pair=float(10 ** np.median(logs)), pairs_above=int(np.sum(logs > math.log10(SUCCESS_THRESHOLD))),
            pairs_below_one=int(np.sum(logs < 0)), pairs_above_mean_rir=int(np.sum(means > SUCCESS_THRESHOLD)),
            pairs_below_one_mean_rir=int(np.sum(means < 1)), train_s=float(np.median([r["train_s"] for r in mine])),
            total_s=float(np.median([r["total_s"] for r in mine])), paper=tuple(PAPER_TABLE2[method][2])))
    return out


def markdown(items: list[Headline]) -> str:
    """The opening table: one row per protocol and method."""
    lines = ["| protocol | method | paper RIR | RIR, 90-pair mean per seed, mean ± std over seeds | median pair | "
             f"pairs RIR > {SUCCESS_THRESHOLD:g}: by seeds' mean of log10 RIR (by mean RIR) | pairs RIR < 1: the same "
             "two averages | runs (pairs per seed) | s per run (train / all) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for h in items:
        stat = ("not yet: no seed has all 90 pairs" if h.statistic is None else
                f"{format_mean_std(*h.statistic)} ({'seed' if len(h.complete_seeds) == 1 else 'seeds'} "
                f"{', '.join(map(str, h.complete_seeds))})")
        seeds = ", ".join(f"s{s}: {n}" for s, n in h.pairs_per_seed.items())
        lines.append(f"| {h.protocol} | {METHOD_LABELS[h.method]} | {format_mean_std(*h.paper)} | {stat} | "
                     f"{h.median_pair:.4g} | {h.pairs_above}/{h.n_pairs} ({h.pairs_above_mean_rir}) | "
                     f"{h.pairs_below_one}/{h.n_pairs} ({h.pairs_below_one_mean_rir}) | "
                     f"{h.n_runs} ({seeds}) | {h.train_s:.1f} / {h.total_s:.1f} |")
    return "\n".join(lines) + "\n"


def rows_of(folders: list[Path]) -> dict[str, list[dict[str, Any]]]:
    """Per protocol, the report rows (:func:`.report.run_rows`: Eq. 15 from each run's stored spectra) of every run
    stored in the folders (each a sweep's, a shard's or a merge's ``--out``: ``runs_<protocol>.jsonl`` and
    ``spectra/``); a run stored in two folders counts once."""
    from kappalab.results import RunStore

    from .report import run_rows

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for folder in folders:
        stores = sorted(folder.glob("runs_*.jsonl"))
        if not stores:
            raise FileNotFoundError(f"{folder}: no runs_<protocol>.jsonl store")
        for store in stores:
            for row in run_rows(RunStore(store).records(), folder):
                out.setdefault(row["protocol"], {}).setdefault(row["key"], row)
    return {protocol: list(rows.values()) for protocol, rows in out.items()}


def write_headline(folders: list[Path], out: Path) -> list[Headline]:
    """``out/headline.md`` and ``out/headline.json`` from the stores in ``folders`` (both protocols)."""
    items = [h for protocol, rows in sorted(rows_of(folders).items()) for h in headlines(rows, protocol)]
    out.mkdir(parents=True, exist_ok=True)
    sources = [str(f) for f in folders]
    write_text(out / "headline.json", json.dumps({"sources": sources, "rows": [h.as_dict() for h in items]},
                                                  indent=1, default=str) + "\n")
    write_text(out / "headline.md", markdown(items))
    return items
