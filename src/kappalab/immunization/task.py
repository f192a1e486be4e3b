"""One immunization problem for a linear feature extractor, and the House Prices instance of Table 1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Loss = Literal["mse", "bce"]


def with_ones_column(X: np.ndarray, bias: bool) -> np.ndarray:
    """``[X 1]`` when ``bias`` (a feature bias b enters as an extra row of theta: ``X theta + 1 b^T = [X 1]
    [theta; b^T]``), else ``X``."""
    return np.hstack([X, np.ones((X.shape[0], 1))]) if bias else X


@dataclass(frozen=True)
class LinearTask:
    """Data of one immunization problem for a linear extractor ``theta`` (``D x D``, ``f(x) = x^T theta``).

    Attributes:
        X_P: pre-training inputs (``N_P x D``, float64).
        y_P: pre-training targets (``N_P``).
        X_H: harmful-task inputs (``N_H x D``).
        y_H: harmful-task targets (``N_H``) or None when no method needs them (IMMA does).
        loss: supervised loss of the linear head: "mse" (regression) or "bce" (binary labels in {0, 1}).
        name: short identifier, e.g. "house_prices/paper".
        data_label: where the data came from (stored in provenance).
    """

    X_P: np.ndarray
    y_P: np.ndarray
    X_H: np.ndarray
    y_H: np.ndarray | None
    loss: Loss
    name: str
    data_label: str

    def __post_init__(self) -> None:
        for name in ("X_P", "X_H"):
            X = getattr(self, name)
            if not (isinstance(X, np.ndarray) and X.ndim == 2 and X.dtype == np.float64 and np.isfinite(X).all()):
                raise ValueError(f"{name} must be a finite float64 2-D numpy array")
        if self.X_P.shape[1] != self.X_H.shape[1]:
            raise ValueError(f"X_P and X_H must have the same number of columns, got {self.X_P.shape[1]} and "
                             f"{self.X_H.shape[1]}")
        for name, X in (("y_P", self.X_P), ("y_H", self.X_H)):
            y = getattr(self, name)
            if y is None and name == "y_H":
                continue
            if not (isinstance(y, np.ndarray) and y.shape == (X.shape[0],) and np.isfinite(y).all()):
                raise ValueError(f"{name} must be a finite 1-D numpy array of length {X.shape[0]}")
        if self.loss not in ("mse", "bce"):
            raise ValueError(f"loss must be 'mse' or 'bce', got {self.loss!r}")

    @property
    def dim(self) -> int:
        """Input dimension D."""
        return int(self.X_P.shape[1])


def house_prices_task(protocol: str, csv_path: str | None = None, n_official: int = 200) -> LinearTask:
    """Table 1's task: D_P = MSZoning != 'RL' (target LotArea), D_H = 'RL' (target SalePrice).

    ``protocol="paper"``: the full splits (309 and 1151 rows). ``protocol="official"``: rows 0..n_official-1 of
    each split (the authors' code trains and evaluates on them), standardization of the whole split kept.
    """
    from kappalab.data import load_house_prices, official_subset

    data = load_house_prices(csv_path)
    if protocol == "paper":
        P, H = data.P, data.H
    elif protocol == "official":
        P, H = official_subset(data.P, n_official), official_subset(data.H, n_official)
    else:
        raise ValueError(f"protocol must be 'paper' or 'official', got {protocol!r}")
    label = (f"House Prices train.csv sha256={data.sha256[:16]}... ({data.na_policy}); "
             f"D_P {P.n_rows} rows target {P.target_name}, D_H {H.n_rows} rows target {H.target_name}")
    return LinearTask(X_P=P.X, y_P=P.y, X_H=H.X, y_H=H.y, loss="mse", name=f"house_prices/{protocol}",
                      data_label=label)
