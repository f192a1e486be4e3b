"""Built-in mutants of the statements: every bound in proofs_checks, scaled by 1.5 up and down, turns its check red.

Each claim module with a bound has a ``bound_location(c, ...)`` check (run at ``c = 1`` by the module's own
test): on witnesses where the bound is tight, or with its measured slack asserted as a range, it asserts that the
bound (times ``c``) is where the module says it is. Here the same checks run with ``c = 1.5`` and ``c = 1/1.5``:
a sufficient step bound made 1.5x larger must admit a violation (the 80-digit measurement finds it) or leave its
asserted slack range; one made smaller must leave its slack range; an inequality's bound moved by 1.5 either
way must be violated on a tight witness or leave its slack range. A bound that is wrong by a factor of 1.5 cannot
pass ``pytest proofs_checks``.
"""

from __future__ import annotations

from functools import partial

import pytest

from . import (test_LB_1, test_T4_1_1b, test_T4_1_2, test_T4_1_4, test_T4_3_1, test_T4_3_2, test_TA_1_2,
               test_TA_1_4)

#: claim -> (its check, the message that a 1.5x-larger bound must produce: a violation, or the slack range)
CHECKS = {
    "TA.1.4 stated": (test_TA_1_4.bound_location, "violated"),
    "T4.1.4 stated": (test_T4_1_4.bound_location, "violated"),
    "T4.3.1 stated (fails)": (partial(test_T4_3_1.bound_location, problems=("stated",)), "not where stated"),
    "T4.3.1 corrected": (partial(test_T4_3_1.bound_location, problems=("corrected",)), "violated"),
    "T4.3.2 stated (fails)": (partial(test_T4_3_2.bound_location, problems=("stated",)), "not where stated"),
    "T4.3.2 corrected": (partial(test_T4_3_2.bound_location, problems=("corrected",)), "violated"),
    "T4.1.1b lower": (partial(test_T4_1_1b.bound_location, bounds=("lower",)), "violated"),
    "T4.1.1b upper": (partial(test_T4_1_1b.bound_location, bounds=("upper",)), "slack"),
    "T4.1.2 stated": (partial(test_T4_1_2.bound_location, bounds=("stated",)), "violated"),
    "T4.1.2 proof chain": (partial(test_T4_1_2.bound_location, bounds=("proof chain",)), "violated"),
    "LB.1": (test_LB_1.bound_location, "slack"),
    "TA.1.2": (test_TA_1_2.bound_location, "slack"),
}
#: for an upper bound on a quantity (T4.1.1b upper, LB.1, TA.1.2) a SMALLER bound is the stronger, violated claim
SMALLER_IS_VIOLATED = {"T4.1.1b upper", "LB.1", "TA.1.2"}


@pytest.mark.parametrize("claim", list(CHECKS))
@pytest.mark.parametrize("factor", [1.5, 1 / 1.5], ids=["x1.5", "div1.5"])
def test_bound_scaled_by_one_and_a_half_turns_check_red(claim, factor):
    check, larger = CHECKS[claim]
    if factor > 1:
        expected = larger
    else:
        expected = "violated" if claim in SMALLER_IS_VIOLATED else "not where stated|slack"
    with pytest.raises(AssertionError, match=expected):
        check(factor)
