"""The paper's image data from local ImageFolder-style directories (needs ``kappalab[deep]``).

Layout expected (one sub-folder per class, as torchvision's ``ImageFolder`` reads it):

* ImageNet-1k (D_P): ``DIR/train/<wnid>/*.JPEG`` and ``DIR/val/<wnid>/*.JPEG`` (the validation images sorted into
  class folders, e.g. with the usual ``valprep.sh``); 1000 classes in wnid order so labels match timm's heads.
* Stanford Cars / Country211 (D_H): ``DIR/train/<class>/*`` and ``DIR/test/<class>/*`` (``valid/`` or ``val/``
  accepted in place of ``test/``).

Transforms (config ``transforms``), in float64 to match the model:

* ``"timm_eval"`` (the paper protocol): timm's evaluation transform for the model (``resolve_data_config`` +
  ``create_transform``) on every split, training included.
* ``"authors"`` (the official protocol, their ``dataset.py`` / ``utils/evaluate_imgnet.py``): training loaders get
  timm's training transform (``RandomResizedCrop`` to the model's input size, bicubic, horizontal flip, colour
  jitter 0.4) with CLIP's mean and std, for ResNet18 too; everything else a squash resize to the input size
  (``Resize((224, 224))``, no crop) with CLIP's mean and std.
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


TRANSFORMS = ("timm_eval", "authors")


def image_transform(net: nn.Module, transforms: str = "timm_eval", training: bool = False):
    """The image transform of ``transforms`` (see the module docstring) for ``net``; ``training``: for a training
    loader."""
    from .timm_models import require_timm

    timm = require_timm()
    cfg = timm.data.resolve_data_config({}, model=net)
    if transforms == "timm_eval":
        return timm.data.create_transform(**cfg, is_training=False)
    if transforms != "authors":
        raise ValueError(f"transforms must be one of {TRANSFORMS}, got {transforms!r}")
    from timm.data.constants import OPENAI_CLIP_MEAN as mean, OPENAI_CLIP_STD as std
    if training:
        return timm.data.create_transform(input_size=cfg["input_size"], is_training=True, mean=mean, std=std,
                                          interpolation="bicubic")
    from torchvision import transforms as T

    return T.Compose([T.Resize(tuple(cfg["input_size"][1:])), T.ToTensor(), T.Normalize(mean, std)])


def image_folder(root: str | Path, dataset: str, split: str, net: nn.Module, transforms: str = "timm_eval",
                 training: bool = False):
    """A torchvision ``ImageFolder`` over ``root/split`` with :func:`image_transform` for ``net`` (float64)."""
    from torchvision.datasets import ImageFolder

    base = image_transform(net, transforms, training)
    return ImageFolder(str(split_dir(root, dataset, split)), transform=lambda img: base(img).to(torch.float64))
