"""The paper's Table 3 configuration as a :class:`~kappalab.deep.task.Task` (timm model, ImageNet, Cars/Country211).

Wired end to end but run only where timm, the data, the weights and a GPU exist. Under ``torchrun``
(``WORLD_SIZE > 1``) the training loaders use a ``DistributedSampler`` and gradients are averaged across ranks
(:mod:`kappalab.deep.train`); evaluation runs on every rank on the full data (simple, and identical results).

A config with ``"random_weights": true`` (the smoke configs) builds the timm model with its random
initialisation and needs no ``--weights``; its ``timm_name`` may name a smaller model of the same family.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Subset

from ..distributed import init_distributed, world
from ..methods import IMMA, OPT_KAPPA
from .task import Task

if TYPE_CHECKING:
    from kappalab.reproduce.table3.config import Table3Config
    from kappalab.reproduce.table3.plan import PaperInputs


def _require(value: str | None, flag: str, what: str) -> Path:
    if not value:
        raise ValueError(f"{flag} is required for the paper's configuration: {what}")
    path = Path(value).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{flag} {path} does not exist: {what}")
    return path


def _ordered(dataset: Any, n: int | None, seed: int, workers: int) -> DataLoader:
    """An unshuffled loader over ``n`` random samples of ``dataset`` (all if ``n`` is None or larger)."""
    rows = np.arange(len(dataset)) if n is None or n >= len(dataset) else np.sort(
        np.random.default_rng(seed).choice(len(dataset), n, replace=False))
    return DataLoader(Subset(dataset, rows.tolist()), batch_size=256, num_workers=workers)


def _labelled(dataset: Any, workers: int) -> tuple[DataLoader, torch.Tensor]:
    """(unshuffled loader, labels) of an ImageFolder, for the linear probe on precomputed features."""
    return _ordered(dataset, None, 0, workers), torch.as_tensor(dataset.targets)


def paper_task(cfg: Table3Config, inputs: PaperInputs, work: Path, device: str, methods: tuple[str, ...],
               calibrating: bool = False) -> Task:
    """Build the task of ``cfg`` (a ``table3_<arch>_<harmful>`` config) from the user's paths, for ``methods``
    (each must have its weight unless ``calibrating``: the calibration is how it is found)."""
    from .imagefolder import image_folder
    from .timm_models import build_timm_model, require_timm

    require_timm()
    imagenet = _require(inputs.imagenet, "--imagenet", "the ImageNet-1k root with train/ and val/ class folders")
    harmful = _require(inputs.harmful_dir, "--harmful-dir", f"the {cfg.harmful} root with train/ and test/")
    random_init = cfg.random_weights
    weights = None if random_init else _require(inputs.weights, "--weights",
                                                f"a local timm state dict of {cfg.timm_name}")
    device = init_distributed(device)
    for spec in (OPT_KAPPA, IMMA):  # the two weights the paper does not give
        (key,), method = spec.lambdas, spec.name
        if method in methods and getattr(cfg, key) is None and not calibrating:
            raise ValueError(f"config {cfg.config_file}: {key} is null (not in the paper); run --calibrate and "
                             f"set it, or leave out {method} with --methods")

    def theta0(seed: int):
        torch.manual_seed(seed)
        model, _ = build_timm_model(cfg.arch, weights, trainable=cfg.trainable_modules,
                                    ridge=cfg.dummy_ridge, side=cfg.dummy_side, load=not random_init,
                                    timm_name=cfg.timm_name, dummy=cfg.protocol == "paper")
        return model.to(device)

    _, net = build_timm_model(cfg.arch, None, trainable=cfg.trainable_modules, load=False,
                              timm_name=cfg.timm_name)
    roots = {"imagenet": imagenet, cfg.harmful: harmful}
    ds = {(name, split): image_folder(root, name, split, net, cfg.transforms)
          for name, root in roots.items()
          for split in (("train", "val") if name == "imagenet" else ("train", "test"))}
    training = {name: ds[name, "train"] if cfg.transforms == "timm_eval"
                else image_folder(root, name, "train", net, cfg.transforms, training=True)
                for name, root in roots.items()}
    workers = cfg.num_workers

    def loaders(seed: int) -> tuple[DataLoader, DataLoader]:
        rank, size = world()
        out = []
        for name in ("imagenet", cfg.harmful):
            data = training[name]
            g = torch.Generator().manual_seed(seed * 7919 + len(out))
            sampler = (torch.utils.data.DistributedSampler(data, num_replicas=size, rank=rank, seed=seed)
                       if size > 1 else None)
            out.append(DataLoader(data, batch_size=cfg.batch_size, shuffle=sampler is None, sampler=sampler,
                                  generator=g, num_workers=workers, drop_last=True,
                                  pin_memory=str(device).startswith("cuda")))
        return out[0], out[1]

    n_rir = cfg.rir_groups * cfg.rir_group_size  # a pool the groups are drawn from (exact Eq. 17 on it)
    test_P = ds["imagenet", "val"]
    if cfg.dp_test_limit:
        test_P = Subset(test_P, list(range(min(cfg.dp_test_limit, len(test_P)))))
    return Task(name=cfg.name, theta0=theta0, loaders=loaders,
                rir_P=_ordered(ds["imagenet", "train"], n_rir, 0, workers),
                rir_H=_ordered(ds[cfg.harmful, "train"], n_rir, 1, workers),
                test_P=DataLoader(test_P, batch_size=256, num_workers=workers),
                probe=(_labelled(ds[cfg.harmful, "train"], workers),
                       _labelled(ds[cfg.harmful, "test"], workers)),
                harmful_classes=len(ds[cfg.harmful, "train"].classes), device=device,
                data_label=f"ImageNet-1k ({imagenet}) vs {cfg.harmful} ({harmful})")
