"""``kappalab verify``: run ``pytest proofs_checks`` and write verdicts.md and verdicts.json (default folder
``results/verify``; the committed ``docs/verdicts.*`` are rewritten only with ``--out-dir docs``).



The claim checks are found (:func:`checks_dir`) in ``--checks DIR``, else next to the source tree kappalab is
imported from (a checkout), else as the installed ``proofs_checks`` package (the wheel ships it). Without pytest
and hypothesis ``verify`` refuses to run (status 2), and a pytest run that did not complete (interrupted,
internal or usage error, nothing collected) writes no verdicts at all: a verdict is never written that was not
measured.

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
import importlib.util
from importlib import resources
from pathlib import Path
from typing import Any

from kappalab.atomic_io import write_json, write_text


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
        if statuses and all(s == "passed" for s in statuses):
            status = "passed"
        elif any(s == "failed" for s in statuses):
            status = "failed"
        else:  # skipped or not collected: nothing was measured
            status = "not measured"
        rows.append({
            "id": claim["id"], "where": claim["where"], "statement": claim["statement"],
            "short": claim.get("short", claim["statement"]), "evidence_line": claim.get("evidence_line", ""),
            "verdict": {"passed": claim["verdict"], "failed": "check failed"}.get(status, "not measured"),
            "cases_tried": ev.get("cases_tried", 0), "families": ev.get("families", {}),
            "counterexample": ev.get("counterexamples", [None])[0] if ev.get("counterexamples") else None,
            "counterexamples": ev.get("counterexamples", []), "measurements": ev.get("measurements", {}),
            "notes": ev.get("notes", []), "precision": ev.get("precision", []),
            "tests": {t: s for t, s in zip(claim["tests"], statuses)}, "status": status,
        })
    return rows


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


#: pytest exit codes after which the per-test outcomes are complete (0: all passed, 1: some failed)
COMPLETE_RUN = (0, 1)


def checks_dir(given: str | None = None) -> Path | None:
    """The ``proofs_checks`` folder to run: ``given``, else the source checkout's, else the installed package's."""
    if given is not None:
        return Path(given).resolve()
    checkout = Path(__file__).resolve().parents[3] / "proofs_checks"
    if (checkout / "conftest.py").is_file():
        return checkout
    spec = importlib.util.find_spec("proofs_checks")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0]).resolve()
    return None


#: what --help prints above the options (the module docstring and docs/theory.md hold the long account)
HELP = """Run the claim checks (pytest on proofs_checks) and write verdicts.md and verdicts.json (default folder
results/verify; the committed docs/verdicts.* are rewritten only with --out-dir docs). A claim whose tests failed
gets the verdict "check failed", never the registry's; a pytest run that did not complete writes no verdicts.
Needs pytest and hypothesis (pip install 'kappalab[test]'); the exit status is nonzero if any check failed.
Details: docs/theory.md."""

EXAMPLES = """examples:
  kappalab verify
  kappalab verify --profile deep --out-dir results/verify_deep
  kappalab verify --out-dir docs"""


def build_parser() -> argparse.ArgumentParser:
    from kappalab.cli_options import RESULTS, Parser

    parser = Parser(prog="kappalab verify", description=HELP, epilog=EXAMPLES,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=["ci", "deep"], default="ci",
                        help="hypothesis profile: ci, derandomized (default); deep, randomized with many more examples")
    parser.add_argument("--out-dir", type=Path, default=RESULTS / "verify",
                        help="folder for verdicts.md / verdicts.json (default results/verify)")
    parser.add_argument("--checks", default=None, metavar="DIR",
                        help="the proofs_checks folder to run (default: the checkout's, else the installed one)")
    return parser


def main(argv: list[str] | None = None) -> int:
    from kappalab.cli_options import check_out

    args = build_parser().parse_args(argv)
    missing = [name for name in ("pytest", "hypothesis") if importlib.util.find_spec(name) is None]
    if missing:
        print(f"kappalab verify: error: {' and '.join(missing)} not installed; verify runs the claim checks with "
              "them (pip install 'kappalab[test]')", file=sys.stderr)
        return 2
    checks = checks_dir(args.checks)
    if checks is None or not (checks / "conftest.py").is_file():
        print(f"kappalab verify: error: --checks: no proofs_checks folder found ({checks})", file=sys.stderr)
        return 2
    try:
        out = check_out(args.out_dir, "--out-dir")
    except ValueError as error:
        print(f"kappalab verify: error: {error}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        ev_dir, junit = Path(tmp) / "evidence", Path(tmp) / "junit.xml"
        env = dict(os.environ, KAPPALAB_EVIDENCE_DIR=str(ev_dir), KAPPALAB_HYPOTHESIS_PROFILE=args.profile)
        try:
            code = subprocess.call([sys.executable, "-m", "pytest", checks.name, "-q", "-p", "no:cacheprovider",
                                    f"--rootdir={checks.parent}", f"--junitxml={junit}"], cwd=checks.parent, env=env)
        except KeyboardInterrupt:
            print("kappalab verify: interrupted; no verdicts written", file=sys.stderr)
            return 130
        if code not in COMPLETE_RUN or not junit.exists():
            print(f"kappalab verify: pytest did not complete (exit code {code}); no verdicts written",
                  file=sys.stderr)
            return 1
        rows = merge(load_registry(), ev_dir, junit_outcomes(junit))
    write_json(out / "verdicts.json", rows, indent=2)
    write_text(out / "verdicts.md", render_md(rows, args.profile))
    failed = code != 0 or any(r["status"] != "passed" for r in rows)
    print(f"kappalab verify: wrote {out / 'verdicts.md'}; pytest exit code {code}")
    return 1 if failed else 0
