"""``kappalab reproduce table3 --proxy --search``: Appendix C.2's selection of the lambdas and epochs on a
validation split, and its table."""

from __future__ import annotations

import copy
import dataclasses
import time
from pathlib import Path
from typing import Any

import torch

from ...atomic_io import write_json, write_text
from ...deep import METHOD_LABELS, CombinedLoader, ImmunizableModel, accuracy, extract_features, immunize, rir_theta0
from ...deep.task import Task
from ...deep.train import DIVERGED
from ...methods import IMMA, OPT_KAPPA, RILL_ONLY
from ...provenance import provenance
from ...results import RunStore
from .config import Table3Config
from .proxy import proxy_task
from .report import fmt_weight
from .run import calibrate, objective_config, train_config


def _search_candidate(task: Task, base: ImmunizableModel, ref_feats: tuple[torch.Tensor, torch.Tensor],
                      cfg: Table3Config, method: str, lambdas: dict[str, float]) -> dict[str, Any]:
    """Train one candidate for ``search.max_epochs`` epochs, recording validation metrics after every epoch."""
    s = cfg.search
    seed = s.seed
    run_cfg = dataclasses.replace(cfg, **lambdas, epochs=s.max_epochs, method_epochs=None)
    model = copy.deepcopy(base)
    torch.manual_seed(seed)
    epochs: list[dict[str, Any]] = []

    def on_epoch_end(epoch: int, means: dict[str, float]) -> None:
        F_H, F_P = (extract_features(model, X, task.device) for X in (task.rir_H, task.rir_P))
        r = rir_theta0(F_H, ref_feats[0], F_P, ref_feats[1], groups=s.rir_groups, group_size=s.rir_group_size,
                       seed=seed)
        epochs.append({"epoch": epoch, "val_dp_acc": accuracy(model, task.test_P, task.device),
                       "est_i": r.est_i, "est_ii": r.est_ii, "est_rir": r.est_rir, "exact_i": r.exact_i,
                       "exact_ii": r.exact_ii, "exact_rir": r.exact_rir, "train_terms": means})

    t0 = time.perf_counter()
    diverged = None
    try:
        immunize(model, method, CombinedLoader(*task.loaders(seed), epoch_on=cfg.epoch_on),
                 objective_config(run_cfg, task.harmful_classes), train_config(run_cfg), device=task.device,
                 on_epoch_end=on_epoch_end, progress=False)
    except DIVERGED as err:
        diverged = f"{type(err).__name__} after {len(epochs)} epoch(s): {str(err)[:200]}"
    return {"method": method, "lambdas": lambdas, "epochs": epochs, "diverged": diverged,
            "wall_s": time.perf_counter() - t0}


def run_search(cfg: Table3Config, out: Path, work: Path) -> dict[str, Any]:
    """Appendix C.2's selection of the lambdas and epochs on a validation split (see :mod:`kappalab.deep.search`).

    Stages (every candidate one record in ``out/search.jsonl``; finished records are not redone):

    1. ``ours_H``: Ours with lambda_P at its balanced scale(s), lambda_H over ``grid(scale_H, lambda_H_offsets)``
       plus ``scale_H * 10^e`` for ``e`` in ``lambda_H_extra_offsets`` (stronger pulls of R_ill);
    2. ``ours_P``: Ours at stage 1's selected lambda_H, lambda_P over the grid of every reading's scale;
    3. ``rill_only``: R_ill Only at Ours' selected lambda_H (only its epochs are selected);
    4. ``opt_kappa`` / ``imma``: their weight over ``grid(scale, lambda_*_offsets)``.

    Returns (and writes to ``out/search_selected.json``) the selected lambdas and epochs per method."""
    from ...deep.search import grid, scales, select

    s = cfg.search
    seed, mult = s.seed, s.multipliers
    task = proxy_task(cfg, work, validation=s.val_fraction)
    store = RunStore(out / "search.jsonl")
    t_start = time.perf_counter()
    base = task.theta0(seed)
    ref = tuple(extract_features(base, X, task.device) for X in (task.rir_H, task.rir_P))
    head_key = "search/init"
    if head_key not in store.done_keys():
        calib = calibrate(task, base, cfg, seed)
        store.append({"key": head_key, "calibration": calib, "val_dp_acc": accuracy(base, task.test_P, task.device),
                      "scales": {r: scales(calib["grad_norms"], r) for r in s.readings},
                      "provenance": provenance(seed, cfg, device=task.device, dtype="float64",
                                               data_label=task.data_label + " (train/validation split)")})
    head = next(r for r in store.records() if r["key"] == head_key)
    acc_floor = head["val_dp_acc"] - s.acc_tolerance
    sc = head["scales"]
    first = sc[s.readings[0]]

    def stage(name: str, method: str, cands: list[dict[str, float]]) -> list[dict[str, Any]]:
        done = store.done_keys()
        recs = []
        for lam in cands:
            key = f"search/{method}/" + ",".join(f"{k}={fmt_weight(v)}" for k, v in sorted(lam.items()))
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
    P_scales = sorted({sc[r]["lambda_P"] for r in s.readings})
    H_vals = grid(first["lambda_H"], s.lambda_H_offsets, mult) + [
        float(f"{first['lambda_H'] * 10.0 ** e:.12g}") for e in s.lambda_H_extra_offsets]
    recs = stage("ours_H", "ours", [{"lambda_H": h, "lambda_P": p} for p in P_scales for h in H_vals])
    pick = best(recs)
    lam_H = pick[0]["lambdas"]["lambda_H"] if pick else first["lambda_H"]
    P_vals = sorted({v for p in P_scales for v in grid(p, s.lambda_P_offsets, mult)})
    recs_P = stage("ours_P", "ours", [{"lambda_H": lam_H, "lambda_P": p} for p in P_vals])
    pick = best(recs + recs_P)
    if pick:
        selected["ours"] = {**pick[0]["lambdas"], "epochs": pick[1], "val": pick[0]["epochs"][pick[1] - 1]}
    lam_H = selected.get("ours", {}).get("lambda_H", lam_H)
    for method, name, cands in (
            (RILL_ONLY.name, RILL_ONLY.name, [{"lambda_H": lam_H}]),
            (OPT_KAPPA.name, OPT_KAPPA.name,
             [{"lambda_kappa": v} for v in grid(first["lambda_kappa"], s.lambda_kappa_offsets, mult)]),
            (IMMA.name, IMMA.name, [{"lambda_imma": v} for v in grid(first["lambda_imma"], s.lambda_imma_offsets,
                                                                     mult)])):
        if method not in cfg.methods:
            continue
        pick = best(stage(name, method, cands))
        if pick:
            selected[method] = {**pick[0]["lambdas"], "epochs": pick[1], "val": pick[0]["epochs"][pick[1] - 1]}
    result = {"acc_floor": acc_floor, "theta0_val_dp_acc": head["val_dp_acc"], "scales": sc,
              "selected": selected, "wall_s_this_call": time.perf_counter() - t_start}
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "search_selected.json", result, indent=2, sort_keys=True)
    write_text(out / "search.md", search_table([r for r in store.records() if r["key"] != head_key], head,
                                                acc_floor, selected))
    return result


def search_table(recs: list[dict[str, Any]], head: dict[str, Any], acc_floor: float,
                 selected: dict[str, Any]) -> str:
    """Markdown summary of the search: one row per candidate, at its best admissible epoch (or its last)."""
    from ...deep.search import admissible

    lines = ["Candidates in the order they ran (seed 0; training part 1600 images per task, validation 400; Eq. 17 "
             "on the validation images, 20 groups of 100). Row: the candidate's best admissible epoch, or its last "
             "epoch marked (n.a.) when no epoch is admissible.", "",
             f"theta_0 D_P validation accuracy {100 * head['val_dp_acc']:.2f}%; admissible: D_P validation "
             f"accuracy >= {100 * acc_floor:.2f}%. Gradient norms at theta_0: "
             + ", ".join(f"{k} {v:.3g}" for k, v in sorted(head["calibration"]["grad_norms"].items()))
             + ". Scales: " + "; ".join(f"{r}: " + ", ".join(f"{k}={fmt_weight(v)}" for k, v in sorted(x.items()))
                                         for r, x in head["scales"].items()), "",
             "| stage | method | lambdas | best epoch | RIR est. (val) | (i) est. | (ii) est. | RIR exact (val) | "
             "D_P val acc. (%) | RIR est. by epoch | wall (s) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        ok = [(e, m) for e, m in enumerate(r["epochs"], 1) if admissible(m, acc_floor)]
        e, m = max(ok, key=lambda t: t[1]["est_rir"]) if ok else (len(r["epochs"]), r["epochs"][-1] if r["epochs"]
                                                                    else None)
        lam = ", ".join(f"{k}={fmt_weight(v)}" for k, v in sorted(r["lambdas"].items()))
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
