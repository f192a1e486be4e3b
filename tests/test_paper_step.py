"""The paper protocol's closed-form Alg. 1 step (``extra.spectral_route = "closed_form"``,
:mod:`kappalab.immunization.paper_step`) against the autograd step (route "dense"), and the degenerate flag of
Table 2's Alg. 1 runs.

* ``(K + ridge I)^{-1} K`` from X's SVD (:func:`kappalab.linear.covariance_factor`, :func:`~kappalab.linear.ridge_weights`)
  against 50-digit mpmath, and the Cholesky solve it replaces, on the same ill-conditioned case (where the solve
  loses digits and it does not); :func:`kappalab.gram.regularizers_from_data` on K's factor (with row weights) against
  :func:`~kappalab.gram.regularizers_from_covariance` and that solve on well-conditioned ones.
* Per step on small tasks with simple spectra: every gradient and every term's value equal to the autograd path's
  to 1e-10 relative (Ours, R_ill Only; preconditioned or not; K of full and of deficient rank).
* At Table 2's shape (full-MNIST pair 0-1, seed 0, first step): the unpreconditioned gradients to 1e-10; the
  preconditioned ones differ by ~1e-7, the rounding floor of the autograd path's own Cholesky solve (pinned here).
* The degenerate flag (R_ill's s_min of H_H): raised alike by both routes, and the gradient moves by the bound
  ``4 s_k ||A theta|| / d^2`` at most when v_k is replaced by any vector of the flagged cluster (negligible).
* One committed Table 2 Alg. 1 run (R_ill Only, pair 0-1, seed 0, lr 0.001) rerun with the closed form: its Eq. 15
  numbers equal the record's to 1e-8 relative (slow: ~10 s).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import mpmath
import numpy as np
import pytest
import scipy.linalg as sl
import torch

from kappalab.errors import DegenerateSpectrumWarning
from kappalab.gram import regularizers_from_covariance, regularizers_from_data
from kappalab.immunization import LinearTask
from kappalab.immunization.methods import step_gradients
from kappalab.immunization.protocols import make_protocol
from kappalab.linear import covariance_factor, hessian, ridge_weights
from kappalab.regularizers import grad_r_ill_from_extremes
from kappalab.reproduce.table2 import table2_config
from kappalab.spectral import psd_extremes

STORE = Path(__file__).resolve().parents[1] / "docs" / "reproduction" / "table2" / "paper_alg1"


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _with_spectrum(s: np.ndarray, N: int, seed: int) -> np.ndarray:
    """An ``N x len(s)`` matrix with singular values ``s`` (random orthogonal factors)."""
    rng = np.random.default_rng(seed)
    U, _ = np.linalg.qr(rng.standard_normal((N, len(s))))
    W, _ = np.linalg.qr(rng.standard_normal((len(s), len(s))))
    return (U * s) @ W.T


def _mp_projector(X: np.ndarray, ridge: float) -> np.ndarray:
    """``(X^T X + ridge I)^{-1} X^T X`` in 50-digit arithmetic (mpmath inverse), rounded to float64."""
    with mpmath.workdps(50):
        Xm = mpmath.matrix(X.tolist())
        K = Xm.T * Xm
        A = K + ridge * mpmath.eye(X.shape[1])
        return np.array((mpmath.inverse(A) * K).tolist(), dtype=float)


def _projector(X) -> np.ndarray:
    """``(K + 1e-3 I)^{-1} K`` from the factor ``X_f = diag(s) Wt`` of K and the ridge weights (NumPy or torch)."""
    s, Wt = covariance_factor(X)
    X_f = s[:, None] * Wt
    return X_f.T @ (ridge_weights(s, 1e-3)[:, None] * X_f)


@pytest.mark.parametrize("N, s", [(12, np.logspace(3, -3, 6)), (4, np.array([30.0, 2.0, 0.05, 1e-3]))])
def test_ridge_weights_against_mpmath_and_the_cholesky_solve(N: int, s: np.ndarray) -> None:
    """N > D (through QR) and N < D (rank N): the projector within its documented bound 2 eps s_1 / sqrt(ridge)
    (1.4e-11, resp. 4e-13); the Cholesky solve of the dense route on the same K (condition s_1^2 / ridge = 1e9,
    resp. 9e5) loses digits to that condition."""
    D = 6 if N > 6 else 7
    X = _with_spectrum(s, N, seed=N) if N > D else _with_spectrum(s, D, seed=N)[:, :N].T
    ref = _mp_projector(X, 1e-3)
    P = _projector(X)
    bound = 2 * np.finfo(float).eps * s[0] / np.sqrt(1e-3)
    assert _rel(P, ref) < bound
    K = X.T @ X
    chol = sl.cho_solve(sl.cho_factor(K + 1e-3 * np.eye(D)), K)
    assert _rel(chol, ref) > 10 * _rel(P, ref)  # the solve is the less accurate route (measured 1.3e-13 vs 1.7e-8, 4e-15 vs 4e-11)
    assert _rel(_projector(torch.from_numpy(X)).numpy(), ref) < bound  # the torch path: the same formulas


def test_covariance_factor_drops_only_the_null_space() -> None:
    """X of rank 3 (5 x 8, two rows repeated): r = 3 kept values, K recomposed to rounding."""
    X = _with_spectrum(np.array([4.0, 1.0, 0.1]), 8, seed=5)[:, :3].T
    X = np.vstack([X, X[:2]])
    s, Wt = covariance_factor(X)
    assert s.shape == (3,) and Wt.shape == (3, 8)
    assert _rel((Wt.T * s ** 2) @ Wt, X.T @ X) < 1e-14


def test_factor_route_bad_input() -> None:
    with pytest.raises(ValueError, match="ridge must be positive"):
        ridge_weights(np.ones(3), 0.0)
    with pytest.raises(ValueError, match="row_weights must hold one weight per row of X"):
        regularizers_from_data(np.eye(3), np.eye(3)[:2], row_weights=np.ones(3))


@pytest.mark.parametrize("N", [30, 5])
def test_factor_route_equals_the_covariance_route_and_the_solve(N: int) -> None:
    """Values and theta-gradients of both regularizers from K's factor equal those from K itself (full rank and
    rank 5 < D = 8: the gram route) to 1e-12; with the ridge weights, the Cholesky-preconditioned gradients (ridge
    0.5) to 1e-12."""
    rng = np.random.default_rng(N)
    X = rng.standard_normal((N, 8)) * np.linspace(0.5, 2.0, 8)
    theta = rng.standard_normal((8, 8)) / 3
    K = X.T @ X
    s, Wt = covariance_factor(X)
    X_f = s[:, None] * Wt
    ref = regularizers_from_covariance(theta, K)
    got = regularizers_from_data(theta, X_f)
    for name in ("r_well", "r_ill", "grad_well", "grad_ill"):
        assert _rel(np.asarray(getattr(got, name)), np.asarray(getattr(ref, name))) < 1e-12, name
    pre = regularizers_from_data(theta, X_f, row_weights=ridge_weights(s, 0.5))
    factor = sl.cho_factor(K + 0.5 * np.eye(8))
    for name in ("grad_well", "grad_ill"):
        assert _rel(getattr(pre, name), sl.cho_solve(factor, getattr(ref, name))) < 1e-12, name


def _task(N_P: int, N_H: int, D: int, seed: int) -> LinearTask:
    rng = np.random.default_rng(seed)
    X_P = rng.standard_normal((N_P, D)) * np.linspace(0.3, 2.0, D)
    X_H = rng.standard_normal((N_H, D)) * np.linspace(2.0, 0.2, D)
    return LinearTask(X_P, np.zeros(N_P), X_H, np.ones(N_H), "bce", "small", "small")


def _step(task: LinearTask, method: str, route: str, overrides: dict) -> tuple[dict, dict, int]:
    """One step of the paper protocol: theta's and w_P's gradients, the terms' values, the degenerate warnings."""
    cfg = table2_config("paper", method, {"extra.spectral_route": route, **overrides})
    proto = make_protocol(task, cfg, "cpu")
    p = proto.init_params(0, with_w_H=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DegenerateSpectrumWarning)
        grads, terms = step_gradients(proto, p, proto._full.for_step(), cfg)
    flagged = sum(issubclass(w.category, DegenerateSpectrumWarning) for w in caught)
    named = {"theta": grads[id(p.theta)].detach().numpy()}
    if id(p.w_P) in grads:
        named["w_P"] = grads[id(p.w_P)].detach().numpy()
    return named, {t.name: float(t.value.detach()) for t in terms}, flagged


@pytest.mark.parametrize("method", ["ours", "rill_only"])
@pytest.mark.parametrize("precondition", [True, False])
@pytest.mark.parametrize("N_P, N_H, D", [(40, 35, 10), (7, 6, 10)])
def test_closed_form_step_equals_autograd_step(method: str, precondition: bool, N_P: int, N_H: int, D: int) -> None:
    """Full rank (N > D) and rank N < D (the rank cut in an exact gap); lambda_H = 1 keeps R_ill's gradient
    comparable to the others (Table 2's 5e7 only scales it)."""
    task = _task(N_P, N_H, D, seed=D + N_P)
    overrides = {"lambda_H": 1.0, "extra.precondition": precondition}
    dense, dense_terms, _ = _step(task, method, "dense", overrides)
    closed, closed_terms, _ = _step(task, method, "closed_form", overrides)
    assert dense.keys() == closed.keys() and dense_terms.keys() == closed_terms.keys()
    for name in dense:
        assert _rel(closed[name], dense[name]) < 1e-10, name
    for name in dense_terms:
        assert abs(closed_terms[name] / dense_terms[name] - 1.0) < 1e-10, name


def test_device_path_equals_the_host_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The branch CUDA takes (torch tensors through the core: QR, SVD, eigh) run on the CPU: the same gradients as
    the NumPy branch to 1e-12."""
    from kappalab.immunization import paper_step

    task = _task(40, 9, 10, seed=4)
    host, host_terms, _ = _step(task, "ours", "closed_form", {"lambda_H": 1.0})
    monkeypatch.setattr(paper_step, "_host_or_device", lambda t: t.detach())
    device, device_terms, _ = _step(task, "ours", "closed_form", {"lambda_H": 1.0})
    for name in host:
        assert _rel(device[name], host[name]) < 1e-12, name
    for name in host_terms:
        assert abs(device_terms[name] / host_terms[name] - 1.0) < 1e-12, name


def test_closed_form_needs_a_positive_ridge() -> None:
    cfg = table2_config("paper", "rill_only", {"extra.spectral_route": "closed_form", "ridge_H": 0.0})
    proto = make_protocol(_task(8, 8, 4, seed=0), cfg, "cpu")
    with pytest.raises(ValueError, match="needs ridge_H > 0, got 0.0"):
        step_gradients(proto, proto.init_params(0, False), proto._full.for_step(), cfg)


def test_route_is_refused_by_the_official_protocol() -> None:
    cfg = table2_config("official", "ours", {"extra.spectral_route": "closed_form"})
    with pytest.raises(ValueError, match="spectral_route 'closed_form' is not implemented for the 'official'"):
        make_protocol(_task(8, 8, 4, seed=0), cfg, "cpu")


@pytest.mark.parametrize("method", ["opt_kappa", "imma"])
def test_route_is_refused_for_the_methods_it_does_not_implement(method: str) -> None:
    """Opt kappa and IMMA have no closed-form Alg. 1 step: the route is refused, not run as the dense step."""
    cfg = table2_config("paper", method, {"extra.spectral_route": "closed_form"})
    with pytest.raises(ValueError, match=f"implements the methods \\('ours', 'rill_only'\\), not '{method}'"):
        make_protocol(_task(8, 8, 4, seed=0), cfg, "cpu")


@pytest.fixture(scope="module")
def pair01() -> LinearTask:
    """Table 2's Alg. 1 task of pair 0-1, seed 0 (the train part of full MNIST's splits)."""
    from kappalab.data.mnist import load_digits, pair_splits

    splits = pair_splits(load_digits("mnist"), load_digits("mnist", split="test"), 0, 1, 0)
    X_P, X_H = splits.arrays("train")
    return LinearTask(X_P, np.zeros(len(X_P)), X_H, np.ones(len(X_H)), "bce", "mnist/0-1/train", "pair 0-1")


def test_real_shape_step(pair01: LinearTask) -> None:
    """D = 784, 5331 rows a task, Ours. Unpreconditioned: equal to 1e-10. Preconditioned: within 1e-6, and the
    autograd path's own floor is that large: its Cholesky solve moves by > 1e-8 when the gradient it is given
    changes by rounding only (another product order)."""
    plain = {"extra.precondition": False}
    a, a_terms, _ = _step(pair01, "ours", "dense", plain)
    b, b_terms, _ = _step(pair01, "ours", "closed_form", plain)
    for name in a:
        assert _rel(b[name], a[name]) < 1e-10, name
    for name in a_terms:
        assert abs(b_terms[name] / a_terms[name] - 1.0) < 1e-10, name
    a, _, _ = _step(pair01, "ours", "dense", {})
    b, _, _ = _step(pair01, "ours", "closed_form", {})
    assert _rel(b["theta"], a["theta"]) < 1e-6
    theta = make_protocol(pair01, table2_config("paper", "ours"), "cpu").init_params(0, False).theta.detach().numpy()
    K = pair01.X_H.T @ pair01.X_H
    K = 0.5 * (K + K.T)
    H = hessian(theta, K)
    G = grad_r_ill_from_extremes(psd_extremes(H), H)
    g1, g2 = 2.0 * K @ (theta @ G), 2.0 * (K @ theta) @ G  # the same product in two orders
    assert _rel(g1, g2) < 1e-13
    factor = sl.cho_factor(K + 1e-3 * np.eye(784))
    assert _rel(sl.cho_solve(factor, g1), sl.cho_solve(factor, g2)) > 1e-8


def test_degenerate_flag_is_s_min_of_H_H_and_its_cluster_does_not_move_the_gradient(pair01: LinearTask) -> None:
    """Table 2's Alg. 1, pair 0-1, first step: s_max of both H is simple (gap > 0.5 s_max); the flag is R_ill's
    s_min = s_k of H_H: s_k ~ 1e-12 s_max, so no gap can exceed the rule's sqrt(eps) s_max. The rank cut lies in a
    gap of > 1e3 (s_k / s_{k+1}). Replacing v_k by any unit vector v of the flagged cluster (eigenvalues within
    sqrt(eps) s_max of s_k) changes the preconditioned gradient by 2 s_k A theta (v v^T - v_k v_k^T) / d^2, at most
    4 s_k ||A theta||_2 / d^2: below 1e-8 of the gradient."""
    _, _, flagged_dense = _step(pair01, "rill_only", "dense", {})
    _, _, flagged_closed = _step(pair01, "rill_only", "closed_form", {})
    assert flagged_dense == flagged_closed == 1
    theta = make_protocol(pair01, table2_config("paper", "ours"), "cpu").init_params(0, False).theta.detach().numpy()
    K = pair01.X_H.T @ pair01.X_H
    K = 0.5 * (K + K.T)
    H = hessian(theta, K)
    lam = np.linalg.eigvalsh(H)[::-1]
    e = psd_extremes(H)
    k, s1 = int(e.rank), lam[0]
    assert (lam[0] - lam[1]) > 0.5 * s1
    assert lam[k - 1] < 1e-11 * s1 and lam[k - 1] > 1e3 * lam[k]
    cluster = np.flatnonzero(lam[:k] - lam[k - 1] <= np.sqrt(np.finfo(float).eps) * s1)
    assert len(cluster) >= 2
    s, Wt = covariance_factor(pair01.X_H)
    X_f, w = s[:, None] * Wt, ridge_weights(s, 1e-3)
    A = X_f.T @ (w[:, None] * X_f)  # (K + 1e-3 I)^-1 K
    r = regularizers_from_data(theta, X_f, which=("min",), on_degenerate="ignore", row_weights=w)
    d = float(e.fro2 / (2 * k) - 0.5 * e.s_min ** 2)
    bound = 4 * float(e.s_min) * np.linalg.norm(A @ theta, 2) / d ** 2
    assert bound < 1e-8 * np.linalg.norm(r.grad_ill)  # measured 1.7e-9
    _, V = np.linalg.eigh(H)
    V = V[:, ::-1]
    rng = np.random.default_rng(0)
    c = rng.standard_normal(len(cluster))
    for v in (V[:, cluster[0]], V[:, cluster] @ (c / np.linalg.norm(c))):
        moved = dataclasses.replace(e, u_min=v, v_min=v)
        change = 2.0 * float(moved.s_min) * (A @ theta) @ (np.outer(v, v) - np.outer(e.v_min, e.v_min)) / d ** 2
        assert np.linalg.norm(change) <= bound * (1 + 1e-12)


@pytest.mark.slow
def test_committed_alg1_run_recomputes_with_the_closed_form(pair01: LinearTask) -> None:
    """R_ill Only, pair 0-1, seed 0, lr 0.001, 30 steps: (i), (ii), RIR of the committed record (made by the
    autograd route) to 1e-8 relative (measured 9e-10 and 4e-11), same ranks and degenerate count."""
    from kappalab.immunization import immunize
    from kappalab.reproduce.table2.spectra import rir_from_spectra, run_spectra, stored_spectrum

    record = next(r for r in map(json.loads, (STORE / "runs_paper_trajectory.jsonl").read_text().splitlines())
                  if r["params"]["method"] == "rill_only" and (r["params"]["a"], r["params"]["b"],
                                                               r["params"]["seed"], r["params"]["eta"]) == (0, 1, 0, 0.001))
    cfg = table2_config("paper", "rill_only", {"extra.spectral_route": "closed_form"})
    run = immunize(pair01, cfg, 0)
    spectra = run_spectra(pair01, run.theta_I, None, {"K_P": stored_spectrum(pair01.X_P),
                                                      "K_H": stored_spectrum(pair01.X_H)})
    again, old = rir_from_spectra(spectra), record["result"]["gram"]
    for m in ("term_i", "term_ii", "rir"):
        assert abs(again[m] / old[m] - 1.0) < 1e-8, m
    assert (again["rank_H"], again["rank_P"]) == (old["rank_H"], old["rank_P"])
    assert run.degenerate_count == record["result"]["degenerate_count"] == 30
