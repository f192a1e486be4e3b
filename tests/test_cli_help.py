"""``--help`` is written for a terminal: a description of at most 12 lines, no reStructuredText roles or literals,
and examples to copy."""

from __future__ import annotations

import re

import pytest

from kappalab.reproduce.table3 import cli as table3_cli

REST = re.compile(r"``|:(mod|class|func|data|meth|attr):`")


@pytest.mark.parametrize("build", [table3_cli.build_parser], ids=["reproduce table3"])
def test_help_is_for_people(build):
    parser = build()
    text = parser.format_help()
    assert not REST.search(text), REST.search(text)
    assert len(parser.description.strip().splitlines()) <= 12
    assert parser.epilog and parser.epilog.startswith("examples:")
    examples = [line for line in parser.epilog.splitlines()[1:] if line.strip().startswith(("kappalab", ".venv"))]
    assert 2 <= len(examples) <= 4
