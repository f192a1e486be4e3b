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


def to_scalars(*xs: Array) -> tuple[float, ...]:
    """Several 0-d arrays or tensors (or Python numbers) as Python floats, the tensors read back in ONE transfer (one
    device sync for all, where :func:`to_scalar` each would cost one per value). Every value is the float
    :func:`to_scalar` gives: the tensors travel as float64, which holds float32 values and integer ranks exactly."""
    on_device = [is_torch(x) for x in xs]
    if sum(on_device) < 2:
        return tuple(to_scalar(x) for x in xs)
    torch = sys.modules["torch"]
    read = iter(torch.stack([x.detach().reshape(()).to(torch.float64) for x, t in zip(xs, on_device) if t]).tolist())
    return tuple(next(read) if t else to_scalar(x) for x, t in zip(xs, on_device))



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


def unit_scale(a: Array, top: float | None = None) -> int:
    """The even exponent ``e`` with ``max|a_ij| * 2^-e`` in ``[1/4, 1)`` (0 for a zero array): ``times_pow2(a, -e)``
    is ``a`` scaled exactly, and, ``e`` being even, square roots of its entries scale exactly too. ``top``:
    ``max|a_ij|`` when the caller has already read it back (then nothing is read again)."""
    e = math.frexp(to_scalar(abs(a).max()) if top is None else top)[1]
    return e + (e % 2)


def unit_scaled(a: Array) -> tuple[Array, Any]:
    """``(times_pow2(a, -e), e)`` with ``e = unit_scale(a)``, bit for bit, without a host read: for a torch tensor
    ``e`` is a 0-d integer tensor on the device and the factor is applied in the same steps as :func:`times_pow2`
    (each an exact power of two, built from its bit pattern; a step of ``2^0`` is a multiplication by 1). For a
    NumPy array ``e`` is an int."""
    if not is_torch(a):
        e = unit_scale(a)
        return times_pow2(a, -e), e
    torch = sys.modules["torch"]
    finfo = torch.finfo(a.dtype)
    m = a.abs().max()
    e = torch.frexp(m).exponent.to(torch.int64)
    e = torch.where(torch.isfinite(m), e + e % 2, torch.zeros_like(e))  # math.frexp(inf or nan) has exponent 0
    k = -e
    step = _pow2_step(a)
    mantissa = round(-math.log2(finfo.eps))  # 52 (float64), 23 (float32)
    bias = math.frexp(float(finfo.max))[1] - 1  # 1023, 127
    bits = {8: torch.int64, 4: torch.int32}[finfo.bits // 8]
    # |k| <= 2 - exponent(smallest subnormal): steps enough to cover the whole range
    for _ in range(-(-(2 - math.frexp(float(finfo.tiny) * float(finfo.eps))[1]) // step)):
        j = k.clamp(-step, step)
        a = a * ((j + bias).to(bits) << mantissa).view(a.dtype)
        k = k - j
    return a, e


def pow2_range(x0: Array, k: int, top: float | None = None) -> int:
    """Where the largest magnitude of ``x0 * 2^k`` falls, decided exactly from exponents (no overflow on the way):
    ``1`` above the dtype's largest finite value (it rounds to inf), ``-1`` below its smallest normal number
    (subnormal or 0: accuracy lost), ``0`` inside; ``0`` too when ``x0`` is all zero or not finite. ``top``:
    ``max|x0|`` when the caller has already read it back."""
    m = to_scalar(abs(x0).max()) if top is None else top
    if m == 0 or not math.isfinite(m):
        return 0
    finfo = sys.modules["torch"].finfo if is_torch(x0) else np.finfo
    top = math.frexp(m)[1] + k  # max|x0| * 2^k lies in [2^(top-1), 2^top)
    if top > math.frexp(float(finfo(x0.dtype).max))[1]:
        return 1
    if top < math.frexp(float(finfo(x0.dtype).tiny))[1]:
        return -1
    return 0
