"""--help is written for a terminal: a description of at most 12 lines naming the docs file with the long account,
no reStructuredText roles or literals anywhere, and two to four examples to copy after the options."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kappalab import analyze, measure, verify
from kappalab.attack import cli as attack_cli
from kappalab.reproduce.table1 import cli as table1_cli
from kappalab.reproduce.table2 import cli as table2_cli
from kappalab.reproduce.table3 import cli as table3_cli

ROOT = Path(__file__).resolve().parents[1]

#: reST in text for a terminal: ``literals``, :role:`target` (any role name), and `interpreted text`_ links
REST = re.compile(r"``|:[a-z]+:`|`_\b")
#: the first heading after the description: argparse's group titles end with a colon, flush left
HEADING = re.compile(r"^(options|optional arguments|positional arguments):$")
EXAMPLE = re.compile(r"^  (kappalab|\.venv\S*/bin/kappalab) ")

COMMANDS = {
    "reproduce table1": table1_cli.build_parser,
    "reproduce table2": table2_cli.build_parser,
    "reproduce table3": table3_cli.build_parser,
    "measure": measure.build_parser,
    "analyze": analyze.parser,
    "verify": verify.build_parser,
    "attack": attack_cli.build_parser,
}


def description_lines(text: str) -> list[str]:
    """The lines of a help text between the usage block (which ends at its first blank line) and the first group
    heading, without the blank lines around them (blank lines between paragraphs count)."""
    lines = text.splitlines()
    start = lines.index("") + 1
    end = next(i for i in range(start, len(lines)) if HEADING.match(lines[i]))
    return "\n".join(lines[start:end]).strip("\n").splitlines()


def examples(text: str) -> list[str]:
    """The command lines of the help's examples block: after a flush-left ``examples:``, each indented by two spaces
    and starting with the command (a continuation line starts with more spaces and is not counted)."""
    lines = text.splitlines()
    assert "examples:" in lines, "no examples block"
    tail = lines[lines.index("examples:") + 1:]
    assert all(line.startswith("  ") for line in tail if line), "the examples block is the last one"
    return [line for line in tail if EXAMPLE.match(line)]


@pytest.fixture
def wide(monkeypatch):
    """argparse wraps option help to $COLUMNS; fix it so the text checked is the same on every terminal."""
    monkeypatch.setenv("COLUMNS", "120")


@pytest.mark.parametrize("name", COMMANDS)
def test_help_is_for_people(name, wide):
    parser = COMMANDS[name]()
    text = parser.format_help()
    assert text.startswith(f"usage: kappalab {name} ")
    assert not REST.search(text), (name, REST.search(text))
    description = description_lines(text)
    assert 1 <= len(description) <= 12, (name, len(description))
    docs = re.search(r"Details: (docs/\S+\.md)\.", "\n".join(description))
    assert docs and (ROOT / docs.group(1)).is_file(), (name, docs)
    assert text.index("\noptions:") < text.index("\nexamples:")
    assert 2 <= len(examples(text)) <= 4, examples(text)


@pytest.mark.parametrize("name", ["alignment", "monotonicity"])
def test_analyze_subcommand_help_has_no_rest(name, wide):
    sub = next(a for a in analyze.parser()._actions if isinstance(a, argparse._SubParsersAction))
    text = sub.choices[name].format_help()
    assert not REST.search(text), REST.search(text)
    assert "docs/theory_on_data.md" in text


@pytest.mark.parametrize("text, expected", [
    ("usage: x\n\none\n\ntwo\n\noptions:\n  -h\n", ["one", "", "two"]),
    ("usage: x\n       [--y]\n\na\nb\n\npositional arguments:\n  z\n\noptions:\n", ["a", "b"]),
])
def test_description_lines_counts_what_sits_between_usage_and_the_first_heading(text, expected):
    assert description_lines(text) == expected


@pytest.mark.parametrize("text", ["``kappalab``", ":mod:`kappalab.x`", ":func:`f`", "see `Link`_ here"])
def test_the_rest_pattern_finds_roles_and_literals(text):
    assert REST.search(text)


def test_help_from_a_real_process_matches_the_parser(wide):
    """One command as a user runs it: the entry point prints the same text format_help gives in-process."""
    env = {**os.environ, "COLUMNS": "120"}
    done = subprocess.run([sys.executable, "-m", "kappalab.cli", "reproduce", "table2", "--help"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout == table2_cli.build_parser().format_help()
