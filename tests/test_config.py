"""Configs: shipped inside the package, one schema per kind, unknown keys are errors naming key and file,
``--set`` overrides with dotted keys, Table 4 is the single source of the linear hyper-parameters."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from kappalab.configs import CONFIG_DIR, ConfigError, names, parse_set
from kappalab.immunization.config import (EXTRA_NAMES, IDENTITY_WHEN_SET, Extras, MethodConfig, load_config,
                                          table1_config)
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
    assert isinstance(cfg.extra, Extras) and cfg.source[0].startswith("kappalab/configs/")
    resolved = cfg.resolved()
    # every value the run reads, defaults filled in; the identity-when-set extras only when set (none here)
    assert set(resolved["extra"]) == set(EXTRA_NAMES) - set(IDENTITY_WHEN_SET)
    assert all(Extras.reason(name) for name in EXTRA_NAMES)


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
    assert cfg.lambda_H == 3e7 and cfg.extra.shift == 1e-5 and cfg.extra.theta_init == "identity"
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
    assert t3.lambda_H == 7.0 and t3.search.max_epochs == 2
    with pytest.raises(ConfigError, match="unknown key 'search.max_epoch'"):
        load_table3_config("proxy", overrides={"search.max_epoch": 2})


def test_table3_search_block_is_typed_and_whole(tmp_path: Path) -> None:
    """The search block is a frozen SearchConfig read by attribute; a block that lacks a key is one ConfigError
    naming the file and the key (before: a KeyError deep inside the search)."""
    from kappalab.configs import CONFIG_DIR

    t3 = load_table3_config("proxy", quick=True)
    assert t3.search.max_epochs == 1 and t3.search.readings == ["task", "pair"]  # quick.search merged into the block
    raw = json.loads((CONFIG_DIR / "table3_proxy.json").read_text())
    del raw["search"]["rir_groups"]
    path = tmp_path / "lacks.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=r"lacks\.json: the search block lacks \['rir_groups'\]"):
        load_table3_config(str(path))


def test_extras_are_typed_and_checked_at_construction(tmp_path: Path) -> None:
    cfg = table1_config("paper", "ours")
    with pytest.raises(AttributeError, match="spectral_rout"):
        cfg.extra.spectral_rout  # an undeclared value cannot be read
    assert cfg.extra.shift == 1e-6 and cfg.extra.adam_betas == (0.9, 0.999)  # a JSON list, held as the tuple
    # inner_lr's default is eta, read where it is used, so it follows an eta changed later
    assert cfg.extra.inner_lr is None and cfg.inner_lr == cfg.eta
    assert cfg.replace(eta=0.02).inner_lr == 0.02 and cfg.replace(eta=0.02).resolved()["extra"]["inner_lr"] == 0.02
    assert cfg.with_extra(inner_lr=0.3).replace(eta=0.02).inner_lr == 0.3
    assert cfg.with_extra(shift=0).extra.shift == 0  # an int where a float is declared is kept as given
    with pytest.raises(ValueError, match="^extra.shuffle must be a bool, got 'yes'$"):
        cfg.with_extra(shuffle="yes")
    with pytest.raises(ValueError, match="^extra.monitor_every must be an int, got True$"):
        cfg.with_extra(monitor_every=True)
    with pytest.raises(ValueError, match="^extra.monitor_every must be a positive int, got 0$"):
        cfg.with_extra(monitor_every=0)
    with pytest.raises(ValueError, match=r"^extra.adam_betas must be a list of 2 numbers, got \[0.9\]$"):
        cfg.with_extra(adam_betas=[0.9])
    with pytest.raises(ValueError, match="^extra.rank_rtol must be a float or null, got 'x'$"):
        cfg.with_extra(rank_rtol="x")
    with pytest.raises(ValueError, match="^extra.theta_init must be one of 'torch_linear', 'identity', got 'eye'$"):
        cfg.with_extra(theta_init="eye")
    with pytest.raises(ConfigError, match=r"c\.json: extra\.precondition must be a bool, got 'false'"):
        load_config(_write(tmp_path, {"extra": {"precondition": {"value": "false", "reason": "a string"}}}))
    with pytest.raises(ConfigError, match=r"--set extra\.shuffle='yes'.*extra\.shuffle must be a bool, got 'yes'"):
        table1_config("paper", "ours", {"extra.shuffle": "yes"})
    with pytest.raises(ValueError, match="extra: unknown key"):
        Extras.of({"nope": 1})
    with pytest.raises(ValueError, match="extra must be an Extras"):
        MethodConfig("ours", "paper", 1.0, 1.0, 1.0, 1, None, 0.0, 0.0, extra={"shift": 1e-6})