"""Table 3's controls as methods: ``oracle`` (task loss + lambda (log kappa(H~_P) - log kappa(H~_H)), Adam) and
``task_only`` (the task loss alone), through the same objective and training loop as the paper's methods."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from kappalab.deep import ImmunizableModel, ObjectiveConfig, objective_terms  # noqa: E402
from kappalab.deep.loader import CombinedLoader  # noqa: E402
from kappalab.deep.train import TrainConfig, immunize, make_optimizer  # noqa: E402

N, D_IN, D = 32, 12, 8


def _model() -> ImmunizableModel:
    g = torch.Generator().manual_seed(0)
    trainable = nn.Sequential(nn.Linear(D_IN, D, dtype=torch.float64), nn.Tanh())
    head = nn.Linear(D, 2, dtype=torch.float64)
    with torch.no_grad():
        for p in [*trainable.parameters(), *head.parameters()]:
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / p.shape[-1] ** 0.5)
    return ImmunizableModel(nn.Identity(), trainable, nn.Identity(), head, D, dummy=False)


def _data(seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4 * N, D_IN, generator=g, dtype=torch.float64), torch.randint(0, 2, (4 * N,), generator=g)


def _log_kappa(F: np.ndarray) -> float:
    """log of the pinv kappa of F^T F from F's singular values (numpy), with the core's default rank rule D * eps."""
    lam = np.linalg.svd(F, compute_uv=False) ** 2
    kept = lam[lam > D * np.finfo(float).eps * lam[0]]
    return float(np.log(kept[0] / kept[-1]))


@pytest.mark.parametrize("route", ["dense", "gram"])
def test_the_oracle_term_is_the_log_kappa_gap_of_the_batches(route):
    model = _model()
    (XP, yP), (XH, yH) = _data(1), _data(2)
    cfg = ObjectiveConfig(lambda_oracle=1.0, harmful_classes=2, spectral_route=route)
    terms = objective_terms(model, "oracle", (XP[:N], yP[:N]), (XH[:N], yH[:N]), cfg)
    with torch.no_grad():
        FP, FH = model.features(XP[:N]).numpy(), model.features(XH[:N]).numpy()
    assert set(terms) == {"task", "log_kappa_ratio"}
    assert float(terms["log_kappa_ratio"].detach()) == pytest.approx(_log_kappa(FP) - _log_kappa(FH), rel=1e-9)
    assert set(objective_terms(model, "task_only", (XP[:N], yP[:N]), (XH[:N], yH[:N]), cfg)) == {"task"}


def test_the_oracle_trains_with_adam_and_the_others_with_sgd():
    model = _model()
    assert isinstance(make_optimizer(model, TrainConfig(optimizer="adam")), torch.optim.Adam)
    assert isinstance(make_optimizer(model, TrainConfig()), torch.optim.SGD)
    with pytest.raises(ValueError, match="optimizer"):
        make_optimizer(model, TrainConfig(optimizer="rmsprop"))


def _trained_gap(method: str, optimizer: str) -> float:
    """log kappa(H~_H) - log kappa(H~_P) on held-out rows after 40 steps of ``method``."""
    model = _model()
    (XP, yP), (XH, yH) = _data(1), _data(2)
    loaders = [torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=N, shuffle=True,
                                           generator=torch.Generator().manual_seed(s))
               for s, (X, y) in enumerate(((XP, yP), (XH, yH)))]
    torch.manual_seed(0)
    immunize(model, method, CombinedLoader(*loaders, epoch_on="harmful"),
             ObjectiveConfig(lambda_oracle=1.0, harmful_classes=2),
             TrainConfig(lr=5e-2, epochs=10, optimizer=optimizer), progress=False)
    (XP2, _), (XH2, _) = _data(3), _data(4)
    with torch.no_grad():
        return _log_kappa(model.features(XH2).numpy()) - _log_kappa(model.features(XP2).numpy())


def test_the_oracle_moves_the_measure_and_task_only_does_not_move_it_as_far():
    """A positive control that works: on held-out rows, 40 oracle steps widen log kappa_H - log kappa_P far more
    than 40 steps of the task loss alone (the null control) from the same theta_0."""
    model = _model()
    (XP, _), (XH, _) = _data(3), _data(4)
    with torch.no_grad():
        start = _log_kappa(model.features(XH).numpy()) - _log_kappa(model.features(XP).numpy())
    oracle, null = _trained_gap("oracle", "adam"), _trained_gap("task_only", "sgd")
    assert oracle - start > 1.0 and oracle - start > 5 * abs(null - start), (start, oracle, null)
