"""``kappalab verify``: run ``pytest proofs_checks`` and write docs/verdicts.md and docs/verdicts.json.

Merges the registry (``claims.json``: statement, location, interpretation, verdict category, backing tests),
the evidence the tests write at run time (``$KAPPALAB_EVIDENCE_DIR/<id>.json``) and the per-test outcome
(pytest's ``--junitxml``). A claim whose tests failed gets the verdict "check failed", never the registry's.
Returns nonzero if any test failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path
from typing import Any


def load_registry() -> list[dict[str, Any]]:
    """The claims registry shipped with the package."""
    return json.loads(resources.files(__package__).joinpath("claims.json").read_text())


def junit_outcomes(path: Path) -> dict[str, str]:
    """node id (``proofs_checks/test_X.py::name``) -> "passed" | "failed" | "skipped"."""
    out: dict[str, str] = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        mod = tc.get("classname", "").replace(".", "/") + ".py"
        name = tc.get("name", "").split("[")[0]
        status = "passed"
        if tc.find("failure") is not None or tc.find("error") is not None:
            status = "failed"
        elif tc.find("skipped") is not None:
            status = "skipped"
        key = f"{mod}::{name}"
        if out.get(key) != "failed":
            out[key] = status
    return out


def merge(registry, evidence_dir: Path, outcomes: dict[str, str]) -> list[dict[str, Any]]:
    rows = []
    for claim in registry:
        ev_path = evidence_dir / f"{claim['id']}.json"
        ev = json.loads(ev_path.read_text()) if ev_path.exists() else {}
        statuses = [outcomes.get(t, "missing") for t in claim["tests"]]
        status = "passed" if statuses and all(s == "passed" for s in statuses) else "failed"
        rows.append({
            "id": claim["id"], "where": claim["where"], "statement": claim["statement"],
            "short": claim.get("short", claim["statement"]), "evidence_line": claim.get("evidence_line", ""),
            "verdict": claim["verdict"] if status == "passed" else "check failed",
            "cases_tried": ev.get("cases_tried", 0), "families": ev.get("families", {}),
            "counterexample": ev.get("counterexamples", [None])[0] if ev.get("counterexamples") else None,
            "counterexamples": ev.get("counterexamples", []), "measurements": ev.get("measurements", {}),
            "notes": ev.get("notes", []), "precision": ev.get("precision", []),
            "tests": {t: s for t, s in zip(claim["tests"], statuses)}, "status": status,
        })
    return rows


def _short(text: str, n: int = 90) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def render_md(rows: list[dict[str, Any]], profile: str) -> str:
    lines = [f"# Verdicts on the paper's claims (`kappalab verify --profile {profile}`)", "",
             "Generated from a real run of `pytest proofs_checks`; reasoning, derivations and step-size tables in "
             "docs/theory.md. `cases` = examples actually executed (hypothesis draws + exact checks).", "",
             "| ID | where | claim (short) | verdict | counterexample / evidence (both sides) | cases | precision | "
             "backing tests |",
             "|---|---|---|---|---|---|---|---|"]
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731  (norms like ||x|| must not split the table)
    for r in rows:
        evid = r.get("evidence_line") or (r["counterexample"]["name"] if r["counterexample"] else "no violation found")
        tests = f"{sum(s == 'passed' for s in r['tests'].values())}/{len(r['tests'])} passed"
        mod = sorted({t.split("::")[0].split("/")[-1] for t in r["tests"]})
        lines.append(f"| {r['id']} | {r['where']} | {esc(r['short'])} | **{r['verdict']}** | {esc(evid)} | "
                     f"{r['cases_tried']} | {', '.join(r['precision'])} | {', '.join(mod)}: {tests} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kappalab verify", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=["ci", "deep"], default="ci")
    parser.add_argument("--out-dir", default="docs")
    parser.add_argument("--repo", default=".")
    args = parser.parse_args(argv)
    repo = Path(args.repo).resolve()
    if not (repo / "proofs_checks").is_dir():
        print(f"kappalab verify: no proofs_checks/ directory under --repo {repo}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        ev_dir, junit = Path(tmp) / "evidence", Path(tmp) / "junit.xml"
        env = dict(os.environ, KAPPALAB_EVIDENCE_DIR=str(ev_dir), KAPPALAB_HYPOTHESIS_PROFILE=args.profile)
        code = subprocess.call([sys.executable, "-m", "pytest", "proofs_checks", "-q", "-p", "no:cacheprovider",
                                f"--junitxml={junit}"], cwd=repo, env=env)
        outcomes = junit_outcomes(junit) if junit.exists() else {}
        rows = merge(load_registry(), ev_dir, outcomes)
    out = (repo / args.out_dir) if not Path(args.out_dir).is_absolute() else Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "verdicts.json").write_text(json.dumps(rows, indent=2) + "\n")
    (out / "verdicts.md").write_text(render_md(rows, args.profile))
    failed = code != 0 or any(r["status"] != "passed" for r in rows)
    print(f"kappalab verify: wrote {out / 'verdicts.md'}; pytest exit code {code}")
    return 1 if failed else 0
