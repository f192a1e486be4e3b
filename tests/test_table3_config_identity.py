"""A Table 3 run's identity config (``resolved(cfg)``) is what it was when the loader returned a dict.

:func:`kappalab.reproduce.table3.config.load_table3_config` returns the frozen :class:`Table3Config` (read by
attribute) instead of ``asdict(...)`` plus ``reasons``, ``config_file`` and ``quick``; run keys are hashes of
``resolved(cfg)``, so it must give the same dict. PINNED holds the sha256 of
``json.dumps(resolved(cfg), sort_keys=True)`` for every shipped ``table3_*.json`` under both protocols, with and
without ``--quick``, computed with the ORIGINAL code (main at c52e468, where ``load_table3_config`` returned the
dict) by a loop over ``CONFIG_DIR.glob("table3_*.json")``, the two protocols and ``quick`` in (False, True); None
where the config has no ``official`` block (a ConfigError, then as now).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from kappalab.configs import CONFIG_DIR, ConfigError
from kappalab.reproduce.table3.config import LOADER_FIELDS, Table3Config, load_table3_config, resolved

#: (config name, protocol, quick) -> sha256 of the identity config; None: the config has no official block
PINNED = {
    ("efficientnet_lite0_fashion-mnist", "paper", False):
        "216ddef6b6e84174a88336a14d4991fddbdbab66ca4cd2a9aa6ad4148bf57158",
    ("efficientnet_lite0_fashion-mnist", "paper", True):
        "216ddef6b6e84174a88336a14d4991fddbdbab66ca4cd2a9aa6ad4148bf57158",
    ("efficientnet_lite0_fashion-mnist", "official", False):
        "7feadcf725940c2f32b3db005cc8dbca593cc88e1a4765348117b44aff661d3d",
    ("efficientnet_lite0_fashion-mnist", "official", True):
        "7feadcf725940c2f32b3db005cc8dbca593cc88e1a4765348117b44aff661d3d",
    ("efficientnet_lite0_mnist", "paper", False): "f8ddbba2f80511f675caea4f6010fc6af5b15681f2e4a28ee8e7698d0855e612",
    ("efficientnet_lite0_mnist", "paper", True): "f8ddbba2f80511f675caea4f6010fc6af5b15681f2e4a28ee8e7698d0855e612",
    ("efficientnet_lite0_mnist", "official", False): "da17f4899e26976e186999c65a3027d91884cf906a2b1ba2623ae9f443a56c91",
    ("efficientnet_lite0_mnist", "official", True): "da17f4899e26976e186999c65a3027d91884cf906a2b1ba2623ae9f443a56c91",
    ("proxy", "paper", False): "01b81a9ca0f2ab5f0da286200225c24095e58f46c852ae6e3db8f684c8d8e325",
    ("proxy", "paper", True): "111e1a57b321a54778eebfa73ed2bbb69855c0e5c7a75e881810d25e279a930d",
    ("proxy", "official", False): "428820a8af46255700e0fc3dbe4a17a51093590a68901bc9ac743b5611aecd79",
    ("proxy", "official", True): "fa2407e643b846e3c58a22e0a0fd8918d4a0dd84d7080278c7d64ed3ee1fc737",
    ("proxy_sensitivity", "paper", False): "ec8736cd0e2226768af91b2c2b8f9b4f6be6c00211fcc1589e6c40e03d6a0925",
    ("proxy_sensitivity", "paper", True): "06d6546199b8ea205070e6b042fe599d5641d6d9cc2dcf40bc75b08fa0e0490b",
    ("proxy_sensitivity", "official", False): None,
    ("proxy_sensitivity", "official", True): None,
    ("proxy_unsearched", "paper", False): "a3d805b3fa22b9f4388316c4465be539c68923ae88ae0a07242b66154092dcd0",
    ("proxy_unsearched", "paper", True): "cb2c8e116f29c27795b550150461eb7551da6f21dffb1b628a95a3a704a11837",
    ("proxy_unsearched", "official", False): None,
    ("proxy_unsearched", "official", True): None,
    ("proxy_wide", "paper", False): "3e01c980eed2eb4becf1d2b085723e285fd29cbfd9de2b0dd2464b2409b70c97",
    ("proxy_wide", "paper", True): "e3c813146196fd01c6183e95aa3c16581a2613059d30bba32deb3aa575ca876f",
    ("proxy_wide", "official", False): "bbf2b3bf8b112ad27777ec5a24c923d304732497d7f364c79cadb2143c8d53dd",
    ("proxy_wide", "official", True): "08326f4f30b9e3e513211a481b4c2eb06b63f838be6f93d813bfa48abfde9dd5",
    ("resnet18_cars", "paper", False): "f56ab2f1f4d2280bb755133cb92de143a77387dc37bfdbad048b49d7f11f0b73",
    ("resnet18_cars", "paper", True): "f56ab2f1f4d2280bb755133cb92de143a77387dc37bfdbad048b49d7f11f0b73",
    ("resnet18_cars", "official", False): "caa1a5c1770b8be1df5bfc237a6a0524d1971ad63019c32516de0f0e352f285c",
    ("resnet18_cars", "official", True): "caa1a5c1770b8be1df5bfc237a6a0524d1971ad63019c32516de0f0e352f285c",
    ("resnet18_country211", "paper", False): "440894fccbf8ed8abd4904b1689d54b7a8cae7d8427e4f79d68fdf9240645793",
    ("resnet18_country211", "paper", True): "440894fccbf8ed8abd4904b1689d54b7a8cae7d8427e4f79d68fdf9240645793",
    ("resnet18_country211", "official", False): "cb5f1bf54aab3ea0724b45c3fcc2ff47f9686ea05178454d60022d780850a4a0",
    ("resnet18_country211", "official", True): "cb5f1bf54aab3ea0724b45c3fcc2ff47f9686ea05178454d60022d780850a4a0",
    ("resnet18_smoke", "paper", False): "dcdf5e6fb947500a676110f9c3b950f1eebb1440f356aabd0d904e964436d062",
    ("resnet18_smoke", "paper", True): "dcdf5e6fb947500a676110f9c3b950f1eebb1440f356aabd0d904e964436d062",
    ("resnet18_smoke", "official", False): "c9c54fea3b08fdcb8f3e6a1fe45494cb3f60d3ebad2d367ec150401010422032",
    ("resnet18_smoke", "official", True): "c9c54fea3b08fdcb8f3e6a1fe45494cb3f60d3ebad2d367ec150401010422032",
    ("vit_cars", "paper", False): "516a4954d0310f7ffd1c792416d960a3474ecd55debfc8ff39d4cdb0a9794f82",
    ("vit_cars", "paper", True): "516a4954d0310f7ffd1c792416d960a3474ecd55debfc8ff39d4cdb0a9794f82",
    ("vit_cars", "official", False): "d984f941215f5b802111027ebcf979bd433945bb8c8c4452d5157ed20fe12b41",
    ("vit_cars", "official", True): "d984f941215f5b802111027ebcf979bd433945bb8c8c4452d5157ed20fe12b41",
    ("vit_country211", "paper", False): "b9bb9e5e95397cbaaa96e128168e5a70e9a70c5a800092f52e88dc0a052f0a74",
    ("vit_country211", "paper", True): "b9bb9e5e95397cbaaa96e128168e5a70e9a70c5a800092f52e88dc0a052f0a74",
    ("vit_country211", "official", False): "e7e280b719a6fafb2737232d2352bd902c104a8e5cae5fc8656450bdea4e89e4",
    ("vit_country211", "official", True): "e7e280b719a6fafb2737232d2352bd902c104a8e5cae5fc8656450bdea4e89e4",
    ("vit_smoke", "paper", False): "84bdc970d35a4d1ef16ac7e502a84996aaa1f1799f956bc69c794d933cec08aa",
    ("vit_smoke", "paper", True): "84bdc970d35a4d1ef16ac7e502a84996aaa1f1799f956bc69c794d933cec08aa",
    ("vit_smoke", "official", False): "8256dbc069d33d52bc4ea4eb1576ca67daac5195b3464264538bf7d1f21ef67b",
    ("vit_smoke", "official", True): "8256dbc069d33d52bc4ea4eb1576ca67daac5195b3464264538bf7d1f21ef67b",
}


def test_every_shipped_config_is_pinned() -> None:
    names = {p.stem[len("table3_"):] for p in CONFIG_DIR.glob("table3_*.json")}
    assert {name for name, _, _ in PINNED} == names


@pytest.mark.parametrize("name, protocol, quick", sorted(PINNED))
def test_identity_config_is_unchanged(name: str, protocol: str, quick: bool) -> None:
    digest = PINNED[name, protocol, quick]
    if digest is None:
        with pytest.raises(ConfigError, match="no 'official' block"):
            load_table3_config(name, quick=quick, protocol=protocol)
        return
    cfg = load_table3_config(name, quick=quick, protocol=protocol)
    assert isinstance(cfg, Table3Config) and cfg.protocol == protocol and cfg.quick == quick
    assert hashlib.sha256(json.dumps(resolved(cfg), sort_keys=True).encode()).hexdigest() == digest


def test_loader_fields_are_not_config_keys() -> None:
    """``reasons``, ``config_file`` and ``quick`` are the loader's: never part of the identity, never a file's
    key, and the config is frozen (a run cannot change what it was given)."""
    cfg = load_table3_config("proxy", quick=True)
    assert not set(LOADER_FIELDS) & set(resolved(cfg))
    assert cfg.config_file == "kappalab/configs/table3_proxy.json" and cfg.reasons
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.epochs = 1  # type: ignore[misc]
    with pytest.raises(ConfigError, match="quick"):
        load_table3_config("proxy", overrides={"quick": True})
