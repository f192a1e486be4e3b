"""A tiny stand-in for the paper's image folders: MNIST digits as 224 x 224 RGB images in ImageFolder layout.

The paper's Table 3 path (timm model, ImageNet-1k as D_P, Stanford Cars / Country211 as D_H) cannot run without
the data, the weights and a GPU. The smoke configuration (``kappalab reproduce table3 --arch resnet18|vit
--smoke``, configs ``table3_<arch>_smoke.json``) runs that same code path on CPU: randomly initialised timm models
(no weights, no hub) and the folders written here, read back through :func:`kappalab.deep.imagefolder.image_folder`
and timm's evaluation transform exactly like the real data:

* ``<root>/imagenet/{train,val}/<digit>/*.png``: D_P = digits 0-4 (labels 0-4 of the 1000-class head);
* ``<root>/digits/{train,test}/<digit>/*.png``: D_H = digits 5-9.

Images: the embedded MNIST subset, the first ``per_class[split]`` images of each digit in data order (train and
val/test disjoint), upsampled bilinearly to 224 x 224 and repeated over three channels. Deterministic; an existing
complete folder is reused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SPLITS = {"imagenet": ("train", "val"), "digits": ("train", "test")}
DIGITS = {"imagenet": (0, 1, 2, 3, 4), "digits": (5, 6, 7, 8, 9)}


def make_digit_folders(root: str | Path, per_class: dict[str, int], size: int = 224) -> tuple[Path, Path]:
    """Write (or reuse) the D_P and D_H folders under ``root``; returns their roots (``imagenet``, ``digits``).

    ``per_class``: images per digit for ``"train"`` and for the held-out split (``"test"``; ImageNet's is
    named ``val``)."""
    from PIL import Image

    from ..data.mnist import load_mnist

    if not (set(per_class) == {"train", "test"} and all(isinstance(v, int) and v >= 1 for v in per_class.values())):
        raise ValueError(f"per_class must give positive ints for 'train' and 'test', got {per_class!r}")
    root = Path(root)
    data = load_mnist()
    for name, digits in DIGITS.items():
        for d in digits:
            rows = np.flatnonzero(data.labels == d)
            need = per_class["train"] + per_class["test"]
            if len(rows) < need:
                raise ValueError(f"digit {d}: {len(rows)} images in {data.source_label}, {need} needed")
            chosen = {"train": rows[:per_class["train"]], "test": rows[per_class["train"]:need]}
            for split, key in zip(SPLITS[name], ("train", "test")):
                folder = root / name / split / str(d)
                if folder.is_dir() and len(list(folder.glob("*.png"))) == per_class[key]:
                    continue
                folder.mkdir(parents=True, exist_ok=True)
                for i in chosen[key]:
                    img = Image.fromarray(data.images[i]).resize((size, size), Image.BILINEAR).convert("RGB")
                    img.save(folder / f"{i:05d}.png")
    return root / "imagenet", root / "digits"
