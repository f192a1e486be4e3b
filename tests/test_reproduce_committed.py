"""The committed result stores recompute identically after the engine refactor.

Table 2: every committed store under docs/reproduction/table2 is read with the report's own selection of a store
written before run identities, and Eq. 15 is recomputed from the stored spectra; the table and the success counts
equal the committed table2_<protocol>.json (each field the committed file has). Table 1: the full paper protocol
(20 runs, ~7 min on one core) reproduces the committed records up to rounding, on every BLAS kernel (its test's
docstring says what that means for a training that amplifies rounding); it runs when KAPPALAB_FULL_TABLE1=1 (the
quick form is compared on every run in tests/test_reproduce_table1.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from kappalab.reproduce import table2
from kappalab.results import RunStore, to_jsonable

ROOT = Path(__file__).resolve().parents[1]


def _written_before_run_identities(folder: Path) -> bool:
    """A store whose reports say ``legacy_store`` (or predate the field): the stores this module is about. Stores
    with run identities are checked by their own tests (test_table2_full90_store, test_table2_seed_spread, ...)."""
    headers = [json.loads(p.read_text())["header"] for p in folder.glob("table2_*.json")]
    return bool(headers) and all(h.get("legacy_store", True) for h in headers)


TABLE2_STORES = sorted(p.parent for p in (ROOT / "docs" / "reproduction" / "table2").glob("*/runs_*.jsonl")
                       if _written_before_run_identities(p.parent))


def test_there_are_committed_table2_stores() -> None:
    assert len(TABLE2_STORES) >= 2


@pytest.mark.parametrize("folder", TABLE2_STORES, ids=lambda p: p.name)
def test_committed_table2_records_recompute_identically(folder: Path) -> None:
    for committed_path in sorted(folder.glob("table2_*.json")):
        committed = json.loads(committed_path.read_text())
        protocol, header = committed["header"]["protocol"], committed["header"]
        plan = table2.plan_from_args(table2.build_parser().parse_args(
            ["--protocol", protocol, "--out", str(folder), "--epochs", str(header["epochs"]), "--pool",
             str(header["pool"])]))
        records, legacy = table2.select_records(plan, set())
        assert legacy and len(records) == committed["n_runs"]
        rows = table2.run_rows(records, folder)
        again = json.loads(json.dumps(to_jsonable({"table": table2.table(rows),
                                                   "success_counts": table2.success_counts(rows)})))
        assert again["success_counts"] == committed["success_counts"]
        for method, entry in committed["table"].items():
            for field, value in entry.items():  # older files lack the newer fields
                assert again["table"][method][field] == value, (committed_path.name, method, field)


def _probe_rounding(Phi: np.ndarray, y: np.ndarray, rank: int) -> tuple[float, float, float]:
    """``(e, kappa, c)``, the rounding model of one probe (exact line search GD on ``1/2 ||Phi w - y||^2``) at
    envelope.py's backward error ``sqrt(D) eps`` per operation chain. ``e`` bounds the error of ``w*`` and of the
    iterates relative to ``||w*||``, so of ``sqrt`` of a norm ratio: the forward error of least squares,
    ``sqrt(D) eps (kappa + kappa^2 eta)`` (Golub and Van Loan, Matrix Computations, 4th ed., Thm. 5.3.1), with
    ``kappa = kappa(Phi)`` at ``rank`` (the record's pinv rank of ``Phi^T Phi``) and ``eta = ||Phi w* - y|| /
    (||Phi|| ||w*||)``. The excess loss ``(f(w) - f*) / (f(0) - f*)`` is a Phi-weighted norm ratio (``e kappa``
    in sqrt) computed as a difference of losses: ``c = 2 sqrt(N) eps f(0) / (f(0) - f*)`` bounds that
    cancellation (``f(w), f* <= f(0)``, each a sum of N squares)."""
    from envelope import EPS

    s = np.linalg.svd(Phi, compute_uv=False)
    kappa = float(s[0] / s[rank - 1])
    w = np.linalg.lstsq(Phi, y, rcond=None)[0]
    residual = float(np.linalg.norm(Phi @ w - y))
    eta = residual / float(s[0] * np.linalg.norm(w))
    f0, f_star = 0.5 * float(y @ y), 0.5 * residual**2
    cancellation = 2 * np.sqrt(len(y)) * EPS * f0 / (f0 - f_star)
    return float(np.sqrt(Phi.shape[1]) * EPS * (kappa + kappa**2 * eta)), kappa, float(cancellation)


def _crossing_determined(curve: np.ndarray, t: int | None, target: float, band: float, offset: float = 0.0) -> bool:
    """Whether the first iteration at or below ``target`` is ``t`` on every kernel, each value of ``curve`` being
    uncertain by ``offset`` and then by ``band`` in sqrt: every earlier value surely above the target, the value at
    ``t`` surely below (None: every value surely above)."""
    lower = np.sqrt(np.maximum(curve - offset, 0.0)) - band
    upper = np.sqrt(curve + offset) + band
    edge = np.sqrt(target)
    return bool(np.all(lower[: len(curve) if t is None else t] > edge) and (t is None or upper[t] < edge))


def _check_committed_probes(folder: Path, old: dict, task, iters: int, target: float) -> tuple[int, float]:
    """The committed probing numbers are those of the committed theta on this kernel (_probe_rounding; two
    kernels: twice each bound): every value of the stored norm-ratio curve and the final ratio within ``2 e`` in
    sqrt, the iteration counts equal where determined (_crossing_determined). Returns how many of the four counts
    were determined and the largest curve gap as a share of its bound."""
    from kappalab.immunization import exact_line_search_gd
    from kappalab.reproduce.table1.run import probe

    theta = np.load(folder / old["files"]["theta_I"])
    again, determined, share = probe(theta, None, task, iters, target), 0, 0.0
    for which, X, y in (("P", task.X_P, task.y_P), ("H", task.X_H, task.y_H)):
        rank = old["evaluation"]["spectra"][f"H_{which}_immunized"]["rank_pinv"]
        e, kappa, cancellation = _probe_rounding(X @ theta, y, rank)
        stored = np.load(folder / f"probe_{old['method']}_seed{old['seed']}_{which}.npy")
        curve, now, was = again[which].pop("curve"), again[which], old["probing"][which]
        gap = np.abs(np.sqrt(curve) - np.sqrt(stored)) if stored.shape == curve.shape else np.array([np.inf])
        assert np.all(gap <= 2 * e), (old["key"], which, float(np.max(gap)), e)
        assert abs(np.sqrt(now["final_norm_ratio"]) - np.sqrt(was["final_norm_ratio"])) <= 2 * e, (old["key"], which)
        excess = exact_line_search_gd(X @ theta, y, iters, target).excess_loss
        for name, values, band, offset in (("iters_to_norm_ratio", curve, 2 * e, 0.0),
                                           ("iters_to_excess_loss", excess, 2 * e * kappa, 2 * cancellation)):
            if _crossing_determined(values, now[name], target, band, offset):
                determined += 1
                assert now[name] == was[name], (old["key"], which, name)
        share = max(share, float(np.max(gap)) / (2 * e))
    return determined, share


def _config(record: dict) -> dict:
    """A record's config values (its reasons and the config files' paths aside: prose and locations)."""
    config = record["provenance"]["config"]
    return {k: ({n: x for n, x in v.items() if not n.endswith("_reason")} if k == "extra" else v)
            for k, v in config.items() if k not in ("reasons", "source")}


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b, 2) / np.linalg.norm(b, 2))


@pytest.mark.skipif(os.environ.get("KAPPALAB_FULL_TABLE1") != "1", reason="~7 min: set KAPPALAB_FULL_TABLE1=1")
def test_full_table1_paper_protocol_reproduces_the_committed_records(tmp_path: Path, record_property) -> None:
    """A rerun of ``reproduce table1 --protocol paper`` (20 runs) against docs/reproduction/table1/paper/runs.jsonl,
    true on every BLAS kernel. Asserted: (a) the config of each run equals the committed one (its reasons and file
    paths aside), the step count, the state before training (history at epoch 0: seed, data and regularizers) to
    REL_TOL, the pinv ranks wherever both envelopes pin the kappa; (b) every evaluation number of the rerun inside
    the rounding envelope of the rerun's theta and every committed one inside that of the committed theta
    (tests/envelope.py, plain NumPy), the data's own numbers (kappa_P_identity, kappa_H_identity: no theta) of the
    committed record also inside the rerun's envelope, and the committed probing numbers recomputed from the
    committed theta within the least-squares rounding model (_check_committed_probes: all 80 iteration counts
    determined and equal; measured: curves at most 0.28 of their bound, SkylakeX against the store's Haswell). The
    state before training agrees to 3.0e-12 at most (--threads 2), well inside REL_TOL.

    (c) theta_I, reported (record_property ``theta_I``, and printed), not asserted: no rounding bound is derivable.
    The training is a rounding-noise amplifier, measured on seed 0 (commands below): data perturbed elementwise by
    a relative eps (two draws) moves theta_I by 0.9-2.6e-6 relative (R_ill Only), 2.0-2.1e-3 (Ours), 1.1 (Opt
    kappa: another optimum; its RIR by 41-69 %), 1.1-1.3 eps (IMMA); another torch kernel gives the same picture:
    ``--threads 2`` 4.3e-7 / 2.3e-3 / 1.08 / bit-equal, ATEN_CPU_CAPABILITY=default (ATen without explicit SIMD)
    1.5e-7 / 2.1e-3 / 1.30 (R_ill Only / Ours / Opt kappa; pinv RIR: Ours -2.0 / -9.4 %, Opt kappa -62 / -15 %),
    and this test passes on both (run on their outputs). So Opt kappa's committed numbers are one outcome of its
    rounding, Ours' RIR holds to ~10 % across torch kernels, and the committed theta_I equals the rerun's only
    on the kernels that wrote it: torch 2.13.0+cpu with AVX512 ATen kernels and 1 thread (measured bit-equal, all
    20 runs; numpy's OpenBLAS kernel does not enter the training: SkylakeX, Haswell, Sandybridge, and MKL with
    MKL_ENABLE_INSTRUCTIONS=AVX2, bit-equal on seed 0). The store's evaluation and probing numbers are those of
    OpenBLAS's Haswell kernel (bit for bit on seed 0 with OPENBLAS_CORETYPE=Haswell, the spectra endpoints aside,
    which now come from the kappa's eigen-decomposition); SkylakeX (this machine's default) moves the pinv RIR by
    at most 1.6e-9 (20 runs), the shifted kappas by 2e-6 and n_kept_shifted by 1-2 (seed 0): rounding, which the old
    bit-for-bit test failed.
    Commands: ``OPENBLAS_CORETYPE=Haswell kappalab reproduce table1 --protocol paper --seeds 0 [--threads 2]``
    (also with ATEN_CPU_CAPABILITY=default) and the same run on ``dataclasses.replace(task, X_P=X_P * (1 + eps
    N(0, 1)), X_H=...)`` through kappalab.immunization.immunize: docs/reproduction/table1/paper_rounding.log."""
    from envelope import evaluation_envelope, outside
    from kappalab.cli import main
    from kappalab.immunization import LinearTask
    from kappalab.reproduce.table2.merge import REL_TOL

    folder = ROOT / "docs/reproduction/table1/paper"
    committed = {(r["method"], r["seed"]): r for r in RunStore(folder / "runs.jsonl").records()}
    meta = json.loads((folder / "table1.json").read_text())["meta"]
    assert main(["reproduce", "table1", "--protocol", "paper", "--out", str(tmp_path), "--no-progress"]) == 0
    runs = json.loads((tmp_path / "table1_paper.json").read_text())["runs"]
    assert len(runs) == len(committed) == 20
    X_P, X_H = np.load(folder / "features_P.npy"), np.load(folder / "features_H.npy")
    task = LinearTask(X_P, np.load(folder / "y_P.npy"), X_H, np.load(folder / "y_H.npy"), "mse", "files", "files")
    report, determined = [], 0
    for r in runs:
        old = committed[r["method"], r["seed"]]
        assert _config(r) == _config(old) and r["n_steps"] == old["n_steps"], r["key"]
        for name, values in old["history"].items():
            assert r["history"][name][0] == pytest.approx(values[0], rel=REL_TOL, abs=0), (r["key"], name)
        theta, theta_old = np.load(tmp_path / r["files"]["theta_I"]), np.load(folder / old["files"]["theta_I"])
        ev, ev_old = r["evaluation"], old["evaluation"]
        assert (ev["rtol"], ev["shift"]) == (ev_old["rtol"], ev_old["shift"]), r["key"]
        envelopes = [evaluation_envelope(t, None, X_P, X_H, rtol=ev["rtol"], shift=ev["shift"])
                     for t in (theta, theta_old)]
        for which, envelope, record in (("rerun", envelopes[0], ev), ("committed", envelopes[1], ev_old)):
            bad, count = outside(envelope, record)
            assert not bad and count == 42, (r["key"], which, bad)
        for name in ("kappa_P_identity", "kappa_H_identity"):
            assert ev_old["pinv"][name] in envelopes[0][("pinv",)][name], (r["key"], name)
        for name, ends in ev_old["spectra"].items():
            kappas = [e[("pinv",)][f"kappa_{name[2:]}"] for e in envelopes]
            if all(k.hi <= k.lo * (1 + 1e-6) for k in kappas):
                assert ev["spectra"][name]["rank_pinv"] == ends["rank_pinv"], (r["key"], name)
        determined += _check_committed_probes(folder, old, task, meta["probe_iters"], meta["probe_target"])[0]
        report.append(f"{r['key']}: theta_I bit-equal {np.array_equal(theta, theta_old)}, relative "
                      f"{_rel(theta, theta_old):.2e}; X_P theta {_rel(X_P @ theta, X_P @ theta_old):.2e}; pinv RIR "
                      f"{ev['pinv']['rir'] / ev_old['pinv']['rir'] - 1:+.2e}")
    assert determined == 4 * len(runs)  # 2 data sets x (norm ratio, excess loss): no count is left unchecked
    record_property("theta_I", report)
    print("\n".join(["", "theta_I of the rerun against the committed one (reported, not asserted):", *report]))
