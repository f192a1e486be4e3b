"""Shared verdict machinery: compare two sides in float64, and re-check any violation in 80 digits.

``confirm_le(name, sides, sm, ev)`` evaluates ``lhs <= rhs`` (or ``<``) from an :class:`~proofs_checks.paper.Ext`
in float64 (NumPy's SVD); if float64 says violated, or cannot decide (degenerate / undefined within
rounding), it recomputes the same sides from the 80-digit matrix. A violation that survives is returned as a
failure message with both sides, the margin and the matrix.
"""

from __future__ import annotations

from typing import Any, Callable

import mpmath as mp
import numpy as np

from .evidence import Evidence
from .highprec import MP_LABEL, MP_TOL, fmt, mp_extremes, mp_spectral, workdps
from .paper import Ext, Undefined, ext64
from .strategies import SpectralMatrix

Sides = Callable[[Ext], tuple[Any, Any]]


def both_sides_message(claim: str, lhs, rhs, sm: SpectralMatrix | None, precision: str, extra: str = "") -> str:
    """The failure text: both sides, the margin rhs - lhs, the precision and the offending matrix."""
    return (f"{claim} violated in {precision}: lhs = {fmt(lhs)}, rhs = {fmt(rhs)}, margin rhs - lhs = "
            f"{fmt(rhs - lhs)}\n{extra}\n{sm!r}")


def confirm_le(claim: str, sides: Sides, sm: SpectralMatrix, ev: Evidence, *, strict: bool = False) -> None:
    """Assert ``lhs <= rhs`` (``<`` if strict) for ``sm``: float64 first, 80 digits when float64 disagrees."""
    ok = (lambda a, b: a < b) if strict else (lambda a, b: a <= b)
    try:
        with np.errstate(all="ignore"):
            lhs, rhs = sides(ext64(sm.matrix))
            lhs, rhs = float(lhs), float(rhs)
        if np.isfinite(lhs) and np.isfinite(rhs) and ok(lhs, rhs):
            ev.case(sm.family, "float64")
            return
    except (Undefined, ZeroDivisionError, ValueError, OverflowError):
        pass
    with workdps():
        lhs, rhs = sides(mp_extremes(mp_spectral(sm)))
        assert mp_ok(lhs, rhs, strict), both_sides_message(claim, lhs, rhs, sm, MP_LABEL)
    ev.case(sm.family + ",mp-recheck", MP_LABEL)


def mp_ok(lhs, rhs, strict: bool = False) -> bool:
    """``lhs <= rhs`` in 80 digits up to the working precision ``MP_TOL * max(|lhs|, |rhs|)`` (equality cases
    such as the k = 2 lower bound of T4.1.1b are exact and land on either side by ~1e-50); ``strict`` demands
    ``lhs < rhs`` by more than that."""
    tol = MP_TOL * max(abs(lhs), abs(rhs))
    return rhs - lhs > tol if strict else lhs - rhs <= tol


def mp_log(x):
    """log that works for floats and mpf (mpmath's, exact enough for both)."""
    return mp.log(x)


def scale_side(sides: Sides, c: float, side: str) -> Sides:
    """A built-in mutant of an inequality ``lhs <= rhs``: the bound (``side``, "lhs" or "rhs") times ``c``."""
    if side == "lhs":
        return lambda e: (lambda l, r: (c * l, r))(*sides(e))
    return lambda e: (lambda l, r: (l, c * r))(*sides(e))


def assert_slack(claim: str, sides: Sides, sm: SpectralMatrix, ev: Evidence, lo: float, hi: float) -> None:
    """On a witness: the inequality holds (:func:`confirm_le`) and its slack ``rhs / lhs`` (80 digits) lies in
    ``[lo, hi]`` (lo to 1e-20, the 80-digit SVD's resolution): where the bound is tight (lo = 1) or how
    conservative it is, asserted as a range."""
    confirm_le(claim, sides, sm, ev)
    with workdps():
        lhs, rhs = sides(mp_extremes(mp_spectral(sm)))
        ratio = rhs / lhs
        inside = lo * (1 - mp.mpf(10) ** -20) <= ratio <= hi
    assert inside, f"{claim}: slack rhs/lhs = {fmt(ratio)} outside [{lo}, {hi}]\n{sm!r}"
    ev.sample("witness slack rhs/lhs", float(ratio))


def diagonal(s) -> SpectralMatrix:
    """The witness ``diag(s)`` (s descending)."""
    n = len(s)
    return SpectralMatrix(np.array(s, dtype=float), np.eye(n), np.eye(n), "witness")
