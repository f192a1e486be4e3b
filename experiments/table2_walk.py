"""Table 2's protocol walk: from the authors' code (official protocol) to Alg. 1 (paper protocol), one difference at a
time, on the 10 pairs (a, a+1 mod 10) x seeds 0-2 of full MNIST (every balanced row of each pair).

Each step changes one setting of the step before it (:data:`STEPS`, in walk order). Its runs are stored under
docs/reproduction/table2/walk/<step>/, each run's config carrying ``extra.walk_step = <step>``; the two endpoints are
the runs of the merged 90-pair stores (full90/official, full90/paper) at these pairs and seeds, whose configs are
exactly the walk's endpoints (checked here: every record's identity config is the step's config). Per step and method:
the paper's statistic over the 10 pairs (per seed the mean over the pairs, then mean ± std over the seeds that have
all 10), for RIR and Eq. 15's terms (i) and (ii) under the paper's pinv kappa (from each run's stored spectra, as the
opening table), the step's factor (its RIR statistic over the previous step's) and the CPU seconds per run (the
step's ``sweep.log``, ``/usr/bin/time``; the endpoints': table2.md's run-cost table). Writes walk/walk.json and
walk/walk.md and prints the table.

    python experiments/table2_walk.py
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kappalab.immunization.config import load_config
from kappalab.methods import OURS, RILL_ONLY
from kappalab.reproduce.table2.spectra import rir_from_spectra

ROOT = Path(__file__).resolve().parents[1] / "docs" / "reproduction" / "table2"
WALK = ROOT / "walk"
PAIRS = tuple((a, (a + 1) % 10) for a in range(10))
SEEDS = (0, 1, 2)
METHODS = {m.name: m.label for m in (OURS, RILL_ONLY)}
TERMS = ("rir", "term_i", "term_ii")
#: the official code's preconditioner ridges (table2_official.json), kept by the paper-protocol steps before Alg. 1's
OFFICIAL_RIDGES = {"ridge_P": 1.0, "ridge_H": 1e-7}
CLOSED_FORM = {"extra.spectral_route": "closed_form"}


@dataclass(frozen=True)
class Step:
    """One step of the walk: its name, what it changes from the step before, and the runs' protocol and overrides
    (``--set``; ``extra.walk_step`` added for the walk's own runs)."""

    name: str
    change: str
    protocol: str
    overrides: dict[str, Any] = field(default_factory=dict)
    reused: Path | None = None  #: an endpoint: the merged 90-pair store whose runs it reads

    @property
    def folder(self) -> Path:
        return self.reused if self.reused is not None else WALK / self.name

    def set_items(self) -> dict[str, Any]:
        """The overrides its runs were made with."""
        return dict(self.overrides) if self.reused is not None else {**self.overrides, "extra.walk_step": self.name}

    def command(self, method: str) -> str:
        """The sweep that makes the step's runs (the endpoints: the 90-pair sweep's, of which these are a part); the
        walk's own runs skip the independent probing measures (``--no-probe``: ~45 of ~50 s of a full-batch run's
        finish, not read here; the endpoints' seed-0 runs have them)."""
        sets = " ".join(f"--set {k}={json.dumps(v)}" for k, v in self.set_items().items())
        return (f"kappalab reproduce table2 --data mnist --protocol {self.protocol} --methods {method} --pairs "
                f"{','.join(f'{a}-{b}' for a, b in PAIRS)} --seeds {','.join(map(str, SEEDS))} {sets} --no-probe "
                f"--out docs/reproduction/table2/walk/{self.name}").replace("  ", " ")


STEPS = (
    Step("official", "the authors' code (table2_official_<method>)", "official", reused=ROOT / "full90" / "official"),
    Step("no_bias", "no bias b in the features X theta + 1 b^T", "official", {"extra.bias": False}),
    Step("input_side", "the preconditioner on theta's input side, (K + ridge I)^-1 grad (Alg. 1's)", "official",
         {"extra.bias": False, "extra.precondition_side": "input"}),
    Step("pinv_kappa", "Alg. 1's regularizers (pinv kappa, k = rank(K)): the paper protocol, still on the code's "
                       "64-row minibatches and ridges", "paper", {"batch_size": 64, **OFFICIAL_RIDGES, **CLOSED_FORM}),
    Step("full_batch", "one full-batch step per epoch (30 steps instead of ~2,500-2,900)", "paper",
         {**OFFICIAL_RIDGES, **CLOSED_FORM}),
    Step("ridge_H", "Alg. 1's ridge on D_H's preconditioner: ridge_H = 1e-3 instead of 1e-7", "paper",
         {"ridge_P": OFFICIAL_RIDGES["ridge_P"], **CLOSED_FORM}),
    Step("alg1", "Alg. 1's ridge on D_P's preconditioner: ridge_P = 1e-3 instead of 1; Alg. 1 (table2_paper_<method>)",
         "paper", CLOSED_FORM, reused=ROOT / "full90" / "paper"),
)


def records(step: Step, method: str) -> list[dict[str, Any]]:
    """The step's stored runs of ``method`` at the walk's pairs and seeds; each record's identity config must be the
    step's (a ValueError naming the run otherwise)."""
    store = step.folder / f"runs_{step.protocol}.jsonl"
    if not store.exists():
        return []
    want = load_config(f"table2_{step.protocol}_{method}", step.set_items()).resolved()
    out = []
    for line in store.read_text().splitlines():
        r = json.loads(line)
        p = r["params"]
        if p["method"] != method or (p["a"], p["b"]) not in PAIRS or p["seed"] not in SEEDS:
            continue
        if json.dumps(r["identity"]["config"], sort_keys=True) != json.dumps(want, sort_keys=True, default=list):
            raise ValueError(f"{store}: run {r['key']} was not made with step {step.name!r}'s config")
        out.append(r)
    return out


def terms_of(step: Step, r: dict[str, Any]) -> dict[str, float]:
    """Eq. 15's (i), (ii), RIR of a run from its stored spectra (pinv kappa, the rank decided on K)."""
    with np.load(step.folder / r["result"]["spectra_file"]) as z:
        return rir_from_spectra(dict(z))


def statistic(runs: list[dict[str, Any]], term: str) -> dict[str, Any]:
    """The paper's statistic of ``term``: per seed with all 10 pairs the mean over them, then mean and sample std."""
    seeds = [s for s in SEEDS if len({(r["a"], r["b"]) for r in runs if r["seed"] == s}) == len(PAIRS)]
    means = [float(np.mean([r[term] for r in runs if r["seed"] == s])) for s in seeds]
    return {"seeds": seeds, "seed_means": means, "mean": float(np.mean(means)) if means else None,
            "std": float(np.std(means, ddof=1)) if len(means) > 1 else None}


def cpu_per_run(step: Step, method: str, n_runs: int) -> float | None:
    """User + system CPU seconds per stored run of ``method``, from the step's ``sweep.log``: each sitting opens with a
    ``# <time> ... --methods <method> ...`` line and ends with ``/usr/bin/time -v``'s report."""
    log = step.folder / "sweep.log"
    if step.reused is not None or not log.exists() or not n_runs:
        return None
    seconds = 0.0
    for sitting in re.split(r"^(?=# \S+ nice )", log.read_text(), flags=re.M):
        if f"--methods {method} " in sitting.split("\n", 1)[0]:
            seconds += sum(float(v) for v in re.findall(r"(?:User|System) time \(seconds\): ([0-9.]+)", sitting))
    return seconds / n_runs if seconds else None


def factor(rir: dict[str, Any], runs: list[dict[str, Any]], previous: tuple[str, dict[str, Any], list] | None
           ) -> dict[str, Any] | None:
    """The step's factor: the mean of its per-seed RIR means over those of ``previous`` (name, RIR statistic and
    runs of the nearest earlier step with a complete seed: the step above, or, when steps between are not run, the
    factor of them all), on the seeds both have complete (all of :data:`SEEDS`: the ratio of the two statistics),
    and the range of the run-by-run ratios (same pair and seed) on those seeds; None when they share no seed."""
    if previous is None:
        return None
    name, previous, before = previous
    seeds = [s for s in rir["seeds"] if s in previous["seeds"]]
    if not seeds:
        return None
    mine = [m for s, m in zip(rir["seeds"], rir["seed_means"]) if s in seeds]
    theirs = [m for s, m in zip(previous["seeds"], previous["seed_means"]) if s in seeds]
    earlier = {(r["a"], r["b"], r["seed"]): r["rir"] for r in before if r["seed"] in seeds}
    ratios = [r["rir"] / earlier[r["a"], r["b"], r["seed"]] for r in runs if r["seed"] in seeds]
    return {"from": name, "seeds": seeds, "value": float(np.mean(mine)) / float(np.mean(theirs)),
            "run_ratios": [min(ratios), max(ratios)]}


def report() -> dict[str, Any]:
    rows = []
    for method in METHODS:
        previous = None
        for step in STEPS:
            runs = [{"a": r["params"]["a"], "b": r["params"]["b"], "seed": r["params"]["seed"], **terms_of(step, r)}
                    for r in records(step, method)]
            stats = {t: statistic(runs, t) for t in TERMS}
            rows.append({"method": method, "step": step.name, "change": step.change, "protocol": step.protocol,
                         "overrides": step.set_items(), "store": str(step.folder.relative_to(ROOT)),
                         "reused": step.reused is not None, "n_runs": len(runs),
                         "complete": stats["rir"]["seeds"] == list(SEEDS), **stats,
                         "factor": factor(stats["rir"], runs, previous),
                         "cpu_s_per_run": cpu_per_run(step, method, len(runs)), "command": step.command(method)})
            previous = (step.name, stats["rir"], runs) if stats["rir"]["seeds"] else previous
    return {"command": "python experiments/table2_walk.py", "pairs": [f"{a}-{b}" for a, b in PAIRS],
            "seeds": list(SEEDS), "rows": rows}


def _cell(stat: dict[str, Any]) -> str:
    """``mean ± std`` (4 and 2 significant digits, each rounded once from the value), the seeds when not all."""
    if stat["mean"] is None:
        return "not run"
    seeds = "" if stat["seeds"] == list(SEEDS) else f" (seed{'s' * (len(stat['seeds']) > 1)} " \
        f"{', '.join(map(str, stat['seeds']))})"
    return _sig(stat["mean"], 4) + (f" ± {_sig(stat['std'], 2)}" if stat["std"] is not None else "") + seeds


def _sig(x: float, digits: int) -> str:
    """``x`` to ``digits`` significant digits, trailing zeros kept (12.96, 13.00, 0.50), no bare point (1397)."""
    return f"{x:#.{digits}g}".rstrip(".")


def _factor(f: dict[str, Any] | None, step: str) -> str:
    if f is None:
        return ""
    seeds = "" if f["seeds"] == list(SEEDS) else f" (seed{'s' * (len(f['seeds']) > 1)} " \
        f"{', '.join(map(str, f['seeds']))})"
    above = [s.name for s in STEPS].index(f["from"]) + 1 == [s.name for s in STEPS].index(step)
    low, high = f["run_ratios"]
    return f"{_sig(f['value'], 3)}x{seeds}" + ("" if above else f", from `{f['from']}`") + \
        f"; runs {_sig(low, 3)}-{_sig(high, 3)}x"


def markdown(result: dict[str, Any]) -> str:
    lines = ["| method | step | what it changes from the step above | runs | RIR, 10-pair mean per seed, mean ± std "
             "| (i) | (ii) | factor (RIR / step above; run-by-run range) | CPU-s per run |", "|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        runs = f"{row['n_runs']}/{len(PAIRS) * len(SEEDS)}" + ("" if row["complete"] or not row["n_runs"] else
                                                              " (unfinished)")
        factor = _factor(row["factor"], row["step"])
        cpu = ("full90 (table2.md, run cost)" if row["reused"] else
               "" if row["cpu_s_per_run"] is None else f"{row['cpu_s_per_run']:.0f}")
        lines.append(f"| {METHODS[row['method']]} | `{row['step']}` | {row['change']} | {runs} | {_cell(row['rir'])} | "
                     f"{_cell(row['term_i'])} | {_cell(row['term_ii'])} | {factor} | {cpu} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    result = report()
    text = markdown(result)
    print(text, end="")
    WALK.mkdir(parents=True, exist_ok=True)
    (WALK / "walk.json").write_text(json.dumps(result, indent=1) + "\n")
    (WALK / "walk.md").write_text(text)
    print(f"wrote {WALK / 'walk.json'} and walk.md")


if __name__ == "__main__":
    main()
