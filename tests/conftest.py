"""Shared test configuration: hypothesis profiles and the NumPy/torch backend fixture ``xp``.

Hypothesis profiles (select with ``KAPPALAB_HYPOTHESIS_PROFILE``):

* ``ci`` (default): derandomized, so every run draws the same examples; few examples, no deadline (linear
  algebra timings vary with the machine's load).
* ``deep``: randomized and many more examples, for a local hunt for counterexamples.

Backends: the ``xp`` fixture runs a test once with NumPy arrays and once with torch tensors (float64, on the
device named by ``KAPPALAB_TEST_DEVICE``, default ``"cpu"``), in the manner of SciPy's ``xp`` fixture. Tests
write the check once and call ``xp.asarray`` / ``xp.numpy`` / ``xp.assert_kind``.
"""

from __future__ import annotations

import os
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=25, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "deep", derandomize=False, deadline=None, max_examples=1000, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("KAPPALAB_HYPOTHESIS_PROFILE", "ci"))

#: Torch device for backend tests ("cpu", "cuda", "cuda:1", ...).
TEST_DEVICE = os.environ.get("KAPPALAB_TEST_DEVICE", "cpu")


@dataclass(frozen=True)
class Backend:
    """One array library as seen by a test: conversion in both directions and a check of the result's kind."""

    name: str  #: "numpy" or "torch"

    @property
    def device(self) -> str | None:
        return TEST_DEVICE if self.name == "torch" else None

    def asarray(self, a: Any, dtype: str = "float64") -> Any:
        """``a`` (a NumPy array or nested list) as this backend's array with the given dtype (and test device)."""
        a = np.asarray(a, dtype=dtype)
        if self.name == "numpy":
            return a
        import torch

        return torch.as_tensor(a, device=TEST_DEVICE)

    def numpy(self, x: Any) -> np.ndarray:
        """Any result of this backend as a NumPy array (copied to the host)."""
        if self.name == "torch":
            return x.detach().cpu().numpy()
        return np.asarray(x)

    def assert_kind(self, x: Any, dtype: str = "float64", ndim: int | None = None) -> None:
        """Assert ``x`` is this backend's array type, with ``dtype`` (and device and ``ndim`` when given)."""
        if self.name == "numpy":
            # NumPy reductions return scalars (np.float64, a 0-d np.generic), which count as 0-d NumPy arrays
            ok = isinstance(x, np.ndarray) or (isinstance(x, np.generic) and x.ndim == 0)
            assert ok, f"expected a NumPy array or scalar, got {type(x).__name__}: {x!r}"
            assert x.dtype == np.dtype(dtype), f"expected dtype {dtype}, got {x.dtype}"
        else:
            import torch

            assert isinstance(x, torch.Tensor), f"expected torch.Tensor, got {type(x).__name__}: {x!r}"
            assert x.dtype == getattr(torch, dtype), f"expected dtype torch.{dtype}, got {x.dtype}"
            want = torch.device(TEST_DEVICE)  # "cuda" means the current CUDA device, reported as "cuda:0" etc.
            same = x.device.type == want.type and (want.index is None or x.device.index == want.index)
            assert same, f"expected device {TEST_DEVICE}, got {x.device}"
        if ndim is not None:
            assert x.ndim == ndim, f"expected ndim {ndim}, got shape {tuple(x.shape)}"


@pytest.fixture(autouse=True)
def _torch_default_dtype_unchanged() -> Iterator[None]:
    """Fail a test that leaves torch's default dtype changed (a model built later in the session would draw its
    initial weights in another dtype: other numbers, test by test, depending on the order), and restore it."""
    torch = sys.modules.get("torch")
    before = torch.get_default_dtype() if torch is not None else None  # None: torch's own float32 once imported
    yield
    torch = sys.modules.get("torch")
    if torch is None:
        return
    before = torch.float32 if before is None else before
    after = torch.get_default_dtype()
    if after != before:
        torch.set_default_dtype(before)
        pytest.fail(f"the test changed torch's default dtype from {before} to {after} (restored)")


def _backend_params() -> list[Any]:
    return ["numpy", pytest.param("torch", marks=pytest.mark.needs_torch)]


@pytest.fixture(params=_backend_params())
def xp(request: pytest.FixtureRequest) -> Backend:
    """The array backend under test (NumPy, then torch on ``KAPPALAB_TEST_DEVICE``)."""
    if request.param == "torch":
        pytest.importorskip("torch")
    return Backend(request.param)


@pytest.fixture
def torch_device() -> Any:
    """The torch device of ``KAPPALAB_TEST_DEVICE`` (skips the test when torch is missing)."""
    torch = pytest.importorskip("torch")
    return torch.device(TEST_DEVICE)


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A NumPy generator seeded from the test's id: reproducible, and different for each test."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def _toy_bce_task(seed: int = 0, n: int = 40, D: int = 50) -> Any:
    """A random binary task for the immunization tests: standard normal X_P, X_H (``n x D``), random 0/1 labels."""
    from kappalab.immunization.task import LinearTask

    rng = np.random.default_rng(seed)
    X_P, X_H = rng.standard_normal((n, D)), rng.standard_normal((n, D))
    y_P = (rng.standard_normal(n) > 0).astype(np.float64)
    y_H = (rng.standard_normal(n) > 0).astype(np.float64)
    return LinearTask(X_P=X_P, y_P=y_P, X_H=X_H, y_H=y_H, loss="bce", name="toy", data_label="random")


@pytest.fixture
def toy_bce_task() -> Callable[..., Any]:
    """``toy_bce_task(seed=0, n=40, D=50)``: the immunization tests' random binary LinearTask."""
    return _toy_bce_task
