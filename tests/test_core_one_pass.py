"""One pass per public call (issue 27, item 1): each public core call resolves the array namespace once, runs the
finiteness and symmetry checks once per matrix, and reads back from the device no more often than its checks need.

Counted with ``sys.setprofile`` (calls of :func:`kappalab._backend.namespace`, :func:`kappalab.validation.finite`
and :func:`kappalab.validation.symmetric`, the latter two per matrix name) and, for torch tensors, a
``TorchFunctionMode`` that sees every tensor method that copies a value to the host (``item``, ``tolist``, ``cpu``,
``numpy``, ``__bool__``, ``__float__``, ``__int__``, ``__index__``: ``float(t)`` and ``bool(t)`` are slot calls that
``sys.setprofile`` does not report). Each check is one read (a check that needs several scalars reads them together,
:func:`kappalab._backend.to_scalars`); ``check=False`` reads nothing. Measured before this change on the same calls
(``r_ill(A, psd=True)``): 6 namespace resolutions, 2 finiteness and 2 symmetry checks, 19 host reads.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import kappalab as kl
from kappalab import _backend, validation
from kappalab import kappa as K
from kappalab.spectral import psd_extremes, svd_extremes

TEST_DEVICE = os.environ.get("KAPPALAB_TEST_DEVICE", "cpu")  # as in conftest's xp fixture

HOST_READS = {"item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__"}


@dataclass
class Counts:
    namespace: int = 0
    finite: Counter = field(default_factory=Counter)  #: matrix name -> finiteness checks
    symmetric: Counter = field(default_factory=Counter)  #: matrix name -> symmetry checks
    host_reads: int = 0


def count(call: Callable[[], object]) -> Counts:
    """Run ``call`` once and count what it did (see the module docstring)."""
    c = Counts()
    targets = {_backend.namespace.__code__: "namespace", validation.finite.__code__: "finite",
               validation.symmetric.__code__: "symmetric"}

    def profile(frame, event, arg) -> None:
        what = targets.get(frame.f_code) if event == "call" else None
        if what == "namespace":
            c.namespace += 1
        elif what is not None:
            getattr(c, what)[frame.f_locals["name"]] += 1

    torch = sys.modules.get("torch")
    mode = None
    if torch is not None:
        from torch.overrides import TorchFunctionMode

        class Reads(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                if getattr(func, "__name__", "") in HOST_READS:
                    c.host_reads += 1
                return func(*args, **(kwargs or {}))

        mode = Reads()
        mode.__enter__()
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
        if mode is not None:
            mode.__exit__(None, None, None)
    return c


@dataclass(frozen=True)
class Case:
    """A public call, the matrices it checks (finiteness, symmetry) and the checks that read back with ``check``."""

    name: str
    call: Callable  #: (inputs, check) -> result
    finite: tuple[str, ...]
    symmetric: tuple[str, ...]
    reads: tuple[str, ...]  #: one host read each, with check=True
    unchecked_reads: int = 0  #: with check=False


PSD = ("finite", "symmetric", "PSD+nonzero")
CASES = [
    Case("r_well", lambda d, c: kl.r_well(d.S, check=c), ("S",), (), ("finite", "nonzero", "range")),
    Case("r_well-psd", lambda d, c: kl.r_well(d.A, psd=True, check=c), ("S",), ("S",), PSD + ("range",)),
    Case("r_ill", lambda d, c: kl.r_ill(d.S, check=c), ("S",), (), ("finite", "nonzero", "denominator", "range")),
    Case("r_ill-psd", lambda d, c: kl.r_ill(d.A, psd=True, check=c), ("S",), ("S",), PSD + ("denominator", "range")),
    Case("grad_r_well-psd", lambda d, c: kl.grad_r_well(d.A, psd=True, check=c, on_degenerate=d.policy(c)),
         ("S",), ("S",), PSD + ("unique", "range")),
    Case("grad_r_ill", lambda d, c: kl.grad_r_ill(d.S, check=c, on_degenerate=d.policy(c)),
         ("S",), (), ("finite", "nonzero", "denominator", "unique", "range")),
    Case("grad_r_ill-psd", lambda d, c: kl.grad_r_ill(d.A, psd=True, check=c, on_degenerate=d.policy(c)),
         ("S",), ("S",), PSD + ("denominator", "unique", "range")),
    Case("condition_number", lambda d, c: K.condition_number(d.S, check=c), ("S",), (), ("finite", "nonzero")),
    Case("condition_number-psd", lambda d, c: K.condition_number(d.A, psd=True, check=c), ("S",), ("S",),
         PSD + ("nonzero",)),
    # spectrum returns its scale as an int: reading it back is its result's need (with check, in the PSD read)
    Case("spectrum", lambda d, c: K.spectrum(d.S, check=c), ("S",), (), ("finite", "scale"), unchecked_reads=1),
    Case("spectrum-psd", lambda d, c: K.spectrum(d.A, psd=True, check=c), ("S",), ("S",), PSD, unchecked_reads=1),
    Case("kappa_of_spectrum", lambda d, c: K.kappa_of_spectrum(d.values, check=c), (), (), ("nonzero",)),
    Case("psd_extremes", lambda d, c: psd_extremes(d.A, check=c), ("A",), ("A",), PSD),
    Case("svd_extremes", lambda d, c: svd_extremes(d.S, check=c), (), (), ("nonzero",)),
    Case("grad_theta_r_well", lambda d, c: kl.grad_theta_r_well(d.theta, d.A, check=c, on_degenerate=d.policy(c)),
         ("theta", "K", "H(theta)"), ("K",), ("finite theta", "finite K", "symmetric K", "finite H", "PSD+nonzero",
                                              "unique")),
    Case("grad_theta_r_ill", lambda d, c: kl.grad_theta_r_ill(d.theta, d.A, check=c, on_degenerate=d.policy(c)),
         ("theta", "K", "H(theta)"), ("K",), ("finite theta", "finite K", "symmetric K", "finite H", "PSD+nonzero",
                                              "denominator", "unique")),
]


@dataclass(frozen=True)
class Inputs:
    S: object  #: general 5 x 4
    A: object  #: symmetric PSD 6 x 6 with simple eigenvalues 1..6
    theta: object
    values: object

    @staticmethod
    def policy(check: bool) -> str:
        """The degeneracy policy is a check of its own (``on_degenerate``), off where ``check`` is."""
        return "raise" if check else "ignore"


def inputs(xp) -> Inputs:
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    A = (Q * np.linspace(1.0, 6.0, 6)) @ Q.T
    return Inputs(xp.asarray(rng.standard_normal((5, 4))), xp.asarray((A + A.T) / 2),
                  xp.asarray(rng.standard_normal((6, 6))), xp.asarray([3.0, 2.0, 1.0]))


@pytest.mark.parametrize("check", [True, False], ids=["check", "unchecked"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_one_pass_per_public_call(xp, case: Case, check: bool) -> None:
    c = count(lambda: case.call(inputs(xp), check))
    assert c.namespace == 1, (case.name, c)
    assert c.finite == (Counter(case.finite) if check else Counter()), (case.name, c)
    assert c.symmetric == (Counter(case.symmetric) if check else Counter()), (case.name, c)
    if xp.name == "torch":
        budget = len(case.reads) if check else case.unchecked_reads
        assert 0 < c.host_reads <= budget if budget else c.host_reads == 0, (case.name, c, case.reads)


def test_backprop_through_r_ill_reads_only_for_its_checks() -> None:
    """Torch input that requires grad: value and closed-form gradient in one pass (one range check for each)."""
    torch = pytest.importorskip("torch")
    A = torch.as_tensor(np.asarray(inputs(np).A), device=TEST_DEVICE).requires_grad_(True)
    c = count(lambda: kl.r_ill(A, psd=True))
    assert (c.namespace, c.finite, c.symmetric) == (1, Counter(S=1), Counter(S=1)), c
    assert 0 < c.host_reads <= len(PSD + ("denominator", "unique", "range value", "range gradient")), c
    c = count(lambda: kl.r_ill(A, psd=True, check=False, on_degenerate="ignore"))
    assert (c.namespace, c.host_reads) == (1, 0), c


def test_the_degeneracy_policy_costs_one_read_without_check(xp) -> None:
    """``on_degenerate`` is its own check: with ``check=False`` and the default policy, its gap test is the one read."""
    c = count(lambda: kl.grad_r_ill(inputs(xp).A, psd=True, check=False))
    assert c.namespace == 1 and not c.finite and not c.symmetric, c
    if xp.name == "torch":
        assert c.host_reads == 1, c


def test_counter_sees_what_it_counts(xp) -> None:
    """The counter is not blind: the pieces called one by one are each counted."""
    a = inputs(xp).A
    c = count(lambda: (validation.finite(a, "a"), validation.symmetric(a, "a"), _backend.namespace(a)))
    # called without the caller's namespace, finite and symmetric resolve their own: 3 in all
    assert (c.namespace, c.finite, c.symmetric) == (3, Counter(a=1), Counter(a=1)), c
    if xp.name == "torch":
        assert c.host_reads == 2, c  # finiteness: one bool; symmetry: max|a| and max|a - a^T| in one read


def test_unit_scaled_is_times_pow2_bit_for_bit(xp) -> None:
    """The device-side scaling (no host read) gives the matrix of ``times_pow2(a, -unit_scale(a))`` bit for bit, over
    the whole exponent range, subnormal and huge entries included, in float64 and float32."""
    rng = np.random.default_rng(1)
    for dtype, exponents in (("float64", range(-1080, 1030, 23)), ("float32", range(-155, 130, 7))):
        bits = np.int64 if dtype == "float64" else np.int32
        for j in exponents:
            base = rng.standard_normal((3, 4)) * np.logspace(0, -20 if dtype == "float64" else -5, 4)
            a = xp.asarray(_backend.times_pow2(base, j).astype(dtype), dtype=dtype)
            scaled, e = _backend.unit_scaled(a)
            want = _backend.times_pow2(a, -_backend.unit_scale(a))
            assert int(_backend.to_scalar(e)) == _backend.unit_scale(a), (dtype, j)
            assert np.array_equal(xp.numpy(scaled).view(bits), xp.numpy(want).view(bits)), (dtype, j, base)
        for special in ([[0.0, 0.0]], [[np.inf, 1.0]], [[np.nan, 1.0]]):
            a = xp.asarray(special, dtype=dtype)
            scaled, e = _backend.unit_scaled(a)
            assert _backend.to_scalar(e) == 0 and np.array_equal(xp.numpy(scaled), special, equal_nan=True), special


def test_to_scalars_reads_what_to_scalar_reads(xp) -> None:
    """One read of several values gives each value :func:`to_scalar` gives (float32 and integer ranks exactly)."""
    values = [xp.asarray(np.float32(1) / 3, dtype="float32"), xp.asarray(7, dtype="int64"),
              xp.asarray(np.pi), 2.5]
    assert _backend.to_scalars(*values) == tuple(_backend.to_scalar(v) for v in values)
    if xp.name == "torch":
        assert count(lambda: _backend.to_scalars(*values)).host_reads == 1
