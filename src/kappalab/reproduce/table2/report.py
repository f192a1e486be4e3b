"""Table 2's report, rebuilt from the store alone: the table, the success counts, the probe table, the markdown,
and the run-by-run comparison of two stores."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from kappalab.results import MEAN_STD_CONVENTION, RunStore, format_mean_std, mean_std, write_report as write_files

from .constants import (METHOD_LABELS, METHODS, OTHER_THRESHOLDS, PAPER_FIG2_SUCCESS, PAPER_TABLE2,
                        PROBE_BUDGET, PROBE_CHECKPOINTS, PROBE_MAX_ITER, PROBE_TARGETS, SUCCESS_THRESHOLD)
from .figure import figure2
from .spectra import rir_from_spectra, rtol_sensitivity
from .tally import success_counts

if TYPE_CHECKING:
    from .plan import Plan

_HASH = re.compile(r"\.[0-9a-f]{12}$")


_pm = format_mean_std  #: "mean ± std" of a (mean, std) pair, the one convention (kappalab.results)


def label_of(key: str) -> str:
    """A run key without its identity hash (a record without a run identity has no hash)."""
    return _HASH.sub("", key)


def run_rows(records: Iterable[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """One flat row per stored run (the CSV's rows); Eq. 15 recomputed from the run's stored spectra."""
    rows = []
    for r in records:
        p, res = r["params"], r["result"]
        ev = res["evaluate"]
        spectra = dict(np.load(out / res["spectra_file"]))
        gram, sens = rir_from_spectra(spectra), rtol_sensitivity(spectra)
        rows.append({
            "key": r["key"], "protocol": p["protocol"], "method": p["method"], "a": p["a"], "b": p["b"],
            "seed": p["seed"], "epochs": p["epochs"], "pool": p.get("pool", 1),
            "term_i": gram["term_i"], "term_ii": gram["term_ii"], "rir": gram["rir"],
            "rank_P": gram["rank_P"], "rank_H": gram["rank_H"],
            "rir_rtol_x0.1": sens["rir_rtol_x0.1"], "rir_rtol_x10": sens["rir_rtol_x10"],
            "rir_own_rank": sens["rir_own_rank_rtol_x1"], "rir_own_rank_rtol_x0.1": sens["rir_own_rank_rtol_x0.1"],
            "rir_own_rank_rtol_x10": sens["rir_own_rank_rtol_x10"],
            "rir_pinv_DxD": ev["pinv"]["rir"], "rir_shifted": ev["shifted"]["rir"],
            "rir_pinv_DxD_rtol_x0.1": ev["sensitivity"]["pinv"]["rtol_x0.1"]["rir"],
            "rir_pinv_DxD_rtol_x10": ev["sensitivity"]["pinv"]["rtol_x10"]["rir"],
            "train_s": res["train_s"], "total_s": res["total_s"], "n_steps": res["n_steps"],
            "degenerate_count": res["degenerate_count"],
        })
    return rows


def table(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per method: mean and std over all finished runs (pairs x seeds) of each column, and the run count."""
    out = {}
    for method in METHODS:
        mine = [r for r in rows if r["method"] == method]
        if not mine:
            continue
        cols = ("term_i", "term_ii", "rir", "rir_rtol_x0.1", "rir_rtol_x10", "rir_own_rank", "rir_own_rank_rtol_x0.1",
                "rir_own_rank_rtol_x10", "rir_pinv_DxD", "rir_shifted",
                "rir_pinv_DxD_rtol_x0.1", "rir_pinv_DxD_rtol_x10", "total_s")
        out[method] = {"n_runs": len(mine), "n_pairs": len({(r["a"], r["b"]) for r in mine}),
                       "n_seeds": len({r["seed"] for r in mine}),
                       **{c: mean_std([r[c] for r in mine]) for c in cols},
                       "median_rir": float(np.median([r["rir"] for r in mine])),
                       **{f"{c}_seed_means": mean_std([float(np.mean([r[c] for r in mine if r["seed"] == seed]))
                                                        for seed in sorted({r["seed"] for r in mine})])
                          for c in ("term_i", "term_ii", "rir")}}
    return out


PROBE_COLUMNS = tuple(f"iters_{t}<={g:g}" for t in ("P", "H") for g in PROBE_TARGETS) + tuple(
    f"excess_{t}@{c}" for t in ("P", "H") for c in PROBE_CHECKPOINTS) + ("excess_P", "excess_H")
#: the columns of the markdown table (the JSON summary has all of PROBE_COLUMNS)
PROBE_SHOWN = (f"iters_P<={PROBE_TARGETS[0]:g}", f"iters_H<={PROBE_TARGETS[0]:g}", f"excess_P@{PROBE_CHECKPOINTS[1]}",
               f"excess_H@{PROBE_CHECKPOINTS[1]}", f"excess_P@{PROBE_CHECKPOINTS[-1]}",
               f"excess_H@{PROBE_CHECKPOINTS[-1]}", "excess_P", "excess_H")


def probe_table(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per method and model (immunized / identity): each independent measure over the probed runs; iterations as
    mean over the runs that reached the target and the count, losses as geometric means."""
    out: dict[str, dict[str, Any]] = {}
    for method in METHODS:
        probes = [r["result"]["probe"] for r in records if r["params"]["method"] == method and "probe" in r["result"]
                  and PROBE_COLUMNS[0] in r["result"]["probe"]["immunized"]]
        if not probes:
            continue
        entry: dict[str, Any] = {"n_runs": len(probes)}
        for which in ("immunized", "identity"):
            for m in PROBE_COLUMNS:
                vals = [p[which][m] for p in probes]
                if m.startswith("iters"):
                    reached = [v for v in vals if v is not None]
                    entry[f"{which}.{m}"] = (f"{np.mean(reached):.0f} ({len(reached)}/{len(vals)})" if reached
                                             else f"> {PROBE_MAX_ITER} (0/{len(vals)})")
                else:
                    entry[f"{which}.{m}"] = f"{np.exp(np.mean(np.log(np.maximum(vals, 1e-300)))):.3g}"
        out[method] = entry
    return out



def write_report(plan: Plan, records: list[dict[str, Any]], n_expected: int, header: dict[str, Any]
                 ) -> dict[str, Any]:
    """Rebuild Table 2 (markdown, CSV, JSON) and Figure 2 from the given stored records alone (spectra read from
    ``plan.out``); returns the JSON summary."""
    rows = run_rows(records, plan.out)
    summary = {"header": header, "n_runs": len(rows), "n_expected": n_expected, "table": table(rows),
               "success_counts": success_counts(rows), "probe": probe_table(records),
               "paper_reference": {"table2": PAPER_TABLE2, "figure2_success_of_90": PAPER_FIG2_SUCCESS},
               "success_threshold": SUCCESS_THRESHOLD, "other_thresholds": OTHER_THRESHOLDS,
               "rtol": "N eps (N = Gram size), rank decided on K", "mean_std": MEAN_STD_CONVENTION,
               "spectral_routes": sorted({record_route(r) for r in records})}
    stem = f"table2_{plan.protocol}"
    write_files(plan.out, stem, summary, markdown(summary, plan), rows,
                f"{header['data_label']}; protocol {plan.protocol}; {len(rows)} of {n_expected} runs")
    if rows:
        figure2(rows, plan.out, plan.protocol, f"Figure 2 ({header['data_label']}; protocol {plan.protocol}; "
                                               f"{len(rows)}/{n_expected} runs; log10 RIR, seed mean)")
    return summary


def record_route(record: dict[str, Any]) -> str:
    """The spectral route a stored run used (a record without the field ran the "dense" route)."""
    return (record.get("result") or {}).get("spectral_route", "dense")


def markdown(summary: dict[str, Any], plan: Plan) -> str:
    """The markdown tables of one protocol's report."""
    h = summary["header"]
    lines = [f"### Table 2, protocol `{plan.protocol}` - {h['data_label']}", "",
             f"{summary['n_runs']} of {summary['n_expected']} runs finished; epochs {plan.epochs}; "
             f"spectral route {' + '.join(summary.get('spectral_routes') or ['-'])}; "
             "kappa from the stored spectra (squared singular values of the features, by SVD), rank k decided on K "
             "at rtol = N eps and used for H(theta_I); "
             f"mean ± std over all finished runs (pairs x seeds; {MEAN_STD_CONVENTION}). "
             "Paper: full MNIST, reference only.", "",
             "| Method | runs | (i) up | (ii) down | RIR up | median RIR | paper (i) | paper (ii) | paper RIR |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m, t in summary["table"].items():
        ref = PAPER_TABLE2[m]
        lines.append(f"| {METHOD_LABELS[m]} | {t['n_runs']} | {_pm(*t['term_i'])} | {_pm(*t['term_ii'])} | "
                     f"{_pm(*t['rir'])} | {t['median_rir']:.4g} | " + " | ".join(_pm(*x) for x in ref) + " |")
    lines += ["", "The paper's ± convention (\"computed over 3 random seeds and averaged over all digit pairs\"): "
              "per seed, the mean over its pairs; then mean ± std of those seed means (a std over seeds only):", "",
              "| Method | seeds | (i) | (ii) | RIR | paper RIR |", "|---|---|---|---|---|---|"]
    for m, t in summary["table"].items():
        lines.append(f"| {METHOD_LABELS[m]} | {t['n_seeds']} | {_pm(*t['term_i_seed_means'])} | "
                     f"{_pm(*t['term_ii_seed_means'])} | {_pm(*t['rir_seed_means'])} | "
                     f"{_pm(*PAPER_TABLE2[m][2])} |")
    lines += ["", "RIR under other kappa definitions and rank tolerances (mean ± std): headline rule at rtol x0.1 "
              "and x10; each matrix its own rank (same spectra) at x0.1, x1, x10; the D x D pinv kappa of the shared "
              "evaluate (rtol D eps) at x0.1, x1, x10; the official code's shifted kappa (1e-6):", "",
              "| Method | x0.1 | x10 | own rank x0.1 | own rank | own rank x10 | DxD x0.1 | DxD | DxD x10 | "
              "shifted | time/run (s) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m, t in summary["table"].items():
        lines.append(f"| {METHOD_LABELS[m]} | " + " | ".join(_pm(*t[c]) for c in (
            "rir_rtol_x0.1", "rir_rtol_x10", "rir_own_rank_rtol_x0.1", "rir_own_rank", "rir_own_rank_rtol_x10",
            "rir_pinv_DxD_rtol_x0.1", "rir_pinv_DxD", "rir_pinv_DxD_rtol_x10", "rir_shifted", "total_s")) + " |")
    lines += ["", f"Figure 2 success counts (pairs whose seed-averaged log10 RIR exceeds log10 of the threshold; "
              f"documented threshold RIR > {SUCCESS_THRESHOLD:g}):", "",
              "| Method | pairs | RIR > 2 | RIR > 10 | RIR > 100 | paper (of 90) |", "|---|---|---|---|---|---|"]
    for m, c in summary["success_counts"].items():
        lines.append(f"| {METHOD_LABELS[m]} | {c['pairs']} | {c['RIR>2']} | {c['RIR>10']} | {c['RIR>100']} | "
                     f"{PAPER_FIG2_SUCCESS[m]} |")
    if summary["probe"]:
        lines += ["", "Independent measures (not RIR): linear probing by gradient descent with exact line search "
                  f"from w = 0. iters X<=g: iterations until the relative excess loss (f(w_t) - f*) / (f(0) - f*) "
                  f"<= g on 1/2||Phi w - y||^2 with Phi the D_X features and y standard normal (Hessian exactly "
                  f"H_X; mean over runs that reached it, count in brackets, max {PROBE_MAX_ITER}); excess X@t: that "
                  f"loss at iteration t (geometric mean); excess_P / excess_H: relative excess loss of a one-vs-rest "
                  f"probe (digit a resp. b vs the other digits) after {PROBE_BUDGET} iterations. Slower on H and "
                  "not slower on P = immunized.", "",
                  "| Method | model | runs | " + " | ".join(PROBE_SHOWN) + " |",
                  "|---|---|---|" + "---|" * len(PROBE_SHOWN)]
        for m, e in summary["probe"].items():
            for which in ("immunized", "identity"):
                lines.append(f"| {METHOD_LABELS[m]} | {which} | {e['n_runs']} | "
                             + " | ".join(str(e[f"{which}.{c}"]) for c in PROBE_SHOWN) + " |")
    return "\n".join(lines) + "\n"




def reproducibility(plan: Plan, other: Plan) -> dict[str, Any]:
    """Run-by-run comparison of two stores of the same sweep (keys in both; e.g. two mathematically equal spectral
    routes, whose runs differ only by rounding): per method the median and maximum relative difference
    ``|a - b| / |b|`` of (i), (ii) and RIR, each recomputed from the stored spectra; written next to the report as
    ``reproducibility_<protocol>.{md,json}``."""
    rows = {name: {label_of(r["key"]): r for r in run_rows(RunStore(p.store_path).records(), p.out)}
            for name, p in (("this", plan), ("other", other))}
    common = sorted(set(rows["this"]) & set(rows["other"]))
    per_method: dict[str, dict[str, Any]] = {}
    for method in METHODS:
        keys = [k for k in common if rows["this"][k]["method"] == method]
        if not keys:
            continue
        entry: dict[str, Any] = {"n": len(keys)}
        for col in ("term_i", "term_ii", "rir"):
            rel = np.array([abs(rows["this"][k][col] - rows["other"][k][col]) / abs(rows["other"][k][col])
                            for k in keys])
            entry[col] = {"median": float(np.median(rel)), "max": float(rel.max()),
                          "n_above_1e-2": int(np.sum(rel > 1e-2))}
        per_method[method] = entry
    summary = {"this": str(plan.store_path), "other": str(other.store_path), "n_common": len(common),
               "per_method": per_method}
    lines = [f"### Run-by-run reproducibility: `{plan.store_path}` vs `{other.store_path}`", "",
             f"{len(common)} runs in both stores (same protocol, method, pair, seed, epochs); relative difference "
             "|a - b| / |b| of each quantity, recomputed from each store's spectra: median, max, and the count of runs "
             "differing by more than 1%.", "",
             "| Method | runs | (i) median | (i) max | (ii) median | (ii) max | RIR median | RIR max | RIR > 1% |",
             "|---|---|---|---|---|---|---|---|---|"]
    for method, e in per_method.items():
        lines.append(f"| {METHOD_LABELS[method]} | {e['n']} | " + " | ".join(
            f"{e[c][q]:.2g}" for c in ("term_i", "term_ii", "rir") for q in ("median", "max"))
            + f" | {e['rir']['n_above_1e-2']} |")
    write_files(plan.out, f"reproducibility_{plan.protocol}", summary, "\n".join(lines) + "\n")
    return summary
