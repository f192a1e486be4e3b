"""The paper's Table 3 code path end to end on CPU (``kappalab reproduce table3 --arch resnet18|vit --smoke``):
a randomly initialised timm model, MNIST digits written as 224 x 224 RGB image folders and read back through
torchvision's ImageFolder with timm's transforms, theta_0's calibration, all four methods (3 steps each, the dummy
layer, the CombinedLoader), checkpoints and a resume from them, both RIR_theta0 estimators and Figure 3's probe;
under both protocols (``--protocol official``: the authors' transforms, no dummy layer, their r1 / r2 and kappa
loss, their ViT trainable set).

Runs where timm imports (the deep environment, ``scripts/setup_deep.sh``); skipped with that reason elsewhere.
Minutes on CPU, not seconds: the models run in float64 at 224 x 224.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mlxtend")

from kappalab.deep import METHODS  # noqa: E402
from kappalab.reproduce.table3 import cli as table3_cli  # noqa: E402
from kappalab.reproduce.table3 import run as table3_run  # noqa: E402

pytestmark = pytest.mark.skipif(importlib.util.find_spec("timm") is None,
                                reason="timm is not installed (the deep environment: scripts/setup_deep.sh)")


@pytest.mark.parametrize("protocol", ["paper", "official"])
@pytest.mark.parametrize("arch", ["resnet18", "vit"])
def test_smoke_configuration_end_to_end(arch: str, protocol: str, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    out, work = tmp_path / "out", tmp_path / "work"
    cfg = table3_run.load_config(f"{arch}_smoke")
    assert table3_cli.main(["--arch", arch, "--smoke", "--out", str(out), "--work", str(work), "--protocol",
                            protocol]) == 0
    records = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [r["method"] for r in records] == ["init", *METHODS]
    init, *methods = records
    kappa_term = "kappa_gap" if protocol == "paper" else "kappa_log"
    assert set(init["calibration"]["grad_norms"]) == {"task", "r_ill", "r_well", kappa_term, "harmful",
                                                      "log_kappa_ratio"}  # the last: the oracle control's
    assert records[1]["identity"]["config"].get("protocol", "paper") == protocol
    n_steps = 5 * cfg.smoke_per_class["train"] // cfg.batch_size  # D_H batches per epoch (drop_last)
    for r in methods:
        assert len(r["history"]) == cfg.epochs and all(torch.isfinite(torch.tensor(v)) for v in
                                                          r["history"][0].values())
        assert len(list(work.glob(f"*/seed0/{r['method']}.pt"))) == 1  # under work/<config and data hash>/
        # the group estimators on the smoke's few held-out images; the exact one needs N >= D, which they are not
        for name, kappa in (("groups", "pinv"), ("authors", "authors")):
            e = r["estimates"][name]
            assert e["kappa"] == kappa and e["groups"] == cfg.rir_groups and e["rir"] > 0
        assert r["estimates"]["exact"]["n_P"] < r["estimates"]["exact"]["dim"]
        assert "needs N >= D" in r["estimates"]["exact"]["ci_note"]
        assert [c["step"] for c in r["checkpoints"]] == [r["n_steps"]] and r["n_steps"] == cfg.epochs * n_steps
        u = r["utility"]
        assert len(u["probe_curve"]) == cfg.probe_epochs + 1 and 0 <= u["dp_test_acc"] <= 1
        assert r["provenance"]["config"]["timm_name"] == cfg.timm_name
    assert n_steps == 3
    suffix = "" if protocol == "paper" else "_official"
    for name in (f"table{suffix}.md", f"figure3{suffix}.png", f"figure3{suffix}.pdf"):
        assert (out / name).stat().st_size > 0
    # resume: a fresh store over the same work folder finds the finished checkpoint and trains nothing; the model
    # it evaluates is the one the first run trained, so its numbers (and the history the checkpoint keeps) are the
    # first run's
    assert table3_cli.main(["--arch", arch, "--smoke", "--out", str(tmp_path / "again"), "--work", str(work),
                            "--methods", "ours", "--protocol", protocol]) == 0
    again = [json.loads(line) for line in (tmp_path / "again" / "runs.jsonl").read_text().splitlines()]
    ours = next(r for r in methods if r["method"] == "ours")
    assert again[1]["history"] == ours["history"]  # the checkpoint keeps it
    assert again[1]["estimates"]["groups"] == ours["estimates"]["groups"] and again[1]["utility"] == ours["utility"]
