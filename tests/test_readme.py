"""The README's findings and Table 1's answer table are generated from the committed result files
(scripts/readme_findings.py) and must equal what those files give today; every link they hold resolves; each
claim's gist (its cell in the claims table) has at most twelve words; user documents and the source carry no tracker
numbers."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from kappalab.findings import GIST_WORDS, read_verdicts
from kappalab.verify import load_registry

ROOT = Path(__file__).resolve().parents[1]
TRACKER_NUMBER = r"\bissues? #?\d+"  #: "issue 12", "issues #3"


@pytest.fixture(scope="module")
def generator():
    spec = importlib.util.spec_from_file_location("readme_findings", ROOT / "scripts" / "readme_findings.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_generated_blocks_are_up_to_date(generator) -> None:
    for path in generator.BLOCKS:
        old, new = generator.rendered(path)
        assert old == new, f"{path} is out of date: run python scripts/readme_findings.py"


def test_the_findings_come_first_and_list_every_claim(generator) -> None:
    readme = (ROOT / "README.md").read_text()
    findings = readme[readme.index("## Findings"):readme.index("<!-- end: findings -->")]
    assert readme.index("## Findings") < readme.index("## The two commands")
    for row in read_verdicts(ROOT / "docs" / "verdicts.json"):
        (line,) = [ln for ln in findings.splitlines() if ln.startswith(f"| {row['id']} |")]
        assert f"**{row['verdict']}**" in line
    for title in generator.PAPER_TABLES:
        assert f"**{title}**" in findings


def test_links_of_the_generated_blocks_resolve(generator) -> None:
    for path in generator.BLOCKS:
        text = (ROOT / path).read_text()
        for target in re.findall(r"\]\(([^)#]+)\)", text):
            if not target.startswith("http"):
                assert (ROOT / path).parent.joinpath(target).exists(), (path, target)


#: each report's answer block; Table 3's answer is its decision table (the verdict from the runs beside their
#: controls, experiments/table3_decision.py), and its comparison with the paper's numbers follows it
ANSWER = {"table1": "table1-answer", "table2": "table2-answer", "table3": "table3-decision"}


@pytest.mark.parametrize("name", sorted(ANSWER))
def test_reports_open_with_their_answer_table(name: str) -> None:
    head = (ROOT / "docs" / "reproduction" / f"{name}.md").read_text().splitlines()[:40]
    assert f"<!-- end: {ANSWER[name]} -->" in head


def test_every_claim_has_a_short_gist() -> None:
    for claim in load_registry():
        assert 0 < len(claim["gist"].split()) <= GIST_WORDS, claim["id"]


@pytest.mark.parametrize("path", ["README.md", "docs/reproduction/table1.md", "docs/reproduction/table2.md",
                                  "docs/reproduction/table3.md", "docs/benchmarks.md", "docs/claims.md"])
def test_no_tracker_numbers_in_user_documents(path: str) -> None:
    assert not re.search(TRACKER_NUMBER, (ROOT / path).read_text(), re.I)


def test_no_tracker_numbers_in_the_source() -> None:
    """A comment or docstring says what it means, not which tracker entry asked for it."""
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "src").rglob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(TRACKER_NUMBER, line, re.I)]
    assert not hits, hits
