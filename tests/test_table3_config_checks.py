"""Table 3's config is typed and checked like the linear tables' :class:`~kappalab.immunization.MethodConfig`: a
wrong type, a rate out of range, an unknown choice or key is one :class:`~kappalab.configs.ConfigError` naming the
key and the file (one line and exit 2 on the command line); ``--set`` reaches every path, the real network's
lambdas included, and enters the run identity."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kappalab.configs import ConfigError
from kappalab.reproduce.table3.config import load_table3_config, resolved

ROOT = Path(__file__).resolve().parents[1]
REAL = "efficientnet_lite0_mnist"


@pytest.mark.parametrize("key, value, says", [
    ("epochs", "three", "epochs must be an int"),
    ("epochs", 0, "epochs must be > 0"),
    ("eta", -1, "eta must be > 0"),
    ("eta", True, "eta must be a float"),
    ("lambda_H", -5.0, "lambda_H must be >= 0"),
    ("momentum", 1.0, "momentum must be < 1"),
    ("seeds", [0, "1"], "seeds must be a list of ints"),
    ("spectral_route", "sparse", "spectral_route must be one of 'dense', 'gram'"),
    ("dummy_side", "left", "dummy_side must be one of"),
])
def test_a_bad_value_names_the_key_and_the_file(key, value, says):
    with pytest.raises(ConfigError, match="table3_proxy.json") as error:
        load_table3_config("proxy", overrides={key: value})
    assert says in str(error.value) and str(error.value).endswith("(from --set)") and "\n" not in str(error.value)


def test_an_unknown_key_names_the_key():
    with pytest.raises(ConfigError, match="lambda_rule"):
        load_table3_config("proxy", overrides={"lambda_rule": "balanced"})


def test_every_shipped_config_passes_the_checks():
    from kappalab.configs import names

    for name in names():
        if name.startswith("table3_"):
            for protocol in ("paper", "official"):
                try:
                    load_table3_config(name.removeprefix("table3_"), protocol=protocol)
                except ConfigError as error:
                    assert "no 'official' block" in str(error), error


def test_set_lambda_changes_the_real_runs_identity_and_lambdas():
    from kappalab.reproduce.table3.real import run_lambdas

    balanced = {"lambda_P": 1e-3, "lambda_H": 1e2, "lambda_kappa": 1e-6, "lambda_imma": 1.0}
    default = load_table3_config(REAL)
    given = load_table3_config(REAL, overrides={"lambda_H": 5e3})
    tenfold = load_table3_config(REAL, overrides={"lambda_multiple": 10})
    assert resolved(given) != resolved(default) and resolved(given)["lambda_H"] == 5e3
    assert run_lambdas(default, balanced) == balanced
    assert run_lambdas(given, balanced) == {**balanced, "lambda_H": 5e3}
    assert run_lambdas(tenfold, balanced) == {k: 10 * v for k, v in balanced.items()}
    assert "lambda_multiple" not in resolved(default) and resolved(tenfold)["lambda_multiple"] == 10


def test_the_command_line_refuses_a_bad_set_in_one_line(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-m", "kappalab.cli", "reproduce", "table3", "--proxy", "--quick",
                             "--set", "epochs=three", "--out", str(tmp_path / "out")], capture_output=True,
                            text=True, cwd=tmp_path, env=env, timeout=300)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "epochs" in lines[0] and "table3_proxy.json" in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, says", [
    (["--proxy", "--quick", "--grid"], "--grid: needs --arch efficientnet_lite0"),
    (["--arch", "efficientnet_lite0", "--harmful", "mnist", "--grid"], "--set per_class.validation=N"),
])
def test_grid_needs_the_real_network_and_a_validation_part(argv, says, tmp_path):
    from kappalab.cli_options import UsageError
    from kappalab.reproduce.table3.cli import prepare

    with pytest.raises(UsageError, match="^--grid: ") as error:
        prepare([*argv, "--out", str(tmp_path / "out")])
    assert says in str(error.value) and "\n" not in str(error.value)


def test_a_validation_part_is_a_per_class_key_and_enters_the_identity():
    with_val = load_table3_config(REAL, overrides={"per_class.validation": 50})
    assert with_val.per_class["validation"] == 50 and resolved(with_val) != resolved(load_table3_config(REAL))
    with pytest.raises(ConfigError, match="per_class.validation must be >= 1"):
        load_table3_config(REAL, overrides={"per_class.validation": 0})
    with pytest.raises(ConfigError, match="per_class.valid"):
        load_table3_config(REAL, overrides={"per_class.valid": 5})


def test_a_forced_tensor_eigensolver_is_another_real_run():
    from kappalab.extremes import forced_method
    from kappalab.reproduce.table3.cli import prepare

    # the real network runs on the CPU whatever --device says; LAPACK adds nothing: the recorded runs' keys
    plan = dataclasses.replace(prepare(["--arch", "efficientnet_lite0", "--harmful", "mnist", "--out", "unused"]),
                               device="cuda")
    assert plan.options(0, "ours") == {"seed": 0, "method": "ours", "device": "cpu", "dtype": "float64"}
    with forced_method("tensor"):
        assert plan.options(0, "ours") == {"seed": 0, "method": "ours", "device": "cpu", "dtype": "float64",
                                           "eigensolver": "tensor"}


def test_a_float32_tail_is_the_real_networks_option_with_float32_features_and_its_own_identity():
    fast = load_table3_config(REAL, overrides={"tail_precision": "float32", "features_precision": "float32"})
    assert resolved(fast)["tail_precision"] == "float32"
    assert "tail_precision" not in resolved(load_table3_config(REAL))  # float64: the recorded runs' keys
    with pytest.raises(ConfigError, match="features_precision must be 'float32' with tail_precision 'float32'"):
        load_table3_config(REAL, overrides={"tail_precision": "float32"})
    with pytest.raises(ConfigError, match="tail_precision must be 'float64' outside the real network"):
        load_table3_config("proxy", overrides={"tail_precision": "float32", "features_precision": "float32"})
    with pytest.raises(ConfigError, match="tail_precision must be one of 'float64', 'float32'"):
        load_table3_config(REAL, overrides={"tail_precision": "half"})
