"""The data and models one Table 3 experiment needs, independent of where they come from."""

from __future__ import annotations

from typing import Any, Callable

from .model import ImmunizableModel


class Task:
    """What the generic experiment loop needs; built by :func:`proxy_task` or :func:`paper_task`.

    ``theta0(seed)`` returns a fresh :class:`ImmunizableModel` at theta_0; ``loaders(seed)`` the (D_P, D_H)
    training loaders; ``rir_P``/``rir_H`` the training inputs the RIR is computed on (row-aligned across models);
    ``test_P`` labelled D_P test data; ``probe`` ((train inputs, labels), (test inputs, labels)) of D_H. Inputs
    are tensors or unshuffled DataLoaders whose batches start with the inputs.
    """

    def __init__(self, *, name: str, theta0: Callable[[int], ImmunizableModel], loaders: Callable[[int], tuple],
                 rir_P: Any, rir_H: Any, test_P: Any, probe: tuple, harmful_classes: int, device: str,
                 data_label: str) -> None:
        self.name, self.theta0, self.loaders = name, theta0, loaders
        self.rir_P, self.rir_H, self.test_P, self.probe = rir_P, rir_H, test_P, probe
        self.harmful_classes, self.device, self.data_label = harmful_classes, device, data_label
