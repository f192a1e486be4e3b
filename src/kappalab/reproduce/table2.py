"""Table 2 and Figure 2: immunize a 784 x 784 linear extractor on every ordered MNIST digit pair.

``kappalab reproduce table2 [--protocol paper|official] [--pairs a-b,...] [--seeds 0,1,2] [--methods ...]
[--workers N] [--device cpu|cuda] [--out DIR] [--epochs E] [--quick] [--report-only]``

One run = (protocol, method, pair (a, b), seed): D_P = images of digit ``a``, D_H = images of digit ``b``
(:func:`kappalab.data.mnist.digit_pair`, capped at the smaller count by seeded sampling). Labels: D_P all 0 (the
authors' code: a degenerate pre-training task, only the covariances matter for RIR), D_H all 1 (Appendix C.2's
``BinaryDataset`` maps one digit to 0 and the other to 1; only IMMA reads D_H's labels). Hyper-parameters come
from ``experiments/configs/table2_<protocol>_<method>.json`` (Table 4's MNIST row is ``table2_mnist_linear.json``).

The sweep is resumable (:mod:`kappalab.sweep`): one JSONL record per finished run in ``OUT/runs_<protocol>.jsonl``
and, per run, ``OUT/spectra/<key>.npz`` with the spectra below, enough to recompute (i), (ii) and RIR without
the model. The report (markdown, CSV, JSON, Figure 2 PNG+PDF) is rebuilt from the records alone.

Rank tolerance. ``N = 500 < D = 784`` and many pixels are constant over a digit's images (rank(K) is 306 for
the 1s, 449 for the 0s), so ``K = X^T X`` and ``H(theta) = theta^T K theta`` are singular and kappa needs the
smallest NONZERO eigenvalue. Besides the shared :func:`kappalab.immunization.evaluate` (D x D eigenvalues, "pinv"
and "shifted" kappa, with its sensitivity block), each run stores the squared singular values of ``X theta (+ 1
b^T)`` and ``X`` (:func:`feature_spectrum`, by SVD: accurate far below the ~1e-15 lambda_max floor of any
eigenvalue solver): the nonzero spectra of H and K without the D - N structural zeros. The headline kappa (:func:`rir_from_spectra`) decides the rank k once per split, on K, at
``rtol = N eps`` (NumPy's convention), and uses the same k for ``H(theta_I)`` (rank(H) = rank(K) for an
invertible theta). The report recomputes everything from the stored spectra, and also gives RIR at ``10 x`` and
``0.1 x`` that tolerance and with each matrix's own numerical rank.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from kappalab.results import RunStore, to_jsonable
from kappalab.sweep import Job, limit_threads, run_sweep

METHODS = ("rill_only", "imma", "opt_kappa", "ours")
METHOD_LABELS = {"rill_only": "R_ill Only", "imma": "IMMA", "opt_kappa": "Opt kappa", "ours": "Ours"}
#: The 90 ordered pairs, offset-major: (0,1), (1,2), ..., (9,0), then (0,2), ... Each block of 10 uses every digit
#: once as D_P and once as D_H, so a partial sweep is a balanced sample.
ALL_PAIRS = tuple((a, (a + d) % 10) for d in range(1, 10) for a in range(10))

#: Paper's Table 2 (a labelled reference column; never used in any computation): (i), (ii), RIR as (mean, std).
PAPER_TABLE2 = {
    "rill_only": ((14.832, 1.039), (8.654, 0.606), (1.933, 0.046)),
    "imma": ((4.522, 0.139), (2.774, 0.094), (1.774, 0.041)),
    "opt_kappa": ((3.196, 1.225), (0.756, 1.171), (69.73, 54.00)),
    "ours": ((6.345, 0.188), (0.149, 0.009), (70.04, 3.280)),
}
#: Paper's Figure 2 text: successful pairs of 90 (threshold not stated; "blue if RIR >> 1").
PAPER_FIG2_SUCCESS = {"rill_only": 0, "imma": 1, "opt_kappa": 58, "ours": 90}

SUCCESS_THRESHOLD = 10.0  #: RIR above which a pair counts as immunized (one order of magnitude, "RIR >> 1")
OTHER_THRESHOLDS = (2.0, 100.0)  #: the success counts are also reported at these
QUICK_PAIRS = ((0, 1), (7, 3))  #: --quick: two pairs (a 0/1 and a harder 7/3), seed 0, QUICK_EPOCHS epochs
QUICK_EPOCHS = 1
PROBE_PAIRS = ALL_PAIRS[:10]  #: the independent measures run on these pairs (first seed): every digit once
PROBE_TARGETS = (0.5, 0.1)  #: iterations until the relative excess loss (f(w_t) - f*) / (f(0) - f*) <= each ...
PROBE_CHECKPOINTS = (10, 100, 500)  #: ... and the relative excess loss at these iterations
PROBE_MAX_ITER = 500  #: ... within this many iterations (None = not reached); the norm ratio is reported here
PROBE_BUDGET = 50  #: one-vs-rest probe: relative excess loss after this many exact-line-search GD iterations


# ---- data and configs ----------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=2)
def _mnist(directory: str | None):
    from kappalab.data.mnist import load_mnist

    return load_mnist(directory)


def pool_images(X: np.ndarray, pool: int) -> np.ndarray:
    """Average-pool flattened 28 x 28 images by ``pool`` (1: unchanged; 2: 14 x 14, D = 196; 4: 7 x 7, D = 49).

    Pooling is linear, so pooling the normalized images equals normalizing the pooled ones."""
    if pool not in (1, 2, 4):
        raise ValueError(f"pool must be 1, 2 or 4 (a divisor of 28 that keeps D > N is not needed), got {pool!r}")
    if pool == 1:
        return X
    side = 28 // pool
    return X.reshape(len(X), side, pool, side, pool).mean(axis=(2, 4)).reshape(len(X), side * side)


def data_label(source_label: str, pool: int) -> str:
    """The data label of every header: the loader's label, plus the pooling when there is one."""
    return source_label if pool == 1 else f"{source_label}, {pool}x{pool} average-pooled to " \
                                          f"{28 // pool}x{28 // pool} (D = {(28 // pool) ** 2})"


def mnist_task(a: int, b: int, seed: int, directory: str | None = None, pool: int = 1):
    """The :class:`~kappalab.immunization.LinearTask` of the ordered pair (D_P = digit a, D_H = digit b)."""
    from kappalab.data.mnist import digit_pair
    from kappalab.immunization import LinearTask

    data = _mnist(directory)
    X_P, X_H = (pool_images(X, pool) for X in digit_pair(data, a, b, seed))
    return LinearTask(X_P=X_P, y_P=np.zeros(len(X_P)), X_H=X_H, y_H=np.ones(len(X_H)), loss="bce",
                      name=f"mnist/{a}-{b}", data_label=data_label(data.source_label, pool))


def table2_config(protocol: str, method: str):
    """``experiments/configs/table2_<protocol>_<method>.json`` as a MethodConfig."""
    from kappalab.immunization import load_config

    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if protocol not in ("paper", "official"):
        raise ValueError(f"protocol must be 'paper' or 'official', got {protocol!r}")
    return load_config(f"table2_{protocol}_{method}")


# ---- spectra and kappa from them -----------------------------------------------------------------------------

def feature_spectrum(F: np.ndarray) -> np.ndarray:
    """The nonzero spectrum of ``H = F^T F`` (``F = X theta (+ 1 b^T)``; ``F = X``: of ``K``) without its
    ``|D - N|`` structural zeros: the ``min(N, D)`` squared singular values of ``F`` (N x D), ascending.

    Computed by the SVD of F, not by ``eigvalsh`` of the Gram matrix ``F F^T``: the Gram eigensolver's absolute
    error is ~eps lambda_max, so it cannot resolve an eigenvalue below ~1e-15 lambda_max (kappa > ~1e15), whereas
    the SVD's absolute error is ~eps sigma_max on sigma, i.e. it resolves lambda_k / lambda_1 down to ~eps^2.
    Table 2's immunized H reach kappa ~1e17 (IMMA, Opt kappa): measured on pair 4-1, seed 0, IMMA, three runs whose
    theta_I differ by 1e-11 (two spectral routes, two Adam kernels) gave RIR 0.60, 0.60, 0.57 from Gram
    eigenvalues and 3.66689 (all six digits equal) from the SVD (``tests/test_reproduce_table2.py`` checks the
    resolution against an exactly known spectrum)."""
    return np.sort(np.linalg.svd(F, compute_uv=False) ** 2)


def default_rtol(eigenvalues: np.ndarray) -> float:
    """``n * eps(float64)`` for a Gram spectrum of length n: NumPy's ``matrix_rank`` convention, as in the core."""
    return len(eigenvalues) * float(np.finfo(np.float64).eps)


def numerical_rank(eigenvalues: np.ndarray, rtol: float | None = None) -> int:
    """Number of eigenvalues above ``rtol * max`` (``rtol=None``: :func:`default_rtol`)."""
    lam = np.asarray(eigenvalues, dtype=np.float64)
    rtol = default_rtol(lam) if rtol is None else rtol
    if not rtol > 0:
        raise ValueError(f"rtol must be > 0, got {rtol!r}")
    if not lam.max() > 0:
        raise ValueError("eigenvalues: the matrix is zero (no positive eigenvalue)")
    return int(np.sum(lam > rtol * lam.max()))


def kappa_from_eigenvalues(eigenvalues: np.ndarray, rtol: float | None = None, rank: int | None = None) -> float:
    """Eq. 1 with the pseudo-inverse: ``lambda_1 / lambda_k``, ``k`` = ``rank`` if given, else
    :func:`numerical_rank` at ``rtol``."""
    lam = np.sort(np.asarray(eigenvalues, dtype=np.float64))[::-1]
    k = numerical_rank(lam, rtol) if rank is None else int(rank)
    if not 1 <= k <= len(lam) or not lam[k - 1] > 0:
        raise ValueError(f"rank must be in 1..{len(lam)} with a positive k-th eigenvalue, got {k}")
    return float(lam[0] / lam[k - 1])


SPECTRA = ("K_P", "K_H", "H_P", "H_H")


def rir_from_spectra(spectra: dict[str, np.ndarray], rtol: float | None = None, *,
                     rank_from_K: bool = True) -> dict[str, float]:
    """Eq. 15 from stored spectra: (i) = kappa(H_H)/kappa(K_H), (ii) = kappa(H_P)/kappa(K_P), RIR = (i)/(ii).

    ``rank_from_K=True`` (the headline): the rank k of each split is decided once, on K, at ``rtol``
    (None: ``n eps``), and ``kappa(H(theta)) = lambda_1 / lambda_k`` with the same k, because
    ``rank(theta^T K theta) = rank(K)`` for every invertible theta (also with the official bias: the constant
    border pixels put the all-ones vector in range(X)). ``False``: each matrix gets its own numerical rank.
    """
    k = {}
    for split in ("P", "H"):
        rank = numerical_rank(spectra[f"K_{split}"], rtol)
        k[f"K_{split}"] = kappa_from_eigenvalues(spectra[f"K_{split}"], rank=rank)
        k[f"H_{split}"] = kappa_from_eigenvalues(spectra[f"H_{split}"], rtol, rank if rank_from_K else None)
        k[f"rank_{split}"] = rank
    term_i, term_ii = k["H_H"] / k["K_H"], k["H_P"] / k["K_P"]
    return {"term_i": term_i, "term_ii": term_ii, "rir": term_i / term_ii,
            **{(n if n.startswith("rank") else f"kappa_{n}"): v for n, v in k.items()}}


def rtol_sensitivity(spectra: dict[str, np.ndarray], rtol: float | None = None) -> dict[str, float]:
    """RIR at ``rtol`` (None: ``n eps``) and at 10x / 0.1x of it, with the rank from K and with each matrix's own."""
    base = default_rtol(spectra["K_P"]) if rtol is None else rtol
    out = {}
    for f in (0.1, 1.0, 10.0):
        out[f"rir_rtol_x{f:g}"] = rir_from_spectra(spectra, base * f)["rir"]
        out[f"rir_own_rank_rtol_x{f:g}"] = rir_from_spectra(spectra, base * f, rank_from_K=False)["rir"]
    return out


# ---- the independent measure: linear probing by gradient descent with exact line search ------------------------

def _one_vs_rest(digit: int, exclude: int, seed: int, directory: str | None, pool: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Digit ``digit`` (label +1) against an equal-size seeded sample of the other digits except ``exclude``."""
    from kappalab.data.mnist import normalize_images

    data = _mnist(directory)
    rng = np.random.default_rng([seed, digit, exclude])
    pos = np.flatnonzero(data.labels == digit)
    rest = np.flatnonzero((data.labels != digit) & (data.labels != exclude))
    neg = rng.choice(rest, size=len(pos), replace=False)
    rows = np.concatenate([pos, neg])
    return pool_images(normalize_images(data.images[rows]), pool), np.concatenate([np.ones(len(pos)), -np.ones(len(neg))])


def probe_measures(theta: np.ndarray, bias: np.ndarray | None, X_P: np.ndarray, X_H: np.ndarray, a: int, b: int,
                   seed: int, directory: str | None = None, pool: int = 1) -> dict[str, Any]:
    """Measures of immunization that are not RIR, for ``theta`` (with ``bias``) and for the identity (reference).

    Both use :func:`kappalab.immunization.exact_line_search_gd` (GD with exact line search from w = 0, Eq. 16).

    * ``iters_H`` / ``iters_P``: iterations on ``1/2||Phi w - y||^2`` with ``Phi`` the features of the D_H / D_P
      images and ``y`` a fixed standard normal vector until the relative excess loss is <= each of PROBE_TARGETS
      (None: not within PROBE_MAX_ITER); ``excess_H@t`` / ``excess_P@t`` that loss at PROBE_CHECKPOINTS; and
      ``norm_ratio_H`` / ``norm_ratio_P``, Eq. 16's norm ratio after PROBE_MAX_ITER iterations. The Hessian of
      this problem is exactly H_H / H_P.
    * ``excess_P`` / ``excess_H``: relative excess loss ``(f(w_T) - f*) / (f(0) - f*)`` after T = PROBE_BUDGET
      iterations of a least-squares probe "digit a (resp. b) = +1 vs the other digits except b (resp. a) = -1"
      (a non-degenerate task on the same features): small = the probe learns fast.
    """
    from kappalab.immunization import exact_line_search_gd, features

    out: dict[str, Any] = {}
    for name, th, bi in (("immunized", theta, bias), ("identity", np.eye(theta.shape[0]), None)):
        row: dict[str, Any] = {}
        for task, X in (("P", X_P), ("H", X_H)):
            y = np.random.default_rng([seed, 1 if task == "P" else 2]).standard_normal(len(X))
            curve = exact_line_search_gd(features(th, X, bi), y, PROBE_MAX_ITER, PROBE_TARGETS[0])
            for target in PROBE_TARGETS:
                hit = np.flatnonzero(curve.excess_loss <= target)
                row[f"iters_{task}<={target:g}"] = int(hit[0]) if hit.size else None
            for t in PROBE_CHECKPOINTS:
                row[f"excess_{task}@{t}"] = float(curve.excess_loss[min(t, len(curve.excess_loss) - 1)])
            row[f"norm_ratio_{task}"] = float(curve.norm_ratio[-1])
        for task, digit, other in (("P", a, b), ("H", b, a)):
            X, y = _one_vs_rest(digit, other, seed, directory, pool)
            curve = exact_line_search_gd(features(th, X, bi), y, PROBE_BUDGET, PROBE_TARGETS[0])
            row[f"excess_{task}"] = float(curve.excess_loss[-1])
        out[name] = row
    return out


# ---- one run (the sweep's worker) ----------------------------------------------------------------------------

def run_key(protocol: str, method: str, a: int, b: int, seed: int, epochs: int, pool: int = 1) -> str:
    """The run's stable identifier (also its spectra file's name)."""
    return f"{protocol}.{method}.{a}-{b}.s{seed}.e{epochs}" + ("" if pool == 1 else f".p{pool}")


#: how the stored spectra are computed (records without the field hold Gram eigenvalues, "eigvalsh-gram")
SPECTRA_METHOD = "svd"


@functools.lru_cache(maxsize=8)
def _data_spectra(a: int, b: int, seed: int, directory: str | None, pool: int) -> dict[str, np.ndarray]:
    """K_P's and K_H's spectra of a task (theta-independent: shared by the four methods' runs in one worker)."""
    task = mnist_task(a, b, seed, directory, pool)
    return {name: feature_spectrum(X) for name, X in (("K_P", task.X_P), ("K_H", task.X_H))}


def run_spectra(task, theta: np.ndarray, bias: np.ndarray | None,
                data_spectra: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The four spectra of a run (:data:`SPECTRA`): K_P, K_H (``data_spectra`` when given: they do not depend on
    theta) and H_P, H_H at ``(theta, bias)``, each by :func:`feature_spectrum`."""
    from kappalab.immunization import features

    data = data_spectra if data_spectra is not None else {"K_P": feature_spectrum(task.X_P),
                                                          "K_H": feature_spectrum(task.X_H)}
    return {**data, "H_P": feature_spectrum(features(theta, task.X_P, bias)),
            "H_H": feature_spectrum(features(theta, task.X_H, bias))}


def run_one(params: dict[str, Any]) -> dict[str, Any]:
    """Sweep worker: immunize one pair, evaluate it, store its spectra; returns the record's ``result``."""
    from kappalab.immunization import evaluate, immunize

    limit_threads(int(params.get("threads", 1)))
    a, b, seed = int(params["a"]), int(params["b"]), int(params["seed"])
    cfg = table2_config(params["protocol"], params["method"]).replace(epochs=int(params["epochs"]))
    pool = int(params.get("pool", 1))
    task = mnist_task(a, b, seed, params.get("data_dir"), pool)
    if cfg.get("loss", task.loss) != task.loss:
        raise ValueError(f"config {cfg.source[-1]}: extra loss {cfg.get('loss')!r} but the MNIST task uses "
                         f"{task.loss!r}")
    start = time.perf_counter()
    run = immunize(task, cfg, seed, device=params.get("device", "cpu"))
    train_s = time.perf_counter() - start
    theta = np.asarray(run.theta_I, dtype=np.float64)
    spectra = run_spectra(task, theta, run.bias, _data_spectra(a, b, seed, params.get("data_dir"), pool))
    folder = Path(params["out"]) / "spectra"
    folder.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(folder / f"{params['key']}.npz", **spectra)
    evaluation = evaluate(run, task, sensitivity=("pinv",), endpoints=False)  # only what the report reads
    result: dict[str, Any] = {
        "gram": rir_from_spectra(spectra), "rtol_sensitivity": rtol_sensitivity(spectra),
        "evaluate": evaluation, "train_s": train_s, "n_steps": run.n_steps,
        "degenerate_count": run.degenerate_count, "spectra_file": f"spectra/{params['key']}.npz",
        "config_source": list(cfg.source), "data_label": task.data_label,
        "spectral_route": cfg.get("spectral_route", "dense"), "spectra": SPECTRA_METHOD,
    }
    if params.get("probe"):
        result["probe"] = probe_measures(theta, run.bias, task.X_P, task.X_H, a, b, seed, params.get("data_dir"),
                                         pool)
    result["total_s"] = time.perf_counter() - start
    return result


# ---- sweep construction ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SweepPlan:
    """What ``main`` runs: protocol, methods, pairs, seeds, epochs, output folder."""

    protocol: str
    methods: tuple[str, ...]
    pairs: tuple[tuple[int, int], ...]
    seeds: tuple[int, ...]
    epochs: int
    out: Path
    device: str = "cpu"
    data_dir: str | None = None
    pool: int = 1
    probe_pairs: tuple[tuple[int, int], ...] = PROBE_PAIRS

    @property
    def store_path(self) -> Path:
        return self.out / f"runs_{self.protocol}.jsonl"

    def jobs(self) -> list[Job]:
        jobs = []
        for method in self.methods:
            for a, b in self.pairs:
                for seed in self.seeds:
                    key = run_key(self.protocol, method, a, b, seed, self.epochs, self.pool)
                    jobs.append(Job(key, {"pool": self.pool,
                        "key": key, "protocol": self.protocol, "method": method, "a": a, "b": b, "seed": seed,
                        "epochs": self.epochs, "out": str(self.out), "device": self.device,
                        "data_dir": self.data_dir, "probe": (a, b) in self.probe_pairs and seed == self.seeds[0]}))
        # seed-major, methods interleaved: a partial sweep covers every method on the same pairs
        order = {pair: i for i, pair in enumerate(self.pairs)}
        return sorted(jobs, key=lambda j: (j.params["seed"], order[(j.params["a"], j.params["b"])],
                                           self.methods.index(j.params["method"])))


def parse_pairs(text: str) -> tuple[tuple[int, int], ...]:
    """``"0-1,3-8"`` -> ((0, 1), (3, 8)); ``"all"`` -> the 90 ordered pairs."""
    if text == "all":
        return ALL_PAIRS
    pairs = []
    for item in text.split(","):
        try:
            a, b = (int(x) for x in item.strip().split("-"))
        except ValueError:
            raise ValueError(f"--pairs: {item!r} is not of the form a-b (digits)") from None
        if not (0 <= a <= 9 and 0 <= b <= 9 and a != b):
            raise ValueError(f"--pairs: {item!r} must name two different digits 0..9")
        pairs.append((a, b))
    return tuple(pairs)


def parse_ints(text: str, name: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"{name}: expected comma-separated integers, got {text!r}") from None


# ---- report: Table 2, Figure 2, success counts, independent measures ------------------------------------------

def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    return (float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else float("nan")) if v.size else (math.nan,) * 2


def _fmt(mean: float, std: float) -> str:
    return f"{mean:.4g} +- {std:.3g}" if math.isfinite(std) else f"{mean:.4g}"


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
                       **{c: _mean_std([r[c] for r in mine]) for c in cols},
                       "median_rir": float(np.median([r["rir"] for r in mine])),
                       **{f"{c}_seed_means": _mean_std([float(np.mean([r[c] for r in mine if r["seed"] == seed]))
                                                        for seed in sorted({r["seed"] for r in mine})])
                          for c in ("term_i", "term_ii", "rir")}}
    return out


def pair_log_rir(rows: list[dict[str, Any]], method: str) -> np.ndarray:
    """10 x 10 matrix of log10 RIR averaged over seeds (rows: D_P digit, columns: D_H digit; NaN = no run)."""
    M = np.full((10, 10), np.nan)
    for a, b in ALL_PAIRS:
        vals = [math.log10(r["rir"]) for r in rows if r["method"] == method and (r["a"], r["b"]) == (a, b)]
        if vals:
            M[a, b] = float(np.mean(vals))
    return M


def success_counts(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per method: pairs with seed-averaged log10 RIR above log10 of each threshold, and pairs finished."""
    out = {}
    for method in METHODS:
        M = pair_log_rir(rows, method)
        done = int(np.isfinite(M).sum())
        if done:
            out[method] = {"pairs": done, **{f"RIR>{t:g}": int(np.sum(M[np.isfinite(M)] > math.log10(t)))
                                             for t in (OTHER_THRESHOLDS[0], SUCCESS_THRESHOLD, OTHER_THRESHOLDS[1])}}
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


def figure2(rows: list[dict[str, Any]], out: Path, protocol: str, title: str) -> list[Path]:
    """Figure 2: one 10 x 10 heat map of log10 RIR per method (diagonal and unfinished pairs blank)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    mats = {m: pair_log_rir(rows, m) for m in methods}
    finite = np.concatenate([M[np.isfinite(M)] for M in mats.values()]) if mats else np.zeros(1)
    lim = max(1.0, float(np.abs(finite).max()) if finite.size else 1.0)
    fig, axes = plt.subplots(1, max(1, len(methods)), figsize=(3.6 * max(1, len(methods)) + 0.8, 3.9),
                             squeeze=False)
    counts = success_counts(rows)
    image = None
    for ax, m in zip(axes[0], methods):
        cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="#dddddd")
        image = ax.imshow(np.ma.masked_invalid(mats[m]), cmap=cmap, vmin=-lim, vmax=lim)
        c = counts[m]
        ax.set_title(f"{METHOD_LABELS[m]}\nRIR>{SUCCESS_THRESHOLD:g}: {c[f'RIR>{SUCCESS_THRESHOLD:g}']}/{c['pairs']}",
                     fontsize=9)
        ax.set_xticks(range(10))
        ax.set_yticks(range(10))
        ax.set_xlabel("D_H digit")
        ax.set_ylabel("D_P digit")
    if image is not None:
        fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="log10 RIR (blue: RIR > 1)")
    fig.suptitle(title, fontsize=9)
    paths = [out / f"figure2_{protocol}.png", out / f"figure2_{protocol}.pdf"]
    for path in paths:
        fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return paths


def write_report(plan: SweepPlan, n_expected: int, header: dict[str, Any]) -> dict[str, Any]:
    """Rebuild Table 2 (markdown, CSV, JSON) and Figure 2 from the store alone; returns the JSON summary."""
    records = [r for r in RunStore(plan.store_path).records() if r["params"].get("pool", 1) == plan.pool
               and r["params"]["epochs"] == plan.epochs]
    rows = run_rows(records, plan.out)
    summary = {"header": header, "n_runs": len(rows), "n_expected": n_expected, "table": table(rows),
               "success_counts": success_counts(rows), "probe": probe_table(records),
               "paper_reference": {"table2": PAPER_TABLE2, "figure2_success_of_90": PAPER_FIG2_SUCCESS},
               "success_threshold": SUCCESS_THRESHOLD, "other_thresholds": OTHER_THRESHOLDS,
               "rtol": "N eps (N = Gram size), rank decided on K",
               "spectral_routes": sorted({record_route(r) for r in records})}
    plan.out.mkdir(parents=True, exist_ok=True)
    stem = plan.out / f"table2_{plan.protocol}"
    (stem.with_suffix(".json")).write_text(json.dumps(to_jsonable(summary), indent=1, sort_keys=True))
    if rows:
        with open(stem.with_suffix(".csv"), "w", newline="") as handle:
            handle.write(f"# {header['data_label']}; protocol {plan.protocol}; {len(rows)} of {n_expected} runs\n")
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        figure2(rows, plan.out, plan.protocol, f"Figure 2 ({header['data_label']}; protocol {plan.protocol}; "
                                f"{len(rows)}/{n_expected} runs; log10 RIR, seed mean)")
    (stem.with_suffix(".md")).write_text(markdown(summary, plan))
    return summary


def markdown(summary: dict[str, Any], plan: SweepPlan) -> str:
    """The markdown tables of one protocol's report."""
    h = summary["header"]
    lines = [f"### Table 2, protocol `{plan.protocol}` - {h['data_label']}", "",
             f"{summary['n_runs']} of {summary['n_expected']} runs finished; epochs {plan.epochs}; "
             f"spectral route {' + '.join(summary.get('spectral_routes') or ['-'])}; "
             "kappa from the stored spectra (squared singular values of the features, by SVD), rank k decided on K "
             "at rtol = N eps and used for H(theta_I); "
             "mean +- std over all finished runs (pairs x seeds). Paper: full MNIST, reference only.", "",
             "| Method | runs | (i) up | (ii) down | RIR up | median RIR | paper (i) | paper (ii) | paper RIR |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m, t in summary["table"].items():
        ref = PAPER_TABLE2[m]
        lines.append(f"| {METHOD_LABELS[m]} | {t['n_runs']} | {_fmt(*t['term_i'])} | {_fmt(*t['term_ii'])} | "
                     f"{_fmt(*t['rir'])} | {t['median_rir']:.4g} | " + " | ".join(_fmt(*x) for x in ref) + " |")
    lines += ["", "The paper's +- convention (\"computed over 3 random seeds and averaged over all digit pairs\"): "
              "per seed, the mean over its pairs; then mean +- std of those seed means (a std over seeds only):", "",
              "| Method | seeds | (i) | (ii) | RIR | paper RIR |", "|---|---|---|---|---|---|"]
    for m, t in summary["table"].items():
        lines.append(f"| {METHOD_LABELS[m]} | {t['n_seeds']} | {_fmt(*t['term_i_seed_means'])} | "
                     f"{_fmt(*t['term_ii_seed_means'])} | {_fmt(*t['rir_seed_means'])} | "
                     f"{_fmt(*PAPER_TABLE2[m][2])} |")
    lines += ["", "RIR under other kappa definitions and rank tolerances (mean +- std): headline rule at rtol x0.1 "
              "and x10; each matrix its own rank (same spectra) at x0.1, x1, x10; the D x D pinv kappa of the shared "
              "evaluate (rtol D eps) at x0.1, x1, x10; the official code's shifted kappa (1e-6):", "",
              "| Method | x0.1 | x10 | own rank x0.1 | own rank | own rank x10 | DxD x0.1 | DxD | DxD x10 | "
              "shifted | time/run (s) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m, t in summary["table"].items():
        lines.append(f"| {METHOD_LABELS[m]} | " + " | ".join(_fmt(*t[c]) for c in (
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


# ---- command line ---------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kappalab reproduce table2", description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", choices=("paper", "official"), default="official")
    parser.add_argument("--pairs", default=None, help="a-b,... or 'all' (default: all; --quick: 0-1,7-3)")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default 0,1,2; --quick: 0)")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of " + ",".join(METHODS))
    parser.add_argument("--epochs", type=int, default=None, help="override the config's epochs (Table 4: 30)")
    parser.add_argument("--pool", type=int, default=None, choices=(1, 2, 4),
                        help="average-pool images (1 = 784 pixels, the paper; --quick: 4)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data-dir", default=None, help="MNIST IDX folder (default: embedded subset)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default docs/reproduction/table2, --quick: .../table2/quick)")
    parser.add_argument("--quick", action="store_true",
                        help=f"CI smoke run: pairs {QUICK_PAIRS}, seed 0, {QUICK_EPOCHS} epoch(s), pool 4")
    parser.add_argument("--no-probe", action="store_true", help="skip the independent (probing) measures")
    parser.add_argument("--report-only", action="store_true", help="rebuild the report from the store, run nothing")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--compare-with", type=Path, default=None, metavar="DIR",
                        help="also write reproducibility_<protocol>.{md,json}: run-by-run differences of (i), (ii), "
                             "RIR between this store and the one in DIR (same keys, e.g. another spectral route)")
    return parser


def plan_from_args(args: argparse.Namespace) -> SweepPlan:
    quick = args.quick
    pairs = parse_pairs(args.pairs) if args.pairs else (QUICK_PAIRS if quick else ALL_PAIRS)
    seeds = parse_ints(args.seeds, "--seeds") if args.seeds else ((0,) if quick else (0, 1, 2))
    methods = tuple(m.strip() for m in args.methods.split(","))
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(f"--methods: unknown {bad}; choose from {METHODS}")
    epochs = args.epochs or (QUICK_EPOCHS if quick else table2_config(args.protocol, "ours").epochs)
    if epochs < 1:
        raise ValueError(f"--epochs must be >= 1, got {epochs}")
    route = spectral_route(args.protocol)
    default = "quick" if quick else ("" if route == "dense" else route)
    out = args.out or Path("docs/reproduction/table2") / default
    pool = args.pool or (4 if quick else 1)
    return SweepPlan(args.protocol, methods, pairs, seeds, epochs, Path(out), args.device, args.data_dir, pool,
                     () if args.no_probe else (pairs[:1] if quick else PROBE_PAIRS))


def spectral_route(protocol: str) -> str:
    """The configured ``extra.spectral_route`` of the protocol's configs ("dense" when absent); all four methods
    must agree (one table, one route)."""
    routes = {table2_config(protocol, m).get("spectral_route", "dense") for m in METHODS}
    if len(routes) != 1:
        raise ValueError(f"the table2_{protocol}_* configs disagree on extra.spectral_route: {sorted(routes)}")
    return routes.pop()


def record_route(record: dict[str, Any]) -> str:
    """The spectral route a stored run used (records written before the field existed used "dense")."""
    return (record.get("result") or {}).get("spectral_route", "dense")


def check_store_route(plan: "SweepPlan", route: str) -> None:
    """Refuse to add runs of one spectral route, or with spectra computed another way, to a store holding other
    runs (no silently mixed table)."""
    records = RunStore(plan.store_path).records()
    others = sorted({record_route(r) for r in records} - {route})
    if others:
        raise ValueError(f"{plan.store_path} holds runs made with spectral_route {others}, the configs now say "
                         f"{route!r}: use another --out (default: docs/reproduction/table2/<route>)")
    stale = sorted({(r.get("result") or {}).get("spectra", "eigvalsh-gram") for r in records} - {SPECTRA_METHOD})
    if stale:
        raise ValueError(f"{plan.store_path} holds runs whose spectra were computed by {stale}, this version stores "
                         f"{SPECTRA_METHOD!r} spectra: use another --out")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        plan = plan_from_args(args)
        if not args.report_only:
            check_store_route(plan, spectral_route(plan.protocol))
    except ValueError as error:
        print(f"kappalab reproduce table2: {error}", file=sys.stderr)
        return 2
    from kappalab.provenance import provenance

    label = data_label(_mnist(plan.data_dir).source_label, plan.pool)
    jobs = plan.jobs()
    header = {"data_label": label, "protocol": plan.protocol, "epochs": plan.epochs, "pool": plan.pool,
              "provenance": provenance(None, {"plan": plan, "configs": {m: table2_config(plan.protocol, m)
                                                                       for m in plan.methods}},
                                       device=plan.device, data_label=label)}
    if not args.report_only:
        summary = run_sweep(jobs, run_one, plan.store_path, workers=args.workers, progress=not args.no_progress,
                            desc=f"table2/{plan.protocol}",
                            extra_record=lambda job: {"provenance": provenance(
                                job.params["seed"], job.params, device=plan.device, data_label=label)})
        if summary.run_times_s:
            mean = float(np.mean(summary.run_times_s))
            print(f"table2: {summary.completed} runs in {summary.wall_time_s:.1f} s ({mean:.1f} s/run in a worker, "
                  f"{args.workers} worker(s)); {summary.skipped} were already done")
    result = write_report(plan, len(jobs), header)
    print(f"table2: report of {result['n_runs']}/{len(jobs)} runs in {plan.out}")
    if args.compare_with is not None:
        other = SweepPlan(**{**plan.__dict__, "out": args.compare_with})
        if not other.store_path.is_file():
            print(f"kappalab reproduce table2: --compare-with: no store {other.store_path}", file=sys.stderr)
            return 2
        comparison = reproducibility(plan, other)
        print(f"table2: {comparison['n_common']} runs compared with {other.store_path} "
              f"-> {plan.out / f'reproducibility_{plan.protocol}.md'}")
    return 0


def reproducibility(plan: SweepPlan, other: SweepPlan) -> dict[str, Any]:
    """Run-by-run comparison of two stores of the same sweep (keys in both; e.g. two mathematically equal spectral
    routes, whose runs differ only by rounding): per method the median and maximum relative difference
    ``|a - b| / |b|`` of (i), (ii) and RIR, each recomputed from the stored spectra; written next to the report as
    ``reproducibility_<protocol>.{md,json}``."""
    rows = {name: {r["key"]: r for r in run_rows(RunStore(p.store_path).records(), p.out)}
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
    stem = plan.out / f"reproducibility_{plan.protocol}"
    stem.with_suffix(".json").write_text(json.dumps(to_jsonable(summary), indent=1, sort_keys=True))
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return summary
