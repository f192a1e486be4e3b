"""The config keys that switch the official protocol's bundled differences one at a time (Table 2's protocol walk):
``extra.bias`` (the official features' bias), ``extra.precondition_side`` (the side of theta the dummy layer's
preconditioner acts on) and ``extra.walk_step`` (a name the run carries). They enter a run's identity only when set
away from their defaults, so every earlier run keeps its identity (tests/test_config_resolved.py pins the hashes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kappalab.configs import ConfigError
from kappalab.immunization import LinearTask
from kappalab.immunization.config import IDENTITY_WHEN_SET, load_config
from kappalab.immunization.protocols import make_protocol

EPS = np.finfo(np.float64).eps


def _task(N: int = 40, D: int = 12, seed: int = 0) -> LinearTask:
    rng = np.random.default_rng(seed)
    X_P, X_H = rng.standard_normal((N, D)), rng.standard_normal((N, D))
    return LinearTask(X_P=X_P, y_P=(rng.random(N) < 0.5).astype(np.float64), X_H=X_H,
                      y_H=(rng.random(N) < 0.5).astype(np.float64), loss="bce", name="walk-keys", data_label="rng")


def test_the_keys_enter_the_identity_only_when_set():
    assert set(IDENTITY_WHEN_SET) == {"bias", "precondition_side", "walk_step"}
    plain = load_config("table2_official_ours").resolved()
    assert not set(IDENTITY_WHEN_SET) & set(plain["extra"])
    at_default = load_config("table2_official_ours", {"extra.bias": True, "extra.precondition_side": None,
                                                       "extra.walk_step": None}).resolved()
    assert at_default == plain
    walk = load_config("table2_official_ours", {"extra.bias": False, "extra.precondition_side": "input",
                                                "extra.walk_step": "no_bias"}).resolved()
    assert {k: walk["extra"][k] for k in IDENTITY_WHEN_SET} == {"bias": False, "precondition_side": "input",
                                                                 "walk_step": "no_bias"}
    assert {k: v for k, v in walk["extra"].items() if k not in IDENTITY_WHEN_SET} == plain["extra"]


def test_a_wrong_side_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match="extra.precondition_side must be"):
        load_config("table2_official_ours", {"extra.precondition_side": "left"})


def test_without_the_bias_the_official_run_starts_where_the_paper_run_starts():
    """The bias is drawn between theta and the heads: without it the official run draws what Alg. 1's does."""
    task = _task()
    official = make_protocol(task, load_config("table2_official_ours"), "cpu").init_params(3, with_w_H=False)
    no_bias = make_protocol(task, load_config("table2_official_ours", {"extra.bias": False}), "cpu")
    paper = make_protocol(task, load_config("table2_paper_ours"), "cpu").init_params(3, with_w_H=False)
    mine = no_bias.init_params(3, with_w_H=False)
    assert official.bias is not None and mine.bias is None and not no_bias.has_bias
    assert torch.equal(mine.theta, paper.theta) and torch.equal(mine.w_P, paper.w_P)
    assert not torch.equal(official.w_P, paper.w_P)


@pytest.mark.parametrize("batch_size", [None, 8])  # full batch: the dense solve; 8 rows < D: Woodbury
@pytest.mark.parametrize("side", [None, "input", "output"])
def test_the_side_is_the_configured_one(side, batch_size):
    """``precondition`` of a gradient G under the official protocol is ``G (K + r I)^-1`` (its own side, 'output' on
    nn.Linear's W = theta^T) or ``(K + r I)^-1 G`` ('input', Alg. 1), K = X^T X of the batch, against NumPy's solve.
    Tolerance: both are backward-stable solves of K + r I (condition <= ~1e3 here), so they agree to a few
    cond * eps relative; 1e3 * cond * eps bounds that with room for the different algorithms (Cholesky, Woodbury)."""
    task = _task()
    overrides = {"batch_size": batch_size, "ridge_H": 0.5}
    if side is not None:
        overrides["extra.precondition_side"] = side
    proto = make_protocol(task, load_config("table2_official_ours", overrides), "cpu")
    assert proto.precondition_side == (side or "output")
    batch = next(iter(proto.batches(torch.Generator().manual_seed(0))))
    X = batch.X_H.numpy()
    A = X.T @ X + 0.5 * np.eye(X.shape[1])
    G = np.random.default_rng(1).standard_normal((X.shape[1], X.shape[1]))
    want = np.linalg.solve(A, G) if side == "input" else np.linalg.solve(A, G.T).T  # A is symmetric
    got = proto.precondition(torch.as_tensor(G), batch, "H").numpy()
    assert np.abs(got - want).max() <= 1e3 * np.linalg.cond(A) * EPS * np.abs(want).max()
