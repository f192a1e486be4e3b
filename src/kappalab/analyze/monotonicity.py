"""``kappalab analyze monotonicity``: does a real training step move kappa(H_P) down and kappa(H_H) up, and how
large is it next to Thm 4.3's stated and corrected step bounds?

Sample (documented defaults; a few CPU-minutes): Table 1, paper protocol (Alg. 1: full batch, no bias, input-side
preconditioning), seeds 0 and 1, the four methods, the first 100 epochs (= 100 steps) of the committed configs;
Table 2, official protocol (the store's configs: minibatches of 64, bias, shifted-eigenvalue regularizers), digit
pairs 0-1 and 7-3, seed 0, the four methods, the first 4 steps of epoch 1 (each measured step solves six
784 x 784 spectral problems). The runs go through
:func:`kappalab.immunization.immunize` with an ``observer`` (no second training loop).

Per step ``theta_t -> theta_{t+1}`` (whole task, not the minibatch):

* kappa(H_P), kappa(H_H), exact pinv kappa, by each store's rule: Table 1 the core
  :func:`kappalab.condition_number` of ``theta^T K theta``; Table 2 the squared singular values of the features
  ``X theta + 1 b^T`` with the rank decided on K (:mod:`kappalab.reproduce.table2`). The guaranteed way is
  kappa(H_P) down (Thm 4.3(1), R_well) and kappa(H_H) up (Thm 4.3(2), R_ill).
* The theorem's step is ``theta' = theta - eta K^+ grad_theta R(H(theta))`` (``K^+``: pseudo-inverse; Alg. 1's
  K^-1 does not exist, K is singular). A real step ``Delta`` (Adam, all terms together) is expressed in that unit
  as ``eta_eq = ||Delta||_F / ||K^+ grad_theta R||_F`` (the step length that direction would need), with the cosine
  between ``Delta`` and ``-K^+ grad_theta R``; it is "inside" a bound when ``eta_eq`` is below it. The stated bounds
  are :func:`kappalab.step_bound_theta_well` / :func:`kappalab.step_bound_theta_ill` (a stated R_ill bound <= 0 is
  "vacuous": it admits no step); the corrected ones (:func:`corrected_bound_well`, :func:`corrected_bound_ill`) are
  those derived and checked in ``proofs_checks/test_T4_3_1.py`` / ``test_T4_3_2.py`` (``docs/theory.md``).
* Table 2's bias: the constant border pixels put the all-ones vector in range(X) (``X e_j = c 1`` for a pixel j
  constant over both digits), so ``X theta + 1 b^T = X theta_eff`` with ``theta_eff = theta + e_j b^T / c``; the
  bounds and directions are evaluated at ``theta_eff``. The bounds use the core's D x D spectrum of
  ``theta_eff^T K theta_eff``; a step where its rank differs from rank(K) is flagged and left out of the split.
"""

from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kappalab import condition_number, grad_theta_r_ill, grad_theta_r_well, step_bound_theta_ill, step_bound_theta_well
from kappalab.alignment import range_basis
from kappalab.atomic_io import atomic_open, save_figure, write_text
from kappalab.errors import KappalabError
from kappalab.linear import hessian, hessian_extremes
from kappalab.methods import LABELS, PAPER_ORDER
from kappalab.regularizers import ill_denominator
from kappalab.spectral import Extremes

from .alignment_on_data import covariance

METHODS = PAPER_ORDER


def corrected_bound_well(e: Extremes, D: int) -> float:
    """Corrected Thm 4.3(1) (``proofs_checks/test_T4_3_1.py``): with ``r = sqrt(s_k/s_1)``,
    ``min{ (1 - r) / (2 (1-1/D) s_1 + 2 r s_k / D), D (sqrt(s_1/s_2) - 1) / (2 s_2) }``; 0 when k < 2."""
    s1, s2, sk, k = float(e.s_max), float(e.s_2), float(e.s_min), int(e.rank)
    if k < 2:
        return 0.0
    r = math.sqrt(sk / s1)
    return min((1 - r) / (2 * (D - 1) * s1 / D + 2 * r * sk / D), D * (math.sqrt(s1 / s2) - 1) / (2 * s2))


def corrected_bound_ill(e: Extremes) -> float:
    """Corrected Thm 4.3(2) (``proofs_checks/test_T4_3_2.py``): ``k d^2 / (2 (k-1) s_min)``, d = R_ill's
    denominator (the core's :func:`kappalab.regularizers.ill_denominator`)."""
    k = int(e.rank)
    d = float(ill_denominator(e, name="H(theta)"))
    return k * d * d / (2 * (k - 1) * float(e.s_min))


@dataclass
class Task:
    """The whole task a sample run is observed on."""

    name: str
    X_P: np.ndarray
    X_H: np.ndarray
    rule: str  # "core" (Table 1) or "features" (Table 2)
    bias_column: tuple[int, float] | None = None  # (j, c) with X e_j = c 1 in both splits

    def __post_init__(self) -> None:
        self.K = {w: covariance(X) for w, X in (("P", self.X_P), ("H", self.X_H))}
        Q_lam = {w: range_basis(self.K[w], name=f"K_{w}") for w in ("P", "H")}
        self.K_pinv = {w: (Q / lam[None, :]) @ Q.T for w, (Q, lam) in Q_lam.items()}
        self.rank = {w: Q.shape[1] for w, (Q, _) in Q_lam.items()}
        if self.rule == "features":
            from kappalab.reproduce.table2 import rank_of, stored_spectrum

            self.rank = {w: rank_of(stored_spectrum(X)) for w, X in (("P", self.X_P), ("H", self.X_H))}

    def theta_eff(self, theta: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        if bias is None:
            return theta
        if self.bias_column is None:
            raise ValueError(f"{self.name}: a run with a bias needs a constant input column to absorb it")
        j, c = self.bias_column
        out = theta.copy()
        out[j] += bias / c
        return out

    def kappa(self, theta: np.ndarray, which: str) -> float:
        X, K = (self.X_P, self.K["P"]) if which == "P" else (self.X_H, self.K["H"])
        if self.rule == "core":
            return float(condition_number(hessian(theta, K), psd=True))
        from kappalab.reproduce.table2 import kappa_at_rank, stored_spectrum

        return kappa_at_rank(stored_spectrum(X @ theta), self.rank[which])


def constant_column(X_P: np.ndarray, X_H: np.ndarray) -> tuple[int, float]:
    """A column constant (and nonzero, with one value) over both splits: ``X e_j = c 1``."""
    for j in range(X_P.shape[1]):
        c = X_P[0, j]
        if c != 0 and (X_P[:, j] == c).all() and (X_H[:, j] == c).all():
            return j, float(c)
    raise ValueError("no input column is constant over both splits: the bias cannot be absorbed into theta")


def state(task: Task, theta: np.ndarray) -> dict[str, Any]:
    """kappas, bounds and preconditioned regularizer directions at ``theta`` (bias already absorbed)."""
    D = theta.shape[0]
    out: dict[str, Any] = {"theta": theta, "kappa_P": task.kappa(theta, "P"), "kappa_H": task.kappa(theta, "H")}
    for which, grad, stated, corrected in (("P", grad_theta_r_well, step_bound_theta_well,
                                            lambda e: corrected_bound_well(e, D)),
                                           ("H", grad_theta_r_ill, step_bound_theta_ill, corrected_bound_ill)):
        K = task.K[which]
        try:
            _, _, _, e = hessian_extremes(theta, K)
            out[f"rank_dxd_{which}"] = int(e.rank)
            out[f"stated_{which}"] = float(stated(theta, K))
            out[f"corrected_{which}"] = corrected(e)
            out[f"direction_{which}"] = task.K_pinv[which] @ grad(theta, K)
        except KappalabError as error:  # degenerate extreme eigenvalue or undefined R_ill: no gradient, no bound
            out[f"error_{which}"] = str(error).splitlines()[0]
    return out


def step_row(before: dict[str, Any], after: dict[str, Any], task: Task) -> dict[str, Any]:
    """One step's record (see the module docstring)."""
    delta = after["theta"] - before["theta"]
    row: dict[str, Any] = {"kappa_P_before": before["kappa_P"], "kappa_P_after": after["kappa_P"],
                           "kappa_H_before": before["kappa_H"], "kappa_H_after": after["kappa_H"],
                           "P_guaranteed_way": after["kappa_P"] < before["kappa_P"],
                           "H_guaranteed_way": after["kappa_H"] > before["kappa_H"],
                           "step_norm": float(np.linalg.norm(delta))}
    for which in ("P", "H"):
        if f"direction_{which}" not in before:
            row[f"bound_status_{which}"] = "undefined"
            row[f"error_{which}"] = before[f"error_{which}"]
            continue
        d = before[f"direction_{which}"]
        norm_d = float(np.linalg.norm(d))
        eta = row["step_norm"] / norm_d if norm_d > 0 else math.inf
        stated, corrected = before[f"stated_{which}"], before[f"corrected_{which}"]
        row.update({f"eta_eq_{which}": eta, f"stated_{which}": stated, f"corrected_{which}": corrected,
                    f"cos_{which}": float(-(delta * d).sum() / (row["step_norm"] * norm_d)) if eta < math.inf
                    and row["step_norm"] > 0 else math.nan,
                    f"ratio_stated_{which}": eta / stated if stated > 0 else math.nan,
                    f"ratio_corrected_{which}": eta / corrected if corrected > 0 else math.nan,
                    f"inside_stated_{which}": "vacuous" if not stated > 0
                    else ("inside" if eta < stated else "outside"),
                    f"inside_corrected_{which}": "inside" if eta < corrected else "outside"})
        rank_ok = before[f"rank_dxd_{which}"] == task.rank[which]
        row[f"bound_status_{which}"] = "ok" if rank_ok else "rank mismatch"
    return row


class Recorder:
    """The observer passed to :func:`kappalab.immunization.immunize`: one :func:`step_row` per step."""

    def __init__(self, task: Task, labels: dict[str, Any], max_steps: int | None = None) -> None:
        self.task, self.labels, self.max_steps, self.rows, self.prev = task, labels, max_steps, [], None

    def __call__(self, step: int, p) -> None:
        if self.max_steps is not None and step > self.max_steps:
            return  # the run goes on (its config is unchanged); only the first max_steps steps are measured
        theta = p.theta.detach().cpu().numpy().astype(np.float64)
        bias = None if p.bias is None else p.bias.detach().cpu().numpy().astype(np.float64)
        now = state(self.task, self.task.theta_eff(theta, bias))
        if self.prev is not None:
            self.rows.append({**self.labels, "step": step, **step_row(self.prev, now, self.task)})
        self.prev = now


# ---- the sample -------------------------------------------------------------------------------------------------

def config_record(cfg) -> dict[str, Any]:
    """The resolved config as JSON, its source files named relative to the configs folder (no machine paths)."""
    from kappalab.results import to_jsonable

    record = to_jsonable(cfg)
    record["source"] = [Path(p).name for p in record.get("source", [])]
    return record


def run_sample(args) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run the sample of the module docstring; returns (step rows, run records)."""
    import torch

    from kappalab.immunization import house_prices_task, immunize, table1_config

    torch.set_num_threads(1)
    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    hp = house_prices_task("paper")
    t1 = Task("House Prices (paper protocol)", hp.X_P, hp.X_H, "core")
    for method in METHODS:
        cfg = table1_config("paper", method).replace(epochs=args.table1_epochs)
        for seed in args.table1_seeds:
            rec = Recorder(t1, {"table": "Table 1", "task": t1.name, "method": method, "seed": seed})
            start = time.perf_counter()
            run = immunize(hp, cfg, seed, observer=rec)
            rows += rec.rows
            runs.append({"table": "Table 1", "task": t1.name, "method": method, "seed": seed, "epochs": cfg.epochs,
                         "steps": run.n_steps, "config": config_record(cfg), "data_label": hp.data_label,
                         "wall_s": time.perf_counter() - start})
    if args.skip_table2:
        return rows, runs
    from kappalab.reproduce.table2 import mnist_task, table2_config

    for a, b in args.table2_pairs:
        task = mnist_task(a, b, args.table2_seed)
        t2 = Task(f"MNIST subset {a}-{b}", task.X_P, task.X_H, "features", constant_column(task.X_P, task.X_H))
        for method in METHODS:
            cfg = table2_config("official", method).replace(epochs=args.table2_epochs)
            rec = Recorder(t2, {"table": "Table 2", "task": t2.name, "method": method, "seed": args.table2_seed},
                           max_steps=args.table2_steps)
            start = time.perf_counter()
            run = immunize(task, cfg, args.table2_seed, observer=rec)
            rows += rec.rows
            runs.append({"table": "Table 2", "task": t2.name, "method": method, "seed": args.table2_seed,
                         "epochs": cfg.epochs, "steps": min(run.n_steps, args.table2_steps),
                         "config": config_record(cfg), "data_label": task.data_label,
                         "wall_s": time.perf_counter() - start})
    return rows, runs


# ---- summary ----------------------------------------------------------------------------------------------------

def fraction(rows: list[dict[str, Any]], which: str, key: str | None = None, value: str | None = None) -> str:
    """"moved / steps (percent)" for the steps (optionally with ``row[key] == value``, bound status ok)."""
    sel = [r for r in rows if key is None or (r.get(key) == value and r.get(f"bound_status_{which}") == "ok")]
    if not sel:
        return "-"
    moved = sum(bool(r[f"{which}_guaranteed_way"]) for r in sel)
    return f"{moved}/{len(sel)} ({100 * moved / len(sel):.0f}%)"


def summary_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| table | method | kappa | all steps | inside stated | outside stated | stated vacuous | "
             "inside corrected | outside corrected | median eta_eq/stated | median eta_eq/corrected | median cos |",
             "|" + "---|" * 12]
    for table in sorted({r["table"] for r in rows}):
        for method in METHODS:
            sel = [r for r in rows if r["table"] == table and r["method"] == method]
            if not sel:
                continue
            for which, arrow in (("P", "kappa(H_P) down"), ("H", "kappa(H_H) up")):
                med = lambda k: _med([r.get(f"{k}_{which}", math.nan) for r in sel])
                lines.append(
                    f"| {table} | {LABELS[method]} | {arrow} | {fraction(sel, which)} | "
                    f"{fraction(sel, which, f'inside_stated_{which}', 'inside')} | "
                    f"{fraction(sel, which, f'inside_stated_{which}', 'outside')} | "
                    f"{fraction(sel, which, f'inside_stated_{which}', 'vacuous')} | "
                    f"{fraction(sel, which, f'inside_corrected_{which}', 'inside')} | "
                    f"{fraction(sel, which, f'inside_corrected_{which}', 'outside')} | "
                    f"{med('ratio_stated')} | {med('ratio_corrected')} | {med('cos')} |")
    return lines


def _med(values: list[float]) -> str:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return f"{np.median(v):.3g}" if v.size else "-"


def figure(out: Path, rows: list[dict[str, Any]]) -> str:
    """Left: kappa trajectories per run; right: eta_eq / corrected bound against the relative kappa change."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = sorted({r["table"] for r in rows})
    fig, axes = plt.subplots(len(tables), 3, figsize=(15, 4.2 * len(tables)), squeeze=False, constrained_layout=True)
    for i, table in enumerate(tables):
        sel = [r for r in rows if r["table"] == table]
        for j, which in enumerate(("P", "H")):
            ax = axes[i, j]
            for k, method in enumerate(METHODS):
                for run_id in sorted({(r["task"], r["seed"]) for r in sel if r["method"] == method}):
                    rr = [r for r in sel if r["method"] == method and (r["task"], r["seed"]) == run_id]
                    ax.plot([r["step"] for r in rr], [r[f"kappa_{which}_after"] for r in rr], color=f"C{k}", lw=0.8,
                            label=LABELS[method] if run_id == sorted({(r["task"], r["seed"]) for r in sel
                                                                      if r["method"] == method})[0] else None)
            ax.set_yscale("log")
            ax.set_xlabel("step")
            ax.set_ylabel(f"kappa(H_{which}), whole task")
            ax.set_title(f"{table}: kappa(H_{which}) per step")
            ax.legend(fontsize=7)
        ax = axes[i, 2]
        for which, marker in (("P", "o"), ("H", "x")):
            pts = [(r[f"ratio_corrected_{which}"],
                    (r[f"kappa_{which}_after"] - r[f"kappa_{which}_before"]) / r[f"kappa_{which}_before"])
                   for r in sel if r.get(f"bound_status_{which}") == "ok"
                   and np.isfinite(r.get(f"ratio_corrected_{which}", math.nan))]
            if pts:
                x, y = zip(*pts)
                ax.scatter(x, y, s=8, marker=marker, alpha=0.6,
                           label=f"kappa(H_{which}) ({'down' if which == 'P' else 'up'} guaranteed)")
        ax.axvline(1.0, color="grey", lw=0.6)
        ax.axhline(0.0, color="grey", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=1e-6)
        ax.set_xlabel("eta_eq / corrected bound (left of 1: inside)")
        ax.set_ylabel("relative kappa change of the step")
        ax.set_title(f"{table}: step size vs kappa move")
        ax.legend(fontsize=7)
    name = "monotonicity.png"
    save_figure(fig, out / name, dpi=110)
    plt.close(fig)
    return name


def run(out: Path, args, command: str) -> dict[str, Any]:
    from kappalab.provenance import provenance
    from kappalab.results import to_jsonable

    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows, runs = run_sample(args)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with atomic_open(out / "monotonicity_steps.csv", "w", newline="") as handle:
        w = csv.DictWriter(handle, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    name = figure(out, rows)
    meta = {"command": command, "table1": {"protocol": "paper", "seeds": args.table1_seeds,
                                           "epochs": args.table1_epochs},
            "table2": None if args.skip_table2 else {"protocol": "official", "pairs": args.table2_pairs,
                                                     "seed": args.table2_seed, "epochs": args.table2_epochs,
                                                     "measured_steps": args.table2_steps},
            "wall_s": time.perf_counter() - start}
    lines = [f"# Per-step monotonicity (generated by `{command}`)", "",
             f"{len(rows)} steps in {len(runs)} runs; {meta['wall_s']:.0f} s. Each cell: steps that moved kappa the "
             "guaranteed way / steps considered. 'inside' / 'outside': eta_eq below / above the bound at the step's "
             "start; steps whose D x D rank differs from rank(K) or whose gradient is undefined are left out of the "
             "split (not of 'all steps').", "", *summary_table(rows), "",
             "Runs: " + "; ".join(f"{r['table']} {r['task']} {LABELS[r['method']]} seed {r['seed']} "
                                  f"({r['steps']} steps)" for r in runs)]
    excluded = {w: sum(r.get(f"bound_status_{w}") != "ok" for r in rows) for w in ("P", "H")}
    lines += ["", f"Steps left out of the bound split: P {excluded['P']}, H {excluded['H']}. Reasons:", ""]
    reasons: dict[str, int] = {}
    for r in rows:
        for w in ("P", "H"):
            status = r.get(f"bound_status_{w}")
            if status != "ok":
                why = r.get(f"error_{w}", status).split(":")[0] if status == "undefined" else status
                label = f"{r['table']}, {w}: {why}"
                reasons[label] = reasons.get(label, 0) + 1
    lines += [f"- {k}: {v} steps" for k, v in sorted(reasons.items())]
    write_text(out / "monotonicity.md", "\n".join(lines) + "\n")
    record = {"meta": meta, "runs": runs, "excluded": excluded, "figure": name,
              "provenance": provenance(None, meta, data_label="; ".join(sorted({r["data_label"] for r in runs})))}
    write_text(out / "monotonicity.json", json.dumps(to_jsonable(record), indent=1))
    return {"n_steps": len(rows), **record}
