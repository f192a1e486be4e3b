"""Configs: shipped inside the package, one schema per kind, unknown keys are errors naming key and file,
``--set`` overrides with dotted keys, Table 4 is the single source of the linear hyper-parameters."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from kappalab.configs import CONFIG_DIR, ConfigError, names, parse_set
from kappalab.immunization.config import EXTRA, MethodConfig, load_config, table1_config
from kappalab.reproduce.table3.config import load_table3_config

LINEAR = [n for n in names() if n.startswith(("table1_", "table2_")) and n.count("_") == 2
          and not n.endswith(("_base", "_linear"))]


def test_configs_are_package_resources() -> None:
    shipped = {p.name for p in resources.files("kappalab.configs").iterdir() if p.name.endswith(".json")}
    assert {"table1_paper_ours.json", "table2_official_ours.json", "table3_proxy.json"} <= shipped
    assert {f"{n}.json" for n in names()} == shipped
    assert Path(str(resources.files("kappalab.configs"))) == CONFIG_DIR


@pytest.mark.parametrize("name", LINEAR)
def test_every_linear_config_loads_with_every_value_declared(name: str) -> None:
    cfg = load_config(name)
    assert set(cfg.extra) <= set(EXTRA) and cfg.source[0].startswith("kappalab/configs/")
    resolved = cfg.resolved()
    assert set(resolved["extra"]) == set(EXTRA)  # every value the run reads, defaults filled in


def test_table4_is_the_single_source_of_eta_and_lambda_H() -> None:
    """eta and lambda_H of Tables 1 and 2 are set only by the two Table 4 row files."""
    setters = {n for n in names() if n.startswith(("table1_", "table2_", "linear_"))
               and {"eta", "lambda_H"} & set(json.loads((CONFIG_DIR / f"{n}.json").read_text()))}
    assert setters == {"linear_house_prices", "table2_mnist_linear"}
    assert table1_config("paper", "ours").lambda_H == 1e7 and load_config("table2_official_ours").lambda_H == 5e7


def _write(tmp_path: Path, body: dict) -> Path:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"base": "table1_paper_ours", **body}))
    return path


def test_unknown_keys_are_errors_naming_key_and_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"c\.json: unknown key 'lamda_H'"):
        load_config(_write(tmp_path, {"lamda_H": 1.0}))
    with pytest.raises(ConfigError, match=r"c\.json: unknown key 'extra\.shfit'"):
        load_config(_write(tmp_path, {"extra": {"shfit": {"value": 1e-6, "reason": "typo"}}}))
    with pytest.raises(ConfigError, match=r"extra\.shift must be"):
        load_config(_write(tmp_path, {"extra": {"shift": 1e-6}}))
    with pytest.raises(ConfigError, match="epochs must be a positive int"):
        load_config(_write(tmp_path, {"epochs": 0}))
    with pytest.raises(ConfigError, match="no such file"):
        load_config("no_such_config")
    bad = tmp_path / "t3.json"
    raw = json.loads((CONFIG_DIR / "table3_proxy.json").read_text())
    bad.write_text(json.dumps({**raw, "choices": {**raw["choices"], "pretrain_epoch": {"value": 1, "reason": ""}}}))
    with pytest.raises(ConfigError, match=r"t3\.json: unknown key 'choices\.pretrain_epoch'"):
        load_table3_config(str(bad))


def test_set_overrides_with_dotted_keys() -> None:
    over = parse_set(["lambda_H=3e7", "extra.shift=1e-5", "extra.theta_init=identity"])
    assert over == {"lambda_H": 3e7, "extra.shift": 1e-5, "extra.theta_init": "identity"}
    cfg = table1_config("paper", "ours", over)
    assert cfg.lambda_H == 3e7 and cfg.get("shift") == 1e-5 and cfg.get("theta_init") == "identity"
    assert cfg.reasons["shift"] == "set on the command line (--set)" and cfg.source[-1].startswith("--set")
    with pytest.raises(ConfigError, match="--set lambda_h: unknown key 'lambda_h'"):
        table1_config("paper", "ours", {"lambda_h": 1.0})
    with pytest.raises(ConfigError, match="unknown key 'extra.nope'"):
        table1_config("paper", "ours", {"extra.nope": 1})
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_set(["lambda_H"])
    with pytest.raises(ConfigError, match="given twice"):
        parse_set(["eta=1", "eta=2"])
    t3 = load_table3_config("proxy", overrides={"lambda_H": 7.0, "search.max_epochs": 2})
    assert t3.lambda_H == 7.0 and t3.search["max_epochs"] == 2
    with pytest.raises(ConfigError, match="unknown key 'search.max_epoch'"):
        load_table3_config("proxy", overrides={"search.max_epoch": 2})


def test_reading_an_undeclared_or_drifted_value_is_an_error() -> None:
    cfg = table1_config("paper", "ours")
    with pytest.raises(KeyError, match="not declared"):
        cfg.get("spectral_rout")
    with pytest.raises(ValueError, match="differs from the declared"):
        cfg.get("shift", 1e-3)
    assert cfg.get("shift", 1e-6) == 1e-6 and cfg.get("inner_lr") == cfg.eta
    with pytest.raises(ValueError, match="extra: unknown key"):
        MethodConfig("ours", "paper", 1.0, 1.0, 1.0, 1, None, 0.0, 0.0, extra={"nope": 1})
