"""The generic immunization pipeline end to end on tiny random images: a pure-torch CNN (always) and a randomly
initialised timm model (only where timm is installed)."""

from __future__ import annotations

import importlib.util
import sys

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
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    for name, value in after.items():
        changed = not torch.equal(before[name], value)
        if name.startswith("frozen.") and name not in trainable:
            assert not changed, f"frozen parameter {name} changed"
    assert not torch.equal(before["dummy.weight"], after["dummy.weight"]), "the dummy layer must train"
    assert ckpt.exists()
    again = immunize(model, method, CombinedLoader(*loaders), obj, TrainConfig(lr=lr, epochs=epochs),
                     checkpoint=ckpt, progress=False)
    assert again == [], "a finished run is not redone"
    return model


@pytest.mark.parametrize("method", METHODS)
def test_small_cnn_end_to_end(method, tmp_path) -> None:
    torch.manual_seed(0)
    net = SmallCNN(3, width=2)
    base = net.split(ridge=1e-6)
    import copy

    model = _check_run(copy.deepcopy(base), method, _loaders((1, 12, 12), (3, 2)), 2, tmp_path)
    X = torch.randn(30, 1, 12, 12, dtype=torch.float64)
    feats = [extract_features(m, X) for m in (model, base)]
    r = rir_theta0(feats[0], feats[1], feats[0], feats[1], groups=3, group_size=10)
    assert r.exact_rir == pytest.approx(1.0) and r.est_i > 0


def test_resume_continues_from_checkpoint(tmp_path) -> None:
    torch.manual_seed(0)
    model = SmallCNN(3, width=2).split()
    loaders = _loaders((1, 12, 12), (3, 2))
    obj = ObjectiveConfig(lambda_H=1.0, harmful_classes=2, reg_rtol=1e-10, on_degenerate="ignore")
    ckpt = tmp_path / "ours.pt"
    assert len(immunize(model, "ours", CombinedLoader(*loaders), obj, TrainConfig(lr=1e-3, epochs=1),
                        checkpoint=ckpt, progress=False)) == 1
    resumed = SmallCNN(3, width=2).split()
    hist = immunize(resumed, "ours", CombinedLoader(*loaders), obj, TrainConfig(lr=1e-3, epochs=3),
                    checkpoint=ckpt, progress=False)
    assert len(hist) == 2 and torch.load(ckpt, weights_only=False)["epoch"] == 3


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
    model, _ = build_timm_model(arch, "unused", trainable=trainable, load=False)
    _check_run(model, "ours", _loaders((3, 224, 224), (1000, 3), n=(4, 4), batch=2), 3, tmp_path, lr=1e-5)


def test_timm_missing_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """timm made unimportable (``sys.modules["timm"] = None``) whether or not it is installed."""
    monkeypatch.setitem(sys.modules, "timm", None)
    from kappalab.deep.timm_models import require_timm

    with pytest.raises(ImportError, match=r"kappalab\[deep\]"):
        require_timm()
