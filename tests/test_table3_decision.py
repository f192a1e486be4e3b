"""Table 3's decision rule (kappalab.reproduce.table3.decision) on made-up records: each verdict where the rule says
it, from the controls and the group estimator's intervals."""

from __future__ import annotations

import pytest

from kappalab.reproduce.table3.decision import decide, decision_table


def _record(method: str, seed: int, rir: float, lo: float, hi: float, acc: float = 0.9) -> dict:
    est = {"rir": rir, "ci95": [lo, hi], "term_i": rir, "term_ii": 1.0}
    return {"method": method, "seed": seed, "utility": {"dp_test_acc": acc}, "identity": {"config": {"eta": 1e-3}},
            "estimates": {"exact": {**est, "ci95": None}, "groups": est, "authors": est}}


def _store(oracle: float, ours: tuple[float, float, float], ours_acc: float = 0.9) -> list[dict]:
    out = []
    for seed in (0, 1, 2):
        out += [_record("init", seed, 1, 1, 1), _record("oracle", seed, oracle, oracle - 0.5, oracle + 0.5),
                _record("task_only", seed, 1.1, 0.9, 1.3), _record("ours", seed, *ours, acc=ours_acc)]
    return out


@pytest.mark.parametrize("oracle, ours, acc, verdict", [
    (10.0, (5.0, 4.0, 6.0), 0.9, "immunizes"),
    (10.0, (5.0, 1.2, 6.0), 0.9, "does not immunize here"),  # its interval reaches into task_only's
    (10.0, (1.8, 1.6, 1.9), 0.9, "does not immunize here"),  # above task_only but not above 2
    (1.2, (5.0, 4.0, 6.0), 0.9, "the measure cannot be moved here"),
    (10.0, (5.0, 4.0, 6.0), 0.85, "utility lost"),  # 5 points below theta_0
])
def test_each_verdict_where_the_rule_puts_it(oracle, ours, acc, verdict):
    rows = {r.method: r for r in decide(_store(oracle, ours, acc))}
    assert rows["ours"].verdict == verdict
    assert rows["ours"].n == 3 and rows["oracle"].verdict == "control"
    assert rows["ours"].interval["groups"] == (ours[1], ours[2])


def test_a_drop_of_exactly_the_limit_keeps_utility():
    """0.82 - 0.80 is 2.0000000000000018 points in floating point: still within 2 points (10 of 500 images)."""
    store = _store(10.0, (5.0, 4.0, 6.0))
    for r in store:
        r["utility"]["dp_test_acc"] = 0.82 if r["method"] == "init" else 0.80
    assert {r.method: r for r in decide(store)}["ours"].verdict == "immunizes"


def test_without_a_control_there_is_no_verdict():
    store = [r for r in _store(10.0, (5.0, 4.0, 6.0)) if r["method"] != "task_only"]
    assert {r.method: r for r in decide(store)}["ours"].verdict == "no verdict: a control is missing"


def test_the_table_states_the_rule_and_lists_controls_first():
    text = decision_table({"D_P A / D_H B, paper protocol": _store(10.0, (5.0, 4.0, 6.0))})
    lines = text.splitlines()
    assert lines[0].startswith("Verdict (group estimator, fixed before the runs)")
    methods = [line.split(" | ")[1] for line in lines if line.startswith("| D_P")]
    assert methods == ["Oracle (control)", "Task only (control)", "Ours"]


def test_a_diverged_seed_makes_the_verdict_diverged_and_the_others_still_count():
    store = _store(10.0, (5.0, 4.0, 6.0))
    store[3] = {**{k: v for k, v in store[3].items() if k not in ("estimates", "utility")},
                "diverged": "FloatingPointError: ours: non-finite loss during epoch 15"}
    rows = {row.method: row for row in decide(store)}
    assert rows["ours"].verdict == "diverged (1 of 3 seeds)" and rows["ours"].n == 3
    assert rows["ours"].rir["groups"] == 5.0  # the two seeds that finished
    alone = [r for r in store if r["method"] != "ours" or "diverged" in r]
    row = {row.method: row for row in decide(alone)}["ours"]
    assert row.verdict == "diverged (1 of 1 seeds)" and row.rir["groups"] != row.rir["groups"]  # NaN: none finished
