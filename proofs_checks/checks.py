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
