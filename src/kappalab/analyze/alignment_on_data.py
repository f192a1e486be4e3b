"""``kappalab analyze alignment``: Sec. 3.1's alignment measures on the paper's data against the RIR each method
achieved in the committed Table 1 and Table 2 stores (read, never re-run).

Data, exactly as the reproductions define it:

* House Prices (Table 1): :func:`kappalab.immunization.house_prices_task` for each protocol ("paper": the full
  splits; "official": the first 200 rows of each, standardisation of the whole split kept); checked equal to the
  store's ``features_P.npy`` / ``features_H.npy``. ``K = X^T X`` without the bias column (the reference Hessian
  ``H(I)`` of Eq. 15 in both protocols).
* MNIST (Table 2): :func:`kappalab.reproduce.table2.mnist_task` on the embedded subset (500 images per digit, so
  that ``digit_pair`` keeps every image and K does not depend on the seed; checked), normalised as there.
  Labelled "MNIST subset (500/digit)" everywhere: the paper used full MNIST.

Measures per (D_P, D_H) pair (:mod:`kappalab.alignment`): the weighted alignment ``tr(K_P K_H) / sum_i lambda_i mu_i``;
the mean squared cosine of the principal angles between the leading ``R_LEADING``-dimensional eigenspaces
("overlap"); the angle between the leading eigenvectors (a 1-dimensional subspace: sign-free); the dimension of
range(K_H) outside range(K_P) (as a fraction of rank(K_H)); the exact best RIR over invertible theta; and the RIR of
the whitening extractor ``theta_w`` (a function of K_P alone, kappa(H_P) = 1), evaluated with the store's own rule
(Table 1: the core pinv kappa of the D x D Hessians; Table 2: spectra by SVD, rank decided on K).

Per method, the achieved RIR of a pair is the geometric mean over the store's seeds; rank correlations (Spearman)
with a percentile bootstrap over pairs (:mod:`kappalab.analyze.stats`). The pairs share digits (each digit is D_P in
9 pairs and D_H in 9), so they are not independent and the intervals are, if anything, too narrow.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from kappalab.alignment import best_rir, eigensystem, eigenspace_angles, weighted_alignment, whitening_theta
from kappalab.atomic_io import atomic_open, save_figure, write_text
from kappalab.errors import DegenerateSpectrumError
from kappalab.methods import LABELS, PAPER_ORDER

from .stats import BOOTSTRAP_REPS, CONFIDENCE, spearman_bootstrap

TABLE1_STORES = {"paper": Path("docs/reproduction/table1/paper"), "official": Path("docs/reproduction/table1/official")}
TABLE2_STORE = Path("docs/reproduction/table2/features")
TABLE2_CSV = "table2_official.csv"
METHODS = PAPER_ORDER
R_LEADING = 10  #: dimension of the leading eigenspaces compared by the "overlap" measure
#: measure -> (label, sign of the correlation with the achieved RIR that Sec. 3.1's explanation predicts)
MEASURES = {
    "weighted_alignment": ("weighted alignment tr(K_P K_H)/sum lambda_i mu_i", -1),
    "overlap_leading": (f"overlap: mean cos^2 of the angles between the leading {R_LEADING}-dim eigenspaces", -1),
    "angle_leading_deg": ("angle between the leading eigenvectors (deg)", +1),
    "escape_fraction": ("dim(range K_H outside range K_P) / rank K_H", +1),
    "whitening_rir": ("RIR of the whitening extractor theta_w (function of K_P)", +1),
    # controls: spectra only, no eigenvectors (sign 0: Sec. 3.1 predicts nothing about them)
    "kappa_ratio": ("control: kappa(K_P) / kappa(K_H) (no eigenvectors)", 0),
    "rank_ratio": ("control: rank K_H / rank K_P (no eigenvectors)", 0),
}


def covariance(X: np.ndarray) -> np.ndarray:
    """``X^T X`` symmetrised (as :meth:`kappalab.immunization.step_types.Batch.covariance` forms it)."""
    K = X.T @ X
    return 0.5 * (K + K.T)


def pair_measures(es_P, es_H) -> dict[str, float]:
    """The measures of the module docstring except ``whitening_rir`` (which needs the store's kappa rule)."""
    out: dict[str, float] = {"weighted_alignment": float(weighted_alignment(es_P, es_H))}
    try:
        cos2 = np.cos(eigenspace_angles(es_P, es_H, R_LEADING)) ** 2
        out["overlap_leading"] = float(cos2.mean())
    except DegenerateSpectrumError:
        out["overlap_leading"] = math.nan  # the leading R_LEADING-space of one of them is not determined
    try:
        out["angle_leading_deg"] = float(np.degrees(eigenspace_angles(es_P, es_H, 1)[0]))
    except DegenerateSpectrumError:
        out["angle_leading_deg"] = math.nan
    b = best_rir(es_P, es_H)
    out.update(best_rir=b.value, escape_dim=b.escape_dim, escape_fraction=b.escape_dim / b.rank_H,
               rank_P=b.rank_P, rank_H=b.rank_H, max_escape_sine=b.max_escape_sine,
               kappa_ratio=b.kappa_K_P / b.kappa_K_H, rank_ratio=b.rank_H / b.rank_P)
    return out


# ---- Table 1: House Prices ------------------------------------------------------------------------------------

def house_prices_rows(root: Path) -> list[dict[str, Any]]:
    """One row per Table 1 protocol: the measures and each method's achieved pinv RIR (store)."""
    from kappalab.immunization import house_prices_task

    rows = []
    for protocol, rel in TABLE1_STORES.items():
        store = root / rel
        records = [json.loads(line) for line in (store / "runs.jsonl").read_text().splitlines() if line.strip()]
        task = house_prices_task(protocol, n_official=200)
        for which, X in (("P", task.X_P), ("H", task.X_H)):
            if not np.array_equal(np.load(store / f"features_{which}.npy"), X):
                raise ValueError(f"{store}/features_{which}.npy differs from house_prices_task({protocol!r}).X_{which}")
        K_P, K_H = covariance(task.X_P), covariance(task.X_H)
        es_P, es_H = eigensystem(K_P, name="K_P"), eigensystem(K_H, name="K_H")
        row: dict[str, Any] = {"data": f"House Prices ({protocol} protocol)", "pair": protocol,
                               **pair_measures(es_P, es_H)}
        row["whitening_rir"] = whitening_rir(task.X_P, task.X_H, whitening_theta(es_P))
        for method in METHODS:
            values = [r["evaluation"]["pinv"]["rir"] for r in records if r["method"] == method]
            row[f"rir_{method}"] = geometric_mean(values)
            row[f"rir_{method}_min"], row[f"rir_{method}_max"] = min(values), max(values)
            row[f"n_{method}"] = len(values)
            row[f"epochs_{method}"] = sorted({r["epochs"] for r in records if r["method"] == method})
        rows.append(row)
    return rows


def whitening_rir(X_P: np.ndarray, X_H: np.ndarray, theta: np.ndarray, spectra: dict | None = None) -> float:
    """Eq. 15 RIR of ``theta`` by Table 2's rule (:func:`kappalab.reproduce.table2.rir_from_spectra`: squared
    singular values of ``X theta`` and ``X`` by SVD, rank decided on K). Used for both data sets: forming
    ``theta_w^T K theta_w`` (a projector for K_P) in floating point leaves eigenvalues of -1e-13 that the D x D
    route's PSD check rightly rejects; for House Prices the ranks of K are separated from rounding by ~1e13, so the
    two rules agree wherever the D x D one is defined. ``spectra`` may hold precomputed entries."""
    from kappalab.reproduce.table2 import rir_from_spectra, stored_spectrum

    spectra = dict(spectra or {})
    for name, F in (("K_P", lambda: X_P), ("K_H", lambda: X_H), ("H_P", lambda: X_P @ theta),
                    ("H_H", lambda: X_H @ theta)):
        if name not in spectra:
            spectra[name] = stored_spectrum(F())
    return rir_from_spectra(spectra)["rir"]


def geometric_mean(values: list[float]) -> float:
    v = np.asarray(values, dtype=float)
    if v.size == 0 or not (v > 0).all():
        raise ValueError(f"geometric mean needs positive values, got {values}")
    return float(np.exp(np.log(v).mean()))


# ---- Table 2: MNIST pairs ---------------------------------------------------------------------------------------

def table2_rirs(root: Path) -> tuple[dict[tuple[int, int], dict[str, list[float]]], str]:
    """``{(a, b): {method: [rir per seed]}}`` from the store's CSV (headline rule) and its data label."""
    path = root / TABLE2_STORE / TABLE2_CSV
    lines = path.read_text().splitlines()
    label = lines[0].lstrip("# ").split(";")[0]
    out: dict[tuple[int, int], dict[str, list[float]]] = {}
    for rec in csv.DictReader(lines[1:]):
        out.setdefault((int(rec["a"]), int(rec["b"])), {}).setdefault(rec["method"], []).append(float(rec["rir"]))
    return out, label


def mnist_rows(root: Path) -> tuple[list[dict[str, Any]], str]:
    """One row per ordered digit pair of the Table 2 store."""
    from kappalab.reproduce.table2 import mnist_task, stored_spectrum
    from kappalab.reproduce.table2.data import load_dataset

    rirs, label = table2_rirs(root)
    data = load_dataset("mnist-subset", None)
    counts = np.bincount(data.labels, minlength=10)
    if len(set(counts.tolist())) != 1:
        raise ValueError(f"digit counts differ ({counts.tolist()}): K would depend on the seed's subsample")
    if data.source_label != label:
        raise ValueError(f"the store was made on {label!r}, the loader gives {data.source_label!r}")
    digit: dict[int, dict[str, Any]] = {}

    def of(d: int, X: np.ndarray) -> dict[str, Any]:
        if d not in digit:
            es = eigensystem(covariance(X), name=f"K(digit {d})")
            theta = whitening_theta(es)
            digit[d] = {"es": es, "theta_w": theta, "K_spec": stored_spectrum(X), "X": X,
                        "H_spec_own": stored_spectrum(X @ theta)}
        elif not np.array_equal(digit[d]["X"], X):
            raise ValueError(f"digit {d}: the images differ between pairs")
        return digit[d]

    rows = []
    for (a, b) in sorted(rirs):
        task = mnist_task(a, b, 0)
        P, H = of(a, task.X_P), of(b, task.X_H)
        row: dict[str, Any] = {"data": label, "pair": f"{a}-{b}", **pair_measures(P["es"], H["es"])}
        row["whitening_rir"] = whitening_rir(P["X"], H["X"], P["theta_w"], {
            "K_P": P["K_spec"], "K_H": H["K_spec"], "H_P": P["H_spec_own"]})
        for method in METHODS:
            values = rirs[(a, b)].get(method, [])
            row[f"rir_{method}"] = geometric_mean(values)
            row[f"n_{method}"] = len(values)
        rows.append(row)
    return rows, label


def correlations(rows: list[dict[str, Any]], seed: int) -> dict[str, dict[str, dict[str, Any]]]:
    """``{method: {measure: {rho, low, high, n, predicted_sign, verdict}}}`` over the rows with finite values."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for method in METHODS:
        out[method] = {}
        for measure, (_, sign) in MEASURES.items():
            x = np.array([r[measure] for r in rows], dtype=float)
            y = np.log10([r[f"rir_{method}"] for r in rows])
            keep = np.isfinite(x) & np.isfinite(y)
            if keep.sum() < 3 or np.ptp(x[keep]) == 0:
                out[method][measure] = {"rho": math.nan, "low": math.nan, "high": math.nan, "n": int(keep.sum()),
                                        "predicted_sign": sign, "verdict": "cannot tell (measure constant)"}
                continue
            rc = spearman_bootstrap(x[keep], y[keep], seed=seed)
            verdict = rc.verdict(sign) if sign else "control (no prediction)"
            out[method][measure] = {"rho": rc.rho, "low": rc.low, "high": rc.high, "n": rc.n,
                                    "predicted_sign": sign, "verdict": verdict,
                                    **within_digit(rows, x, y, keep)}
    return out


def within_digit(rows: list[dict[str, Any]], x: np.ndarray, y: np.ndarray, keep: np.ndarray) -> dict[str, float]:
    """Mean Spearman rho over the groups of pairs that share D_P (resp. D_H): the correlation left once the
    identity of one digit is held fixed (9 pairs per group)."""
    out = {}
    for side, position in (("within_P", 0), ("within_H", 1)):
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(rows):
            if keep[i]:
                groups.setdefault(r["pair"].split("-")[position], []).append(i)
        rhos = [spearmanr(x[g], y[g]).statistic for g in groups.values() if len(g) >= 3 and np.ptp(x[g]) > 0]
        out[f"rho_{side}"] = float(np.mean(rhos)) if rhos else math.nan
    return out


# ---- outputs ----------------------------------------------------------------------------------------------------

def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with atomic_open(path, "w", newline="") as handle:
        w = csv.DictWriter(handle, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (json.dumps(v) if isinstance(v, list) else v) for k, v in r.items()})


def figures(out: Path, hp: list[dict[str, Any]], mn: list[dict[str, Any]], label: str) -> list[str]:
    """One PNG per method: achieved RIR against the weighted alignment, the leading overlap and theta_w's RIR."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = ("weighted_alignment", "overlap_leading", "whitening_rir")
    names = []
    for method in METHODS:
        fig, axes = plt.subplots(1, len(panels), figsize=(13, 4.5), layout="constrained")
        for ax, measure in zip(axes, panels):
            ax.scatter([r[measure] for r in mn], [r[f"rir_{method}"] for r in mn], s=14, alpha=0.7,
                       label=f"Table 2 pairs ({label}), geo-mean of seeds")
            for r, marker in zip(hp, ("s", "D")):
                mid, lo, hi = r[f"rir_{method}"], r[f"rir_{method}_min"], r[f"rir_{method}_max"]
                ax.errorbar([r[measure]], [mid], yerr=[[mid - lo], [hi - mid]],
                            fmt=marker, color="C3" if marker == "s" else "C2", label=f"{r['data']} (min-max of seeds)")
            ax.set_yscale("log")
            if measure == "whitening_rir":
                ax.set_xscale("log")
            ax.set_xlabel(MEASURES[measure][0], fontsize=8)
            ax.set_ylabel(f"achieved RIR, {LABELS[method]}")
            ax.axhline(1.0, color="grey", lw=0.5)
        fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=3, fontsize=8)
        fig.suptitle(f"{LABELS[method]}: achieved RIR vs alignment (best RIR over all theta is infinite for every "
                     "pair)", fontsize=10)
        name = f"alignment_{method}.png"
        save_figure(fig, out / name, dpi=110)
        plt.close(fig)
        names.append(name)
    return names


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else ("nan" if math.isnan(v) else f"{v:.4g}")
    return str(v)


def markdown(hp: list[dict[str, Any]], mn: list[dict[str, Any]], corr: dict, label: str, meta: dict) -> str:
    lines = [f"# Alignment against achieved RIR (generated by `{meta['command']}`)", "",
             f"Data: House Prices (Table 1 stores, both protocols) and {len(mn)} ordered digit pairs of the Table 2 "
             f"store ({label}; not full MNIST). Achieved RIR: geometric mean over the store's seeds.", "",
             "## House Prices", "",
             "| protocol | weighted alignment | overlap | leading angle (deg) | rank P / H | escape dim | best RIR | "
             "theta_w RIR | " + " | ".join(f"{LABELS[m]} RIR (min-max)" for m in METHODS) + " |",
             "|" + "---|" * (8 + len(METHODS))]
    for r in hp:
        lines.append(f"| {r['pair']} | {_fmt(r['weighted_alignment'])} | {_fmt(r['overlap_leading'])} | "
                     f"{_fmt(r['angle_leading_deg'])} | {r['rank_P']} / {r['rank_H']} | {r['escape_dim']} | "
                     f"{_fmt(r['best_rir'])} | {_fmt(r['whitening_rir'])} | " + " | ".join(
                         f"{_fmt(r[f'rir_{m}'])} ({_fmt(r[f'rir_{m}_min'])}-{_fmt(r[f'rir_{m}_max'])})"
                         for m in METHODS)
                     + " |")
    finite = sum(math.isfinite(r["best_rir"]) for r in mn)
    lines += ["", f"## MNIST pairs ({label})", "",
              f"Best RIR over all invertible theta: finite for {finite} of {len(mn)} pairs. Measures over the pairs "
              "(min / median / max):", "", "| measure | min | median | max |", "|---|---|---|---|"]
    for measure, (text, _) in MEASURES.items():
        v = np.array([r[measure] for r in mn], dtype=float)
        v = v[np.isfinite(v)]
        lines.append(f"| {text} | {_fmt(float(v.min()))} | {_fmt(float(np.median(v)))} | {_fmt(float(v.max()))} |")
    lines += ["", f"## Spearman rank correlation with log achieved RIR over the {len(mn)} pairs "
              f"({int(CONFIDENCE * 100)}% percentile bootstrap over pairs, {BOOTSTRAP_REPS} resamples, seed "
              f"{meta['seed']})", "",
              "Predicted sign: the sign Sec. 3.1's explanation implies (more alignment, less immunization). Verdict: "
              "'supports' / 'contradicts' when the interval excludes 0 on the predicted / opposite side, 'cannot tell' "
              "otherwise. 'within D_P' / 'within D_H': mean rho over the 10 groups of 9 pairs sharing D_P / D_H "
              "(one digit's identity held fixed).", "",
              "| method | measure | predicted | rho | interval | verdict | within D_P | within D_H |",
              "|---|---|---|---|---|---|---|---|"]
    for method in METHODS:
        for measure, c in corr[method].items():
            sign = {1: "+", -1: "-", 0: "none"}[c["predicted_sign"]]
            lines.append(f"| {LABELS[method]} | {measure} | {sign} | {_fmt(c['rho'])} "
                         f"| [{_fmt(c['low'])}, {_fmt(c['high'])}] | {c['verdict']} | {_fmt(c.get('rho_within_P'))} "
                         f"| {_fmt(c.get('rho_within_H'))} |")
    return "\n".join(lines) + "\n"


def run(out: Path, root: Path, seed: int, command: str) -> dict[str, Any]:
    """Compute everything and write ``alignment.md``, ``alignment_pairs.csv``, ``alignment.json`` and the figures."""
    from kappalab.provenance import provenance
    from kappalab.results import to_jsonable

    out.mkdir(parents=True, exist_ok=True)
    hp = house_prices_rows(root)
    mn, label = mnist_rows(root)
    corr = correlations(mn, seed)
    meta = {"command": command, "seed": seed, "r_leading": R_LEADING, "bootstrap_reps": BOOTSTRAP_REPS,
            "stores": {**{f"table1_{k}": str(v) for k, v in TABLE1_STORES.items()}, "table2": str(TABLE2_STORE)}}
    names = figures(out, hp, mn, label)
    write_csv(out / "alignment_pairs.csv", hp + mn)
    write_text(out / "alignment.md", markdown(hp, mn, corr, label, meta))
    record = {"meta": meta, "house_prices": hp, "mnist": mn, "correlations": corr, "figures": names,
              "provenance": provenance(seed, meta, data_label=f"House Prices; {label}")}
    write_text(out / "alignment.json", json.dumps(to_jsonable(record), indent=1))
    return record
