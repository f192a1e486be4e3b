"""T4.1.1b (proof B.2.1): ``2k/((k-1)(kappa^2-1) s_min^2) <= R_ill(S) <= 2k/((kappa^2-1) s_min^2)`` for k >= 2.

Both sides from the paper's formulas (:mod:`proofs_checks.paper`); float64 first, 80 digits on any disagreement.
Verdict: holds wherever R_ill is defined (kappa > 1, k >= 2); at kappa = 1 both bounds and R_ill are undefined.
"""

from __future__ import annotations

from hypothesis import given

from .checks import confirm_le
from .evidence import Evidence
from .paper import r_ill
from .profiles import budget
from .strategies import spectral_matrices

EV = Evidence("T4.1.1b")
MATRICES = spectral_matrices(min_rank=2, rank="any", max_log_kappa=12)  # kappa up to 1e12


def _kappa2m1_smin2(e):
    return (e.s_max / e.s_min) ** 2 * e.s_min**2 - e.s_min**2  # (kappa^2 - 1) s_min^2 = s_max^2 - s_min^2


@budget(40)
@given(sm=MATRICES)
def test_r_ill_at_least_lower_bound(sm):
    confirm_le("T4.1.1b lower", lambda e: (2 * e.rank / ((e.rank - 1) * _kappa2m1_smin2(e)),
                                           r_ill(e)), sm, EV)


@budget(40)
@given(sm=MATRICES)
def test_r_ill_at_most_upper_bound(sm):
    confirm_le("T4.1.1b upper", lambda e: (r_ill(e),
                                           2 * e.rank / _kappa2m1_smin2(e)), sm, EV)
