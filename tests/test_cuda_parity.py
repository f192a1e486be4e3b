"""Every core public function of :mod:`kappalab` gives the NumPy result on torch tensors on CUDA (float64, 1e-12).

One table, :data:`CALLS`, names each public function of ``kappalab.__all__`` with one call on the test matrices of
``test_core_parity`` (square / tall / wide / rank-deficient, n <= 6, kappa <= 30, relative gaps >= 0.2: the
backward-stable LAPACK and cuSOLVER routines leave ~1e-13, so 1e-12 norm-wise relative is the same bound as the
CPU parity suite). Each call runs on NumPy arrays and on torch tensors on each device of :data:`DEVICES`; the result
must stay on the input's device, in float64, and equal NumPy's to 1e-12. Without CUDA the "cuda" cases are skipped
("CUDA not available") and the "cpu" cases run the same comparisons, so the file is exercised on every machine.
``test_every_public_function_is_covered`` fails when a function is added to ``kappalab.__all__`` without a row here.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np
import pytest
from test_core_parity import RANK_RTOL, _matrix, _psd, _theta_case, assert_parity

import kappalab as kl

torch = pytest.importorskip("torch")

DEVICES = ("cpu", "cuda")


def _vectors_free(e: kl.Extremes) -> dict[str, Any]:
    """The sign-free content of an :class:`~kappalab.Extremes`: scalars and the rank-one ``s u v^T`` terms."""
    outer = lambda s, u, v: s * np.outer(np.asarray(u), np.asarray(v))
    to = lambda x: x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    return {"s_max": to(e.s_max), "s_2": to(e.s_2), "s_min": to(e.s_min), "fro2": to(e.fro2), "rank": to(e.rank),
            "top": outer(to(e.s_max), to(e.u_max), to(e.v_max)), "bottom": outer(to(e.s_min), to(e.u_min), to(e.v_min))}


def _batched_extremes_free(e: kl.BatchedExtremes) -> dict[str, Any]:
    """The sign-free content of a :class:`~kappalab.BatchedExtremes`: values, flag and the projectors ``v v^T``."""
    to = lambda x: x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    proj = lambda v: to(v)[..., :, None] * to(v)[..., None, :]
    return {"largest": to(e.largest), "smallest": to(e.smallest), "converged": to(e.converged).astype(float),
            "top": proj(e.largest_vector), "bottom": proj(e.smallest_vector)}


def _rir_fields(r: kl.RIRResult) -> dict[str, Any]:
    return {f: getattr(r, f) for f in ("term_i", "term_ii", "rir", "kappa_H_immunized", "kappa_H_reference",
                                       "kappa_P_immunized", "kappa_P_reference")}


_theta, _K = _theta_case(False)
_theta_sing, _K_sing = _theta_case(True)
_G = np.random.default_rng(4).standard_normal(_theta.shape)
_K_H = _psd(4, [8.0, 3.0, 2.5, 0.5], seed=13)

#: public function -> (arguments as NumPy arrays, keyword arguments, how to read the result)
CALLS: dict[str, tuple[Callable, tuple, dict, Callable[[Any], Any]]] = {
    "condition_number": (kl.condition_number, (_matrix("tall-rank-deficient"),), {}, None),
    "r_well": (kl.r_well, (_matrix("wide"),), {}, None),
    "r_ill": (kl.r_ill, (_matrix("square-rank-deficient"),), {}, None),
    "grad_r_well": (kl.grad_r_well, (_matrix("tall"),), {}, None),
    "grad_r_ill": (kl.grad_r_ill, (_matrix("square"),), {}, None),
    "hessian": (kl.hessian, (_theta, _K), {}, None),
    "grad_theta_r_well": (kl.grad_theta_r_well, (_theta, _K_sing), {"rtol": RANK_RTOL}, None),
    "grad_theta_r_ill": (kl.grad_theta_r_ill, (_theta, _K_sing), {"rtol": RANK_RTOL}, None),
    "preconditioned_step": (kl.preconditioned_step, (_theta, _K, _G, 0.3), {"ridge": 0.1}, None),
    "step_bound_well": (kl.step_bound_well, (_psd(4, [5.0, 2.0, 1.0, 0.4], seed=7),), {"psd": True}, None),
    "step_bound_ill": (kl.step_bound_ill, (_matrix("tall"),), {}, None),
    "step_bound_theta_well": (kl.step_bound_theta_well, (_theta, _K), {"rtol": RANK_RTOL}, None),
    "step_bound_theta_ill": (kl.step_bound_theta_ill, (_theta_sing, _K_sing), {"rtol": RANK_RTOL}, None),
    "eq10_singular_values": (kl.eq10_singular_values, (_theta_sing, _K_sing), {"reading": "proof"}, None),
    "rir": (kl.rir, (_theta, _K, _K_H), {}, _rir_fields),
    "psd_extremes": (kl.psd_extremes, (_psd(5, [6.0, 3.0, 1.0], seed=9),), {}, _vectors_free),
    "batched_extremes": (kl.batched_extremes, (np.stack([_psd(5, [6.0, 3.0, 1.0], seed=9),
                                                          _psd(5, [4.0, 2.0, 1.5, 0.3], seed=3)]),), {},
                         _batched_extremes_free),
    "svd_extremes": (kl.svd_extremes, (_matrix("tall-rank-deficient"),), {}, _vectors_free),
}


def _device(name: str) -> str:
    if name == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA not available: the cuda half of this parity test needs a GPU; it runs in "
                    "scripts/gpu_check.sh (last run: docs/gpu.md)")
    return name


def _as_dict(x: Any, read: Callable | None) -> dict[str, Any]:
    return read(x) if read is not None else {"value": x}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(CALLS))
def test_torch_on_device_equals_numpy(name: str, device: str) -> None:
    device = _device(device)
    func, args, kwargs, read = CALLS[name]
    on_device = [torch.as_tensor(a, device=device) if isinstance(a, np.ndarray) else a for a in args]
    out = func(*on_device, **kwargs)
    if read is None:
        assert isinstance(out, torch.Tensor) and out.dtype == torch.float64, f"{name}: {type(out)}"
        assert out.device.type == device, f"{name} left the device: {out.device}"
    got, want = _as_dict(out, read), _as_dict(func(*args, **kwargs), read)
    assert got.keys() == want.keys()
    for key in want:
        value = got[key].detach().cpu().numpy() if isinstance(got[key], torch.Tensor) else got[key]
        assert_parity(value, want[key], err_msg=f"{name}.{key} on {device}")


def test_every_public_function_is_covered() -> None:
    public = {n for n in kl.__all__ if inspect.isfunction(getattr(kl, n))}
    assert public == set(CALLS), f"missing: {sorted(public - set(CALLS))}, extra: {sorted(set(CALLS) - public)}"
