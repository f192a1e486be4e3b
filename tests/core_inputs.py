"""Inputs shared by the core formula tests: the two array backends, a meta-device tensor, a matrix with a NaN
where only a full scan finds it, and float64's eps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

EPS = float(np.finfo(float).eps)
NAN_2x2 = [[1.0, np.nan], [0.0, 1.0]]  # NaN in the upper triangle (eigvalsh reads the lower one)


def backends():
    """pytest params turning a nested list into a NumPy array or a float64 torch tensor (the ``to`` argument)."""
    return [pytest.param(np.asarray, id="numpy"), pytest.param(lambda a: torch.tensor(a, dtype=torch.float64),
                                                               id="torch")]


def meta(n: int = 3) -> torch.Tensor:
    """An n x n tensor on the 'meta' device: it has a shape and no values."""
    return torch.eye(n, dtype=torch.float64, device="meta")
