"""R_well, R_ill and their gradients across float64's range (issue 11, item 7), against mpmath.

For each scale ``c`` the input is ``S = fl(c * S1)`` and the reference is computed by mpmath (50 digits) from the
float entries of that very ``S``, so the only error measured is kappalab's. Where the reference lies inside float64's
normal range the result must match it to ``64 * n * eps`` (normwise: backward-stable SVD/eigh on an O(1)-conditioned
matrix, the regularizers' formulas having no cancellation here); outside it the result is inf (above) or subnormal /
0 (below) with a :class:`~kappalab.errors.FloatRangeWarning`. NaN never appears.
"""

from __future__ import annotations

import warnings

import mpmath as mp
import numpy as np
import pytest

import kappalab as kl
from kappalab.errors import FloatRangeWarning, UndefinedRegularizerError

EPS = float(np.finfo(np.float64).eps)
BIG, TINY = mp.mpf(np.finfo(np.float64).max), mp.mpf(np.finfo(np.float64).tiny)
SCALES = [2.0**-1000, 1e-300, 1e-160, 1e-100, 1.0, 1e100, 1e160, 1e300, 2.0**1000]


def _S1() -> np.ndarray:
    """4 x 3 with singular values 3, 2, 1 (s_max and s_min simple: both gradients exist)."""
    rng = np.random.default_rng(11)
    U, _ = np.linalg.qr(rng.standard_normal((4, 3)))
    V, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    return U @ np.diag([3.0, 2.0, 1.0]) @ V.T


def _reference(S: np.ndarray) -> dict[str, mp.matrix | mp.mpf]:
    """R_well, R_ill and both gradients of the float matrix S, in mpmath at 50 digits."""
    with mp.workdps(50):
        A = mp.matrix(S.tolist())
        U, s, Vt = mp.svd_r(A)
        order = sorted(range(len(s)), key=lambda i: -s[i])
        m, n = S.shape
        p = k = min(m, n)
        fro2 = sum(A[i, j] ** 2 for i in range(m) for j in range(n))
        i1, ik = order[0], order[-1]
        d = fro2 / (2 * k) - s[ik] ** 2 / 2

        def outer(i: int) -> mp.matrix:
            return mp.matrix([[U[r, i] * Vt[i, c] for c in range(n)] for r in range(m)])

        return {"r_well": s[i1] ** 2 / 2 - fro2 / (2 * p), "r_ill": 1 / d,
                "grad_r_well": s[i1] * outer(i1) - A / p, "grad_r_ill": (s[ik] * outer(ik) - A / k) / d**2}


def _entries(x: object) -> list[mp.mpf]:
    return list(x) if isinstance(x, mp.matrix) else [x]


FUNCS = ["r_well", "r_ill", "grad_r_well", "grad_r_ill"]


@pytest.mark.parametrize("c", SCALES, ids=lambda c: f"{c:.0e}")
@pytest.mark.parametrize("func", FUNCS)
def test_regularizers_across_float64s_range(xp, func: str, c: float) -> None:
    S = c * _S1()
    ref = _reference(S)[func]
    top = max(abs(v) for v in _entries(ref))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = xp.numpy(getattr(kl, func)(xp.asarray(S)))
    ranged = [w for w in caught if issubclass(w.category, FloatRangeWarning)]
    got = np.atleast_1d(got).ravel()
    assert not np.isnan(got).any(), (func, c, got)
    if top > BIG:
        assert np.isinf(got).any() and len(ranged) == 1, (func, c, got, caught)
    elif top < TINY:
        assert np.all(np.abs(got) < float(TINY)) and len(ranged) == 1, (func, c, got, caught)
    else:
        assert not ranged, [str(w.message) for w in ranged]
        err = max(abs(mp.mpf(float(g)) - r) for g, r in zip(got, _entries(ref)))
        assert err <= 64 * 4 * EPS * top, (func, c, float(err / top))


@pytest.mark.parametrize("c", [1e-300, 1e300], ids=["1e-300", "1e+300"])
def test_check_false_returns_the_same_without_the_range_warning(c: float) -> None:
    S = c * _S1()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        unchecked = [kl.r_well(S, check=False), kl.r_ill(S, check=False)]
    with pytest.warns(FloatRangeWarning):
        checked = [kl.r_well(S), kl.r_ill(S)]
    assert unchecked == checked


def test_issue11_r_ill_at_1e_minus_300_is_defined_and_overflows() -> None:
    """Issue 11: R_ill(1e-300 diag(2, 1)) used to be reported undefined ("all singular values are equal", with
    s_max = 2e-300 and s_min = 1e-300 printed beside it): the denominator had underflowed to 0. It is defined,
    1 / (1e-600 * (5/4 - 1/2)), far above float64's range: inf with the range warning."""
    with pytest.warns(FloatRangeWarning, match=r"R_ill\(S\) has magnitude ~1e\+600, above the normal range"):
        assert kl.r_ill(1e-300 * np.diag([2.0, 1.0])) == np.inf


def test_undefined_r_ill_message_is_scale_free() -> None:
    """At any scale the message says what is true: the relative denominator is 0 and s_min / s_max = 1."""
    for c in (1e-300, 1.0, 1e300):
        with pytest.raises(UndefinedRegularizerError) as info:
            kl.r_ill(c * np.eye(3))
        msg = str(info.value)
        assert "= 0.000e+00 s_max^2 is zero within rounding" in msg and "(s_min / s_max = 1)" in msg, msg


def test_float32_range_is_float32s() -> None:
    """R_well(1e30 S1) ~ 1e60 is beyond float32's 3.4e38: inf with the warning (float64 would hold it)."""
    S = (1e30 * _S1()).astype(np.float32)
    with pytest.warns(FloatRangeWarning, match="above the normal range of float32"):
        out = kl.r_well(S)
    assert out.dtype == np.float32 and np.isinf(out)
    assert np.isfinite(kl.r_well(S.astype(np.float64)))


@pytest.mark.parametrize("c", [1e-100, 1e100], ids=["1e-100", "1e+100"])
@pytest.mark.parametrize("func", ["r_well", "r_ill"])
def test_autograd_backpropagates_the_rescaled_gradient(func: str, c: float) -> None:
    torch = pytest.importorskip("torch")
    S = torch.tensor(c * _S1(), requires_grad=True)
    getattr(kl, func)(S).backward()
    ref = _reference(c * _S1())[f"grad_{func}"]
    top = max(abs(v) for v in ref)
    err = max(abs(mp.mpf(float(g)) - r) for g, r in zip(S.grad.numpy().ravel(), ref))
    assert err <= 64 * 4 * EPS * top


@pytest.mark.parametrize("psd", [False, True], ids=["general", "psd"])
@pytest.mark.parametrize("check", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize("func", FUNCS + ["condition_number"])
def test_meta_tensors_get_one_line_naming_the_device(func: str, psd: bool, check: bool) -> None:
    torch = pytest.importorskip("torch")
    S = torch.eye(3, dtype=torch.float64, device="meta")
    with pytest.raises(ValueError, match=r"^S is a tensor on the 'meta' device \(a shape without values\)"):
        getattr(kl, func)(S, psd=psd, check=check)


def test_meta_tensor_requiring_grad_gets_the_same_line() -> None:
    torch = pytest.importorskip("torch")
    S = torch.eye(3, dtype=torch.float64, device="meta", requires_grad=True)
    with pytest.raises(ValueError, match="'meta' device"):
        kl.r_ill(S)


# ---- the exact power-of-two scaling behind all of the above -----------------------------------------------------

def test_unit_scale_is_even_and_lands_in_a_quarter_to_one() -> None:
    from kappalab._backend import unit_scale

    for top, e in ((3.0, 2), (1.0, 2), (0.5, 0), (0.25, 0), (0.2, -2), (2.0**1000, 1002), (5e-324, -1072)):
        assert unit_scale(np.array([[top, -top / 3]])) == e, top
        assert 0.25 <= np.ldexp(top, -e) < 1.0
    assert unit_scale(np.zeros((2, 2))) == 0


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_times_pow2_is_exact_beyond_one_factors_range(xp, dtype: str) -> None:
    """2^k with |k| beyond the dtype's exponent range is applied in representable steps (float32: steps of 2^64)."""
    from kappalab._backend import times_pow2

    big = 2000 if dtype == "float64" else 200
    x = xp.asarray(np.ldexp(1.5, -big // 2), dtype=dtype)
    assert float(xp.numpy(times_pow2(x, big))) == np.ldexp(1.5, big // 2)
    assert float(xp.numpy(times_pow2(xp.asarray(1.0, dtype=dtype), 2 * big))) == np.inf
    assert float(xp.numpy(times_pow2(xp.asarray(1.0, dtype=dtype), -2 * big))) == 0.0


@pytest.mark.parametrize("x, k, where", [
    (1.5, 1023, 0), (1.0, 1024, 1), (1.0, -1022, 0), (1.0, -1023, -1), (0.0, 5000, 0), (np.inf, -5000, 0),
], ids=["largest binade", "2^1024 overflows", "smallest normal", "subnormal", "zero", "inf"])
def test_pow2_range_decides_from_exponents(x: float, k: int, where: int) -> None:
    from kappalab._backend import pow2_range

    assert pow2_range(np.array([x, -x / 2]), k) == where


def test_psd_message_at_scale_shows_the_callers_eigenvalue(xp) -> None:
    """R_well computes on 2^-e S; the PSD error still names S's own eigenvalue."""
    with pytest.raises(ValueError, match=r"its smallest eigenvalue is -1\.0+e\+200"):
        kl.r_well(xp.asarray(1e200 * np.diag([3.0, 2.0, -1.0])), psd=True)
