"""``kappalab reproduce table3 --proxy``: the CPU proxy's task (MNIST digits 0-4 vs 5-9 on the embedded subset,
SmallCNN pre-trained per seed and cached)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ...atomic_io import cache_ok, torch_save, write_checked
from ...deep import ImmunizableModel, SmallCNN, pretrain
from ...deep.task import Task
from .config import Table3Config


def _split(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(test_fraction * n))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def proxy_task(cfg: Table3Config, work: Path, validation: float | None = None, device: str = "cpu") -> Task:
    """The CPU proxy: MNIST digits 0-4 vs 5-9 on the embedded subset, SmallCNN pre-trained per seed (cached).

    With ``validation`` (a fraction) the training rows of each task are split again (seed ``split_seed + 1``)
    into a smaller training set and a validation set, and the task is built on those: theta_0 is pre-trained and
    immunized on the smaller training set, and ``test_P``, ``rir_P``/``rir_H`` and the probe's test half are the
    validation rows. The test split is not used (this is the ``--search`` mode's task)."""
    from torch.utils.data import DataLoader, TensorDataset

    from ...data.mnist import load_mnist, select_digits

    data = load_mnist()
    tensors = {}
    for tag, digits in (("P", cfg.pretrain_digits), ("H", cfg.harmful_digits)):
        X, y = select_digits(data, digits, flatten=False)
        y = np.searchsorted(np.asarray(sorted(digits)), y)  # labels 0..len(digits)-1
        train, test = _split(len(y), cfg.test_fraction, cfg.split_seed)
        cap = cfg.max_train_per_task
        train = train[:cap] if cap else train
        if validation:
            keep, val = _split(len(train), validation, cfg.split_seed + 1)
            train, test = train[keep], train[val]  # "test" below is the validation split
        for part, rows in (("train", train), ("test", test)):
            tensors[tag, part] = (torch.as_tensor(X[rows][:, None]), torch.as_tensor(y[rows]))
    n_P, n_H = len(cfg.pretrain_digits), len(cfg.harmful_digits)

    def loader(tag: str, seed: int, batch: int) -> DataLoader:
        return DataLoader(TensorDataset(*tensors[tag, "train"]), batch_size=batch, shuffle=True,
                          generator=torch.Generator().manual_seed(seed))

    def theta0(seed: int) -> ImmunizableModel:
        path = work / f"seed{seed}" / "theta0.pt"
        torch.manual_seed(seed)
        net = SmallCNN(n_P, width=cfg.width)
        if cache_ok(path):  # whole (its sha256 agrees); a torn or truncated one is removed and rebuilt
            net.load_state_dict(torch.load(path, weights_only=True))
        else:
            pretrain(net, loader("P", seed, cfg.pretrain_batch_size), epochs=cfg.pretrain_epochs,
                     lr=cfg.pretrain_lr)
            write_checked(path, lambda target: torch_save(net.state_dict(), target))
        return net.split(ridge=cfg.dummy_ridge, side=cfg.dummy_side, dummy=cfg.protocol == "paper")

    rir = "test" if validation else "train"
    return Task(name=cfg.name, theta0=theta0,
                loaders=lambda seed: (loader("P", 1000 + seed, cfg.batch_size),
                                      loader("H", 2000 + seed, cfg.batch_size)),
                rir_P=tensors["P", rir][0], rir_H=tensors["H", rir][0], test_P=tensors["P", "test"],
                probe=(tensors["H", "train"], tensors["H", "test"]), harmful_classes=n_H, device=device,
                data_label=data.source_label + f" digits {cfg.pretrain_digits} vs {cfg.harmful_digits}")
