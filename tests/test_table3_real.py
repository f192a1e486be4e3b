"""Table 3's real-network configuration (``--arch efficientnet_lite0``): what runs without timm or the data.

The official protocol's k where the tail's input is a cached activation (the image width, not the activation's);
the configs (the exact estimator's sample minimum, both protocols); the command line's refusals (one line, exit 2,
in a fresh process); the input preprocessing against a hand computation; the L-BFGS head against scikit-learn-free
known answers (separable data); the part draw's disjointness on synthetic labels.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kappalab.deep import ObjectiveConfig, SmallCNN, objective_terms  # noqa: E402
from kappalab.deep.official import r_ill_official  # noqa: E402
from kappalab.deep.model import hessian_tilde  # noqa: E402
from kappalab.deep.trunk import preprocess  # noqa: E402
from kappalab.reproduce.table3.config import load_table3_config  # noqa: E402
from kappalab.reproduce.table3.real import fit_head  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("efficientnet_lite0_mnist", "efficientnet_lite0_fashion-mnist")


def test_official_k_replaces_the_input_width() -> None:
    """With ``official_k`` the official R_ill uses it; without, the input batch's last dimension (28 here)."""
    torch.manual_seed(0)
    model = SmallCNN(3, width=2).split(dummy=False)
    g = torch.Generator().manual_seed(1)
    bP, bH = ((torch.randn(16, 1, 28, 28, generator=g, dtype=torch.float64),
               torch.randint(0, 3, (16,), generator=g)) for _ in range(2))
    with torch.no_grad():
        S_H = hessian_tilde(model.features(bH[0]))
    model.train()
    for k, expected_k in ((None, 28), (112, 112)):
        cfg = ObjectiveConfig(lambda_H=1.0, harmful_classes=3, protocol="official", official_k=k)
        got = float(objective_terms(model, "rill_only", bP, bH, cfg)["r_ill"].detach())
        assert got == pytest.approx(float(r_ill_official(S_H, expected_k)), rel=1e-9)


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("protocol", ["paper", "official"])
def test_configs_load_and_hold_enough_held_out_samples(name: str, protocol: str) -> None:
    cfg = load_table3_config(name, protocol=protocol)
    assert {cfg.pretrain_data, cfg.harmful} == {"mnist", "fashion-mnist"}
    assert 10 * cfg.per_class["heldout"] >= 2 * 1280  # the exact estimator: at least twice the feature width
    assert cfg.lambda_P is None and cfg.lambda_H is None and cfg.protocol == protocol  # balanced at run time
    assert (cfg.unfollowed is not None) == (protocol == "official")


def test_norm_statistics_is_a_setting_and_leaves_the_default_keys_alone() -> None:
    """``--set norm_statistics=frozen`` enters the run identity's config; the default ("batch") does not (the keys of
    the stored runs stay theirs); another value is a one-line config error."""
    from kappalab.configs import ConfigError
    from kappalab.reproduce.table3.config import resolved

    default = load_table3_config(CONFIGS[0], protocol="paper")
    frozen = load_table3_config(CONFIGS[0], protocol="paper", overrides={"norm_statistics": "frozen"})
    assert default.norm_statistics == "batch" and "norm_statistics" not in resolved(default)
    assert resolved(frozen) == {**resolved(default), "norm_statistics": "frozen"}
    with pytest.raises(ConfigError, match="norm_statistics must be one of"):
        load_table3_config(CONFIGS[0], protocol="paper", overrides={"norm_statistics": "eval"})


def _cli(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "kappalab.cli", "reproduce", "table3", *args,
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)


@pytest.mark.parametrize("args, names", [
    (["--arch", "efficientnet_lite0", "--harmful", "cars"], "--harmful cars"),
    (["--arch", "resnet18", "--harmful", "mnist"], "--harmful mnist"),
    (["--arch", "efficientnet_lite0", "--harmful", "mnist", "--weights", "w.pth"], "--arch efficientnet_lite0"),
    (["--arch", "efficientnet_lite0", "--smoke"], "--arch efficientnet_lite0"),
])
def test_bad_combinations_are_one_line_errors(args: list[str], names: str, tmp_path: Path) -> None:
    result = _cli(args, tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert names in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_preprocess_by_hand() -> None:
    """A constant image stays constant through the bicubic resize; 0 and 255 map to (0 - m)/s and (1 - m)/s."""
    images = np.stack([np.zeros((28, 28), np.uint8), np.full((28, 28), 255, np.uint8)])
    x = preprocess(images, 56, (0.5, 0.4, 0.3), (0.5, 0.2, 0.1))
    assert x.shape == (2, 3, 56, 56) and x.dtype == torch.float32
    for c, (m, s) in enumerate(zip((0.5, 0.4, 0.3), (0.5, 0.2, 0.1))):
        assert torch.allclose(x[0, c], torch.full((56, 56), (0 - m) / s, dtype=x.dtype), atol=1e-6)
        assert torch.allclose(x[1, c], torch.full((56, 56), (1 - m) / s, dtype=x.dtype), atol=1e-6)


def test_fit_head_separates_separable_classes() -> None:
    """Ten well-separated Gaussian clusters: the head's training accuracy is 1, and its L2 term keeps W finite."""
    rng = np.random.default_rng(0)
    centers = 5 * rng.standard_normal((10, 16))
    y = np.repeat(np.arange(10), 20)
    F = torch.as_tensor(centers[y] + 0.1 * rng.standard_normal((200, 16)))
    head = fit_head(F, torch.as_tensor(y), l2=1e-4)
    assert float((head(F).argmax(1) == torch.as_tensor(y)).double().mean()) == 1.0
    assert torch.isfinite(head.weight).all() and not head.weight.requires_grad
