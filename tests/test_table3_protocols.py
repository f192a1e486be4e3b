"""Table 3 under two protocols (issue 18): ``--protocol paper`` (the paper's text, the path before the protocols
existed) and ``--protocol official`` (the authors' public code as read, :mod:`kappalab.deep.official`).

Known answers: the authors' r1 / r2 on a matrix of known spectrum with k = p = the input width; the same terms
computed by a training step on a real input batch against NumPy's eigenvalues of the step's own features; the
authors' ViT trainable set from their name rule; a constant learning rate over a run; the paper protocol's run keys
as they were before the protocols; and the command line's bad combinations (each in a fresh process).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mlxtend")

from kappalab.deep import METHODS, ObjectiveConfig, SmallCNN, immunize, objective_terms  # noqa: E402
from kappalab.deep.official import kappa_log_loss, r_ill_official, r_well_official  # noqa: E402
from kappalab.reproduce.table3 import cli as table3_cli  # noqa: E402
from kappalab.reproduce.table3.config import PROTOCOLS, load_table3_config, resolved  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIFT = 1e-6


def _known_spectrum(values: list[float], seed: int = 0) -> torch.Tensor:
    """``Q diag(values) Q^T`` for a random orthogonal Q (float64)."""
    Q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((len(values), len(values))))
    return torch.as_tensor(Q @ np.diag(values) @ Q.T)


def test_official_regularizers_use_k_equal_to_the_given_width() -> None:
    """Spectrum (4, 3, 2, 1, 0.5): ||S||_F^2 = 30.25; the shifted rule's s_max = 4 + 1e-6, s_min = 0.5 + 1e-6."""
    S = _known_spectrum([4.0, 3.0, 2.0, 1.0, 0.5])
    for k in (224, 28, 5):
        r1 = (4 + SHIFT) ** 2 / 2 - 30.25 / (2 * k)
        r2 = 1 / (30.25 / (2 * k) - (0.5 + SHIFT) ** 2 / 2)
        assert float(r_well_official(S, k)) == pytest.approx(r1, rel=1e-13)
        assert float(r_ill_official(S, k)) == pytest.approx(r2, rel=1e-13)
    # log kappa of the shifted rule: log((4 + 1e-6) / (0.5 + 1e-6)); D_H's enters as its reciprocal
    kap = np.log((4 + SHIFT) / (0.5 + SHIFT))
    assert float(kappa_log_loss(S, S)) == pytest.approx(1 / kap + kap, rel=1e-13)
    with pytest.raises(ValueError, match="k must be a positive int"):
        r_ill_official(S, 0)


def _step_terms(method: str, protocol: str, width: int = 2, n: int = 16):
    """One objective evaluation on a SmallCNN (``4 * width`` features) and 28 x 28 batches of ``n`` images."""
    torch.manual_seed(0)
    model = SmallCNN(3, width=width).split(dummy=protocol == "paper")
    g = torch.Generator().manual_seed(1)
    batch = lambda: (torch.randn(n, 1, 28, 28, generator=g, dtype=torch.float64),  # noqa: E731
                     torch.randint(0, 3, (n,), generator=g))
    bP, bH = batch(), batch()
    cfg = ObjectiveConfig(lambda_P=1.0, lambda_H=1.0, harmful_classes=3, protocol=protocol, reg_rtol=1e-10)
    return model, bP, bH, objective_terms(model, method, bP, bH, cfg)


def test_official_step_uses_the_input_width_on_its_own_features() -> None:
    """The official Ours step's r1 / r2 on the batch's features equal their formulas with k = p = 28 (the MNIST
    width), computed here in NumPy from the same features (8 features, 16 rows: S has full rank, so the shifted
    rule's s_min is the smallest eigenvalue plus the shift); k = 8 (the features) or the rank would differ."""
    model, bP, bH, terms = _step_terms("ours", "official")
    with torch.no_grad():
        FP, FH = (model.features(b[0]).numpy() for b in (bP, bH))
    model.train()

    def parts(F: np.ndarray) -> tuple[float, float, float]:
        S = F.T @ F
        lam = np.linalg.eigvalsh(S + SHIFT * np.eye(S.shape[0]))
        return float(lam[-1]), float(lam[lam > SHIFT].min()), float((S * S).sum())

    (smax, _, froP), (_, smin, froH) = parts(FP), parts(FH)
    assert FP.shape[1] == 8 and np.linalg.matrix_rank(FH) == 8
    r_well, r_ill = (float(terms[k].detach()) for k in ("r_well", "r_ill"))
    assert r_well == pytest.approx(smax ** 2 / 2 - froP / (2 * 28), rel=1e-9)
    assert r_ill == pytest.approx(1 / (froH / (2 * 28) - smin ** 2 / 2), rel=1e-9)
    assert abs(r_ill - 1 / (froH / (2 * 8) - smin ** 2 / 2)) > 1e-3 * r_ill  # k = D_hid = rank = 8 would differ
    _, _, _, kterms = _step_terms("opt_kappa", "official")
    assert set(kterms) == {"task", "kappa_log"}


def test_official_path_has_no_dummy_layer_and_no_preconditioning() -> None:
    """The official model has no dummy layer (so nothing multiplies a gradient by K^-1): its extractor is
    exactly SmallCNN's blocks 2-3; a model with a dummy layer is refused under the official protocol."""
    model, bP, bH, _ = _step_terms("ours", "official")
    assert model.dummy is None
    net = SmallCNN(3, width=2)
    expected = {id(p) for p in [*net.block2.parameters(), *net.block3.parameters()]}
    assert {id(p) for p in net.split(dummy=False).extractor_parameters()} == expected
    cfg = ObjectiveConfig(harmful_classes=3, protocol="official")
    with pytest.raises(ValueError, match="no dummy layer"):
        objective_terms(SmallCNN(3, width=2).split(), "ours", bP, bH, cfg)
    with pytest.raises(ValueError, match="protocol must be one of"):
        ObjectiveConfig(protocol="authors")


def test_learning_rate_is_constant_over_a_run(monkeypatch) -> None:
    """Every optimizer step of a 2-epoch official run uses the configured lr (no schedule), and the official
    configs of the paper's rows all use the authors' effective lr 1e-5 (their vit_country211.yaml says 5e-6, which
    their never-stepped scheduler overwrites with 1e-5)."""
    from torch.utils.data import DataLoader, TensorDataset

    from kappalab.deep import CombinedLoader, TrainConfig

    seen: list[float] = []
    step = torch.optim.SGD.step

    def spy(self, *args, **kwargs):
        seen.extend(g["lr"] for g in self.param_groups)
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.SGD, "step", spy)
    model, bP, bH, _ = _step_terms("ours", "official")
    loaders = [DataLoader(TensorDataset(*b), batch_size=4) for b in (bP, bH)]
    immunize(model, "ours", CombinedLoader(*loaders), ObjectiveConfig(lambda_P=1e-6, lambda_H=1e-3,
                                                                      harmful_classes=3, protocol="official"),
             TrainConfig(lr=3e-4, epochs=2), progress=False)
    assert len(seen) == 2 * 4 * 2 and set(seen) == {3e-4}  # 2 epochs x 4 steps x 2 parameter groups
    for row in ("resnet18_cars", "resnet18_country211", "vit_cars", "vit_country211"):
        cfg = load_table3_config(row, protocol="official")
        assert cfg.eta == 1e-5 and cfg.transforms == "authors" and cfg.unfollowed
        assert cfg.batch_size == (32 if row == "vit_country211" else 64)
        assert cfg.timm_name == ("resnet18" if row.startswith("resnet") else "vit_base_patch16_224")


def test_protocol_is_part_of_the_run_identity() -> None:
    """The paper protocol's keys are those computed before the protocols existed (hashes taken from the code
    before this change); the official protocol's differ, so both protocols keep their runs in one store."""
    data, opts = {"name": "x", "sha256": "y"}, {"seed": 0, "method": "ours", "device": "cpu", "dtype": "float64"}
    from kappalab.reproduce.identity import identity

    before = {"proxy": "731048afe636", "resnet18_cars": "f9d29ee930f6", "vit_smoke": "9d077cd93b90"}
    for name, old in before.items():
        paper, official = (load_table3_config(name, protocol=p) for p in PROTOCOLS)
        assert identity(resolved(paper), data, opts)["hash"] == old
        assert "protocol" not in resolved(paper) and resolved(official)["protocol"] == "official"
        assert identity(resolved(official), data, opts)["hash"] != old


def test_official_block_layers_before_quick_and_set() -> None:
    assert load_table3_config("proxy", protocol="official").method_epochs is None  # no early stopping
    assert load_table3_config("proxy").method_epochs["imma"] == 3
    wide = load_table3_config("proxy_wide", quick=True, protocol="official", overrides={"epochs": 2})
    assert wide.protocol == "official" and wide.epochs == 2 and wide.rir_group_size == 50
    assert "k" in wide.unfollowed and wide.reasons["unfollowed"]
    paper = load_table3_config("proxy_wide")
    assert paper.protocol == "paper" and paper.width * 4 > paper.rir_group_size and not paper.unfollowed


def test_proxy_quick_both_protocols_share_one_store(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out, work = tmp_path / "out", tmp_path / "work"
    for protocol in PROTOCOLS:
        argv = ["--proxy", "--quick", "--out", str(out), "--work", str(work), "--methods", "ours", "--protocol",
                protocol]
        assert table3_cli.main(argv) == 0
    for protocol, name in zip(PROTOCOLS, ("table.md", "table_official.md")):  # both tables kept
        assert f"protocol: {protocol}" in (out / name).read_text()
        assert "| Ours | authors', 4 groups of 50 |" in (out / name).read_text()
    records = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [(r["method"], r["identity"]["config"].get("protocol", "paper")) for r in records] == [
        ("init", "paper"), ("ours", "paper"), ("init", "official"), ("ours", "official")]
    assert len({r["key"] for r in records}) == 4
    for r in records[1::2]:
        assert set(r["estimates"]) == {"exact", "groups", "authors"}
    assert (out / "figure3_official.png").stat().st_size > 0 and (out / "figure3.png").stat().st_size > 0


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "kappalab.cli", "reproduce", "table3", *args], cwd=cwd, env=env,
                          text=True, capture_output=True, timeout=300)


@pytest.mark.parametrize("args, names", [
    (["--proxy", "--protocol", "official", "--config", "proxy_sensitivity"], "--protocol official"),
    (["--proxy", "--search", "--protocol", "official"], "--search"),
    (["--proxy", "--set", "protocol=official"], "--set protocol"),
    (["--proxy", "--protocol", "authors"], "--protocol"),
])
def test_bad_protocol_combinations_are_one_line_errors(args: list[str], names: str, tmp_path: Path) -> None:
    result = _cli([*args, "--out", str(tmp_path / "out")], tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert names in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_every_method_has_an_official_objective() -> None:
    keys = {m: set(_step_terms(m, "official")[3]) for m in METHODS}
    assert keys == {"ours": {"task", "r_well", "r_ill"}, "rill_only": {"task", "r_ill"},
                    "opt_kappa": {"task", "kappa_log"}, "imma": {"task", "harmful"}}


@pytest.mark.skipif(importlib.util.find_spec("timm") is None,
                    reason="timm is not installed (the deep environment: scripts/setup_deep.sh)")
def test_official_vit_trains_every_layernorm_the_last_block_and_the_head() -> None:
    """Their models/vit.py trains a parameter when its name contains 'blocks.11', 'norm' or 'head'. On a 12-block
    ViT-Tiny that is 60 tensors: norm1/norm2 of 12 blocks (48), the last block's attention and MLP (8), the final
    norm (2) and the head (2). One official Ours step moves exactly those (gradients flow through the rest)."""
    from torch.utils.data import DataLoader, TensorDataset

    from kappalab.deep import CombinedLoader, TrainConfig
    from kappalab.deep.timm_models import AUTHORS_VIT_TRAINABLE, build_timm_model

    torch.manual_seed(0)
    model, net = build_timm_model("vit", None, trainable=AUTHORS_VIT_TRAINABLE, load=False, dummy=False,
                                  timm_name="vit_tiny_patch16_224", img_size=32)
    named = dict(net.named_parameters())
    rule = {n for n in named if "blocks.11" in n or "norm" in n or "head" in n}
    trained = {id(p) for p in [*model.extractor_parameters(), *model.classifier_parameters()]}
    assert len(rule) == 60 and trained == {id(named[n]) for n in rule}
    before = {n: p.detach().clone() for n, p in named.items()}
    g = torch.Generator().manual_seed(0)
    batch = lambda: TensorDataset(torch.randn(4, 3, 32, 32, generator=g, dtype=torch.float64),  # noqa: E731
                                  torch.randint(0, 5, (4,), generator=g))
    immunize(model, "ours", CombinedLoader(DataLoader(batch(), batch_size=4), DataLoader(batch(), batch_size=4)),
             ObjectiveConfig(lambda_P=1e-6, lambda_H=1.0, harmful_classes=5, protocol="official"),
             TrainConfig(lr=1e-2, epochs=1), progress=False)
    moved = {n for n, p in named.items() if not torch.equal(before[n], p.detach())}
    assert moved == rule
