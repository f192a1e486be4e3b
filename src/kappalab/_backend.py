"""One formula, two array libraries.

Every public function of kappalab accepts a NumPy array or a torch tensor and returns the same kind. The
formulas are written once against the small namespace below; torch is imported only when the caller passes
a tensor (as in einops' backend choice), so ``import kappalab`` never imports torch.
"""

from __future__ import annotations

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
