"""``features_lambda_max``: lambda_max(Phi^T Phi) by Lanczos with theta and X, against the SVD of the formed features
(NumPy, an independent route), and the official protocol's history monitor that uses it."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kappalab.immunization import LinearTask, load_config  # noqa: E402
from kappalab.immunization import protocols  # noqa: E402
from kappalab.immunization.protocols import Protocol, make_protocol  # noqa: E402
from kappalab.immunization.spectra import LANCZOS_RTOL, features_lambda_max  # noqa: E402
from kappalab.immunization.spectra import (FeatureGram, gram_extremes_shifted, kappa_of_extremes,  # noqa: E402
                                           torch_kappa)


def _sigma_max_squared(X: np.ndarray, theta: np.ndarray, bias: np.ndarray | None) -> float:
    Phi = X @ theta + (0.0 if bias is None else bias[None, :])
    return float(np.linalg.svd(Phi, compute_uv=False)[0] ** 2)


def _case(rng: np.random.Generator, n: int, d: int, top: tuple[float, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """X (n x d) and a theta whose features X theta have the leading singular values ``top`` (then a decaying
    tail), built from orthonormal factors: X = U diag(s) V^T, theta = V diag(t / s) W^T."""
    U, _ = np.linalg.qr(rng.standard_normal((n, n)))
    V, _ = np.linalg.qr(rng.standard_normal((d, d)))
    W, _ = np.linalg.qr(rng.standard_normal((d, d)))
    s = np.linspace(2.0, 0.5, n)
    t = np.concatenate([top, np.geomspace(0.9, 1e-3, n - len(top))]) if top else rng.uniform(0.1, 3.0, n)
    X = U @ np.diag(s) @ V[:, :n].T
    theta = V[:, :n] @ np.diag(t / s) @ W[:, :n].T + 1e-3 * V[:, n:] @ W[:, n:].T
    return X, theta


@pytest.mark.parametrize("with_bias", [False, True])
def test_lambda_max_equals_the_svd_of_the_formed_features(with_bias: bool) -> None:
    rng = np.random.default_rng(0)
    X, theta = _case(rng, 40, 90)
    bias = rng.standard_normal(90) if with_bias else None
    lam = features_lambda_max(torch.as_tensor(X), torch.as_tensor(theta), None if bias is None else torch.as_tensor(bias))
    assert lam is not None
    assert abs(float(lam) / _sigma_max_squared(X, theta, bias) - 1.0) < 1e-13


@pytest.mark.parametrize("top", [(1.0, 1.0), (1.0, 0.999)])
def test_a_repeated_or_nearly_repeated_top_is_found_or_refused(top: tuple[float, ...]) -> None:
    """A repeated top eigenvalue is one Ritz value (the start vector sees one direction of its eigenspace): found.
    A gap of 0.2% either converges within the steps or is refused (None), never returned inaccurate."""
    rng = np.random.default_rng(1)
    X, theta = _case(rng, 40, 90, top)
    lam = features_lambda_max(torch.as_tensor(X), torch.as_tensor(theta))
    ref = _sigma_max_squared(X, theta, None)
    if top[0] == top[1]:
        assert lam is not None
    if lam is not None:
        assert abs(float(lam) / ref - 1.0) < 1e-12


def test_stacked_runs_give_each_runs_value() -> None:
    rng = np.random.default_rng(2)
    cases = [_case(rng, 30, 70) for _ in range(3)]
    biases = [rng.standard_normal(70) for _ in cases]
    stack = lambda arrays: torch.as_tensor(np.stack(arrays))
    lam = features_lambda_max(stack([X for X, _ in cases]), stack([t for _, t in cases]), stack(biases))
    assert lam is not None and lam.shape == (3,)
    for r, ((X, theta), bias) in enumerate(zip(cases, biases)):
        assert abs(float(lam[r]) / _sigma_max_squared(X, theta, bias) - 1.0) < 1e-13


def test_an_invariant_krylov_space_or_too_few_steps_is_refused() -> None:
    rng = np.random.default_rng(3)
    X, theta = torch.as_tensor(rng.standard_normal((2, 50))), torch.as_tensor(rng.standard_normal((50, 50)))
    assert features_lambda_max(X, theta) is None  # rank(S) = 2: the Krylov space closes after two steps
    assert features_lambda_max(torch.zeros(4, 50, dtype=torch.float64), theta) is None  # S = 0
    X, theta = _case(rng, 40, 90)
    assert features_lambda_max(torch.as_tensor(X), torch.as_tensor(theta), max_steps=2) is None


def _official(n: int = 60, d: int = 100) -> Protocol:
    rng = np.random.default_rng(4)
    task = LinearTask(rng.standard_normal((n, d)), np.zeros(n), rng.standard_normal((n, d)) + 0.5, np.ones(n), "bce",
                      "random", "random")
    cfg = load_config("table2_official_ours").replace(batch_size=16)
    return make_protocol(task, cfg, "cpu")


@torch.no_grad()  # as the monitor runs
def _base_kappas(proto: Protocol, p) -> list[torch.Tensor]:
    """The base protocol's whole-task kappas (features, Gram, ``eigvalsh``), bypassing the official override."""
    return [Protocol.whole_task_kappa(proto, p, which) for which in ("P", "H")]


def test_the_monitor_equals_the_gram_routes_eigvalsh() -> None:
    """The official protocol's history (features route, N < D) against the base protocol's whole-task kappa (features,
    Gram, ``eigvalsh``), at the initial parameters and at a perturbed theta."""
    proto = _official()
    p = proto.init_params(0, with_w_H=False)
    for _ in range(2):
        fast, base = proto.monitor(p), _base_kappas(proto, p)
        for a, b in zip(fast, base):
            assert abs(float(a) / float(b) - 1.0) < 10 * LANCZOS_RTOL
        with torch.no_grad():
            p.theta.add_(0.1 * torch.randn(p.theta.shape, generator=torch.Generator().manual_seed(5),
                                           dtype=torch.float64))


def test_the_monitor_falls_back_to_the_gram_route(monkeypatch: pytest.MonkeyPatch) -> None:
    proto = _official()
    p = proto.init_params(0, with_w_H=False)
    monkeypatch.setattr(protocols, "features_lambda_max", lambda *args, **kwargs: None)
    assert [float(k) for k in proto.monitor(p)] == [float(k) for k in _base_kappas(proto, p)]


def test_the_two_homes_of_the_gram_routes_shifted_kappa_agree() -> None:
    """:func:`gram_shifted_kappa` (torch_kappa, the monitor) and ``kappa_of_extremes`` of the gram route's extremes
    (the closed-form Opt kappa step) compute ``(lambda_max(G) + shift) / shift``: bit for bit equal."""
    Phi = torch.as_tensor(np.random.default_rng(6).standard_normal((20, 50)))
    F = FeatureGram(Phi)
    assert float(torch_kappa(F, "shifted", shift=1e-6)) == float(kappa_of_extremes(gram_extremes_shifted(F, 1e-6)))
