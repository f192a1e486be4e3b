"""Generated blocks of the Markdown pages: the lines between ``<!-- generated: NAME (SOURCE) -->`` and
``<!-- end: NAME -->``, which the script named as SOURCE rewrites from its stores (the one home of that rule, for
``scripts/readme_findings.py`` and the Table 3 experiments' ``--write``)."""

from __future__ import annotations

import re


def block_pattern(name: str) -> re.Pattern[str]:
    """The block ``name`` (any SOURCE): groups 1 and 3 are its two marker lines, group 2 its body."""
    return re.compile(rf"(<!-- generated: {re.escape(name)} \([^)\n]*\) -->\n)(.*?)(<!-- end: {re.escape(name)} -->)",
                      re.S)


def replace_block(text: str, name: str, body: str, where: str = "the page") -> str:
    """``text`` with block ``name``'s body replaced by ``body`` (one final newline); ``where`` names the page in the
    error raised when its markers are missing."""
    pattern = block_pattern(name)
    if not pattern.search(text):
        raise ValueError(f"{where}: no generated block {name!r} (markers missing)")
    return pattern.sub(lambda m: m[1] + body.rstrip("\n") + "\n" + m[3], text, count=1)
