"""Features for ``kappalab measure``'s images form: a timm model, two weights files, two image folders.

The model is ``timm.create_model(NAME, pretrained=False)`` with each local state dict loaded strictly
(:func:`kappalab.deep.timm_models.load_weights`; no hub access), in eval mode and float64. Its features are timm's
pooled pre-logit features, ``forward_head(forward_features(x), pre_logits=True)`` (``num_features`` columns), of
every image file under a folder (any depth, sorted by path, read as RGB), through timm's evaluation transform for
the model (:func:`kappalab.deep.imagefolder.image_transform`). Needs ``kappalab[deep]`` (timm, torchvision).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..atomic_io import save_npy
from ..data.fetch import digest_of
from ..reproduce.identity import sha256_arrays
from .imagefolder import image_transform
from .timm_models import load_weights, require_timm

#: the image suffixes read (torchvision's ImageFolder's)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def image_files(folder: str | Path, argument: str) -> list[Path]:
    """Every image file under ``folder``, sorted; ValueError naming ``argument`` when there is none."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise ValueError(f"{argument}: {root} is not a folder of images")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(f"{argument}: no image file ({', '.join(IMAGE_SUFFIXES)}) under {root}")
    return files


def timm_net(name: str, weights: str | Path, argument: str) -> torch.nn.Module:
    """timm's ``name`` with the state dict ``weights`` (strict), float64, eval mode."""
    timm = require_timm()
    try:
        net = timm.create_model(name, pretrained=False)
    except RuntimeError as error:  # timm: "Unknown model (...)"
        raise ValueError(f"--model: {str(error).splitlines()[0]}") from None
    try:
        load_weights(net, weights)
    except (FileNotFoundError, RuntimeError, OSError, ValueError) as error:
        raise ValueError(f"{argument}: {str(error).splitlines()[0]}") from None
    return net.to(torch.float64).eval()


@torch.no_grad()
def features(net: torch.nn.Module, files: list[Path], batch_size: int, argument: str) -> np.ndarray:
    """The pooled pre-logit features (``N x num_features``, float64) of ``files``."""
    from PIL import Image, UnidentifiedImageError

    transform = image_transform(net, "timm_eval")
    out = []
    for start in range(0, len(files), batch_size):
        batch = []
        for path in files[start:start + batch_size]:
            try:
                with Image.open(path) as image:
                    batch.append(transform(image.convert("RGB")).to(torch.float64))
            except (OSError, UnidentifiedImageError) as error:
                raise ValueError(f"{argument}: cannot read image {path} ({error})") from None
        out.append(net.forward_head(net.forward_features(torch.stack(batch)), pre_logits=True))
    return torch.cat(out).numpy()


def extract_all(model: str, weights0: str, weightsI: str, p_images: str, h_images: str, *, batch_size: int = 32,
                save: str | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``({"p0", "h0", "pi", "hi"} -> features, inputs record)``; ``save``: a folder for the four ``.npy`` files."""
    files = {"p": image_files(p_images, "--p-images"), "h": image_files(h_images, "--h-images")}
    nets = {"0": timm_net(model, weights0, "--weights0"), "i": timm_net(model, weightsI, "--weightsI")}
    out = {f"{task}{which}": features(net, files[task], batch_size, f"--{task}-images")
           for which, net in nets.items() for task in ("p", "h")}
    if save is not None:
        folder = Path(save).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        for name, array in out.items():
            save_npy(folder / f"{name}.npy", array)
    inputs = {"model": model, "weights0": {"path": str(weights0), "sha256": digest_of(Path(weights0))},
              "weightsI": {"path": str(weightsI), "sha256": digest_of(Path(weightsI))},
              "p_images": {"folder": str(p_images), "files": len(files["p"])},
              "h_images": {"folder": str(h_images), "files": len(files["h"])}, "saved_features": save,
              "features_sha256": sha256_arrays(out)}
    return {k: out[k] for k in ("p0", "h0", "pi", "hi")}, inputs
