"""A pretrained EfficientNet-Lite0 cut in two: a frozen trunk whose activations are computed once and cached, and
the tail that immunization trains (Table 3's real-network rows, :mod:`kappalab.reproduce.table3.real`).

* **Input** (:func:`preprocess`): 28 x 28 grey images (uint8) -> [0, 1] -> bicubic resize to ``size`` x ``size``
  (clamped to [0, 1]) -> the grey channel repeated three times -> ``(x - mean) / std`` with the network's own
  normalisation (:func:`kappalab.deep.efficientnet.data_config`: mean = std = 0.5).
* **Cut** ``blocks.k``: trunk = ``conv_stem``, ``bn1`` (BatchNorm + ReLU6) and ``blocks[:k]``, run in eval mode
  (theta_0's BatchNorm statistics) in float32, the precision the weights were trained in; tail =
  ``blocks[k:]``, ``conv_head``, ``bn2`` (BatchNorm + ReLU6), then the global average pool to the 1280 features
  (:func:`split_tail`).
* **Cache** (:func:`cached_trunk`): ``<cache>/table3-real/trunk/<key>.npy`` (float32) with ``<key>.json`` (the
  key's parts, the CPU and wall seconds the activations took, torch's version and thread count); the key is the
  sha256 of the weights' sha256, the images' sha256, the cut, the size and this module's preprocessing version.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as nnf
from torch import nn

from ..atomic_io import save_npy, write_json
from ..data.fetch import cache_dir, cached, digest_of

PREPROCESS_VERSION = 1
"""Bumped whenever :func:`preprocess` changes (part of the cache key)."""


def cut_index(net: nn.Module, cut: str) -> int:
    """The block index ``k`` of a cut named ``"blocks.k"`` (1 <= k < number of blocks)."""
    prefix, _, index = cut.partition(".")
    if prefix != "blocks" or not index.isdigit() or not 1 <= int(index) < len(net.blocks):
        raise ValueError(f"cut must be 'blocks.k' with 1 <= k < {len(net.blocks)}, got {cut!r}")
    return int(index)


def preprocess(images: np.ndarray, size: int, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """Grey uint8 images (N, 28, 28) as the network's float32 input (N, 3, size, size); see the module docstring."""
    x = torch.as_tensor(np.asarray(images, dtype=np.float32) / 255.0)[:, None]
    x = nnf.interpolate(x, size=(size, size), mode="bicubic", align_corners=False).clamp_(0.0, 1.0)
    m = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1)
    return (x.expand(-1, 3, -1, -1) - m) / s


@torch.no_grad()
def trunk_forward(net: nn.Module, cut: str, x: torch.Tensor) -> torch.Tensor:
    """The trunk's activations (the input of ``blocks[k]``) of a batch, in eval mode."""
    k = cut_index(net, cut)
    net.eval()
    return net.blocks[:k](net.bn1(net.conv_stem(x)))


def split_tail(net: nn.Module, cut: str) -> tuple[nn.Module, nn.Module]:
    """(trainable, neck): ``blocks[k:]`` + ``conv_head`` + ``bn2``, and the global average pool (flattened)."""
    k = cut_index(net, cut)
    return nn.Sequential(*net.blocks[k:], net.conv_head, net.bn2), net.global_pool


def cache_key(weights_sha256: str, images_sha256: str, cut: str, size: int) -> str:
    """The sha256 naming a cached activation array (see the module docstring)."""
    body = json.dumps({"weights": weights_sha256, "images": images_sha256, "cut": cut, "size": size,
                       "preprocess": PREPROCESS_VERSION}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def cached_trunk(net: nn.Module, weights_sha256: str, images: np.ndarray, cut: str, size: int,
                 cache: Path | None = None, batch: int = 64) -> tuple[np.ndarray, dict[str, Any]]:
    """The trunk's float32 activations of ``images`` (uint8, (N, 28, 28)) and the cache entry's metadata,
    computed on the CPU and cached on first use. The array's own sha256 is in the metadata and is checked on
    every later read; an entry that fails the check (a torn or truncated file, torn metadata) is recomputed."""
    from .efficientnet import data_config

    images = np.ascontiguousarray(images, dtype=np.uint8)
    images_sha = hashlib.sha256(images.tobytes() + str(images.shape).encode()).hexdigest()
    key = cache_key(weights_sha256, images_sha, cut, size)
    root = (cache if cache is not None else cache_dir()) / "table3-real" / "trunk"
    path, meta_path = root / f"{key}.npy", root / f"{key}.json"
    if meta_path.is_file():
        with contextlib.suppress(ValueError, KeyError):  # a torn metadata file: the entry is rebuilt
            meta = json.loads(meta_path.read_text())
            if cached(path, meta["array_sha256"]):
                return np.load(path), meta
    conf = data_config(net)
    net = net.float().eval()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    out = [trunk_forward(net, cut, preprocess(images[i:i + batch], size, conf["mean"], conf["std"])).numpy()
           for i in range(0, len(images), batch)]
    array = np.concatenate(out)
    meta = {"key": key, "weights_sha256": weights_sha256, "images_sha256": images_sha, "cut": cut, "size": size,
            "preprocess": PREPROCESS_VERSION, "mean": list(conf["mean"]), "std": list(conf["std"]),
            "shape": list(array.shape), "images": int(len(images)), "cpu_s": time.process_time() - cpu0,
            "wall_s": time.perf_counter() - wall0, "torch": torch.__version__, "threads": torch.get_num_threads()}
    meta["array_sha256"] = digest_of(save_npy(path, array))
    write_json(meta_path, meta, indent=1)  # after the array: an entry without its metadata is rebuilt
    return array, meta
