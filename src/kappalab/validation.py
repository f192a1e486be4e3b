"""Input checks shared by every public function. Each error names the argument and the problem.

A public function resolves its array namespace ``xp`` once (:func:`~kappalab._backend.namespace`) and hands it to
these checks, and runs each of them once: the internal functions it calls are told the input is checked instead of
checking it again (SciPy's pattern, ``xp = array_namespace(x)`` once per public call). Each value check reads back
from the device once (one sync on CUDA), the symmetry check included; ``check=False`` reads nothing."""

from __future__ import annotations

from types import ModuleType

from ._backend import Array, as_float, eps, is_torch, namespace, to_scalars


def matrix(x: object, name: str, *, square: bool = False, check: bool = True, xp: ModuleType | None = None) -> Array:
    """Return ``x`` as a real floating 2-D array, checking shape, and with ``check`` values (not a meta tensor) and
    finiteness.

    ``check=False`` skips the finiteness scan (a device-to-host sync on CUDA) for hot loops whose inputs
    were already validated; shape checks are free and always run (the meta check, free too, is then the caller's:
    :func:`require_values`). ``xp``: the caller's namespace.
    """
    a = as_float(x, name)
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got an array with ndim={a.ndim} and shape {tuple(a.shape)}")
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"{name} must be non-empty, got shape {tuple(a.shape)}")
    if square and a.shape[0] != a.shape[1]:
        raise ValueError(f"{name} must be square, got shape {tuple(a.shape)}")
    if check:
        require_values(a, name)
        finite(a, name, xp)
    return a


def matrix_to_decompose(x: object, name: str, *, square: bool = False, check: bool = True,
                        xp: ModuleType | None = None) -> Array:
    """:func:`matrix` for a matrix about to be decomposed: the (free) meta-tensor check runs whatever ``check`` says
    (a meta tensor has no values to decompose), once."""
    a = matrix(x, name, square=square, check=check, xp=xp)
    if not check:
        require_values(a, name)
    return a


def require_values(a: Array, name: str) -> None:
    """Raise if ``a`` is a torch tensor on the ``meta`` device: it has a shape and a dtype but no values to compute
    with. (Free: no device sync; the functions that decompose a matrix call it whatever ``check`` says.)"""
    if is_torch(a) and a.device.type == "meta":
        raise ValueError(f"{name} is a tensor on the 'meta' device (a shape without values): kappalab needs its "
                         f"values; create it on 'cpu' or 'cuda'")


def finite(a: Array, name: str, xp: ModuleType | None = None) -> None:
    """Raise if ``a`` holds NaN or Inf, saying how many (one host read when it does not)."""
    xp = namespace(a) if xp is None else xp
    bad = ~xp.isfinite(a)
    if bool(bad.any()):
        n_nan = int(xp.isnan(a).sum())
        n_inf = int(bad.sum()) - n_nan
        raise ValueError(f"{name} contains non-finite entries ({n_nan} NaN, {n_inf} Inf)")


def symmetric_tolerance(a: Array) -> float:
    """Relative tolerance for symmetry: ``n * eps(dtype)`` times ``max |a_ij|``.

    A matrix formed as ``X^T X`` in floating point is symmetric up to about ``N * eps * ||X||^2``; the check
    is meant to catch a wrong argument (a non-symmetric matrix passed as K), not rounding, so it uses
    ``100 * n * eps`` relative to the largest entry.
    """
    return 100.0 * a.shape[0] * eps(a)


def symmetric(a: Array, name: str, xp: ModuleType | None = None) -> float:
    """Raise if the square matrix ``a`` is not symmetric within :func:`symmetric_tolerance`; else return
    ``max |a_ij|`` (read back with the asymmetry, in one host read; the caller's scaling reuses it)."""
    xp = namespace(a) if xp is None else xp
    scale, asym = to_scalars(xp.abs(a).max(), xp.abs(a - a.T).max())
    tol = symmetric_tolerance(a) * scale
    if asym > tol:
        raise ValueError(
            f"{name} must be symmetric: max |{name} - {name}^T| = {asym:.3e} exceeds the tolerance {tol:.3e} "
            f"(100 * n * eps * max|{name}_ij|)"
        )
    return scale


def same_kind(*arrays: Array, xp: ModuleType | None = None) -> None:
    """Raise if the arrays mix NumPy and torch, or torch tensors on different devices or dtypes. ``xp``: the namespace
    the caller resolved over these arrays (which has already refused a mix of the two kinds)."""
    if xp is None:
        namespace(*arrays)
    tensors = [a for a in arrays if is_torch(a)]
    if tensors:
        devices = {str(t.device) for t in tensors}
        if len(devices) > 1:
            raise ValueError(f"tensors are on different devices: {sorted(devices)}")
    dtypes = {str(a.dtype) for a in arrays}
    if len(dtypes) > 1:
        raise TypeError(f"inputs have different dtypes {sorted(dtypes)}; convert them to one dtype first")


def positive_scalar(value: float, name: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float, raising if it is not finite and positive (or zero where allowed)."""
    v = float(value)
    if not (v == v) or v in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'non-negative' if allow_zero else 'positive'}, got {value!r}")
    return v
