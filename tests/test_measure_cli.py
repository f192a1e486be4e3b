"""``kappalab measure`` as a user meets it: the success path (table, JSON with one object per estimator, the numbers
recomputed here with plain NumPy), the one-line warning when the group size is below D, and every refusal: exit
status 2, ONE line on stderr naming the argument, no traceback. The success paths, ``--help`` and one refusal run in
fresh processes; the other refusals in this process, as a fresh process would show them (:mod:`cli_run`)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from cli_run import ROOT, Outcome, in_process, in_processes

EPS = np.finfo(float).eps


def _run_all(cases: dict[str, list[str]], cwd: Path) -> dict[str, Outcome]:
    """name -> outcome of ``kappalab measure ARGS`` in fresh processes."""
    return in_processes({name: ["measure", *args] for name, args in cases.items()}, cwd)


def _features(tmp: Path, D: int = 12, n: int = 150, seed: int = 0) -> dict[str, Path]:
    """theta_0's ReLU features of a random layer; theta_I stretches D_H's first feature by 3 and doubles D_P's."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((D, D))
    p0, h0 = (np.maximum(rng.standard_normal((n, D)) @ A, 0.0) + 0.1 * rng.standard_normal((n, D)) for _ in range(2))
    arrays = {"p0": p0, "h0": h0, "pi": 2 * p0, "hi": h0 * np.r_[3.0, np.ones(D - 1)]}
    paths = {}
    for name, a in arrays.items():
        paths[name] = tmp / f"{name}.npy"
        np.save(paths[name], a)
    return paths


def _args(paths: dict[str, Path], **replace: Path | str) -> list[str]:
    return [x for k in ("p0", "h0", "pi", "hi") for x in (f"--{k}", str(replace.get(k, paths[k])))]


def _kappa(F: np.ndarray) -> float:
    s = np.linalg.svd(F, compute_uv=False)
    kept = s[s > max(F.shape) * EPS * s[0]]
    return float((kept[0] / kept[-1]) ** 2)


def test_measure_success_path_and_json(tmp_path: Path) -> None:
    paths = _features(tmp_path)
    runs = _run_all({"ok": [*_args(paths), "--json", "out/m.json", "--seed", "3"],
                     "warn": [*_args(paths), "--group-size", "10", "--exact-budget", "0"]}, tmp_path)
    code, stdout, stderr = runs["ok"]
    assert code == 0 and stderr == "", stderr
    rows = [line for line in stdout.splitlines() if line.startswith("| ")]
    assert rows[0] == "| estimator | term (i) | term (ii) | RIR | 95% CI |"
    assert [r.split(" | ")[0] for r in rows[1:]] == ["| exact", "| groups", "| authors"]
    assert "alignment.best_rir" in stdout
    record = json.loads((tmp_path / "out" / "m.json").read_text())
    F = {k: np.load(p) for k, p in paths.items()}
    exact_i = _kappa(F["hi"]) / _kappa(F["h0"])
    assert record["exact"]["term_i"] == pytest.approx(exact_i, rel=1e-10) and exact_i > 1.5
    assert record["exact"]["term_ii"] == pytest.approx(1.0, abs=1e-12)  # kappa is scale-free: pi = 2 p0
    for name in ("groups", "authors"):
        lo, hi = record[name]["ci95"]
        assert lo <= record[name]["rir"] <= hi and record[name]["groups"] == 20 and record[name]["seed"] == 3
    assert record["inputs"]["hi"]["shape"] == [150, 12] and len(record["inputs"]["hi"]["sha256"]) == 64
    assert record["alignment"]["best_rir"] >= 1 and record["warnings"] == []
    assert record["provenance"]["seed"] == 3

    code, stdout, stderr = runs["warn"]
    lines = stderr.strip().splitlines()
    assert code == 0 and len(lines) == 1 and lines[0].startswith("kappalab measure: warning: group size 10 < D = 12")
    assert "| exact | " in stdout and " | - |" in stdout and "exact: no bootstrap over samples" in stdout
    assert record["exact"]["ci95"][0] <= record["exact"]["rir"] <= record["exact"]["ci95"][1]


def _error_cases(tmp: Path, paths: dict[str, Path]) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, a text the one stderr line must contain)."""
    def save(name: str, array: np.ndarray, **kw) -> Path:
        np.save(tmp / name, array, **kw)
        return tmp / name

    F = {k: np.load(p) for k, p in paths.items()}
    text = tmp / "text.npy"
    text.write_text("not an array\n")
    nan, inf = F["hi"].copy(), F["hi"].copy()
    nan[4, 1], inf[0, 0] = np.nan, np.inf
    (tmp / "few").mkdir()
    few = _features(tmp / "few", D=12, n=10)
    if importlib.util.find_spec("timm") is None:
        images = (["--model", "resnet18", "--weights0", "w0", "--weightsI", "wI", "--p-images", "p", "--h-images",
                   "h"], "the images form needs timm")
    else:
        images = (["--model", "resnet18", "--weights0", "w0", "--weightsI", "wI", "--p-images", "nowhere",
                   "--h-images", "h"], "--p-images")
    return {
        "missing file": (_args(paths, p0=tmp / "nope.npy"), "--p0"),
        "unreadable file": (_args(paths, h0=text), "--h0: cannot read"),
        "object array": (_args(paths, pi=save("obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)),
                         "--pi: cannot read"),
        "1-d array": (_args(paths, hi=save("vec.npy", np.ones(150))), "--hi"),
        "rows differ": (_args(paths, pi=save("short.npy", F["pi"][:-1])), "--p0 and --pi must hold the same D_P"),
        "D differs": (_args(paths, hi=save("narrow.npy", F["hi"][:, :-1])), "same number of columns D"),
        "NaN": (_args(paths, hi=save("nan.npy", nan)), "--hi"),
        "Inf": (_args(paths, hi=save("inf.npy", inf)), "NaN/Inf"),
        "N < D": ([*_args(few), "--group-size", "5"], "the exact estimator needs N >= D"),
        "N < group size": (_args({k: save(f"{k}50.npy", a[:50]) for k, a in F.items()}), "--group-size 100"),
        "zero features": (_args(paths, p0=save("zero.npy", np.zeros_like(F["p0"]))), "--p0: "),
        "a zero group": (_args(paths, h0=save("zero_rows.npy", np.r_[F["h0"][:1], np.zeros((149, 12))]),
                               hi=save("zero_rows_i.npy", np.r_[F["hi"][:1], np.zeros((149, 12))])), "the features"),
        "missing argument": (_args(paths)[:-2], "missing --hi"),
        "both forms": ([*_args(paths), "--model", "resnet18"], "not both"),
        "images form incomplete": (["--model", "resnet18"], "--weights0"),
        "images form": images,
        "json is a folder": ([*_args(paths), "--json", str(tmp)], "--json"),
        "bad seed": ([*_args(paths), "--seed", "-1"], "--seed"),
        "bad budget": ([*_args(paths), "--exact-budget", "lots"], "--exact-budget"),
        "NaN budget": ([*_args(paths), "--exact-budget", "nan"], "--exact-budget"),
    }


#: the refusal that also runs in a fresh process (the others run in this process)
REFUSAL_IN_PROCESS = "NaN"


def test_measure_refusals_are_one_line_exit_2(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    paths = _features(tmp_path)
    cases = _error_cases(tmp_path, paths)
    results = _run_all({"help": ["--help"], REFUSAL_IN_PROCESS: cases[REFUSAL_IN_PROCESS][0]}, tmp_path)
    code, stdout, stderr = results.pop("help")
    assert code == 0 and stdout.startswith("usage: kappalab measure") and stderr == ""
    results.update({name: in_process(["measure", *argv], tmp_path, capfd) for name, (argv, _) in cases.items()
                    if name not in results})
    assert results.keys() == cases.keys()
    for name, (code, stdout, stderr) in results.items():
        lines = stderr.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in stderr, (name, code, stdout, stderr)
        assert cases[name][1] in lines[0] and lines[0].startswith("kappalab measure: error:"), (name, lines)


def test_measure_images_form_matches_the_features_form(tmp_path: Path) -> None:
    """Where timm is installed (.venv-deep): timm's ``test_resnet`` (96 features) with two random state dicts as
    theta_0 and theta_I, 100 random-noise PNGs per task; the features it saves, fed to the features form, give the
    same JSON estimates."""
    torch = pytest.importorskip("torch")
    timm = pytest.importorskip("timm")
    from PIL import Image

    for seed, name in ((0, "w0.pth"), (1, "wI.pth")):
        torch.manual_seed(seed)
        torch.save(timm.create_model("test_resnet", pretrained=False).state_dict(), tmp_path / name)
    rng = np.random.default_rng(0)
    for task in ("p", "h"):
        for k in range(100):
            folder = tmp_path / task / f"class{k % 3}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(folder / f"{k:03d}.png")
    small = ["--groups", "5", "--group-size", "50", "--n-boot", "200"]
    images = ["--model", "test_resnet", "--weights0", "w0.pth", "--weightsI", "wI.pth", "--p-images", "p",
              "--h-images", "h", "--save-features", "feats", "--json", "images.json", *small]
    code, stdout, stderr = _run_all({"images": images}, tmp_path)["images"]
    assert code == 0 and "Traceback" not in stderr, stderr
    features = {k: tmp_path / "feats" / f"{k}.npy" for k in ("p0", "h0", "pi", "hi")}
    assert np.load(features["hi"]).shape == (100, 96)
    code, _, stderr = _run_all({"files": [*_args(features), "--json", "files.json", *small]}, tmp_path)["files"]
    assert code == 0, stderr
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("images.json", "files.json"))
    for name in ("exact", "groups", "authors"):
        assert {k: a[name][k] for k in ("term_i", "term_ii", "rir", "ci95")} == \
            {k: b[name][k] for k in ("term_i", "term_ii", "rir", "ci95")}
    assert a["inputs"]["weights0"]["sha256"] != a["inputs"]["weightsI"]["sha256"] and a["form"] == "images"


def _groups(n: int, seed: int) -> list[np.ndarray]:
    """D_H's 20 groups of 100 rows: the first draws of default_rng(seed)."""
    rng = np.random.default_rng(seed)
    return [np.sort(rng.choice(n, 100, replace=False)) for _ in range(20)]


def _ref_group_means(hi: np.ndarray, h0: np.ndarray, pi: np.ndarray, p0: np.ndarray, kappa, seed: int
                     ) -> tuple[float, float, float]:
    """The paper's 20 groups of 100 (D_H's drawn first from default_rng(seed), then D_P's): means of (i)_g, (ii)_g
    and (i)_g / (ii)_g."""
    rng = np.random.default_rng(seed)
    gH = [np.sort(rng.choice(h0.shape[0], 100, replace=False)) for _ in range(20)]
    gP = [np.sort(rng.choice(p0.shape[0], 100, replace=False)) for _ in range(20)]
    i = np.array([kappa(hi[g]) / kappa(h0[g]) for g in gH])
    ii = np.array([kappa(pi[g]) / kappa(p0[g]) for g in gP])
    return float(i.mean()), float(ii.mean()), float((i / ii).mean())


def test_docs_example_recomputes() -> None:
    """docs/measure.md's worked example: the committed JSON's inputs are the committed features (sha256), its exact
    and group estimates recompute from them with plain NumPy, and the doc's tables are the JSON's numbers. The
    authors' kappa at D = 128 > 100 is set by rounding (its smallest kept eigenvalue is 1e-6 + O(D eps lambda_max)):
    compared within that derived spread."""
    import hashlib

    from kappalab.estimators import Estimate
    from kappalab.measure import table

    docs = ROOT / "docs"
    text = (docs / "measure.md").read_text()
    F = {k: np.load(docs / "measure" / f"{k}.npy") for k in ("p0", "h0", "hi_x2", "hi_weak")}

    def authors(G: np.ndarray) -> float:
        e = np.linalg.eigvalsh(G.T @ G + 1e-6 * np.eye(G.shape[1]))
        return float(e.max() / e[e > 1e-6].min())

    for case, expected in (("x2", 1.0), ("weak", 25.0)):
        record = json.loads((docs / "measure" / f"{case}.json").read_text())
        hi, h0, p0 = F[f"hi_{case}"], F["h0"], F["p0"]
        for name, path in (("hi", f"hi_{case}.npy"), ("h0", "h0.npy"), ("p0", "p0.npy"), ("pi", "p0.npy")):
            digest = hashlib.sha256((docs / "measure" / path).read_bytes()).hexdigest()
            assert record["inputs"][name]["sha256"] == digest, name
        exact = record["exact"]
        assert exact["term_i"] == pytest.approx(_kappa(hi) / _kappa(h0), rel=1e-10)
        assert exact["term_i"] == pytest.approx(expected, rel=1e-12) and exact["term_ii"] == 1.0
        seed = record["groups"]["seed"]
        ours = _ref_group_means(hi, h0, p0, p0, _kappa, seed)
        assert [record["groups"][k] for k in ("term_i", "term_ii", "rir")] == pytest.approx(ours, rel=1e-9)
        theirs = _ref_group_means(hi, h0, p0, p0, authors, seed)
        lam_max = np.array([np.linalg.norm(G[g], 2) ** 2 for G in (hi, h0) for g in _groups(256, seed)])
        spread = 4 * 128 * EPS * lam_max.max() / 1e-6  # ~1.6e-3 here: two floors' rounding, relative to 1e-6
        assert [record["authors"][k] for k in ("term_i", "term_ii", "rir")] == pytest.approx(theirs, rel=spread)
        if case == "x2":  # per group (4 lambda_max + 1e-6) / (lambda_max + 1e-6): the scale, read as immunization
            s = np.array([np.linalg.norm(h0[g], 2) ** 2 for g in _groups(256, seed)])
            assert record["authors"]["rir"] == pytest.approx(np.mean((4 * s + 1e-6) / (s + 1e-6)), rel=spread)
        estimates = {k: Estimate(**{**record[k], "ci95": tuple(record[k]["ci95"]),
                                    "per_group_i": tuple(record[k]["per_group_i"]),
                                    "per_group_ii": tuple(record[k]["per_group_ii"])})
                     for k in ("exact", "groups", "authors")}
        assert table(estimates) in text, case
        assert f"alignment.best_rir): {record['alignment']['best_rir']:.4g}" in text
