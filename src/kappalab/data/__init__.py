"""Datasets used by the paper's linear experiments: House Prices (Table 1) and MNIST (Table 2)."""

from kappalab.data.house_prices import (
    HousePricesData,
    RegressionSplit,
    feature_rank,
    load_house_prices,
    official_subset,
)
from kappalab.data.mnist import MnistData, digit_pair, load_mnist, select_digits

__all__ = [
    "HousePricesData",
    "MnistData",
    "RegressionSplit",
    "digit_pair",
    "feature_rank",
    "load_house_prices",
    "load_mnist",
    "official_subset",
    "select_digits",
]
