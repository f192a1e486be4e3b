"""``kappalab reproduce table1 --quick`` writes complete files from which every number can be recomputed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from kappalab.cli import main as cli_main  # noqa: E402
from kappalab.immunization import LinearTask, evaluate  # noqa: E402


REFERENCE = Path(__file__).parent / "data" / "table1_quick_reference.json"


@pytest.mark.parametrize("protocol", ["paper", "official"])
def test_quick_run_is_complete_and_self_consistent(tmp_path, protocol):
    out = tmp_path / protocol
    args = ["reproduce", "table1", "--quick", "--protocol", protocol, "--out", str(out), "--no-progress",
            "--probe-iters", "20"]
    assert cli_main(args) == 0
    for name in (f"table1_{protocol}.json", f"table1_{protocol}.md", f"table1_{protocol}.csv",
                 f"figure1_{protocol}.png", f"figure1_{protocol}.pdf", f"runs_{protocol}.jsonl"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    data = json.loads((out / f"table1_{protocol}.json").read_text())
    assert {r["method"] for r in data["runs"]} == {"ours", "rill_only", "imma", "opt_kappa"}
    folder = out / "data" / data["meta"]["data"]["sha256"][:12]
    X_P, X_H = np.load(folder / "features_P.npy"), np.load(folder / "features_H.npy")
    assert X_P.dtype == np.float64 and X_P.shape[1] == 79
    task = LinearTask(X_P, np.load(folder / "y_P.npy"), X_H, np.load(folder / "y_H.npy"), "mse", "files", "files")
    for r in data["runs"]:
        assert r["provenance"]["seed"] == r["seed"] and r["protocol"] == protocol
        assert r["key"].endswith(r["identity"]["hash"]) and r["identity"]["options"]["seed"] == r["seed"]
        theta = np.load(out / r["files"]["theta_I"])
        bias = np.load(out / r["files"]["bias"]) if r["files"]["bias"] else None
        assert (bias is not None) == (protocol == "official")
        again = evaluate(theta, task, bias=bias, shift=r["evaluation"]["shift"])
        for d in ("pinv", "shifted"):
            for k in ("term_i", "term_ii", "rir"):
                assert again[d][k] == pytest.approx(r["evaluation"][d][k], rel=1e-10), (r["key"], d, k)
    # the markdown lists the paper's numbers as a labelled reference next to ours
    md = (out / f"table1_{protocol}.md").read_text()
    assert "paper RIR" in md and "356.2" in md
    # resumable: a second call redoes nothing
    assert cli_main(args) == 0
    assert len((out / f"runs_{protocol}.jsonl").read_text().splitlines()) == 4


#: the probes' floats (norm ratios after --probe-iters gradient steps) move between BLAS kernels at the rounding
#: level; 1e-10 is the lab's agreement criterion for one run computed two ways (kappalab.reproduce.table2.merge.REL_TOL)
PROBE_REL = 1e-10


@pytest.mark.parametrize("protocol", ["paper", "official"])
def test_quick_numbers_match_the_recorded_reference_run(tmp_path, protocol):
    """Every number of ``--quick`` (both kappa definitions, the sensitivity block, the probing counts) is what the
    runner before the engine refactor (commit 1680d7b) wrote for the same command (tests/data/table1_quick_reference.json,
    recorded from that commit's ``reproduce table1 --quick`` with OpenBLAS's SkylakeX kernels), up to rounding: each
    evaluation number of the reference lies inside the rounding envelope of this run's theta (tests/envelope.py,
    plain NumPy), the probes' integers are equal and their floats within PROBE_REL. The ``spectra`` endpoints come
    from the eigenvalues that give the kappas: the ranks are equal where the envelope pins the pinv kappa (the rank
    rule cuts in a gap wider than rounding), lambda_max and lambda_min_pinv within 1e-8 relative (measured: 2.7e-10),
    and lambda_min_raw (the rounding noise of an exact zero) not at all."""
    from envelope import evaluation_envelope, outside

    reference = json.loads(REFERENCE.read_text())["runs"]
    assert cli_main(["reproduce", "table1", "--quick", "--protocol", protocol, "--out", str(tmp_path),
                     "--no-progress"]) == 0
    report = json.loads((tmp_path / f"table1_{protocol}.json").read_text())
    runs = report["runs"]
    assert len(runs) == 4
    folder = tmp_path / "data" / report["meta"]["data"]["sha256"][:12]
    X_P, X_H = np.load(folder / "features_P.npy"), np.load(folder / "features_H.npy")
    for r in runs:
        ref = reference[f"{protocol}/{r['method']}/seed{r['seed']}/epochs{r['epochs']}"]
        got, want = dict(r["evaluation"]), dict(ref["evaluation"])
        spectra, spectra_ref = got.pop("spectra"), want.pop("spectra")
        assert (got["rtol"], got["shift"], got["has_bias"]) == (want["rtol"], want["shift"], want["has_bias"])
        theta = np.load(tmp_path / r["files"]["theta_I"])
        bias = np.load(tmp_path / r["files"]["bias"]) if r["files"]["bias"] else None
        envelope = evaluation_envelope(theta, bias, X_P, X_H, rtol=got["rtol"], shift=got["shift"])
        for which, record in (("this run", got), ("reference", want)):
            bad, count = outside(envelope, record)
            assert not bad and count == 42, (r["key"], which, bad)
        for part, ref_probe in ref["probing"].items():
            for name, value in ref_probe.items():
                now = r["probing"][part][name]
                if isinstance(value, float):
                    assert now == pytest.approx(value, rel=PROBE_REL), (r["key"], part, name)
                else:
                    assert now == value, (r["key"], part, name)
        for name, ends in spectra_ref.items():
            kappa = envelope[("pinv",)][f"kappa_{name[2:]}"]
            if kappa.hi <= kappa.lo * (1 + 1e-6):
                assert spectra[name]["rank_pinv"] == ends["rank_pinv"], (r["key"], name)
            for end in ("lambda_max", "lambda_min_pinv"):
                assert spectra[name][end] == pytest.approx(ends[end], rel=1e-8), (r["key"], name, end)


def test_two_protocols_and_a_changed_config_share_one_out(tmp_path):
    """paper and official into one --out leave each other's files alone; --set makes new runs under new keys,
    never showing the old numbers; the store keeps both."""
    base = ["reproduce", "table1", "--quick", "--out", str(tmp_path), "--no-progress", "--probe-iters", "5",
            "--methods", "ours"]
    assert cli_main(base + ["--protocol", "paper"]) == 0
    paper = json.loads((tmp_path / "table1_paper.json").read_text())["runs"][0]
    theta = tmp_path / paper["files"]["theta_I"]
    before = theta.read_bytes()
    assert cli_main(base + ["--protocol", "official"]) == 0
    official = json.loads((tmp_path / "table1_official.json").read_text())["runs"][0]
    assert theta.read_bytes() == before and official["files"]["theta_I"] != paper["files"]["theta_I"]
    assert json.loads((tmp_path / "table1_paper.json").read_text())["runs"][0] == paper
    assert cli_main(base + ["--protocol", "paper", "--set", "lambda_H=3e7"]) == 0
    changed = json.loads((tmp_path / "table1_paper.json").read_text())["runs"][0]
    assert changed["key"] != paper["key"] and changed["identity"]["config"]["lambda_H"] == 3e7
    assert changed["evaluation"]["pinv"]["rir"] != paper["evaluation"]["pinv"]["rir"]
    assert len((tmp_path / "runs_paper.jsonl").read_text().splitlines()) == 2  # both kept
    assert theta.read_bytes() == before
