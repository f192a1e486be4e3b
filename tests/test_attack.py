"""The attackers of :mod:`kappalab.attack` against closed forms computed here, the reach rule on hand-made curves,
and the extractor attackers' gradients against central differences. Features are built from their spectrum
(``U diag(s) V^T`` with random orthonormal U, V), so kappa is chosen, not found."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kappalab.attack import probe_attackers as pa
from kappalab.attack.extractor_attackers import batch_grads, extractor_attack, lora_grads
from kappalab.attack.measures import first_reach, slowdown
from kappalab.attack.problem import Factor, Rotated, loss
from kappalab.attack.registry import FUNCTIONS, registry

EPS = np.finfo(np.float64).eps


def _features(N: int, D: int, kappa: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((N, D)))[0]
    V = np.linalg.qr(rng.standard_normal((D, D)))[0]
    F = U @ np.diag(np.sqrt(np.geomspace(kappa, 1.0, D))) @ V.T
    return F, rng.standard_normal((N, 2))


def _take(it, n: int) -> list[np.ndarray]:
    return [next(it) for _ in range(n)]


def test_registry_matches_the_shipped_grid() -> None:
    reg = registry()
    assert list(reg) == list(FUNCTIONS) and len(reg) >= 8
    assert [a.name for a in reg.values() if a.changes_extractor] == ["finetune", "lora_r1", "lora_r4", "lora_r16"]
    assert len(reg["momentum"].grid) == 12 and reg["gd"].grid == ({},)


def test_gd_follows_the_eigenbasis_closed_form() -> None:
    """GD with step 1/s_max from 0 on ||F W - Y||^2/(2N): in F's SVD basis each component after t steps is
    ``(1 - (1 - s_i^2/(N s_max))^t) u_i^T Y / s_i`` (diagonal recursion). Both sides are float64 with error about
    ``t * D * eps * ||W*||`` from t rounded steps; the bound below uses 100 x that."""
    F, Y = _features(60, 8, 1e3, 0)
    f = Factor.of(F)
    t = 50
    W = _take(pa.gd(Rotated.of(F, Y, f)), t)[-1]
    U, s, Vt = np.linalg.svd(F, full_matrices=False)
    decay = (1 - s ** 2 / (F.shape[0] * f.s_max)) ** t
    expected = Vt.T @ (((1 - decay) / s)[:, None] * (U.T @ Y))
    w_star = np.linalg.norm(np.linalg.lstsq(F, Y, rcond=None)[0])
    assert np.linalg.norm(W - expected) <= 100 * t * F.shape[1] * EPS * w_star, (W, expected)


def test_solve_is_lstsq_and_its_loss_does_not_depend_on_kappa() -> None:
    """One step reaches the least-squares optimum at kappa 4 and 1e10 alike (same column space, same targets)."""
    for kappa in (4.0, 1e10):
        F, Y = _features(80, 10, kappa, 1)
        W = next(pa.solve(Rotated.of(F, Y)))
        ref = np.linalg.lstsq(F, Y, rcond=None)[0]
        # backward-stable solutions agree to about kappa(F) * eps relative (kappa(F) = sqrt(kappa))
        assert np.linalg.norm(W - ref) <= 100 * np.sqrt(kappa) * EPS * np.linalg.norm(ref)


def test_lbfgs_reaches_the_optimum_in_about_rank_steps() -> None:
    """Exact line search on a quadratic: L-BFGS is conjugate-gradient-like and ends in about D steps (D = 10 here;
    40 allows rounding's loss of conjugacy at kappa 1e4). The excess loss after 40 steps is below 1e-10 of the
    initial one; gradient descent at the same count is far above (kappa 1e4)."""
    F, Y = _features(80, 10, 1e4, 2)
    f = Factor.of(F)
    f_star = loss(F, Y, f.solve(Y))
    f_0 = loss(F, Y, np.zeros((10, 2)))
    W = _take(pa.lbfgs(Rotated.of(F, Y, f), memory=10), 40)[-1]
    assert loss(F, Y, W) - f_star <= 1e-10 * (f_0 - f_star)
    W_gd = _take(pa.gd(Rotated.of(F, Y, f)), 40)[-1]
    assert loss(F, Y, W_gd) - f_star > 1e-3 * (f_0 - f_star)


def test_momentum_without_momentum_is_gradient_descent_and_adam_first_step_is_sign() -> None:
    F, Y = _features(40, 6, 100.0, 3)
    f = Factor.of(F)
    W_m = _take(pa.momentum(Rotated.of(F, Y, f), scale=0.7, beta=0.0), 5)[-1]
    W_g = _take(pa.gd(Rotated.of(F, Y, f), scale=0.7), 5)[-1]
    assert np.allclose(W_m, W_g, rtol=0, atol=10 * EPS * np.abs(W_g).max())
    # Adam's first bias-corrected step is lr * g / (|g| + eps'): -lr * sign(g) up to the eps term
    W1 = next(pa.adam(Rotated.of(F, Y, f), lr=0.01))
    G = F.T @ (F @ np.zeros((6, 2)) - Y) / F.shape[0]
    assert np.allclose(W1, -0.01 * G / (np.abs(G) + pa.ADAM_EPS), rtol=0, atol=4 * EPS * 0.01)


def test_extractor_gradients_match_central_differences() -> None:
    """float64 central differences on one random direction each: error O(h^2 |f'''|) + O(eps |f| / h); h = 1e-5
    gives about 1e-10 relative, the bound is 1e-7."""
    rng = np.random.default_rng(4)
    Xb, Yb, M, W = (rng.standard_normal(s) for s in ((16, 5), (16, 2), (5, 4), (4, 2)))
    _, dM, dW = batch_grads(Xb, Yb, M, W)
    h = 1e-5
    for grad, which in ((dM, 0), (dW, 1)):
        E = rng.standard_normal(grad.shape)
        args_p = [M + h * E, W] if which == 0 else [M, W + h * E]
        args_m = [M - h * E, W] if which == 0 else [M, W - h * E]
        fd = (batch_grads(Xb, Yb, *args_p)[0] - batch_grads(Xb, Yb, *args_m)[0]) / (2 * h)
        assert abs(fd - np.sum(grad * E)) <= 1e-7 * max(1.0, abs(fd)), (which, fd, np.sum(grad * E))


def test_lora_gradients_match_central_differences() -> None:
    """As above, for ``M = theta + B A`` in B, A and W (the bound and step as above)."""
    rng = np.random.default_rng(6)
    Xb, Yb, theta, B, A, W = (rng.standard_normal(s) for s in ((16, 5), (16, 2), (5, 4), (5, 3), (3, 4), (4, 2)))
    _, *grads = lora_grads(Xb, Yb, theta, B, A, W)
    h = 1e-5
    for i, grad in enumerate(grads):
        E = rng.standard_normal(grad.shape)
        plus, minus = [B, A, W], [B, A, W]
        plus[i], minus[i] = plus[i] + h * E, minus[i] - h * E
        fd = (lora_grads(Xb, Yb, theta, *plus)[0] - lora_grads(Xb, Yb, theta, *minus)[0]) / (2 * h)
        assert abs(fd - np.sum(grad * E)) <= 1e-7 * max(1.0, abs(fd)), (i, fd, np.sum(grad * E))


@pytest.mark.parametrize("rank", [None, 2])
def test_extractor_attackers_fit_a_realizable_task(rank: int | None) -> None:
    """Y = X v exactly: fine-tuning and LoRA drive the training loss down by 1e-6 of its start (Adam, full batch)."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((64, 6))
    Y = X @ rng.standard_normal((6, 1))
    theta = rng.standard_normal((6, 6))
    maps = _take(extractor_attack(X, Y, theta, seed=0, optimizer="adam", lr=1e-2, batch_size=64, rank=rank), 3000)
    assert loss(X, Y, maps[-1].map) <= 1e-6 * loss(X, Y, np.zeros((6, 1)))


def test_accuracy_counts_the_classes_the_targets_code_and_none_for_a_regression() -> None:
    """By hand: +-1 targets read by sign (0 is wrong); one-hot and +-1 one-vs-rest codes by the largest entry; real
    targets, or a row with two largest entries, are no classes (None)."""
    from kappalab.attack.problem import prediction_accuracy

    Y = np.array([[1.0], [-1.0], [1.0], [-1.0]])
    assert prediction_accuracy(np.array([[0.3], [-2.0], [0.0], [0.1]]), Y) == 0.5
    onehot = np.eye(3)[[0, 2, 1, 2]]
    P = np.array([[0.9, 0.1, 0.0], [0.2, 0.3, 0.4], [0.5, 0.2, 0.1], [0.0, 0.0, 1.0]])
    assert prediction_accuracy(P, onehot) == 0.75 and prediction_accuracy(P, 2 * onehot - 1) == 0.75
    assert prediction_accuracy(P[:, :1], np.array([[0.5], [1.0], [-1.0], [1.0]])) is None
    assert prediction_accuracy(P, np.array([[1.0, 1.0, 0.0], *onehot[1:]])) is None


@pytest.mark.parametrize("kappa, rank_deficient", [(50.0, False), (1e12, False), (1e12, True)])
def test_attack_records_accuracy_at_each_budget_where_the_targets_are_classes(kappa: float,
                                                                             rank_deficient: bool) -> None:
    """A +-1 task: at the least-squares solution (``solve``, one step) each budget's accuracy on the training and
    test rows is the least-squares fit's sign agreement, recomputed here with another solver (lstsq), on features
    with kappa(H) 50 or 1e12, and with a repeated column (rank 5 of 6). A real-valued target gives None."""
    from kappalab.attack.measures import attack
    from kappalab.attack.problem import Split
    from kappalab.attack.registry import Model

    F, Y = _features(200, 5, kappa, 3)
    if rank_deficient:
        F = np.hstack([F, F[:, :1]])
    y = np.where(F[:, :5] @ np.arange(1.0, 6.0) + 0.3 * Y[:, 0] > 0, 1.0, -1.0)
    split = Split.of(F, y, 0)
    kw = dict(budgets=(1, 10), steps=100, batch_size=16, selection_budget=10)
    solve = attack(Model(split), registry()["solve"], 0, **kw)
    (A, Yt), (At, Yte) = split.train, split.test
    # a different solver: rows predicted within its rounding of 0 (kappa(F) <= 1e6, so about 1e-10 of the largest
    # prediction; 1e-8 is the margin allowed) may differ
    W = np.linalg.lstsq(A, Yt, rcond=None)[0]
    for b in (1, 10):
        for rows, (X, T) in (("train", (A, Yt)), ("test", (At, Yte))):
            P = X @ W
            undecided = np.mean(np.abs(P) < 1e-8 * np.abs(P).max())
            assert abs(solve.at_budget[b][f"{rows}_accuracy"] - np.mean(np.sign(P) == T)) <= undecided
    assert 0.8 < solve.at_budget[10]["test_accuracy"] <= 1.0
    regression = attack(Model(Split.of(F, Y[:, 0], 0)), registry()["gd"], 0, **kw)
    assert regression.at_budget[10]["train_accuracy"] is None and regression.at_budget[10]["test_accuracy"] is None


def test_reach_rule_on_hand_made_curves() -> None:
    c0 = np.array([10.0, 5.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    cI = np.array([10.0, 9.0, 8.0, 7.0, 6.0, 4.0, 3.0, 2.0, 1.5, 1.2, 0.9])
    s = slowdown(cI, c0, 1, 0.0, 10)  # target c0[1] = 5: cI first <= 5 at step 5
    assert (s.steps, s.reached, s.slowdown, s.limit) == (5, True, 5.0, 10)
    assert first_reach(cI, 2.0, 0.0, 10) == 7 and first_reach(cI, 2.0, 1.0, 10) == 6
    assert first_reach(cI, 0.5, 0.0, 10) is None
    s2 = slowdown(cI[:3], c0, 1, 0.0, 2)  # target 5 not within 2 steps
    assert not s2.reached and s2.slowdown is None
    with pytest.raises(ValueError, match="too short"):
        slowdown(cI[:5], c0, 1, 0.0, 10)


def test_scope_group_of_identical_extractors_has_slowdown_one() -> None:
    """A theta_I equal to the reference (theta = I) on a kappa-1e4 task: gradient descent's loss still falls at step
    100 by far more than the rounding slack, so theta_I first reaches the reference's step-100 loss at step 100
    (slowdown exactly 1.0); solve reaches it at step 1 (0.01). One record per model x attacker."""
    from kappalab.attack.scope import Group, ModelSpec, run_group

    X, Y = _features(80, 6, 1e4, 6)
    eye = np.eye(6)
    group = Group("t", 0, None, X, Y[:, 0], (ModelSpec("ours", eye, "immunized", "key", 2.0),
                                            ModelSpec("direct", eye, "reference")))
    records, curves = run_group(group, ("gd", "solve"), log=lambda line: None)
    assert len(records) == 4 and set(curves) == {r["curve"] for r in records}
    by = {(r["method"], r["attacker"]): r for r in records}
    c = curves[by[("ours", "gd")]["curve"]]
    assert c[99] - c[100] > 10 * by[("ours", "gd")]["slack"]
    assert by[("ours", "gd")]["slowdown"]["direct"]["100"]["slowdown"] == 1.0
    assert by[("ours", "solve")]["slowdown"]["direct"]["100"]["slowdown"] == 0.01
    assert by[("direct", "gd")]["slowdown"] == {}  # a reference is not compared with itself


def test_scope_budgets_set_the_run_length_and_the_slowdowns_taken() -> None:
    """``budgets`` (1, 10): each run is 10 x 10 steps (curves of 101 points) and the slowdowns are taken at 1 and
    10 only; the first 101 points of the default run (10 x 100 steps) are the same iterates (rtol 1e-12: one
    computation twice, on one machine), so a slowdown at a budget both runs take is the same."""
    from kappalab.attack.scope import Group, ModelSpec, run_group

    X, Y = _features(80, 6, 1e3, 9)
    theta = np.random.default_rng(9).standard_normal((6, 6))
    group = Group("t", 0, None, X, Y[:, 0], (ModelSpec("ours", theta, "immunized", "key", 2.0),
                                            ModelSpec("direct", np.eye(6), "reference")))
    short, short_curves = run_group(group, ("gd", "adam"), log=lambda line: None, budgets=(1, 10))
    long, long_curves = run_group(group, ("gd", "adam"), log=lambda line: None)
    for r, q in zip(short, long):
        assert short_curves[r["curve"]].size == 101 and long_curves[q["curve"]].size == 1001
        np.testing.assert_allclose(short_curves[r["curve"]], long_curves[q["curve"]][:101], rtol=1e-12)
        if r["method"] == "ours":
            assert set(r["slowdown"]["direct"]) == {"1", "10"} and set(q["slowdown"]["direct"]) == {"1", "10", "100"}
            assert r["slowdown"]["direct"]["10"]["steps"] == q["slowdown"]["direct"]["10"]["steps"]


def test_scope_attacks_a_deep_model_from_its_features_alone() -> None:
    """A feature-only model (a deep extractor's D_H features, no theta) is attacked like a linear one: features
    with kappa 1e6 against a reference's of 4 (the same column space) slow gradient descent by more than 10x at
    budget 100 and a least-squares solve not at all; an attacker that changes the extractor is refused."""
    from kappalab.attack.scope import Group, ModelSpec, run_group

    F_ref, Y = _features(120, 6, 4.0, 7)
    U, s, Vt = np.linalg.svd(F_ref, full_matrices=False)
    F_ill = U @ np.diag(np.sqrt(np.geomspace(1e6, 1.0, 6))) @ Vt
    pixels = np.random.default_rng(8).standard_normal((120, 5))
    group = Group("t3", 0, "d", pixels, Y[:, 0], (ModelSpec("ours", None, "immunized", "k", 9.0, features=F_ill),
                                                 ModelSpec("init", None, "reference", features=F_ref)))
    records, _ = run_group(group, ("gd", "solve"), log=lambda line: None)
    by = {(r["method"], r["attacker"]): r["slowdown"].get("init", {}).get("100") for r in records}
    gd, solve = by[("ours", "gd")], by[("ours", "solve")]
    assert not gd["reached"] or gd["slowdown"] >= 10
    assert solve["reached"] and solve["slowdown"] <= 2
    with pytest.raises(ValueError, match="finetune change the extractor"):
        run_group(group, ("gd", "finetune"), log=lambda line: None)


def test_a_strided_curve_is_the_full_curve_at_its_computed_steps_and_reach_is_late_by_less_than_the_stride() -> None:
    """``curve_every = 10`` (the deep attackers' stride) on a linear extractor's fine-tuning, same seed: the computed
    points are the every-step curve's (the same iterates; rtol 1e-12 covers a different summation order), NaN
    elsewhere; a reach step read from it is the first computed step at or below the target: never before the full
    curve's (a minibatch curve may dip below the target between computed steps and rise again)."""
    from kappalab.attack.measures import attack
    from kappalab.attack.problem import Split
    from kappalab.attack.registry import Model

    rng = np.random.default_rng(7)
    X = rng.standard_normal((200, 6))
    y = X @ rng.standard_normal(6) + 0.1 * rng.standard_normal(200)
    theta = rng.standard_normal((6, 6))
    model = Model(Split.of(X @ theta, y, 0), Split.of(X, y, 0), theta)
    finetune = registry()["finetune"]
    kw = dict(budgets=(1, 10, 100), steps=300, batch_size=16, selection_budget=20)
    full = attack(model, finetune, 0, **kw).curve
    strided = attack(model, finetune, 0, curve_every=10, **kw).curve
    computed = np.flatnonzero(~np.isnan(strided))
    assert list(computed) == list(range(11)) + list(range(20, 301, 10))
    assert np.allclose(strided[computed], full[computed], rtol=1e-12, atol=0)
    for target in np.quantile(full[:301], [0.1, 0.3, 0.6]):
        true, read = first_reach(full, target, 0.0, 300), first_reach(strided, target, 0.0, 300)
        assert true is not None and read is not None and true <= read
        assert read == min(t for t in computed if full[t] <= target)


def test_append_keeps_what_is_stored_and_refuses_an_attack_stored_twice(tmp_path) -> None:
    from kappalab.attack.scope import Group, ModelSpec, stored_twice, write

    spec = ModelSpec("ours", np.eye(2), "immunized")
    group = Group("table3", 1, "fmnist_vs_mnist", np.zeros((3, 2)), np.zeros(3), (spec,))
    record = {"seed": 1, "method": "ours"}
    write(tmp_path, "table3", [{**record, "attacker": "gd"}], {group.curve_key(spec, "gd"): np.ones(3)}, {}, "x")
    assert stored_twice(tmp_path, "table3", [group], ["gd", "finetune"]) == [group.curve_key(spec, "gd")]
    write(tmp_path, "table3", [{**record, "attacker": "finetune"}], {group.curve_key(spec, "finetune"): np.zeros(3)},
          {}, "x", append=True)
    lines = (tmp_path / "table3.jsonl").read_text().splitlines()
    assert [json.loads(x)["attacker"] for x in lines] == ["gd", "finetune"]
    with np.load(tmp_path / "table3_curves.npz") as z:
        assert sorted(z.files) == sorted(group.curve_key(spec, a) for a in ("gd", "finetune"))
        assert z[group.curve_key(spec, "gd")].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="both hold table3/ours/s1/fmnist_vs_mnist\\|gd"):
        write(tmp_path, "table3", [{**record, "attacker": "gd"}], {group.curve_key(spec, "gd"): np.ones(3)}, {}, "x",
              append=True)
    assert len((tmp_path / "table3.jsonl").read_text().splitlines()) == 2  # nothing written by the refusal


def test_merge_joins_parts_verbatim_and_refuses_an_attack_in_two(tmp_path) -> None:
    from kappalab.attack.scope import Group, ModelSpec, merge, write

    spec = ModelSpec("ours", np.eye(2), "immunized")
    group = Group("table3", 1, "fmnist_vs_mnist", np.zeros((3, 2)), np.zeros(3), (spec,))
    for attacker, config in (("gd", {"run": "a"}), ("finetune", {"run": "b"})):
        key = group.curve_key(spec, attacker)
        write(tmp_path / attacker, "table3", [{"seed": 1, "attacker": attacker, "curve": key}],
              {key: np.full(3, len(attacker), dtype=float)}, config, "x")
    merge(tmp_path / "out", "table3", [tmp_path / "gd", tmp_path / "finetune"])
    records = [json.loads(x) for x in (tmp_path / "out" / "table3.jsonl").read_text().splitlines()]
    assert [(r["attacker"], r["provenance"]["config"]["run"]) for r in records] == [("gd", "a"), ("finetune", "b")]
    with np.load(tmp_path / "out" / "table3_curves.npz") as z:
        assert z[group.curve_key(spec, "finetune")].tolist() == [8.0, 8.0, 8.0]
    with pytest.raises(ValueError, match="both hold table3/ours/s1/fmnist_vs_mnist\\|gd"):
        merge(tmp_path / "again", "table3", [tmp_path / "gd", tmp_path / "gd"])
    with pytest.raises(ValueError, match="no table3.jsonl"):
        merge(tmp_path / "again", "table3", [tmp_path / "nowhere"])
    assert not (tmp_path / "again").exists()


def test_lbfgs_on_rank_deficient_features_stays_at_the_optimum_after_converging() -> None:
    """Three singular values at 1e-15 of the largest (below the rank rule's max(N, D) eps): the factor drops them,
    and L-BFGS, converged in a few steps, stays at the minimum-norm optimum for 500 steps. (With them kept, its exact
    line search stepped 1 / s_i^2 along them and grew W to 1e13 on House Prices' direct features.)"""
    rng = np.random.default_rng(10)
    U = np.linalg.qr(rng.standard_normal((120, 8)))[0]
    V = np.linalg.qr(rng.standard_normal((8, 8)))[0]
    F = U @ np.diag([9.0, 7.0, 5.0, 3.0, 2.0, 1e-14, 1e-14, 1e-14]) @ V.T
    Y = rng.standard_normal((120, 2))
    problem = Rotated.of(F, Y)
    assert problem.factor.rank == 5 and problem.factor.s.shape == (5,)
    W_star = problem.factor.solve(Y)
    optimum = loss(F, Y, W_star)
    iterates = _take(pa.lbfgs(problem, memory=10), 500)
    for W in iterates[20:]:
        assert np.linalg.norm(W) <= 1.01 * np.linalg.norm(W_star)
        assert abs(problem.loss(W) - optimum) <= problem.slack(F, Y, W) + problem.slack(F, Y, W_star)
