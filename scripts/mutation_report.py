"""Write docs/mutation.json and docs/mutation.md from mutmut 3's results (called by scripts/mutation.sh).

Per module: killed / survived (incl. "no tests") / timeout / not checked, the score
``(killed + timeout) / (checked - equivalent)`` (a timeout counts as killed: the mutant made the tests hang, which
a test run detects), and every survivor with its diff and a one-line reason from
``scripts/mutation_reasons.json`` (``{"<mutant name>": "equivalent: ..."}``); a survivor without a reason is listed
as UNEXPLAINED. Mutants that a later test kills show up as killed on the next run.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import subprocess
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REASONS = ROOT / "scripts" / "mutation_reasons.json"
#: The oracle of this script's runs (docs/mutation.md explains it; the settings live in [tool.mutmut] and
#: scripts/mutation_plugin.py). Modules measured before it carry no "oracle" entry.
ORACLE = "core test files of [tool.mutmut], hypothesis profile 'mutation' (10 examples), fastest test first"
STATUS = re.compile(r"^\s*(kappalab\.(\w+)\.\S+): (.+)$")


def results(mutmut: str) -> dict[str, dict[str, str]]:
    """module -> {mutant name: status} from ``mutmut results --all true``."""
    out = subprocess.run([mutmut, "results", "--all", "true"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    by_module: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        m = STATUS.match(line)
        if m:
            by_module.setdefault(m.group(2), {})[m.group(1)] = m.group(3).strip()
    return by_module


def mutant_sources(module: str) -> dict[str, str]:
    """function name -> source, of mutmut's copy of ``module`` (the original of ``f`` is ``x_f__mutmut_orig``,
    mutant N ``x_f__mutmut_N``)."""
    text = (ROOT / "mutants" / "src" / "kappalab" / f"{module}.py").read_text()
    lines = text.splitlines()
    return {node.name: "\n".join(lines[node.lineno - 1:node.end_lineno])
            for node in ast.walk(ast.parse(text)) if isinstance(node, ast.FunctionDef)}


def diff(sources: dict[str, str], name: str) -> str:
    """The changed lines of mutant ``name`` (as ``mutmut show`` prints them, read from the files: one mutmut
    process per survivor took seconds each)."""
    mutant = name.rsplit(".", 1)[1]
    base = mutant.rsplit("__mutmut_", 1)[0]
    plain = base.removeprefix("x_")
    before = sources[base + "__mutmut_orig"].replace(base + "__mutmut_orig", plain).splitlines()
    after = sources[mutant].replace(mutant, plain).splitlines()
    return "\n".join(line for line in difflib.unified_diff(before, after, lineterm="", n=0)
                     if line.startswith(("+", "-")) and not line.startswith(("+++", "---")))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mutmut", default="mutmut")
    ap.add_argument("--times", type=Path, required=True)
    ap.add_argument("modules", nargs="+")
    args = ap.parse_args()
    reasons = json.loads(REASONS.read_text()) if REASONS.exists() else {}
    times = dict(line.split("\t") for line in args.times.read_text().splitlines() if line.strip())
    json_path = ROOT / "docs" / "mutation.json"
    report = json.loads(json_path.read_text()) if json_path.exists() else {"modules": {}}
    all_results = results(args.mutmut)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    for module in args.modules:
        statuses = all_results.get(module)
        if not statuses:
            continue
        counts = Counter(statuses.values())
        survivors = []
        sources = mutant_sources(module)
        for name in sorted(n for n, s in statuses.items() if s in ("survived", "no tests")):
            reason = reasons.get(name, "UNEXPLAINED")
            survivors.append({"mutant": name, "diff": diff(sources, name), "reason": reason})
        equivalent = sum(1 for s in survivors if s["reason"].startswith("equivalent"))
        killed = counts["killed"] + counts["timeout"]
        unchecked = counts["not checked"] + counts["skipped"]
        denominator = len(statuses) - unchecked - equivalent
        report["modules"][module] = {
            "total": len(statuses), "killed": counts["killed"], "timeout": counts["timeout"],
            "survived": counts["survived"] + counts["no tests"], "not_checked": unchecked,
            "other": {k: v for k, v in counts.items()
                      if k not in ("killed", "survived", "timeout", "no tests", "not checked", "skipped")},
            "equivalent": equivalent, "score_non_equivalent": killed / denominator if denominator else 1.0,
            "wall_seconds": int(times.get(module, 0)), "commit": commit, "oracle": ORACLE,
            "survivors": survivors,
        }
    report["command"] = "scripts/mutation.sh " + " ".join(sorted(report["modules"]))
    json_path.write_text(json.dumps(report, indent=1) + "\n")
    (ROOT / "docs" / "mutation.md").write_text(render(report))


def render(report: dict) -> str:
    lines = ["# Mutation testing of the core formula modules", "",
             "Generated by `scripts/mutation.sh` (mutmut 3; do not edit by hand). Regenerate with:", "",
             "    MUTMUT=/path/to/venv/bin/mutmut scripts/mutation.sh [MODULE...]",
             "    MUTMUT=/path/to/venv/bin/mutmut scripts/mutation.sh --survivors [MODULE...]  # after adding tests",
             "",
             "## The oracle", "",
             "- Tests: the core test files listed in `[tool.mutmut] pytest_add_cli_args_test_selection` of",
             "  pyproject.toml (proofs_checks re-derive the paper's quantities without calling kappalab, so they",
             "  cannot kill a mutant of src/). Per mutant, mutmut runs only the tests that executed the mutated",
             "  function on the clean code, and stops at the first failure (`-x`).",
             "- `scripts/mutation_plugin.py` (loaded with `-p mutation_plugin`): hypothesis profile `mutation`",
             "  (derandomized like `ci`, 10 examples per property instead of 25); a mutant's tests run fastest first",
             "  (durations from mutmut's clean run), which changes how soon a mutant is killed, not whether; the",
             "  session fails unless kappalab is imported from mutmut's copy (`mutants/src`).",
             "- Left out: `test_numpy_path_never_imports_torch` (a fresh interpreter, which cannot see the mutants).",
             "- Tests written to kill survivors live in the core test files of their subject (`test_kappa_rules.py`,",
             "  `test_gram_routes.py`, `test_regularizer_formulas.py`, `test_spectral_extremes.py`,",
             "  `test_linear_step_and_gradients.py`, `test_step_bounds_and_eq10.py`; all in the selection: a change of",
             "  the selection makes mutmut discard every result), each against a closed form or a documented message.",
             "- One child process (`--max-children 1`) under `nice -n 10`, `OMP_NUM_THREADS=1`, on a shared 2-core",
             "  machine; wall times below are for that.",
             "",
             "Score = (killed + timeout) / (checked - equivalent survivors); a timeout counts as killed. Rows without",
             "a commit were measured by an earlier oracle (25 hypothesis examples, file order, fewer test files).",
             "",
             "| module | total | not checked | killed | timeout | survived | equivalent | score (non-equivalent) "
             "| wall s | commit |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, m in sorted(report["modules"].items()):
        lines.append(f"| {name} | {m['total']} | {m['not_checked']} | {m['killed']} | {m['timeout']} | "
                     f"{m['survived']} | {m['equivalent']} | {m['score_non_equivalent']:.1%} | {m['wall_seconds']} | "
                     f"{m.get('commit', 'earlier oracle')} |")
    for name, m in sorted(report["modules"].items()):
        if not m["survivors"]:
            continue
        lines += ["", f"## {name}: survivors", ""]
        for s in m["survivors"]:
            lines += [f"- `{s['mutant']}`: {s['reason']}", "", "  ```diff"]
            lines += [f"  {line}" for line in s["diff"].splitlines()] + ["  ```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
