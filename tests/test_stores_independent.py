"""The committed result stores, recomputed outside kappalab: plain NumPy (``np.linalg.svd``, written here) from
the arrays each store keeps, never through the functions that wrote them.

* Table 1 (``docs/reproduction/table1/paper`` and ``official``): every run's theta_I (+ bias) on the stored inputs
  X_P, X_H. Eq. 15's pseudo-inverse kappa from the singular values of the features ``F = X theta (+ 1 b^T)``
  (``lambda(H) = s(F)^2``), rank rule ``lambda > rtol * lambda_1`` with the record's rtol (79 eps).
* Table 2 (``features``, ``official_traj``, ``paper_alg1``): a sample of runs per store; Eq. 15 from the stored
  spectra of K and H(theta_I) by the rule the report states (rank k decided on K at ``n eps``, ``n`` = the
  number of stored values, the same k for H).
* Table 3 (every ``runs.jsonl`` under ``docs/reproduction/table3``): no features or spectra are stored, so the
  check is the estimator's arithmetic: the stored per-group (i), (ii) give the estimate (mean over groups), its
  std and the per-group RIR mean; the exact RIR is exact (i) / exact (ii).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1] / "docs" / "reproduction"
EPS = np.finfo(np.float64).eps
TERMS = ("term_i", "term_ii", "rir")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _kappa_from_eigenvalues(lam: np.ndarray, rtol: float, rank: int | None = None) -> tuple[float, int]:
    """``lambda_1 / lambda_k`` with ``k = #{lambda > rtol lambda_1}`` (or the given rank); ``(kappa, k)``."""
    lam = np.sort(np.asarray(lam, dtype=np.float64))[::-1]
    k = int(np.count_nonzero(lam > rtol * lam[0])) if rank is None else rank
    return float(lam[0] / lam[k - 1]), k


def _eq15(kappa: dict[str, float]) -> dict[str, float]:
    term_i = kappa["H_H_immunized"] / kappa["H_H_identity"]
    term_ii = kappa["H_P_immunized"] / kappa["H_P_identity"]
    return {"term_i": term_i, "term_ii": term_ii, "rir": term_i / term_ii}


# ---- Table 1 ------------------------------------------------------------------------------------------------------

TABLE1 = ("paper", "official")


@pytest.mark.parametrize("store", TABLE1)
def test_table1_runs_recompute_from_theta_by_plain_svd(store: str) -> None:
    folder = ROOT / "table1" / store
    X = {s: np.load(folder / f"features_{s}.npy") for s in ("P", "H")}
    records = [r.get("result", r) for r in _jsonl(folder / "runs.jsonl")]
    assert {(r["method"], r["seed"]) for r in records} == \
        {(m, s) for m in ("rill_only", "imma", "opt_kappa", "ours") for s in range(5)}
    D = X["P"].shape[1]
    for r in records:
        ev = r["evaluation"]
        assert ev["rtol"] == D * EPS  # the rule the report states: eigenvalues of the D x D Hessian above D eps
        theta = np.load(folder / r["files"]["theta_I"])
        bias = np.load(folder / r["files"]["bias"]) if r["files"].get("bias") else None
        assert ev["has_bias"] == (bias is not None)
        kappa, bound = {}, 0.0
        for s in ("P", "H"):
            F = X[s] @ theta + (0.0 if bias is None else bias[None, :])
            for name, M in ((f"H_{s}_immunized", F), (f"H_{s}_identity", X[s])):
                lam = np.linalg.svd(M, compute_uv=False) ** 2
                kappa[name], k = _kappa_from_eigenvalues(lam, ev["rtol"])
                assert k == ev["spectra"][name]["rank_pinv"], (r["key"], name)
                # the record's route (eigvalsh of the D x D Hessian) errs by ~D eps lambda_1 on lambda_k
                bound += 4 * D * EPS * kappa[name]
        again = _eq15(kappa)
        for t in TERMS:
            assert again[t] == pytest.approx(ev["pinv"][t], rel=bound), (r["key"], t, bound)
        for name in kappa:
            stored = ev["pinv"][f"kappa_{name[2:]}"]  # H_H_immunized -> kappa_H_immunized
            assert kappa[name] == pytest.approx(stored, rel=bound), (r["key"], name)


def test_table1_report_is_the_mean_and_std_of_the_runs() -> None:
    folder = ROOT / "table1" / "paper"
    records = [r.get("result", r) for r in _jsonl(folder / "runs.jsonl")]
    summary = json.loads((folder / "table1.json").read_text())["summary"]
    for method, row in summary.items():
        rir = np.array([r["evaluation"]["pinv"]["rir"] for r in records if r["method"] == method])
        assert len(rir) == 5
        mean, std = row["pinv"]["rir"][:2]
        assert mean == pytest.approx(rir.sum() / 5, rel=1e-13)
        assert std == pytest.approx(np.sqrt(((rir - rir.mean()) ** 2).sum() / 4), rel=1e-12)


# ---- Table 2 ------------------------------------------------------------------------------------------------------

TABLE2 = {"features": "runs_official.jsonl", "official_traj": "runs_official_trajectory.jsonl",
          "paper_alg1": "runs_paper_trajectory.jsonl"}
SAMPLE = 6  #: runs per method and store, drawn with a fixed seed


def _sample(records: list[dict]) -> list[dict]:
    rng = np.random.default_rng(20251201)
    out = []
    for method in sorted({r["params"]["method"] for r in records}):
        mine = [r for r in records if r["params"]["method"] == method]
        out += [mine[i] for i in sorted(rng.choice(len(mine), size=min(SAMPLE, len(mine)), replace=False))]
    return out


@pytest.mark.parametrize("store", sorted(TABLE2))
def test_table2_runs_recompute_from_their_spectra(store: str) -> None:
    folder = ROOT / "table2" / store
    records = _jsonl(folder / TABLE2[store])
    assert len(records) >= 120
    for rec in _sample(records):
        r = rec["result"]
        path = folder / (r["files"]["spectra"] if "files" in r else r["spectra_file"])
        with np.load(path) as z:
            lam = {name: z[name] for name in ("K_P", "K_H", "H_P", "H_H")}
        kappa = {}
        for s in ("P", "H"):
            n = len(lam[f"K_{s}"])
            kappa[f"H_{s}_identity"], k = _kappa_from_eigenvalues(lam[f"K_{s}"], n * EPS)
            kappa[f"H_{s}_immunized"], _ = _kappa_from_eigenvalues(lam[f"H_{s}"], n * EPS, rank=k)
            assert k == r["gram"][f"rank_{s}"], (rec["key"], s)
            assert kappa[f"H_{s}_identity"] == pytest.approx(r["gram"][f"kappa_K_{s}"], rel=8 * EPS)
            assert kappa[f"H_{s}_immunized"] == pytest.approx(r["gram"][f"kappa_H_{s}"], rel=8 * EPS)
        again = _eq15(kappa)
        for t in TERMS:  # the same four divisions in another order: a few rounding errors at most
            assert again[t] == pytest.approx(r["gram"][t], rel=16 * EPS), (rec["key"], t)


# ---- Table 3 ------------------------------------------------------------------------------------------------------

#: the proxy's stores (the real network's stores, table3/real/, table3/powered/ and table3/unfinished/, have their
#: own tests: tests/test_table3_real_store.py, tests/test_table3_powered_store.py)
TABLE3 = sorted(p for p in (ROOT / "table3").rglob("runs.jsonl")
                if not {"real", "powered", "unfinished"} & set(p.relative_to(ROOT / "table3").parts))


def test_there_are_table3_stores() -> None:
    assert {p.parent.name for p in TABLE3} >= {"table3", "proxy_wide", "unsearched", "sensitivity_lambdaP_2e-5"}


@pytest.mark.parametrize("path", TABLE3, ids=lambda p: p.parent.name)
def test_table3_estimates_recompute_from_the_stored_groups(path: Path) -> None:
    blocks = [(rec["key"], name, rec[name]) for rec in _jsonl(path) for name in ("rir", "rir_authors") if name in rec]
    assert blocks
    for key, name, b in blocks:
        i, ii = np.array(b["per_group_i"]), np.array(b["per_group_ii"])
        assert len(i) == len(ii) == b["groups"], (key, name)
        tol = 8 * EPS * b["groups"]
        assert b["est_i"] == pytest.approx(i.sum() / len(i), rel=tol), (key, name)
        assert b["est_ii"] == pytest.approx(ii.sum() / len(ii), rel=tol), (key, name)
        assert b["est_rir"] == pytest.approx((i / ii).sum() / len(i), rel=tol), (key, name)
        assert b["exact_rir"] == pytest.approx(b["exact_i"] / b["exact_ii"], rel=4 * EPS), (key, name)
        for std, x in ((b["std_i"], i), (b["std_ii"], ii), (b["std_rir"], i / ii)):  # over the groups, ddof 0
            assert std == pytest.approx(np.sqrt(((x - x.mean()) ** 2).sum() / len(x)), rel=1e-12), (key, name)
