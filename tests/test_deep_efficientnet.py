"""EfficientNet-Lite0's ImageNet weights: the positional key map and its refusals (everywhere), and the loaded model's
top-1 classes on two of scikit-image's photographs (where timm imports: the deep environment).

The photographs are read from the scikit-image wheel (``pip download --no-deps scikit-image==0.25.2`` into
kappalab's cache, never installed; the two PNG members' sha256 checked), so no package is added to any
environment. Expected classes (issue 26, from timm's default preprocessing of this model): ``chelsea`` is a cat
(ImageNet 281 tabby, 282 tiger cat or 285 Egyptian cat), ``coffee`` is 967 espresso.
"""

from __future__ import annotations

import importlib.util
import io
from collections import OrderedDict

import pytest
import torch

from kappalab.data import fetch
from kappalab.deep.efficientnet import key_map

HAS_TIMM = importlib.util.find_spec("timm") is not None
SKIMAGE_WHEEL = "scikit-image==0.25.2"
PHOTOS = {"skimage/data/chelsea.png": "596aa1e7cb875eb79f437e310381d26b338a81c2da23439704a73c4651e8c4bb",
          "skimage/data/coffee.png": "cc02f8ca188b167c775a7101b5d767d1e71792cf762c33d6fa15a4599b5a8de7"}
EXPECTED = {"skimage/data/chelsea.png": {281, 282, 285}, "skimage/data/coffee.png": {967}}


def test_key_map_pairs_in_order_and_checks_shapes() -> None:
    source = OrderedDict([("_conv.weight", torch.zeros(4, 3)), ("_bn.weight", torch.zeros(4)),
                          ("_fc.weight", torch.zeros(2, 4))])
    target = OrderedDict([("conv.weight", torch.ones(4, 3)), ("bn.weight", torch.ones(4)),
                          ("head.weight", torch.ones(2, 4))])
    assert key_map(source, target) == {"conv.weight": "_conv.weight", "bn.weight": "_bn.weight",
                                       "head.weight": "_fc.weight"}
    swapped = OrderedDict([("bn.weight", torch.ones(4)), ("conv.weight", torch.ones(4, 3)),
                           ("head.weight", torch.ones(2, 4))])
    with pytest.raises(ValueError, match=r"tensor _conv.weight \(4, 3\) does not match bn.weight \(4,\)"):
        key_map(source, swapped)
    with pytest.raises(ValueError, match="has 3 tensors, tf_efficientnet_lite0 has 2"):
        key_map(source, OrderedDict(list(target.items())[:2]))


def _photos() -> dict[str, bytes]:
    wheel = fetch.download_wheel(SKIMAGE_WHEEL, fetch.cache_dir() / "skimage-photos",
                                 "run pip download --no-deps scikit-image==0.25.2 by hand into that folder")
    members = fetch.read_members(wheel, list(PHOTOS), "a scikit-image wheel holds skimage/data/*.png")
    for name, raw in members.items():
        fetch.verify_digest(raw, PHOTOS[name], f"{wheel.name}:{name}", "another scikit-image build")
    return members


@pytest.mark.skipif(not HAS_TIMM, reason="timm is not installed (the deep environment: scripts/setup_deep.sh)")
def test_pretrained_top1_on_photographs() -> None:
    import timm
    from PIL import Image

    from kappalab.deep.efficientnet import data_config, load_efficientnet_lite0

    net = load_efficientnet_lite0(dtype=torch.float32)
    transform = timm.data.create_transform(**data_config(net))
    batch = torch.stack([transform(Image.open(io.BytesIO(raw)).convert("RGB")) for raw in _photos().values()])
    with torch.no_grad():
        probs = net(batch).softmax(1)
    for (name, expected), p in zip(EXPECTED.items(), probs):
        top = int(p.argmax())
        assert top in expected, f"{name}: top-1 class {top} (p = {float(p.max()):.3f}), expected one of {expected}"
    assert float(probs[1, 967]) > 0.5  # espresso, confidently (issue 26 measured p = 0.95)
