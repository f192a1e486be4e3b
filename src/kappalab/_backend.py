"""One formula, two array libraries.

Every public function of kappalab accepts a NumPy array or a torch tensor and returns the same kind. The
formulas are written once against the small namespace below; torch is imported only when the caller passes
a tensor (as in einops' backend choice), so ``import kappalab`` never imports torch.
"""

from __future__ import annotations

import math
import sys
from types import ModuleType
from typing import Any

import numpy as np

Array = Any  # numpy.ndarray or torch.Tensor


def is_torch(x: object) -> bool:
    """True when ``x`` is a torch tensor (checked without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def namespace(*arrays: object) -> ModuleType:
    """Return ``numpy`` or ``torch`` for the given arrays; mixing the two is an error."""
    kinds = {is_torch(a) for a in arrays if a is not None}
    if len(kinds) > 1:
        raise TypeError("mixed NumPy arrays and torch tensors: pass all inputs as the same kind")
    if kinds == {True}:
        return sys.modules["torch"]
    return np


def eps(x: Array) -> float:
    """Machine epsilon of ``x``'s floating dtype."""
    if is_torch(x):
        return float(sys.modules["torch"].finfo(x.dtype).eps)
    return float(np.finfo(x.dtype).eps)


def eye_like(x: Array, n: int) -> Array:
    """``n x n`` identity with the dtype (and device) of ``x``."""
    if is_torch(x):
        return sys.modules["torch"].eye(n, dtype=x.dtype, device=x.device)
    return np.eye(n, dtype=x.dtype)


def as_float(x: object, name: str, dtype: object | None = None) -> Array:
    """Convert array-likes to a floating array (float64 unless the input already is float32/float64).

    Tensors keep their device. Integer and boolean inputs become float64. Complex inputs are rejected: the
    paper's theory is real.
    """
    if is_torch(x):
        torch = sys.modules["torch"]
        if x.is_complex():
            raise TypeError(f"{name} must be real, got complex dtype {x.dtype}")
        if dtype is not None:
            return x.to(dtype)
        if not x.is_floating_point() or x.dtype in (torch.float16, torch.bfloat16):
            return x.to(torch.float64)
        return x
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be a NumPy array or a torch tensor, got {type(x).__name__}")
    if isinstance(x, (list, tuple, int, float, np.ndarray, np.generic)):
        arr = np.asarray(x)
    else:
        raise TypeError(f"{name} must be a NumPy array or a torch tensor, got {type(x).__name__}")
    if np.iscomplexobj(arr):
        raise TypeError(f"{name} must be real, got complex dtype {arr.dtype}")
    if dtype is not None:
        return arr.astype(dtype, copy=False)
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    return arr


def to_scalar(x: Array) -> float:
    """A 0-d array or tensor as a Python float (forces a device sync for CUDA tensors)."""
    return float(x.item()) if hasattr(x, "item") else float(x)



def as_dtype_of(value: Array, ref: Array) -> Array:
    """``value`` (e.g. an integer rank) converted to ``ref``'s floating dtype, so that mixing it into a formula
    neither promotes float32 NumPy data to float64 nor turns torch integer division into float32."""
    if is_torch(value):
        return value.to(ref.dtype)
    return np.asarray(value, dtype=ref.dtype)


def scalar_like(x: Array, value: float) -> Array:
    """A 0-d array holding ``value`` with the dtype (and device) of ``x``."""
    if is_torch(x):
        return sys.modules["torch"].full((), value, dtype=x.dtype, device=x.device)
    return np.asarray(value, dtype=x.dtype)


def _pow2_step(x: Array) -> int:
    """The largest ``j`` with ``2^j`` and ``2^-j`` comfortably representable in ``x``'s dtype (512 for float64)."""
    finfo = sys.modules["torch"].finfo if is_torch(x) else np.finfo
    return math.frexp(float(finfo(x.dtype).max))[1] // 2


def times_pow2(x: Array, k: int) -> Array:
    """``x * 2^k``, exact wherever the result is a normal number; ``k`` may exceed the dtype's exponent range (the
    factor is applied in steps that are each representable). Overflow gives inf, underflow subnormals or 0, silently
    (see :func:`pow2_range` to tell)."""
    step = _pow2_step(x)
    with np.errstate(over="ignore", under="ignore"):  # NumPy's own warning; the callers decide what to report
        while k:
            j = max(-step, min(step, k))
            x = x * math.ldexp(1.0, j)
            k -= j
    return x


def unit_scale(a: Array) -> int:
    """The even exponent ``e`` with ``max|a_ij| * 2^-e`` in ``[1/4, 1)`` (0 for a zero array): ``times_pow2(a, -e)``
    is ``a`` scaled exactly, and, ``e`` being even, square roots of its entries scale exactly too."""
    e = math.frexp(to_scalar(abs(a).max()))[1]
    return e + (e % 2)


def pow2_range(x0: Array, k: int) -> int:
    """Where the largest magnitude of ``x0 * 2^k`` falls, decided exactly from exponents (no overflow on the way):
    ``1`` above the dtype's largest finite value (it rounds to inf), ``-1`` below its smallest normal number
    (subnormal or 0: accuracy lost), ``0`` inside; ``0`` too when ``x0`` is all zero or not finite."""
    m = to_scalar(abs(x0).max())
    if m == 0 or not math.isfinite(m):
        return 0
    finfo = sys.modules["torch"].finfo if is_torch(x0) else np.finfo
    top = math.frexp(m)[1] + k  # max|x0| * 2^k lies in [2^(top-1), 2^top)
    if top > math.frexp(float(finfo(x0.dtype).max))[1]:
        return 1
    if top < math.frexp(float(finfo(x0.dtype).tiny))[1]:
        return -1
    return 0
