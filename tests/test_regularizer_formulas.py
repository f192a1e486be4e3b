"""R_well and R_ill: known values and gradients on a diagonal S, the degeneracy policy, rtol, out-of-range
inputs, the unchecked pole and the torch hot loop.

Each test checks a documented behaviour against an independent reference: a closed form on a diagonal (or
exactly representable) matrix, worked out by hand in the comment, or the documented error message.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import kappalab as kl
from kappalab.errors import DegenerateSpectrumError, UndefinedRegularizerError
from core_inputs import NAN_2x2


# ---- kappalab.regularizers ----------------------------------------------------------------------------------------
# S = diag(2, 1, 1/2): R_well = s_1^2/2 - ||S||_F^2/(2p) = 2 - 5.25/6; grad R_well = s_1 e_1 e_1^T - S/p
# = diag(4/3, -1/3, -1/6). R_ill: k = 3, s_k = 1/2, d = 5.25/6 - 1/8 = 3/4, R_ill = 4/3;
# grad R_ill = (s_k e_3 e_3^T - S/3) / d^2 = diag(-2/3, -1/3, 1/3) / (9/16).
REG_S = np.diag([2.0, 1.0, 0.5])
REG_VALUES = {"r_well": 2 - 5.25 / 6, "r_ill": 4 / 3}
REG_GRADS = {"r_well": np.diag([4 / 3, -1 / 3, -1 / 6]), "r_ill": np.diag([-2 / 3, -1 / 3, 1 / 3]) * 16 / 9}


@pytest.mark.parametrize("psd", [False, True], ids=["svd", "psd"])
@pytest.mark.parametrize("which", ["r_well", "r_ill"])
def test_regularizers_known_values_and_arguments(which, psd) -> None:
    value, grad = getattr(kl, which), getattr(kl, f"grad_{which}")
    assert float(value(REG_S, psd=psd)) == pytest.approx(REG_VALUES[which], rel=1e-14)
    np.testing.assert_allclose(grad(REG_S, psd=psd), REG_GRADS[which], rtol=1e-14, atol=1e-15)
    for f in (value, grad):
        with pytest.raises(ValueError, match=r"^rtol must be None or a relative tolerance in \[0, 1\)"):
            f(REG_S, psd=psd, rtol=1.5)
        with pytest.raises(ValueError, match=r"^S contains non-finite entries \(1 NaN, 0 Inf\)"):
            f(np.array(NAN_2x2), psd=psd)
        with pytest.raises(ValueError, match=r"^S must be a 2-D matrix"):
            f(np.ones(3), psd=psd)
        if psd:
            with pytest.raises(ValueError, match=r"^solver must be 'auto' or one of"):
                f(REG_S, psd=True, solver="nope")
            with pytest.raises(ValueError, match=r"^S must be symmetric"):
                f(np.array([[2.0, 1.0], [0.0, 1.0]]), psd=True)
            with pytest.raises(ValueError, match=r"^S must be positive semidefinite"):
                f(np.diag([2.0, 1.0, -1.0]), psd=True)
            with pytest.raises(ValueError, match=r"^S must be square"):
                f(np.ones((2, 3)), psd=True)
        else:  # the SVD route takes any matrix: diag(2, 1, -1/2) has the singular values of REG_S
            assert float(f(np.diag([2.0, 1.0, 0.5]) @ np.diag([1.0, 1.0, -1.0])).ravel()[0]) == pytest.approx(
                float(f(REG_S).ravel()[0]), rel=1e-14)
    with pytest.raises(ValueError, match=r"^on_degenerate must be 'raise', 'warn' or 'ignore', got 'bogus'"):
        value(REG_S, psd=psd, on_degenerate="bogus")
    for policy in ("raise", "warn", "ignore"):
        assert float(value(REG_S, psd=psd, on_degenerate=policy)) == pytest.approx(REG_VALUES[which], rel=1e-14)
    # check=False: no rank-zero test (a host sync): R_well(0) = 0 comes back
    if which == "r_well":
        with pytest.raises(ValueError, match=r"^S has rank zero"):
            value(np.zeros((2, 2)), psd=psd)
        assert float(value(np.zeros((2, 2)), psd=psd, check=False)) == 0.0


@pytest.mark.parametrize("psd", [False, True], ids=["svd", "psd"])
def test_r_ill_passes_rtol(psd) -> None:
    # S = diag(2, 1, 0.05), rtol = 0.1 (threshold 0.2): k = 2, s_k = 1, ||S||_F^2 = 5.0025, d = 5.0025/4 - 1/2
    S = np.diag([2.0, 1.0, 0.05])
    d = 5.0025 / 4 - 0.5
    assert float(kl.r_ill(S, psd=psd, rtol=0.1)) == pytest.approx(1 / d, rel=1e-14)
    np.testing.assert_allclose(kl.grad_r_ill(S, psd=psd, rtol=0.1), np.diag([-1.0, 0.5, -0.025]) / d**2,
                               rtol=1e-14, atol=1e-16)


@pytest.mark.parametrize("psd", [False, True], ids=["svd", "psd"])
@pytest.mark.parametrize("which", ["r_well", "r_ill"])
def test_regularizer_gradients_degeneracy_policy_and_gap(which, psd) -> None:
    grad = getattr(kl, f"grad_{which}")
    # the needed end repeated (s_1 for R_well, s_k for R_ill): raise by default, a subgradient with "ignore"
    bad = np.diag([1.0, 1.0, 0.5]) if which == "r_well" else np.diag([2.0, 1.0, 1.0])
    label = r"s_max = s_1" if which == "r_well" else r"s_min = s_k \(smallest nonzero\)"
    with pytest.raises(DegenerateSpectrumError, match=rf"^{label} of S is not unique"):
        grad(bad, psd=psd)
    assert np.isfinite(grad(bad, psd=psd, on_degenerate="ignore")).all()
    with pytest.warns(UserWarning):
        grad(bad, psd=psd, on_degenerate="warn")
    # a relative gap of 1e-6 is degenerate for gap_rtol = 1e-3 only
    near = np.diag([1 + 1e-6, 1.0, 0.5]) if which == "r_well" else np.diag([2.0, 1 + 1e-6, 1.0])
    assert np.isfinite(grad(near, psd=psd)).all()
    with pytest.raises(DegenerateSpectrumError, match=r"\(gap_rtol = 1\.0e-03\)"):
        grad(near, psd=psd, gap_rtol=1e-3)


@pytest.mark.parametrize("which", ["r_well", "r_ill"])
def test_regularizers_backpropagate_the_closed_form(which) -> None:
    S = torch.tensor(REG_S, requires_grad=True)
    getattr(kl, which)(S).backward()
    np.testing.assert_allclose(S.grad.numpy(), REG_GRADS[which], rtol=1e-14, atol=1e-15)
    with pytest.raises(DegenerateSpectrumError):  # the policy applies before autograd (s_1 or s_k repeated)
        bad = np.diag([1.0, 1.0, 0.5]) if which == "r_well" else np.diag([2.0, 1.0, 1.0])
        getattr(kl, which)(torch.tensor(bad, requires_grad=True))
    # gap_rtol reaches that policy: a relative gap of 1e-6 is degenerate for gap_rtol = 1e-3
    near = np.diag([1 + 1e-6, 1.0, 0.5]) if which == "r_well" else np.diag([2.0, 1 + 1e-6, 1.0])
    getattr(kl, which)(torch.tensor(near, requires_grad=True))
    with pytest.raises(DegenerateSpectrumError, match=r"\(gap_rtol = 1\.0e-03\)"):
        getattr(kl, which)(torch.tensor(near, requires_grad=True), gap_rtol=1e-3)


def test_regularizers_out_of_range_warn_and_return_ieee_values() -> None:
    from kappalab.errors import FloatRangeWarning

    # S = diag(2^600, 1): R_well = 2^1200 / 2 - (2^1200 + 1) / 4 ~ 2^1198, above float64's range: inf, with a warning
    with pytest.warns(FloatRangeWarning, match=r"^R_well\(S\) has magnitude ~1e\+361, above the normal range of "
                                               r"float64: returned as inf$"):
        assert float(kl.r_well(np.diag([2.0**600, 1.0]))) == np.inf
    with warnings.catch_warnings():  # check=False: no range test, no warning
        warnings.simplefilter("error")
        assert float(kl.r_well(np.diag([2.0**600, 1.0]), check=False)) == np.inf
    # S = diag(2^-600, 2^-601): R_ill = 1 / (||S||_F^2/4 - s_2^2/2) = (16/3) 2^1200: inf too
    with pytest.warns(FloatRangeWarning, match=r"^R_ill\(S\) has magnitude .* above the normal range"):
        assert float(kl.r_ill(np.diag([2.0**-600, 2.0**-601]))) == np.inf
    # S = diag(2^-600, 2^-601): R_well = 2^-1200 (1/2 - 5/16) ~ 1e-362, below float64's normal range
    with pytest.warns(FloatRangeWarning, match=r"^R_well\(S\) has magnitude ~1e-362, below the normal range of "
                                               r"float64: returned as a subnormal number or 0$"):
        assert float(kl.r_well(np.diag([2.0**-600, 2.0**-601]))) == 0.0
    # S = diag(2^-1030, 2^-1031) (subnormal entries): the value warns once, for itself (no gradient is formed);
    # the gradient, ~ s_1 = 2^-1030, warns under its own name
    tiny = np.diag([2.0**-1030, 2.0**-1031])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert float(kl.r_well(tiny)) == 0.0
    assert [str(w.message) for w in caught] == ["R_well(S) has magnitude ~1e-621, below the normal range of float64: "
                                                "returned as a subnormal number or 0"]
    with pytest.warns(FloatRangeWarning, match=r"^grad R_well\(S\) has magnitude ~1e-310, below the normal range"):
        kl.grad_r_well(tiny)
    # grad R_ill scales as c^-3: S = diag(2^-400, 2^-401) gives entries ~ 2^1200: inf, with the warning naming it
    with pytest.warns(FloatRangeWarning, match=r"^grad R_ill\(S\) has magnitude .* above the normal range"):
        assert np.isinf(kl.grad_r_ill(np.diag([2.0**-400, 2.0**-401]))).any()


def test_extremes_route_checks_and_names() -> None:
    from kappalab.regularizers import extremes

    # default: the SVD route, any matrix (diag(3, -1) has singular values 3, 1); psd=True: eigenvalues, PSD checked
    e = extremes(np.diag([3.0, -1.0]))
    assert (float(e.s_max), float(e.s_min), int(e.rank)) == (3.0, 1.0, 2)
    with pytest.raises(ValueError, match=r"^K must be positive semidefinite"):
        extremes(np.diag([3.0, -1.0]), psd=True, name="K")
    for psd in (False, True):
        with pytest.raises(ValueError, match=r"^K must be a 2-D matrix"):
            extremes(np.ones(3), psd=psd, name="K")
    with pytest.raises(ValueError, match=r"^K contains non-finite entries"):
        extremes(np.array(NAN_2x2), psd=True, name="K")
    # check=False: no finiteness scan; NumPy's SVD meets the NaN
    with pytest.raises(np.linalg.LinAlgError):
        extremes(np.array(NAN_2x2), check=False)


def test_formulas_from_extremes_check_by_default_and_name_S() -> None:
    from kappalab import regularizers as R

    e = R.extremes(np.eye(2))  # k = 2 equal singular values: R_ill's denominator is 0
    for f in (R.ill_denominator, R.r_ill_from_extremes, lambda e: R.grad_r_ill_from_extremes(e, np.eye(2))):
        with pytest.raises(UndefinedRegularizerError, match=r"^R_ill\(S\) is undefined: its denominator "
                                                            r"\|\|S\|\|_F\^2/\(2k\) - s_min\^2/2 = 0\.0+e"):
            f(e)
    assert float(R.ill_denominator(e, check=False)) == 0.0


@pytest.mark.parametrize("psd", [False, True], ids=["svd", "psd"])
def test_r_ill_unchecked_returns_the_pole(psd) -> None:
    # S = I: all singular values equal, R_ill's denominator is exactly 0. check=False (the hot loop) skips the
    # test: the value is 1/0 = inf and the gradient's formula divides by 0 (no exception either way)
    with np.errstate(divide="ignore", invalid="ignore"):
        assert float(kl.r_ill(np.eye(2), psd=psd, check=False)) == np.inf
        assert not np.isfinite(kl.grad_r_ill(np.eye(2), psd=psd, check=False, on_degenerate="ignore")).all()
    with pytest.raises(UndefinedRegularizerError, match=r"^R_ill\(S\) is undefined"):
        kl.r_ill(np.eye(2), psd=psd)


def test_r_ill_zero_denominator_bound() -> None:
    # S = diag(1, 1 - delta) (k = p = 2): d = ||S||_F^2/4 - s_2^2/2 is computed exactly here, d = delta/2 (to
    # rounding), and R_ill is undefined when d <= p eps (||S||_F^2/(2k) + s_1 s_2) ~ 2 eps (1/2 + 1) = 3 eps.
    # delta = 11 * 2^-53 = 5.5 eps: d = 2.75 eps, undefined. delta = 2^-49 = 8 eps: d = 4 eps, defined, R_ill = 2^50
    # exactly. (Bounds a factor off, e.g. 2 eps (fro2/(3k) + s_1 s_2) ~ 2.67 eps or 2 eps (fro2 + s_1 s_2) ~ 6 eps,
    # flip one of the two.)
    # the message is scale-free (relative to s_max^2): d = 2.75 eps = 6.106e-16, bound 3 eps (to rounding) = 6.661e-16
    message = (r"^R_ill\(S\) is undefined: its denominator \|\|S\|\|_F\^2/\(2k\) - s_min\^2/2 = 6\.106e-16 s_max\^2 "
               r"is zero within rounding \(bound 6\.661e-16 s_max\^2\): all k = 2 nonzero singular values are equal "
               r"\(s_min / s_max = 0\.99999999999999878\)$")
    with pytest.raises(UndefinedRegularizerError, match=message):
        kl.r_ill(np.diag([1.0, 1.0 - 11 * 2.0**-53]))
    assert float(kl.r_ill(np.diag([1.0, 1.0 - 2.0**-49]))) == 2.0**50


def test_torch_hot_loop_uses_S_as_given() -> None:
    # torch with check=False reads nothing back to the host, so S is not unit-scaled (module docstring, "Scale"): at
    # S = diag(2^600, 1), s_1^2 = 2^1200 overflows in the computation itself and R_well = inf - inf is NaN; NumPy
    # (scaled whatever check says) and torch with check=True return the rescaled inf
    S = np.diag([2.0**600, 1.0])
    assert torch.isnan(kl.r_well(torch.tensor(S), check=False))
    assert float(kl.r_well(S, check=False)) == np.inf
    from kappalab.errors import FloatRangeWarning

    with pytest.warns(FloatRangeWarning, match=r"^R_well\(S\) has magnitude"):
        assert float(kl.r_well(torch.tensor(S))) == np.inf
    # check=False leaves the finiteness scan out: NumPy's SVD meets the NaN itself
    with pytest.raises(np.linalg.LinAlgError):
        kl.r_well(np.array(NAN_2x2), check=False)
