"""The generic immunization pipeline end to end on tiny random images: a pure-torch CNN (always) and a randomly
initialised timm model (only where timm is installed)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from kappalab.deep import METHODS, CombinedLoader, ObjectiveConfig, SmallCNN, TrainConfig, immunize  # noqa: E402
from kappalab.deep import rir_theta0, extract_features  # noqa: E402

torch.set_num_threads(1)


def _loaders(shape: tuple[int, ...], classes: tuple[int, int], n: tuple[int, int] = (24, 16), batch: int = 8):
    g = torch.Generator().manual_seed(0)
    out = []
    for k, c in zip(n, classes):
        X = torch.randn(k, *shape, generator=g, dtype=torch.float64)
        out.append(DataLoader(TensorDataset(X, torch.randint(0, c, (k,), generator=g)), batch_size=batch,
                              shuffle=True, generator=torch.Generator().manual_seed(1)))
    return out


def _check_run(model, method, loaders, classes, tmp_path, epochs=1, lr=1e-3):
    obj = ObjectiveConfig(lambda_P=1e-6, lambda_H=1.0, lambda_kappa=1e-6, lambda_imma=0.1, harmful_classes=classes,
                          reg_rtol=1e-10, on_degenerate="ignore")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ckpt = tmp_path / f"{method}.pt"
    hist = immunize(model, method, CombinedLoader(*loaders), obj, TrainConfig(lr=lr, epochs=epochs),
                    checkpoint=ckpt, progress=False)
    assert len(hist) == epochs and all(torch.isfinite(torch.tensor(list(h.values()))).all() for h in hist)
    after = model.state_dict()
    # tensors of the immunized layers, the head and the dummy layer, by storage (a timm model split by reference
    # lists the immunized blocks' BatchNorm buffers under ``frozen.owner.*`` as well)
    free = {t.data_ptr() for m in (model.trainable, model.classifier, model.dummy) for t in m.state_dict().values()}
    frozen = [name for name, value in after.items() if value.data_ptr() not in free]
    assert frozen, "the frozen part holds tensors"
    for name in frozen:
        assert torch.equal(before[name], after[name]), f"frozen tensor {name} changed"
    assert not torch.equal(before["dummy.weight"], after["dummy.weight"]), "the dummy layer must train"
    assert ckpt.exists()
    trained = {k: v.clone() for k, v in model.state_dict().items()}
    again = immunize(model, method, CombinedLoader(*loaders), obj, TrainConfig(lr=lr, epochs=epochs),
                     checkpoint=ckpt, progress=False)
    assert again == hist, "a finished run is not redone: its checkpoint's history is returned"
    assert all(torch.equal(trained[k], v) for k, v in model.state_dict().items())
    return model


@pytest.mark.parametrize("method", METHODS)
def test_small_cnn_end_to_end(method, tmp_path) -> None:
    torch.manual_seed(0)
    net = SmallCNN(3, width=2)
    base = net.split(ridge=1e-6)
    import copy

    model = _check_run(copy.deepcopy(base), method, _loaders((1, 12, 12), (3, 2)), 2, tmp_path)
    g = torch.Generator().manual_seed(2)
    X_H, X_P = (torch.randn(30, 1, 12, 12, dtype=torch.float64, generator=g) for _ in range(2))
    F_HI, F_H0, F_PI, F_P0 = (extract_features(m, X) for X in (X_H, X_P) for m in (model, base))
    r = rir_theta0(F_HI, F_H0, F_PI, F_P0, groups=3, group_size=10)

    def kappa(F: torch.Tensor) -> float:  # NumPy reference: (s_max / s_min)^2 of the features (rank 8 < 30)
        s = np.linalg.svd(F.numpy(), compute_uv=False)
        return (s[0] / s[-1]) ** 2

    ref = (kappa(F_HI) / kappa(F_H0)) / (kappa(F_PI) / kappa(F_P0))
    assert r.exact_rir == pytest.approx(ref, rel=1e-9) and r.exact_i != 1.0, "immunization moved kappa"


def test_resume_continues_from_checkpoint(tmp_path) -> None:
    torch.manual_seed(0)
    model = SmallCNN(3, width=2).split()
    loaders = _loaders((1, 12, 12), (3, 2))
    obj = ObjectiveConfig(lambda_H=1.0, harmful_classes=2, reg_rtol=1e-10, on_degenerate="ignore")
    ckpt = tmp_path / "ours.pt"
    first = immunize(model, "ours", CombinedLoader(*loaders), obj, TrainConfig(lr=1e-3, epochs=1),
                     checkpoint=ckpt, progress=False)
    assert len(first) == 1
    resumed = SmallCNN(3, width=2).split()
    hist = immunize(resumed, "ours", CombinedLoader(*loaders), obj, TrainConfig(lr=1e-3, epochs=3),
                    checkpoint=ckpt, progress=False)
    assert len(hist) == 3 and hist[0] == first[0] and torch.load(ckpt, weights_only=True)["epoch"] == 3


class _Payload:
    """Unpickling this object runs ``os.mkdir(marker)``: code inside a crafted checkpoint."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return os.mkdir, (self.marker,)


def test_checkpoint_with_pickled_code_is_refused(tmp_path) -> None:
    """Checkpoints are data: a pickled object is refused before anything in it runs (weights_only=True)."""
    import pickle

    model = SmallCNN(3, width=2).split()
    ckpt, marker = tmp_path / "ours.pt", tmp_path / "code_ran"
    torch.save({"model": model.state_dict(), "epoch": 1, "payload": _Payload(str(marker))}, ckpt)
    obj = ObjectiveConfig(lambda_H=1.0, harmful_classes=2, reg_rtol=1e-10, on_degenerate="ignore")
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        immunize(model, "ours", CombinedLoader(*_loaders((1, 12, 12), (3, 2))), obj, TrainConfig(epochs=2),
                 checkpoint=ckpt, progress=False)
    assert not marker.exists(), "nothing from the checkpoint ran"


def _timm_usable() -> tuple[bool, str]:
    if importlib.util.find_spec("timm") is None:
        return False, "timm is not installed (optional extra kappalab[deep]); the timm path is untested here"
    try:
        import timm  # noqa: F401
    except Exception as error:  # e.g. torchvision failing to import beside this torch build
        return False, f"timm is installed but does not import: {error!r}"
    return True, ""


TIMM_OK, TIMM_REASON = _timm_usable()


@pytest.mark.skipif(not TIMM_OK, reason=TIMM_REASON or "timm unusable")
@pytest.mark.parametrize("arch", ["resnet18", "vit"])
def test_timm_model_end_to_end(arch, tmp_path) -> None:
    from kappalab.deep.timm_models import build_timm_model

    trainable = ["layer4.0", "layer4.1"] if arch == "resnet18" else ["blocks.-1"]
    model, _ = build_timm_model(arch, None, trainable=trainable, load=False,
                                timm_name=None if arch == "resnet18" else "vit_tiny_patch16_224")
    _check_run(model, "ours", _loaders((3, 224, 224), (1000, 3), n=(4, 4), batch=2), 3, tmp_path, lr=1e-5)


def test_timm_missing_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """timm made unimportable (``sys.modules["timm"] = None``) whether or not it is installed."""
    monkeypatch.setitem(sys.modules, "timm", None)
    from kappalab.deep.timm_models import require_timm

    with pytest.raises(ImportError, match=r"kappalab\[deep\]"):
        require_timm()


@pytest.mark.parametrize("statistics", ["batch", "frozen"])
def test_norm_statistics_frozen_keeps_running_statistics_and_trains_the_affine_weights(statistics) -> None:
    """``norm_statistics="frozen"``: the immunized layers' BatchNorm stays in eval mode through training (theta_0's
    running statistics, never updated), its weight and bias still train; ``"batch"`` updates the statistics."""
    from torch import nn

    from kappalab.deep import ImmunizableModel

    torch.manual_seed(0)
    trainable = nn.Sequential(nn.Linear(6, 8, dtype=torch.float64), nn.BatchNorm1d(8, dtype=torch.float64),
                              nn.Tanh())
    model = ImmunizableModel(nn.Identity(), trainable, nn.Identity(), nn.Linear(8, 3, dtype=torch.float64), 8,
                             norm_statistics=statistics)
    norm = trainable[1]
    assert norm.training == (statistics == "batch") and trainable[0].training and model.classifier.training
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    g = torch.Generator().manual_seed(0)
    loaders = [DataLoader(TensorDataset(torch.randn(16, 6, generator=g, dtype=torch.float64),
                                        torch.randint(0, c, (16,), generator=g)), batch_size=8) for c in (3, 2)]
    obj = ObjectiveConfig(lambda_P=1e-6, lambda_H=1.0, lambda_kappa=1e-6, lambda_imma=0.1, harmful_classes=2,
                          reg_rtol=1e-10, on_degenerate="ignore")
    immunize(model, "ours", CombinedLoader(*loaders), obj, TrainConfig(lr=1e-2, epochs=1), progress=False)
    after = norm.state_dict()
    assert not torch.equal(before["weight"], after["weight"]) and not torch.equal(before["bias"], after["bias"])
    moved = not torch.equal(before["running_mean"], after["running_mean"])
    assert moved == (statistics == "batch")
    assert int(after["num_batches_tracked"]) == (4 if statistics == "batch" else 0)  # 2 steps x (D_P, D_H) batch
    with pytest.raises(ValueError, match="norm_statistics must be 'batch' or 'frozen'"):
        ImmunizableModel(nn.Identity(), trainable, nn.Identity(), nn.Linear(8, 3), 8, norm_statistics="eval")
