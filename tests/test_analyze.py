"""``kappalab analyze``: command line contract, statistics, and the monotonicity bookkeeping on exact steps."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from kappalab import grad_theta_r_ill, grad_theta_r_well, hessian
from kappalab.analyze import main
from kappalab.analyze.monotonicity import Task, corrected_bound_ill, corrected_bound_well, state, step_row
from kappalab.analyze.stats import RankCorrelation, bootstrap_rhos, spearman_bootstrap
from kappalab.linear import hessian_extremes
from proofs_checks.test_T4_3_1 import corrected_bound as reference_well
from proofs_checks.test_T4_3_2 import corrected_bound as reference_ill


# ---- command line -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--help"], ["alignment", "--help"], ["monotonicity", "-h"]])
def test_help_starts_no_work(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    assert "usage: kappalab analyze" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, needle", [
    ([], "the following arguments are required"),
    (["bogus"], "invalid choice: 'bogus'"),
    (["monotonicity", "--table1-epochs", "0"], "--table1-epochs: expected a positive integer"),
    (["monotonicity", "--table2-pairs", "3-3"], "two different digits"),
    (["monotonicity", "--table1-seeds", "-1"], "non-negative integer seed"),
    (["alignment", "--seed", "x"], "non-negative integer seed"),
    (["alignment", "--root", "no/such/dir"], "has no docs/reproduction folder"),
])
def test_bad_arguments_exit_2_with_one_line(argv, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


# ---- statistics -------------------------------------------------------------------------------------------------

def test_spearman_bootstrap_on_monotone_and_on_independent_data():
    x = np.arange(30.0)
    rc = spearman_bootstrap(x, np.exp(x / 5))
    assert rc.rho == 1.0 and rc.low == pytest.approx(1.0, abs=1e-12) and rc.high == pytest.approx(1.0, abs=1e-12)
    assert rc.verdict(+1) == "supports" and rc.verdict(-1) == "contradicts"
    rng = np.random.default_rng(1)
    rc = spearman_bootstrap(rng.standard_normal(90), rng.standard_normal(90))
    assert rc.low < 0 < rc.high and rc.verdict(+1) == "cannot tell"
    assert RankCorrelation(-0.5, -0.7, -0.2, 10).verdict(-1) == "supports"
    with pytest.raises(ValueError, match="equal length"):
        spearman_bootstrap(np.ones(3), np.ones(4))


# ---- monotonicity bookkeeping -----------------------------------------------------------------------------------

def _random_case(seed: int, D: int = 5):
    rng = np.random.default_rng(seed)
    X_P, X_H = rng.standard_normal((12, D)), rng.standard_normal((9, D))
    return Task("random", X_P, X_H, "core"), rng.standard_normal((D, D))


@pytest.mark.parametrize("seed", range(5))
def test_corrected_bounds_equal_the_proofs_checks_definitions(seed):
    task, theta = _random_case(seed)
    for which, ours, ref in (("P", lambda e: corrected_bound_well(e, 5), lambda e: reference_well(e, 5)),
                             ("H", corrected_bound_ill, lambda e: reference_ill(e, 5))):
        _, _, _, e = hessian_extremes(theta, task.K[which])
        assert ours(e) == pytest.approx(float(ref(e)), rel=1e-14)


@pytest.mark.parametrize("which", ["P", "H"])
def test_a_pure_theorem_step_inside_the_corrected_bound_is_measured_exactly(which):
    # theta' = theta - eta K^+ grad R: eta_eq must be eta, the cosine 1, and kappa must move the guaranteed way
    # (the corrected bound is a proven sufficient condition, checked in proofs_checks).
    task, theta = _random_case(7)
    before = state(task, theta)
    eta = 0.5 * before[f"corrected_{which}"]
    after = state(task, theta - eta * before[f"direction_{which}"])
    row = step_row(before, after, task)
    assert row[f"eta_eq_{which}"] == pytest.approx(eta, rel=1e-12)
    assert row[f"cos_{which}"] == pytest.approx(1.0, abs=1e-12)
    assert row[f"inside_corrected_{which}"] == "inside" and row[f"bound_status_{which}"] == "ok"
    assert row[f"{which}_guaranteed_way"]


def test_direction_is_the_pseudo_inverse_preconditioned_gradient():
    task, theta = _random_case(8)
    s = state(task, theta)
    for which, grad in (("P", grad_theta_r_well), ("H", grad_theta_r_ill)):
        K = task.K[which]
        # K d = K K^+ grad = grad (the gradient 2 K theta G lies in range(K))
        np.testing.assert_allclose(K @ s[f"direction_{which}"], grad(theta, K), rtol=1e-9, atol=1e-9)
    assert s["kappa_P"] == pytest.approx(float(np.linalg.cond(hessian(theta, task.K["P"]))), rel=1e-9)


def test_monotonicity_end_to_end_one_step_per_method(tmp_path):
    out = tmp_path / "m"
    assert main(["monotonicity", "--table1-epochs", "2", "--table1-seeds", "0", "--skip-table2", "--out",
                 str(out)]) == 0
    rows = list(csv.DictReader((out / "monotonicity_steps.csv").open()))
    assert len(rows) == 4 * 2 and {r["method"] for r in rows} == {"rill_only", "imma", "opt_kappa", "ours"}
    for r in rows:
        moved = float(r["kappa_P_after"]) < float(r["kappa_P_before"])
        assert (r["P_guaranteed_way"] == "True") == moved
        assert math.isfinite(float(r["eta_eq_P"]))
    assert (out / "monotonicity.png").stat().st_size > 0
    assert "| Table 1 | Ours |" in (out / "monotonicity.md").read_text()
    runs = json.loads((out / "monotonicity.json").read_text())["runs"]
    assert all(src.endswith(".json") and "/" not in src for r in runs for src in r["config"]["source"])


def test_bootstrap_rhos_equal_scipy_spearman_on_each_resample():
    # the vectorised resampling computes Spearman as Pearson of average ranks; scipy's spearmanr (per resample, same
    # indices) is the reference, ties included
    from scipy.stats import spearmanr

    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 5, 20).astype(float), rng.standard_normal(20)
    got = bootstrap_rhos(x, y, seed=3, reps=50)
    idx = np.random.default_rng(3).integers(0, 20, (50, 20))
    ref = [spearmanr(x[i], y[i]).statistic for i in idx if np.ptp(x[i]) > 0]
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-13)


@pytest.mark.parametrize("protocol", ["paper", "official"])
def test_observer_sees_every_step_and_does_not_change_the_run(protocol):
    from kappalab.immunization import LinearTask, immunize, table1_config

    rng = np.random.default_rng(5)
    X_P, X_H = rng.standard_normal((32, 4)), rng.standard_normal((32, 4))
    task = LinearTask(X_P, rng.standard_normal(32), X_H, rng.standard_normal(32), "mse", "tiny", "synthetic")
    cfg = table1_config(protocol, "ours").replace(epochs=2, batch_size=None if protocol == "paper" else 8)
    seen: list[tuple[int, np.ndarray]] = []
    run = immunize(task, cfg, 0, observer=lambda step, p: seen.append((step, p.theta.detach().numpy().copy())))
    plain = immunize(task, cfg, 0)
    assert [s for s, _ in seen] == list(range(run.n_steps + 1))
    assert not np.array_equal(seen[0][1], seen[1][1])  # step 0 is the initialisation, before any update
    np.testing.assert_array_equal(seen[-1][1], run.theta_I)
    np.testing.assert_array_equal(run.theta_I, plain.theta_I)
