"""Datasets used by the paper's linear experiments: House Prices (Table 1) and MNIST (Table 2)."""

from kappalab.data.house_prices import (
    HousePricesData,
    RegressionSplit,
    feature_rank,
    load_house_prices,
    official_subset,
)
from kappalab.data.mnist import MnistData, PairSplits, digit_pair, load_digits, load_mnist, pair_splits, select_digits

__all__ = [
    "HousePricesData",
    "MnistData",
    "PairSplits",
    "RegressionSplit",
    "digit_pair",
    "feature_rank",
    "load_digits",
    "load_house_prices",
    "load_mnist",
    "official_subset",
    "pair_splits",
    "select_digits",
]
