"""The paper's image data from local ImageFolder-style directories (needs ``kappalab[deep]``).

Layout expected (one sub-folder per class, as torchvision's ``ImageFolder`` reads it):

* ImageNet-1k (D_P): ``DIR/train/<wnid>/*.JPEG`` and ``DIR/val/<wnid>/*.JPEG`` (the validation images sorted into
  class folders, e.g. with the usual ``valprep.sh``); 1000 classes in wnid order so labels match timm's heads.
* Stanford Cars / Country211 (D_H): ``DIR/train/<class>/*`` and ``DIR/test/<class>/*`` (``valid/`` or ``val/``
  accepted in place of ``test/``).

Transforms are timm's evaluation transforms for the model (``resolve_data_config`` + ``create_transform``),
in float64 to match the model.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

DOWNLOAD = {
    "imagenet": "ImageNet-1k (ILSVRC2012) from https://image-net.org (registration required)",
    "cars": "Stanford Cars (e.g. torchvision's StanfordCars layout, or the Kaggle mirror), sorted into class folders",
    "country211": "Country211 (https://github.com/openai/CLIP/blob/main/data/country211.md; torchvision's "
                  "Country211 already uses class folders)",
    "digits": "MNIST digits 5-9 written by kappalab.deep.smoke.make_digit_folders (the smoke configuration)",
}


def split_dir(root: str | Path, dataset: str, split: str) -> Path:
    """``root/split`` (for D_H's test split also ``valid``/``val``), or FileNotFoundError saying what to get."""
    root = Path(root).expanduser()
    candidates = [split] + (["valid", "val"] if split == "test" else [])
    for name in candidates:
        if (root / name).is_dir():
            return root / name
    raise FileNotFoundError(
        f"{dataset}: no {' or '.join(candidates)} folder under {root}. Download {DOWNLOAD[dataset]} and arrange it as "
        f"{root}/{{{','.join(candidates)}}}/<class>/<image> (see kappalab.deep.imagefolder)")


def image_folder(root: str | Path, dataset: str, split: str, net: nn.Module):
    """A torchvision ``ImageFolder`` over ``root/split`` with timm's eval transform for ``net`` (float64)."""
    from .timm_models import require_timm

    timm = require_timm()
    from torchvision.datasets import ImageFolder

    cfg = timm.data.resolve_data_config({}, model=net)
    base = timm.data.create_transform(**cfg, is_training=False)
    return ImageFolder(str(split_dir(root, dataset, split)), transform=lambda img: base(img).to(torch.float64))
