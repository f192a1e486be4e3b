"""The argparse number types of kappalab.cli_options: what each admits, and the one-line message naming the
expected value for what it refuses."""

from __future__ import annotations

import argparse
import math

import pytest

from kappalab.cli_options import budget, positive_float, positive_int, seed


@pytest.mark.parametrize("parse, text, value", [
    (positive_int, "1", 1), (seed, "0", 0), (positive_float, "1e-3", 1e-3), (budget, "0", 0.0),
    (budget, "inf", math.inf)])
def test_admitted(parse, text, value) -> None:
    assert parse(text) == value and type(parse(text)) is type(value)


@pytest.mark.parametrize("parse, text, expected", [
    (positive_int, "0", "a positive integer"), (positive_int, "1.5", "a positive integer"),
    (seed, "-1", "a non-negative integer seed"), (positive_float, "0", "a finite number > 0"),
    (positive_float, "inf", "a finite number > 0"), (positive_float, "nan", "a finite number > 0"),
    (positive_float, "x", "a finite number > 0"), (budget, "-1", "a number >= 0 (or inf)"),
    (budget, "nan", "a number >= 0 (or inf)")])
def test_refused_with_one_line(parse, text, expected) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as err:
        parse(text)
    assert str(err.value) == f"expected {expected}, got {text!r}"
