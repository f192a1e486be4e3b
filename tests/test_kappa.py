"""kappalab.kappa against independent references: exact spectra (rational orthogonal matrices, Fractions), the
committed Table 2 records, and the rank rule's boundaries.

Matrices are built from their spectrum, ``Q diag(lambda) Q^T`` with ``Q`` a product of Householder reflectors of
small integer vectors, which is exactly orthogonal over the rationals: the exact spectrum is known, and the float
matrix is the exact one with each entry rounded (relative error <= eps/2). By Weyl's inequality its eigenvalues
(singular values) then differ from the exact ones by at most ``||E||_2 <= n * eps/2 * max|a_ij|``, and a
backward-stable solver adds about ``n * eps * ||A||`` more; tolerances below are written from these bounds.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from kappalab import kappa as K
from kappalab.spectral import psd_extremes

EPS = float(np.finfo(np.float64).eps)
ROOT = Path(__file__).resolve().parents[1]


# ---- exact spectrum-built matrices ----------------------------------------------------------------------------

def _householder(v: list[int]) -> list[list[Fraction]]:
    vv = sum(x * x for x in v)
    n = len(v)
    return [[Fraction(int(i == j)) - Fraction(2 * v[i] * v[j], vv) for j in range(n)] for i in range(n)]


def _mul(A: list[list[Fraction]], B: list[list[Fraction]]) -> list[list[Fraction]]:
    return [[sum(a * b for a, b in zip(row, col)) for col in zip(*B)] for row in A]


def _orthogonal(n: int, seed: int) -> list[list[Fraction]]:
    """An exactly orthogonal rational n x n matrix: a product of two Householder reflectors."""
    rng = np.random.default_rng(seed)
    v1, v2 = (rng.integers(1, 7, size=n).tolist() for _ in range(2))
    v2[0] = -v2[0]
    return _mul(_householder(v1), _householder(v2))


def built(values: list[Fraction], shape: tuple[int, int], seed: int = 0) -> np.ndarray:
    """The float matrix ``fl(Q_m[:, :p] diag(values) Q_n[:, :p]^T)`` (``values`` exact, ``p = len(values)``);
    ``shape`` square and ``Q_m = Q_n`` gives a symmetric PSD matrix with eigenvalues ``values`` (and zeros)."""
    m, n = shape
    Qm = _orthogonal(m, seed)
    Qn = Qm if m == n else _orthogonal(n, seed + 1)
    p = len(values)
    return np.array([[float(sum(Qm[i][t] * values[t] * Qn[j][t] for t in range(p))) for j in range(n)]
                     for i in range(m)])


def _exact_kappa(values: list[Fraction]) -> Fraction:
    nonzero = [v for v in values if v > 0]
    return max(nonzero) / min(nonzero)


SPECTRA = {
    "well conditioned": [Fraction(8), Fraction(4), Fraction(2), Fraction(1), Fraction(1, 2)],
    "graded 1e-6": [Fraction(1), Fraction(1, 10), Fraction(1, 10**3), Fraction(1, 10**6)],
    "rank 3 of 6": [Fraction(5), Fraction(3), Fraction(1), Fraction(0), Fraction(0), Fraction(0)],
}


@pytest.mark.parametrize("name", list(SPECTRA))
@pytest.mark.parametrize("psd", [True, False], ids=["psd", "general"])
def test_condition_number_matches_the_exact_spectrum(xp, name: str, psd: bool) -> None:
    values = SPECTRA[name]
    n = len(values)
    shape = (n, n) if psd else (n + 2, n)
    A = built(values, shape, seed=3)
    got = K.condition_number(xp.asarray(A), psd=psd)
    xp.assert_kind(got, ndim=0)
    exact = _exact_kappa(values)
    # eigen/singular values move by <= (n eps/2 + c n eps) max|a|: relative error on s_1/s_k <= ~4 n eps kappa
    bound = 4 * max(shape) * EPS * float(exact)
    assert abs(float(xp.numpy(got)) / float(exact) - 1) <= bound, (name, float(xp.numpy(got)), float(exact), A)


def test_rank_rule_counts_the_exact_rank(xp) -> None:
    A = built(SPECTRA["rank 3 of 6"], (6, 6), seed=3)
    values, _ = K.spectrum(xp.asarray(A), psd=True)
    rule = K.rank_rule(values, values[0], K.default_rtol(A))
    assert int(rule.rank) == 3 and xp.numpy(rule.kept).tolist() == [True] * 3 + [False] * 3


def test_feature_route_resolves_kappa_beyond_1e15(xp) -> None:
    """kappa(F^T F) = 1e18 exactly (singular values of F from 1 down to 1e-9). The squared singular values of F
    recover it; the eigenvalues of F^T F cannot (their absolute error ~eps swamps lambda_min = 1e-18)."""
    s = [Fraction(1), Fraction(1, 10**3), Fraction(1, 10**6), Fraction(1, 10**9)]
    F = built(s, (12, 4), seed=5)
    got = float(xp.numpy(K.kappa_of_features(xp.asarray(F))))
    exact = 1e18
    # each singular value errs by <= ~2 max(N, D) eps s_1 (rounding of F, then the SVD): relative on s_min^-2
    bound = 2 * 2 * 12 * EPS * 1e9
    # the rank rule of the D x D matrix H applied to the same spectrum cuts at 4 eps lambda_1 > 1e-18 lambda_1:
    assert float(xp.numpy(K.kappa_of_spectrum(K.feature_spectrum(xp.asarray(F))))) == pytest.approx(1e12, rel=1e-6)
    assert abs(got / exact - 1) <= bound, got
    eig = np.linalg.eigvalsh(F.T @ F)
    from_gram = eig[-1] / eig[eig > K.default_rtol(eig) * eig[-1]].min()
    assert abs(from_gram / exact - 1) > 0.5, from_gram  # the route the feature spectrum replaces is off by far more


def test_feature_spectrum_is_the_squared_singular_values(xp) -> None:
    s = [Fraction(3), Fraction(2), Fraction(1, 2)]
    F = built(s, (5, 3), seed=1)
    lam = xp.numpy(K.feature_spectrum(xp.asarray(F)))
    np.testing.assert_allclose(lam, [9.0, 4.0, 0.25], rtol=4 * 5 * EPS * 9 / 0.25)
    assert np.all(np.diff(lam) < 0)


# ---- the rank rule's boundaries -------------------------------------------------------------------------------

def test_value_at_the_threshold_is_zero_and_just_above_is_not(xp) -> None:
    """``s_i > rtol * s_1`` (strict): with two values the default threshold is 2 eps * s_1."""
    at = 2 * EPS
    above = np.nextafter(at, 1.0)
    assert float(xp.numpy(K.kappa_of_spectrum(xp.asarray([1.0, at])))) == 1.0  # rank 1
    assert float(xp.numpy(K.kappa_of_spectrum(xp.asarray([1.0, above])))) == 1.0 / above  # rank 2


def test_dim_sets_the_default_tolerance(xp) -> None:
    values = xp.asarray([1.0, 3e-15])
    assert float(xp.numpy(K.kappa_of_spectrum(values))) == pytest.approx(1 / 3e-15, rel=1e-15)  # 2 eps < 3e-15
    assert float(xp.numpy(K.kappa_of_spectrum(values, dim=100))) == 1.0  # 100 eps > 3e-15


@pytest.mark.parametrize("rtol", [-0.1, 1.0, float("nan")])
def test_rtol_outside_0_1_is_rejected(rtol: float) -> None:
    with pytest.raises(ValueError, match=r"rtol must be None or a relative tolerance in \[0, 1\)"):
        K.kappa_of_spectrum(np.array([2.0, 1.0]), rtol)


def test_rtol_zero_counts_every_positive_value(xp) -> None:
    assert float(xp.numpy(K.kappa_of_spectrum(xp.asarray([2.0, 1e-300, 0.0]), 0.0))) == 2.0 / 1e-300


def test_spectrum_order_does_not_matter_and_rank_overrides(xp) -> None:
    values = xp.asarray([0.5, 4.0, 0.0, 1.0])
    assert float(xp.numpy(K.kappa_of_spectrum(values))) == 8.0
    assert float(xp.numpy(K.kappa_of_spectrum(values, rank=2))) == 4.0


@pytest.mark.parametrize("rank", [0, 4, 5, 2.0])
def test_bad_rank_is_rejected(rank: object) -> None:
    with pytest.raises(ValueError, match="rank must be an int in 1..4 with a positive rank-th value"):
        K.kappa_of_spectrum(np.array([4.0, 1.0, 0.5, 0.0]), rank=rank)


def test_zero_spectrum_has_rank_zero(xp) -> None:
    with pytest.raises(ValueError, match="spectrum has rank zero"):
        K.kappa_of_spectrum(xp.asarray([0.0, 0.0]))


def test_psd_check_reports_the_callers_eigenvalue(xp) -> None:
    """The spectrum is computed on 2^-scale A; the message shows A's own eigenvalue."""
    A = 1e200 * np.diag([3.0, 2.0, -1.0])
    with pytest.raises(ValueError, match=r"S must be positive semidefinite: its smallest eigenvalue is -1\.0+e\+200"):
        K.condition_number(xp.asarray(A), psd=True)


# ---- one set of eigenvalues with the regularizers; scale --------------------------------------------------------

@pytest.mark.parametrize("n", [20, 200], ids=["eigh route", "tridiag route"])
def test_psd_kappa_uses_the_extremes_eigenvalues_bit_for_bit(n: int) -> None:
    """NumPy: kappa(A) and the s_1 / s_k of psd_extremes(A, solver="auto") come from the same eigenvalues."""
    rng = np.random.default_rng(n)
    X = rng.standard_normal((n + 5, n)) * np.logspace(0, -4, n)
    A = X.T @ X
    A = 0.5 * (A + A.T)
    e = psd_extremes(A)
    assert K.condition_number(A, psd=True) == e.s_max / e.s_min


@pytest.mark.parametrize("psd", [True, False], ids=["psd", "general"])
@pytest.mark.parametrize("j", [-1000, -301, 1, 300, 1000])
def test_kappa_is_invariant_under_powers_of_two_bit_for_bit(xp, psd: bool, j: int) -> None:
    A = built(SPECTRA["graded 1e-6"], (4, 4) if psd else (6, 4), seed=2)
    base = K.condition_number(xp.asarray(A), psd=psd)
    scaled = K.condition_number(xp.asarray(np.ldexp(A, j)), psd=psd)
    assert float(xp.numpy(scaled)) == float(xp.numpy(base))


@pytest.mark.parametrize("c", [1e-300, 1e-150, 1e150, 1e300])
def test_kappa_at_extreme_scales_matches_the_exact_value(xp, c: float) -> None:
    """c A rounds every entry once more (relative eps/2), which the bound of the exact test already covers."""
    values = SPECTRA["graded 1e-6"]
    A = c * built(values, (4, 4), seed=2)
    got = float(xp.numpy(K.condition_number(xp.asarray(A), psd=True)))
    assert abs(got / 1e6 - 1) <= 4 * 4 * EPS * 1e6 * 2, got


# ---- the shifted kappa -------------------------------------------------------------------------------------------

def test_shifted_kappa_matches_the_exact_shifted_spectrum(xp) -> None:
    values = [Fraction(4), Fraction(1), Fraction(1, 4)]
    A = built(values, (3, 3), seed=4)
    shift = Fraction(1, 2**20)
    exact = (values[0] + shift) / (values[2] + shift)
    got = float(xp.numpy(K.kappa_shifted(xp.asarray(A), float(shift))))
    assert abs(got / float(exact) - 1) <= 4 * 3 * EPS * float(exact)


def test_shifted_kappa_drops_an_eigenvalue_equal_to_the_shift(xp) -> None:
    """diag(4, 1, 0) + shift I is diagonal: its eigenvalues are exact, the null one equals the shift and the
    official rule (``> shift``) drops it."""
    shift = 2.0**-20
    got = float(xp.numpy(K.kappa_shifted(xp.asarray(np.diag([4.0, 1.0, 0.0])), shift)))
    assert got == (4.0 + shift) / (1.0 + shift)


def test_shifted_kappa_of_the_zero_matrix_is_an_error(xp) -> None:
    with pytest.raises(ValueError, match="S has no eigenvalue above the shift 1e-06"):
        K.kappa_shifted(xp.asarray(np.zeros((3, 3))))


@pytest.mark.parametrize("shift", [0.0, -1e-6])
def test_shift_must_be_positive(shift: float) -> None:
    with pytest.raises(ValueError, match="shift must be positive"):
        K.kappa_shifted(np.eye(2), shift)


# ---- the registry of kappa definitions ---------------------------------------------------------------------------

def test_each_registered_definition_reads_the_exact_kappa_of_its_rule(xp) -> None:
    """A full-rank PSD 3 x 3 matrix with exact eigenvalues 4, 1/4, 1/16: "pinv" is 4 / (1/16), "shifted" is
    (4 + shift) / (1/16 + shift). (With a null eigenvalue the shifted rule keeps or drops it by the sign of its
    rounding: the module docstring's coin flip, which this test must not depend on.)"""
    values = [Fraction(4), Fraction(1, 4), Fraction(1, 16)]
    A = xp.asarray(built(values, (3, 3), seed=2))
    shift = Fraction(1, 2**10)
    exact = {"pinv": _exact_kappa(values), "shifted": (values[0] + shift) / (values[2] + shift)}
    for name, d in K.KAPPA_DEFINITIONS.items():
        got = float(xp.numpy(d.of_matrix(A, shift=float(shift))))
        # Weyl + solver: each eigenvalue within ~2 * 3 n eps * 4 of the exact one; relative to the smallest, 1/16
        assert abs(got / float(exact[name]) - 1) <= 2 * (2 * 3 * 3 * EPS * 4) / float(values[2]), (name, got)


def test_a_definitions_kappa_is_its_largest_over_its_smallest_kept_value(xp) -> None:
    """``of_values`` and ``rule`` of each definition describe one rule: kappa is the largest value over the smallest
    one the rule keeps (eigenvalues given, so nothing but the rule is tested)."""
    lam = xp.asarray(np.array([1e-20, 3e-7, 2e-3, 0.5, 8.0]))  # ascending
    for d in K.KAPPA_DEFINITIONS.values():
        for rtol, shift in ((None, 1e-6), (1e-4, 1e-3)):
            kept = np.asarray(xp.numpy(d.rule(lam, rtol=rtol, shift=shift).kept), dtype=bool)
            values = np.asarray(xp.numpy(lam))
            assert float(xp.numpy(d.of_values(lam, rtol=rtol, shift=shift))) == 8.0 / values[kept].min()
    pinv, shifted = K.KAPPA_DEFINITIONS["pinv"], K.KAPPA_DEFINITIONS["shifted"]
    # the rule each one reads: rtol relative to the largest value (default n eps), the shift absolute
    assert np.asarray(xp.numpy(pinv.rule(lam, rtol=1e-4, shift=1.0).kept)).tolist() == [False, False, True, True, True]
    assert np.asarray(xp.numpy(shifted.rule(lam, rtol=0.5, shift=1e-6).kept)).tolist() == [False, False, True, True,
                                                                                            True]
    assert np.asarray(xp.numpy(shifted.rule(lam, rtol=None, shift=1e-7).kept)).tolist() == [False, True, True, True,
                                                                                             True]


def test_kappa_definition_names_the_registry_and_refuses_other_names() -> None:
    assert K.KAPPA_NAMES == ("pinv", "shifted")  # the names records and configs store
    assert {n: K.kappa_definition(n).parameter for n in K.KAPPA_NAMES} == {"pinv": "rtol", "shifted": "shift"}
    with pytest.raises(ValueError, match=r"^kappa definition must be one of \('pinv', 'shifted'\), got 'svd'$"):
        K.kappa_definition("svd")


# ---- RIR ---------------------------------------------------------------------------------------------------------

def test_rir_terms_are_the_ratios_of_eq_15() -> None:
    t = K.rir_terms(Fraction(30), Fraction(3), Fraction(8), Fraction(2))
    assert (t.term_i, t.term_ii, t.rir) == (Fraction(10), Fraction(4), Fraction(5, 2))


def test_committed_table2_records_recompute_identically() -> None:
    """Every 20th committed Table 2 record: its RIR block ("gram": rank decided on K at n eps, used for H) and its
    rtol-sensitivity RIRs, recomputed from the stored spectra with kappalab.kappa, equal the recorded values."""
    folder = ROOT / "docs" / "reproduction" / "table2" / "features"
    records = [json.loads(line) for line in (folder / "runs_official.jsonl").read_text().splitlines()][::20]
    assert len(records) >= 50
    for r in records:
        res = r["result"]
        spectra = dict(np.load(folder / res["spectra_file"]))
        base = K.default_rtol(spectra["K_P"])

        def rir(rtol: float, rank_from_K: bool) -> tuple[K.RIRTerms, dict[str, int]]:
            kap, ranks = {}, {}
            for split in ("P", "H"):
                lam = K.descending(spectra[f"K_{split}"])
                ranks[split] = int(K.rank_rule(lam, lam[0], rtol).rank)
                kap[f"K_{split}"] = K.kappa_of_spectrum(lam, rank=ranks[split])
                kap[f"H_{split}"] = K.kappa_of_spectrum(spectra[f"H_{split}"], rtol,
                                                        rank=ranks[split] if rank_from_K else None)
            return K.rir_terms(kap["H_H"], kap["K_H"], kap["H_P"], kap["K_P"]), ranks

        terms, ranks = rir(base, True)
        gram = res["gram"]
        assert (terms.term_i, terms.term_ii, terms.rir) == (gram["term_i"], gram["term_ii"], gram["rir"]), r["key"]
        assert (ranks["P"], ranks["H"]) == (gram["rank_P"], gram["rank_H"]), r["key"]
        for f in (0.1, 1.0, 10.0):
            sens = res["rtol_sensitivity"]
            assert rir(base * f, True)[0].rir == sens[f"rir_rtol_x{f:g}"], (r["key"], f)
            assert rir(base * f, False)[0].rir == sens[f"rir_own_rank_rtol_x{f:g}"], (r["key"], f)


# ---- meta tensors ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda S: K.condition_number(S),
    lambda S: K.condition_number(S, psd=True, check=False),
    lambda S: K.kappa_of_features(S, check=False),
    lambda S: K.kappa_shifted(S, check=False),
    lambda S: K.eigenvalues(S),
], ids=["condition_number", "condition_number-psd-unchecked", "kappa_of_features", "kappa_shifted", "eigenvalues"])
def test_meta_tensors_get_one_line_naming_the_device(call) -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"is a tensor on the 'meta' device \(a shape without values\)"):
        call(torch.eye(3, dtype=torch.float64, device="meta"))


def test_torch_eigenvalues_are_eigvalsh_values() -> None:
    """Torch takes eigvalsh's values at every size: those the training objectives (Opt kappa, r1/r2) used."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    X = rng.standard_normal((30, 20)) * np.logspace(0, -5, 20)
    A = torch.tensor(X.T @ X)
    assert torch.equal(K.eigenvalues(A), torch.linalg.eigvalsh(A))


def test_rank_check_can_be_left_to_the_caller(xp) -> None:
    """check=False skips the host sync of the rank's value check: rank 3 of (4, 1, 0) then divides by zero."""
    with np.errstate(divide="ignore"):
        assert float(xp.numpy(K.kappa_of_spectrum(xp.asarray([4.0, 1.0, 0.0]), rank=3, check=False))) == np.inf
    with pytest.raises(ValueError, match="rank must be an int"):
        K.kappa_of_spectrum(xp.asarray([4.0, 1.0, 0.0]), rank=3)
