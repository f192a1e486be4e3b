"""``kappalab reproduce table3``: Table 3 and Figure 3 (immunizing deep nets), and their CPU-scale analogue.

The command line (modes, options, defaults) is :mod:`kappalab.reproduce.table3_cli`, which checks the arguments and
the config without importing torch and then calls :func:`run`. This module holds the work: the proxy task, the
calibration, the runs, the lambda / epoch search, and the table and figure.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..deep.task import Task
from ..deep.train import world
from ..deep import (METHOD_LABELS, METHODS, CombinedLoader, ImmunizableModel, ObjectiveConfig, SmallCNN,
                    TrainConfig, accuracy, balanced_scale, extract_features, gradient_norms, immunize,
                    linear_probe_curve, pretrain, rir_theta0)
from ..cli_options import UsageError
from ..errors import DegenerateSpectrumWarning
from ..provenance import provenance
from ..results import RunStore, format_mean_std, mean_std, to_jsonable
from .identity import data_identity, identity
from .table3_config import load_table3_config, resolved
PAPER_TABLE3 = {  # Table 3 of the paper, ResNet18 / Cars and Country211: (i), (ii), RIR_theta0, D_P test acc.
    "cars": {"rill_only": (1.878, 1.786, 1.057, 63.84), "imma": (0.866, 0.889, 0.974, 63.57),
             "opt_kappa": (1.217, 0.798, 1.527, 63.65), "ours": (2.386, 0.699, 3.467, 62.36)},
    "country211": {"rill_only": (20.727, 20.675, 1.038, 62.17), "imma": (0.791, 0.814, 0.972, 67.03),
                   "opt_kappa": (1.538, 1.053, 1.472, 66.81), "ours": (3.287, 0.399, 8.714, 65.01)},
}


# ----------------------------------------------------------------------------------------------- configuration
def load_config(name: str, quick: bool = False, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Table 3 config (shipped ``table3_<name>.json`` or a path) as one flat dict
    (:func:`kappalab.reproduce.table3_config.load_table3_config`); its methods must be known."""
    cfg = load_table3_config(name, quick, overrides)
    unknown = [m for m in cfg["methods"] if m not in METHODS]
    if unknown:
        raise ValueError(f"config {cfg['config_file']}: unknown methods {unknown}; choose from {METHODS}")
    return cfg


def objective_config(cfg: dict[str, Any], harmful_classes: int) -> ObjectiveConfig:
    """The :class:`ObjectiveConfig` of a loaded config."""
    return ObjectiveConfig(lambda_P=cfg["lambda_P"], lambda_H=cfg["lambda_H"],
                           lambda_kappa=cfg.get("lambda_kappa") or 0.0, lambda_imma=cfg.get("lambda_imma") or 0.0,
                           imma_inner_steps=cfg["imma_inner_steps"], imma_inner_lr=cfg["imma_inner_lr"],
                           harmful_classes=harmful_classes, label_smoothing=cfg["label_smoothing"],
                           reg_rtol=cfg["reg_rtol"], on_degenerate=cfg["on_degenerate"],
                           protocol=cfg.get("protocol") or "paper", official_k=cfg.get("image_size"))


def train_config(cfg: dict[str, Any], method: str | None = None) -> TrainConfig:
    """The :class:`TrainConfig` of a loaded config (``method_epochs[method]`` overrides ``epochs`` when given)."""
    epochs = (cfg.get("method_epochs") or {}).get(method, cfg["epochs"])
    return TrainConfig(lr=cfg["eta"], momentum=cfg["momentum"], extractor_weight_decay=cfg["extractor_weight_decay"],
                       classifier_weight_decay=cfg["classifier_weight_decay"], epochs=epochs)


# ------------------------------------------------------------------------------------------------ a task's data
def _split(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(test_fraction * n))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def proxy_task(cfg: dict[str, Any], work: Path, validation: float | None = None, device: str = "cpu") -> Task:
    """The CPU proxy: MNIST digits 0-4 vs 5-9 on the embedded subset, SmallCNN pre-trained per seed (cached).

    With ``validation`` (a fraction) the training rows of each task are split again (seed ``split_seed + 1``)
    into a smaller training set and a validation set, and the task is built on those: theta_0 is pre-trained and
    immunized on the smaller training set, and ``test_P``, ``rir_P``/``rir_H`` and the probe's test half are the
    validation rows. The test split is not used (this is the ``--search`` mode's task)."""
    from torch.utils.data import DataLoader, TensorDataset

    from ..data.mnist import load_mnist, select_digits

    data = load_mnist()
    tensors = {}
    for tag, digits in (("P", cfg["pretrain_digits"]), ("H", cfg["harmful_digits"])):
        X, y = select_digits(data, digits, flatten=False)
        y = np.searchsorted(np.asarray(sorted(digits)), y)  # labels 0..len(digits)-1
        train, test = _split(len(y), cfg["test_fraction"], cfg["split_seed"])
        cap = cfg.get("max_train_per_task")
        train = train[:cap] if cap else train
        if validation:
            keep, val = _split(len(train), validation, cfg["split_seed"] + 1)
            train, test = train[keep], train[val]  # "test" below is the validation split
        for part, rows in (("train", train), ("test", test)):
            tensors[tag, part] = (torch.as_tensor(X[rows][:, None]), torch.as_tensor(y[rows]))
    n_P, n_H = len(cfg["pretrain_digits"]), len(cfg["harmful_digits"])

    def loader(tag: str, seed: int, batch: int) -> DataLoader:
        return DataLoader(TensorDataset(*tensors[tag, "train"]), batch_size=batch, shuffle=True,
                          generator=torch.Generator().manual_seed(seed))

    def theta0(seed: int) -> ImmunizableModel:
        path = work / f"seed{seed}" / "theta0.pt"
        torch.manual_seed(seed)
        net = SmallCNN(n_P, width=cfg["width"])
        if path.exists():
            net.load_state_dict(torch.load(path, weights_only=True))
        else:
            pretrain(net, loader("P", seed, cfg["pretrain_batch_size"]), epochs=cfg["pretrain_epochs"],
                     lr=cfg["pretrain_lr"])
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(net.state_dict(), path)
        return net.split(ridge=cfg["dummy_ridge"], side=cfg["dummy_side"], dummy=cfg["protocol"] == "paper")

    rir = "test" if validation else "train"
    return Task(name=cfg["name"], theta0=theta0,
                loaders=lambda seed: (loader("P", 1000 + seed, cfg["batch_size"]),
                                      loader("H", 2000 + seed, cfg["batch_size"])),
                rir_P=tensors["P", rir][0], rir_H=tensors["H", rir][0], test_P=tensors["P", "test"],
                probe=(tensors["H", "train"], tensors["H", "test"]), harmful_classes=n_H, device=device,
                data_label=data.source_label + f" digits {cfg['pretrain_digits']} vs {cfg['harmful_digits']}")


# ------------------------------------------------------------------------------------------- the generic loop
def _calibration(task: Task, model: ImmunizableModel, cfg: dict[str, Any], seed: int) -> dict[str, Any]:
    """Mean gradient norms of every term at theta_0 over ``calibration_batches`` batch pairs, and the balanced
    lambdas (tied extreme eigenvalues of a batch's H~ are counted, not printed). Computed on a copy of ``model``
    in training mode, as a training step sees it: BatchNorm layers of the immunized blocks use batch statistics
    and update the copy's running statistics, never theta_0's (frozen layers stay in eval mode)."""
    model = copy.deepcopy(model).train()
    batches = int(cfg.get("calibration_batches", 5))
    obj = objective_config(cfg, task.harmful_classes)
    pairs = list(zip(range(batches), CombinedLoader(*task.loaders(seed), epoch_on="longer")))
    norms: dict[str, list[float]] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DegenerateSpectrumWarning)
        for method in METHODS:
            for _, (bP, bH) in pairs:
                for k, v in gradient_norms(model, method, bP, bH, obj, task.device).items():
                    norms.setdefault(k, []).append(v)
    for w in caught:
        if not issubclass(w.category, DegenerateSpectrumWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    mean = {k: float(np.mean(v)) for k, v in norms.items()}
    weight_of = {"r_well": "lambda_P", "r_ill": "lambda_H", "kappa_gap": "lambda_kappa", "kappa_log": "lambda_kappa",
                 "harmful": "lambda_imma"}
    ties = sum(issubclass(w.category, DegenerateSpectrumWarning) for w in caught)
    return {"grad_norms": mean, "batches": batches, "degenerate_batches": ties,
            "balanced": {weight_of[k]: balanced_scale(mean["task"], v) for k, v in mean.items() if k != "task"}}


def evaluate(task: Task, model: ImmunizableModel, reference: ImmunizableModel | None, cfg: dict[str, Any],
             seed: int) -> dict[str, Any]:
    """D_P test accuracy, Figure 3's probe curve, and (with a reference theta_0) Eq. 17 exact and estimated."""
    (Xtr, ytr), (Xte, yte) = task.probe
    F_tr, F_te = extract_features(model, Xtr, task.device), extract_features(model, Xte, task.device)
    out: dict[str, Any] = {
        "dp_test_acc": accuracy(model, task.test_P, task.device),
        "probe_curve": linear_probe_curve(F_tr, ytr.to(task.device), F_te, yte.to(task.device),
                                          epochs=cfg["probe_epochs"], num_classes=task.harmful_classes,
                                          step=cfg["probe_step"]),
    }
    if reference is not None:
        feats = [extract_features(m, X, task.device) for X in (task.rir_H, task.rir_P) for m in (model, reference)]
        for key, estimator in (("rir", "pinv"), ("rir_authors", "authors")):
            out[key] = asdict(rir_theta0(*feats, groups=cfg["rir_groups"], group_size=cfg["rir_group_size"],
                                         seed=seed, estimator=estimator))
    return out


def run_keys(task: Task, cfg: dict[str, Any], data: dict[str, str], seeds: list[int], methods: list[str]
             ) -> dict[tuple[int, str], tuple[str, dict[str, Any]]]:
    """``(seed, method) -> (key, identity)`` of every record of the call (``init`` records included)."""
    out = {}
    for s in seeds:
        for m in ["init", *methods]:
            ident = identity(resolved(cfg), data, {"seed": s, "method": m, "device": task.device, "dtype": "float64"})
            out[s, m] = (f"{task.name}/seed{s}/{m}.{ident['hash']}", ident)
    return out


def run_task(task: Task, cfg: dict[str, Any], store: RunStore, work: Path, seeds: list[int], methods: list[str],
             keys: dict[tuple[int, str], tuple[str, dict[str, Any]]]) -> None:
    """Run every missing (seed, method) record of ``task`` (plus one ``init`` record per seed), under ``keys``."""
    from tqdm.auto import tqdm

    done = store.done_keys()
    todo = [(s, m) for s in seeds for m in ["init", *methods] if keys[s, m][0] not in done]
    for seed, method in tqdm(todo, desc=f"table3 {task.name}", disable=not sys.stderr.isatty()):
        (key, ident), t0 = keys[seed, method], time.perf_counter()
        base = task.theta0(seed)
        record: dict[str, Any] = {"key": key, "task": task.name, "seed": seed, "method": method, "identity": ident}
        if method == "init":
            record["calibration"] = _calibration(task, base, cfg, seed)
            record.update(evaluate(task, base, None, cfg, seed))
        else:
            model = copy.deepcopy(base)
            torch.manual_seed(seed)
            loader = CombinedLoader(*task.loaders(seed), epoch_on=cfg["epoch_on"])
            record["history"] = immunize(model, method, loader, objective_config(cfg, task.harmful_classes),
                                         train_config(cfg, method), device=task.device,
                                         checkpoint=work / f"seed{seed}" / f"{method}.pt")
            record.update(evaluate(task, model, base, cfg, seed))
        record["wall_s"] = time.perf_counter() - t0
        record["provenance"] = provenance(seed, cfg, device=task.device, dtype="float64", data_label=task.data_label)
        if world()[0] == 0:  # under torchrun every rank trains; rank 0 alone records
            store.append(record)


# ------------------------------------------------------------------------------ the lambda / epoch search
LAMBDA_OF = {"ours": ("lambda_H", "lambda_P"), "rill_only": ("lambda_H",), "opt_kappa": ("lambda_kappa",),
             "imma": ("lambda_imma",)}


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _search_candidate(task: Task, base: ImmunizableModel, ref_feats: tuple[torch.Tensor, torch.Tensor],
                      cfg: dict[str, Any], method: str, lambdas: dict[str, float]) -> dict[str, Any]:
    """Train one candidate for ``search.max_epochs`` epochs, recording validation metrics after every epoch."""
    from ..errors import UndefinedRegularizerError

    s = cfg["search"]
    seed = s["seed"]
    run_cfg = {**cfg, **lambdas, "epochs": s["max_epochs"], "method_epochs": None}
    model = copy.deepcopy(base)
    torch.manual_seed(seed)
    epochs: list[dict[str, Any]] = []

    def on_epoch_end(epoch: int, means: dict[str, float]) -> None:
        F_H, F_P = (extract_features(model, X, task.device) for X in (task.rir_H, task.rir_P))
        r = rir_theta0(F_H, ref_feats[0], F_P, ref_feats[1], groups=s["rir_groups"], group_size=s["rir_group_size"],
                       seed=seed)
        epochs.append({"epoch": epoch, "val_dp_acc": accuracy(model, task.test_P, task.device),
                       "est_i": r.est_i, "est_ii": r.est_ii, "est_rir": r.est_rir, "exact_i": r.exact_i,
                       "exact_ii": r.exact_ii, "exact_rir": r.exact_rir, "train_terms": means})

    t0 = time.perf_counter()
    diverged = None
    try:
        immunize(model, method, CombinedLoader(*task.loaders(seed), epoch_on=cfg["epoch_on"]),
                 objective_config(run_cfg, task.harmful_classes), train_config(run_cfg), device=task.device,
                 on_epoch_end=on_epoch_end, progress=False)
    except (FloatingPointError, UndefinedRegularizerError, torch.linalg.LinAlgError) as err:
        diverged = f"{type(err).__name__} after {len(epochs)} epoch(s): {str(err)[:200]}"
    return {"method": method, "lambdas": lambdas, "epochs": epochs, "diverged": diverged,
            "wall_s": time.perf_counter() - t0}


def run_search(cfg: dict[str, Any], out: Path, work: Path) -> dict[str, Any]:
    """Appendix C.2's selection of the lambdas and epochs on a validation split (see :mod:`kappalab.deep.search`).

    Stages (every candidate one record in ``out/search.jsonl``; finished records are not redone):

    1. ``ours_H``: Ours with lambda_P at its balanced scale(s), lambda_H over ``grid(scale_H, lambda_H_offsets)``
       plus ``scale_H * 10^e`` for ``e`` in ``lambda_H_extra_offsets`` (stronger pulls of R_ill);
    2. ``ours_P``: Ours at stage 1's selected lambda_H, lambda_P over the grid of every reading's scale;
    3. ``rill_only``: R_ill Only at Ours' selected lambda_H (only its epochs are selected);
    4. ``opt_kappa`` / ``imma``: their weight over ``grid(scale, lambda_*_offsets)``.

    Returns (and writes to ``out/search_selected.json``) the selected lambdas and epochs per method."""
    from ..deep.search import grid, scales, select

    s = cfg["search"]
    seed, mult = s["seed"], s["multipliers"]
    task = proxy_task(cfg, work, validation=s["val_fraction"])
    store = RunStore(out / "search.jsonl")
    t_start = time.perf_counter()
    base = task.theta0(seed)
    ref = tuple(extract_features(base, X, task.device) for X in (task.rir_H, task.rir_P))
    head_key = "search/init"
    if head_key not in store.done_keys():
        calib = _calibration(task, base, cfg, seed)
        store.append({"key": head_key, "calibration": calib, "val_dp_acc": accuracy(base, task.test_P, task.device),
                      "scales": {r: scales(calib["grad_norms"], r) for r in s["readings"]},
                      "provenance": provenance(seed, cfg, device=task.device, dtype="float64",
                                               data_label=task.data_label + " (train/validation split)")})
    head = next(r for r in store.records() if r["key"] == head_key)
    acc_floor = head["val_dp_acc"] - s["acc_tolerance"]
    sc = head["scales"]
    first = sc[s["readings"][0]]

    def stage(name: str, method: str, cands: list[dict[str, float]]) -> list[dict[str, Any]]:
        done = store.done_keys()
        recs = []
        for lam in cands:
            key = f"search/{method}/" + ",".join(f"{k}={_fmt(v)}" for k, v in sorted(lam.items()))
            if key not in done:
                rec = _search_candidate(task, base, ref, cfg, method, lam)
                rec.update(key=key, stage=name)
                store.append(rec)
                print(f"{key}: " + "; ".join(f"e{m['epoch']} RIR {m['est_rir']:.3f} (i) {m['est_i']:.3f} "
                                             f"acc {m['val_dp_acc']:.3f}" for m in rec["epochs"])
                      + (f" [{rec['diverged']}]" if rec["diverged"] else ""), flush=True)
            if key not in [r["key"] for r in recs]:
                recs.append(next(r for r in store.records() if r["key"] == key))
        return recs

    def best(recs: list[dict[str, Any]]) -> tuple[dict[str, Any], int] | None:
        pick = select(recs, acc_floor)
        return None if pick is None else (recs[pick[0]], pick[1])

    selected: dict[str, Any] = {}
    P_scales = sorted({sc[r]["lambda_P"] for r in s["readings"]})
    H_vals = grid(first["lambda_H"], s["lambda_H_offsets"], mult) + [
        float(f"{first['lambda_H'] * 10.0 ** e:.12g}") for e in s.get("lambda_H_extra_offsets", [])]
    recs = stage("ours_H", "ours", [{"lambda_H": h, "lambda_P": p} for p in P_scales for h in H_vals])
    pick = best(recs)
    lam_H = pick[0]["lambdas"]["lambda_H"] if pick else first["lambda_H"]
    P_vals = sorted({v for p in P_scales for v in grid(p, s["lambda_P_offsets"], mult)})
    recs_P = stage("ours_P", "ours", [{"lambda_H": lam_H, "lambda_P": p} for p in P_vals])
    pick = best(recs + recs_P)
    if pick:
        selected["ours"] = {**pick[0]["lambdas"], "epochs": pick[1], "val": pick[0]["epochs"][pick[1] - 1]}
    lam_H = selected.get("ours", {}).get("lambda_H", lam_H)
    for method, name, cands in (
            ("rill_only", "rill_only", [{"lambda_H": lam_H}]),
            ("opt_kappa", "opt_kappa", [{"lambda_kappa": v} for v in grid(first["lambda_kappa"],
                                                                          s["lambda_kappa_offsets"], mult)]),
            ("imma", "imma", [{"lambda_imma": v} for v in grid(first["lambda_imma"], s["lambda_imma_offsets"],
                                                               mult)])):
        if method not in cfg["methods"]:
            continue
        pick = best(stage(name, method, cands))
        if pick:
            selected[method] = {**pick[0]["lambdas"], "epochs": pick[1], "val": pick[0]["epochs"][pick[1] - 1]}
    result = {"acc_floor": acc_floor, "theta0_val_dp_acc": head["val_dp_acc"], "scales": sc,
              "selected": selected, "wall_s_this_call": time.perf_counter() - t_start}
    out.mkdir(parents=True, exist_ok=True)
    (out / "search_selected.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (out / "search.md").write_text(search_table([r for r in store.records() if r["key"] != head_key], head,
                                                acc_floor, selected))
    return result


def search_table(recs: list[dict[str, Any]], head: dict[str, Any], acc_floor: float,
                 selected: dict[str, Any]) -> str:
    """Markdown summary of the search: one row per candidate, at its best admissible epoch (or its last)."""
    from ..deep.search import admissible

    lines = ["Candidates in the order they ran (seed 0; training part 1600 images per task, validation 400; Eq. 17 "
             "on the validation images, 20 groups of 100). Row: the candidate's best admissible epoch, or its last "
             "epoch marked (n.a.) when no epoch is admissible.", "",
             f"theta_0 D_P validation accuracy {100 * head['val_dp_acc']:.2f}%; admissible: D_P validation "
             f"accuracy >= {100 * acc_floor:.2f}%. Gradient norms at theta_0: "
             + ", ".join(f"{k} {v:.3g}" for k, v in sorted(head["calibration"]["grad_norms"].items()))
             + ". Scales: " + "; ".join(f"{r}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(x.items()))
                                         for r, x in head["scales"].items()), "",
             "| stage | method | lambdas | best epoch | RIR est. (val) | (i) est. | (ii) est. | RIR exact (val) | "
             "D_P val acc. (%) | RIR est. by epoch | wall (s) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        ok = [(e, m) for e, m in enumerate(r["epochs"], 1) if admissible(m, acc_floor)]
        e, m = max(ok, key=lambda t: t[1]["est_rir"]) if ok else (len(r["epochs"]), r["epochs"][-1] if r["epochs"]
                                                                    else None)
        lam = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(r["lambdas"].items()))
        sel = selected.get(r["method"])
        mark = " **sel.**" if sel and all(sel.get(k) == v for k, v in r["lambdas"].items()) else ""
        if m is None:
            lines.append(f"| {r['stage']} | {METHOD_LABELS[r['method']]} | {lam} | - | diverged | | | | | | "
                         f"{r['wall_s']:.0f} |")
            continue
        lines.append(f"| {r['stage']} | {METHOD_LABELS[r['method']]}{mark} | {lam} | {e}{'' if ok else ' (n.a.)'} | "
                     f"{m['est_rir']:.4g} | {m['est_i']:.4g} | {m['est_ii']:.4g} | {m['exact_rir']:.4g} | "
                     f"{100 * m['val_dp_acc']:.2f} | " + " ".join(f"{x['est_rir']:.3g}" for x in r["epochs"])
                     + (" (diverged)" if r["diverged"] else "") + f" | {r['wall_s']:.0f} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ table and figure
def _ms(values: list[float], fmt: str = "{:.3f}") -> str:
    return format_mean_std(*mean_std(values), fmt)


def aggregate(records: list[dict[str, Any]], out: Path, title: str, suffix: str = "") -> str:
    """``table<suffix>.md`` and ``figure3<suffix>.png``/``.pdf`` from the records alone; returns the table's
    markdown (``suffix``: ``""`` for the paper protocol, ``"_official"`` for the other, so that both protocols'
    tables live side by side in one output folder)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by.setdefault(r["method"], []).append(r)
    seeds = sorted({r["seed"] for r in records})
    both = all("rir_authors" in r for r in records if r["method"] != "init")  # stores before issue 18: ours only
    lines = [f"### {title.replace(chr(10), '; ')}", "", f"Seeds: {seeds} (mean ± sample std over seeds). Eq. 17 "
             "estimated as in the paper (mean over random groups of training samples) and exact (all training "
             "samples at once), with our kappa (pseudo-inverse: largest over smallest nonzero eigenvalue of H~, a "
             "measure of conditioning)" + ("; and with the authors' (max over min of the eigenvalues of H~ + 1e-6 "
                                           "I above 1e-6: where D_hid exceeds the group size, a measure of the "
                                           "largest eigenvalue's scale, see kappalab.deep.metrics)." if both else
                                           "."), "",
             "| Method | (i) ↑ est. | (ii) ↓ est. | RIR_θ0 ↑ est. | (i) exact | (ii) exact | RIR_θ0 exact | "
             + ("authors' (i) est. | authors' (ii) est. | authors' RIR_θ0 est. | authors' RIR_θ0 exact | "
                if both else "") + "D_P test acc. (%) | wall (s) |",
             "|---|---|---|---|---|---|---|" + ("---|---|---|---|" if both else "") + "---|---|"]
    if "init" in by:
        lines.append("| Init. θ0 | 1.0 | 1.0 | 1.0 | 1.0 | 1.0 | 1.0 | " + ("1.0 | 1.0 | 1.0 | 1.0 | " if both else "")
                     + f"{_ms([100 * r['dp_test_acc'] for r in by['init']], '{:.2f}')} | "
                     f"{_ms([r['wall_s'] for r in by['init']], '{:.0f}')} |")
    for m in METHODS:
        if m not in by:
            continue
        rs = by[m]

        def g(k: str, key: str = "rir") -> str:
            return _ms([r[key][k] for r in rs])

        authors = (" | ".join(g(k, "rir_authors") for k in ("est_i", "est_ii", "est_rir", "exact_rir")) + " | "
                   if both else "")
        lines.append(f"| {METHOD_LABELS[m]} | {g('est_i')} | {g('est_ii')} | {g('est_rir')} | "
                     f"{g('exact_i')} | {g('exact_ii')} | {g('exact_rir')} | {authors}"
                     f"{_ms([100 * r['dp_test_acc'] for r in rs], '{:.2f}')} | "
                     f"{_ms([r['wall_s'] for r in rs], '{:.0f}')} |")
    conf = next((r["provenance"]["config"] for r in records if r["method"] != "init"), None)
    if conf is not None:
        weights = {"ours": ("lambda_H", "lambda_P"), "rill_only": ("lambda_H",), "opt_kappa": ("lambda_kappa",),
                   "imma": ("lambda_imma",)}
        ep = conf.get("method_epochs") or {}
        lines += ["", f"Settings: protocol {conf.get('protocol', 'paper')}; lr " + _fmt(conf["eta"]) + "; " + "; ".join(
            f"{METHOD_LABELS[m]}: " + ", ".join(f"{w} = {_fmt(conf[w])}" for w in weights[m])
            + f", {ep.get(m, conf['epochs'])} epochs" for m in METHODS if m in by) + "."]
    table = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"table{suffix}.md").write_text(table)
    _figure(by, out, title, suffix)
    return table


def _figure(by: dict[str, list[dict[str, Any]]], out: Path, title: str, suffix: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for m in ["init", *METHODS]:
        if m not in by:
            continue
        curves = 100 * np.asarray([r["probe_curve"] for r in by[m]])
        x, mu, sd = np.arange(curves.shape[1]), curves.mean(0), curves.std(0)
        ax.plot(x, mu, label="Init. θ0" if m == "init" else METHOD_LABELS[m], ls="--" if m == "init" else "-")
        ax.fill_between(x, mu - sd, mu + sd, alpha=0.2)
    ax.set_xlabel("linear-probing epochs (full-batch GD) on D_H")
    ax.set_ylabel("D_H test accuracy (%)")
    import textwrap

    ax.set_title("\n".join(textwrap.fill(line, 75) for line in title.split("\n")), fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out / f"figure3{suffix}.{ext}", dpi=150)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------- entry points
def _data_identity(cfg: dict[str, Any], args: argparse.Namespace) -> dict[str, str]:
    """The proxy: the embedded MNIST subset's arrays and the digits. The paper's nets: the folders and the weights
    file's sha256 (hashing ImageNet's files is out of reach; the folders are named instead)."""
    if args.proxy or args.smoke:
        from ..data.mnist import load_mnist

        data = load_mnist()
        name = (f"mnist-subset/{cfg['pretrain_digits']}-vs-{cfg['harmful_digits']}" if args.proxy
                else f"mnist-subset digits at 224x224 ({cfg['name']}, {cfg['smoke_per_class']} per class)")
        return data_identity(name, {"images": data.images, "labels": data.labels})
    import hashlib

    digest = hashlib.sha256(Path(args.weights).read_bytes()).hexdigest() if args.weights and Path(
        args.weights).is_file() else "no weights file"
    return {"name": f"imagenet-1k ({args.imagenet}) vs {cfg['harmful']} ({args.harmful_dir})",
            "sha256": f"weights {digest}"}


def run(call) -> int:
    """Run what ``kappalab reproduce table3`` asked for (``call``: the checked command line, a
    :class:`kappalab.reproduce.table3_cli.Call`), with torch's default dtype float64 for the call only (restored
    after it: a caller in the same process, a test session among them, keeps its own)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _run(call)
    finally:
        torch.set_default_dtype(previous)


def _run(call) -> int:
    args, cfg, out, seeds, methods, title = call.args, call.cfg, call.out, call.seeds, call.methods, call.title
    unknown = [m for m in cfg["methods"] + methods if m not in METHODS]
    if unknown:
        raise UsageError(f"config {cfg['config_file']}: unknown methods {unknown}; choose from {METHODS}")
    if cfg["arch"] == "efficientnet_lite0":
        from .table3_real_report import run_and_report

        return run_and_report(call)
    data = _data_identity(cfg, args)
    # checkpoints (theta_0 and the immunization's epochs) live under the hash of the config and the data
    tag = identity(resolved(cfg), data, {"device": args.device, "dtype": "float64"})["hash"]
    work = (Path(args.work) if args.work else out / "work") / tag
    if args.search:
        if not args.proxy or not cfg.get("search") or cfg["protocol"] != "paper":
            raise UsageError("--search: needs --proxy and a config with a 'search' block")
        cfg["methods"] = methods
        result = run_search(cfg, out, work.with_name(work.name + "_search"))
        print(json.dumps({m: {k: v for k, v in x.items() if k != "val"} for m, x in result["selected"].items()},
                         indent=2))
        return 0
    store = RunStore(out / "runs.jsonl")
    stored = store.records()
    legacy = bool(stored) and all("identity" not in r for r in stored)
    if not args.aggregate_only:
        if any("identity" not in r for r in stored):
            raise UsageError(f"--out: {store.path} holds runs written before run identities (read it with "
                             "--aggregate-only); use another --out")
        task = proxy_task(cfg, work, device=args.device) if args.proxy else None
        if task is None:
            from ..deep.paper import paper_task

            if args.smoke:
                from ..deep.smoke import make_digit_folders

                args.imagenet, args.harmful_dir = map(str, make_digit_folders(work / "data", cfg["smoke_per_class"]))
            try:
                task = paper_task(cfg, args, work)
            except (ValueError, FileNotFoundError, ImportError) as error:  # missing inputs or kappalab[deep]
                raise UsageError(f"--arch {args.arch}: {str(error).splitlines()[0]}") from None
        if args.calibrate:
            print(json.dumps(_calibration(task, task.theta0(seeds[0]), cfg, seeds[0]), indent=2))
            return 0
        keys = run_keys(task, cfg, data, seeds, methods)
        t0 = time.perf_counter()
        with store.lock():
            run_task(task, cfg, store, work, seeds, methods, keys)
        print(f"table3 {cfg['name']}: runs finished in {time.perf_counter() - t0:.0f} s this call")
        if world()[0] != 0:
            return 0  # tables and figures are rank 0's
        wanted = {key for key, _ in keys.values()}
        records = [r for r in store.records() if r["key"] in wanted]
    elif legacy:  # a store written before run identities (e.g. the committed docs/reproduction/table3)
        records = [r for r in stored if r["seed"] in seeds]
    else:
        records = [r for r in stored if r.get("identity", {}).get("config") == to_jsonable(resolved(cfg))
                   and r["identity"]["data"] == data and r["identity"]["options"]["device"] == args.device
                   and r["seed"] in seeds]
    if not records:
        print(f"kappalab reproduce table3: no records of this config in {store.path}", file=sys.stderr)
        return 1
    print(aggregate(records, out, title, "" if cfg["protocol"] == "paper" else "_official"))
    return 0
