"""T4.1.1b (proof B.2.1): ``2k/((k-1)(kappa^2-1) s_min^2) <= R_ill(S) <= 2k/((kappa^2-1) s_min^2)`` for k >= 2.

Both sides from the paper's formulas (:mod:`proofs_checks.paper`); float64 first, 80 digits on any disagreement.
Verdict: holds wherever R_ill is defined (kappa > 1, k >= 2); at kappa = 1 both bounds and R_ill are undefined.
"""

from __future__ import annotations

from hypothesis import given

from .checks import assert_slack, confirm_le, diagonal, scale_side
from .evidence import Evidence
from .paper import r_ill
from .profiles import budget
from .strategies import spectral_matrices

EV = Evidence("T4.1.1b")
MATRICES = spectral_matrices(min_rank=2, rank="any", max_log_kappa=12)  # kappa up to 1e12


def _kappa2m1_smin2(e):
    return (e.s_max / e.s_min) ** 2 * e.s_min**2 - e.s_min**2  # (kappa^2 - 1) s_min^2 = s_max^2 - s_min^2


def lower(e):
    return 2 * e.rank / ((e.rank - 1) * _kappa2m1_smin2(e)), r_ill(e)


def upper(e):
    return r_ill(e), 2 * e.rank / _kappa2m1_smin2(e)


@budget(40)
@given(sm=MATRICES)
def test_r_ill_at_least_lower_bound(sm):
    confirm_le("T4.1.1b lower", lower, sm, EV)


@budget(40)
@given(sm=MATRICES)
def test_r_ill_at_most_upper_bound(sm):
    confirm_le("T4.1.1b upper", upper, sm, EV)


def bound_location(c: float = 1.0, bounds: tuple[str, ...] = ("lower", "upper")) -> None:
    """Both bounds are attained: at k = 2 all three sides equal 4/(s_1^2 - s_2^2); the upper one also whenever
    s_2 = ... = s_k (then ||S||_F^2 - k s_k^2 = s_1^2 - s_k^2), e.g. diag(2, 1, 1)."""
    if "lower" in bounds:
        for s in ([2.0, 1.0], [3.0, 0.5, 0.0]):
            assert_slack("T4.1.1b lower", scale_side(lower, c, "lhs"), diagonal(s), EV, 1.0, 1 + 1e-12)
    if "upper" in bounds:
        for s in ([2.0, 1.0], [2.0, 1.0, 1.0], [5.0, 0.1, 0.1, 0.0]):
            assert_slack("T4.1.1b upper", scale_side(upper, c, "rhs"), diagonal(s), EV, 1.0, 1 + 1e-12)


def test_bounds_are_attained():
    bound_location()
