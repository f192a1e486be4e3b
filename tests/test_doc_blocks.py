"""The generated-block rule of the docs (kappalab.doc_blocks): one block replaced, its neighbours kept."""

import pytest

from kappalab.doc_blocks import replace_block

PAGE = """# Page
<!-- generated: table3-decision (experiments/table3_decision.py) -->
old decision
<!-- end: table3-decision -->
between
<!-- generated: table3-decision-pilots (experiments/table3_decision.py) -->
old pilots
<!-- end: table3-decision-pilots -->
"""


def test_only_the_named_block_changes_even_when_another_name_extends_it():
    out = replace_block(PAGE, "table3-decision", "new decision\n\n\n")
    assert out == PAGE.replace("old decision\n", "new decision\n")
    out = replace_block(PAGE, "table3-decision-pilots", "new pilots")
    assert out == PAGE.replace("old pilots\n", "new pilots\n")


def test_missing_markers_name_the_page_and_the_block():
    with pytest.raises(ValueError, match=r"docs/x.md: no generated block 'table3-checkpoints'"):
        replace_block(PAGE, "table3-checkpoints", "body", "docs/x.md")
