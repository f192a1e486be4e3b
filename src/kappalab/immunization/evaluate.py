"""Eq. 15 (RIR) of an immunized linear extractor under both kappa definitions, with a tolerance sensitivity block.

The Hessians are ``H(theta_I) = Phi^T Phi`` with ``Phi = X theta_I (+ 1 b^T)`` (biased features when the run has a
bias: the official code evaluates those) and ``H(I) = X^T X``; both are formed by the core
:func:`kappalab.hessian` (the bias enters as an extra input row: ``theta_aug = [theta; b^T]``,
``K_aug = [X 1]^T [X 1]``). kappa definitions, the rank rule and the RIR terms: :mod:`kappalab.kappa`; each
Hessian's spectrum is computed once and serves every ``rtol`` of the sensitivity block and the endpoints.

The direct Hessian ``H(I) = X^T X`` (*direct*: the reference ``theta = I`` of Eq. 15, :mod:`kappalab.kappa`;
records name it ``H_P_identity``, ``kappa_P_identity``) depends on the data only: the last few data sets' direct
Hessians, their eigenvalues under each kappa definition and the (augmented) covariance ``K`` of the immunized Hessian
``theta_aug^T K theta_aug`` are kept (keyed by the sha256 of X), so that the runs on the same data compute them once
(Table 2: X is one digit's images, shared by every method, seed and pair with that digit); a kept value is the one
the same computation gives (bit for bit).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any, Callable, Hashable

import numpy as np

from kappalab._backend import times_pow2
from kappalab.kappa import (DEFAULT_SHIFT, KAPPA_DEFINITIONS, KAPPA_NAMES, KappaDefinition, check_rtol, default_rtol,
                            rir_terms, spectrum)
from kappalab.linear import hessian

from .task import LinearTask, with_ones_column

DEFINITIONS = KAPPA_NAMES
SENSITIVITY_FACTORS = (0.1, 10.0)


def _covariance(X: np.ndarray, bias: bool) -> np.ndarray:
    """``K = X^T X``, or ``K_aug = [X 1]^T [X 1]`` with a bias, symmetrized."""
    Xa = with_ones_column(X, bias)
    K = Xa.T @ Xa
    return 0.5 * (K + K.T)


#: direct Hessians kept: sha256 of X -> {"H": H(I), and each value computed from it, by what}
_DIRECT: OrderedDict[str, dict[Hashable, Any]] = OrderedDict()
#: distinct X whose direct block is kept: Table 2's tasks have 10 (one per digit; the pair picks two), a batched
#: sweep runs one method over every pair before the next, so all 10 are kept (D = 784: 4.9 MB each)
DIRECT_KEPT = 10


def direct_hessian(X: np.ndarray) -> np.ndarray:
    """``H(I) = X^T X``, the direct Hessian (module docstring; the core :func:`kappalab.hessian` at theta = I),
    kept for the last :data:`DIRECT_KEPT` distinct X (read-only)."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    digest = hashlib.sha256(X.tobytes()).hexdigest() + str(X.shape)
    if digest in _DIRECT:
        _DIRECT.move_to_end(digest)
        return _DIRECT[digest]["H"]
    H = hessian(np.eye(X.shape[1]), X.T @ X)
    H.flags.writeable = False
    _DIRECT[digest] = {"H": H}
    while len(_DIRECT) > DIRECT_KEPT:
        _DIRECT.popitem(last=False)
    return H


def _of(M: np.ndarray, what: Hashable, compute: Callable[[], Any]) -> Any:
    """``compute()``, kept with ``M`` when M is a kept direct Hessian (:func:`direct_hessian`)."""
    entry = next((e for e in _DIRECT.values() if e["H"] is M), None)  # at most DIRECT_KEPT entries
    if entry is None:
        return compute()
    if what not in entry:
        value = compute()
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
        entry[what] = value
    return entry[what]


def hessians(theta: np.ndarray, task: LinearTask, bias: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The four Hessians of Eq. 15: ``H_P``/``H_H`` at theta_I (with bias) and the direct ones at theta = I (no bias;
    kept per data, read-only: :func:`direct_hessian`), under their stored names ``H_P_identity``, ``H_H_identity``."""
    out = {}
    theta_aug = theta if bias is None else np.vstack([theta, bias[None, :]])
    for which, X in (("P", task.X_P), ("H", task.X_H)):
        direct = direct_hessian(X)
        K = _of(direct, ("K", bias is not None), lambda X=X: _covariance(X, bias is not None))  # data only: kept
        out[f"H_{which}_immunized"] = hessian(theta_aug, K)
        out[f"H_{which}_identity"] = direct
    return out


def terms(H: dict[str, np.ndarray], d: KappaDefinition, rtol: float, shift: float) -> dict[str, float]:
    """(i), (ii), RIR and the four kappas under the definition ``d`` (at ``rtol`` or ``shift``, the one it reads).
    Each Hessian's eigenvalues under ``d`` are computed once per ``shift`` and serve every ``rtol``."""
    k = {}
    for name, M in H.items():
        lam = _of(M, (d.name, shift), lambda M=M: d.eigenvalues(M, rtol=None, shift=shift, check=True))
        k[name] = float(d.of_values(lam, rtol=rtol, shift=shift))
    t = rir_terms(k["H_H_immunized"], k["H_H_identity"], k["H_P_immunized"], k["H_P_identity"])
    return {"term_i": t.term_i, "term_ii": t.term_ii, "rir": t.rir,
            **{f"kappa_{name[2:]}": v for name, v in k.items()}}


def spectrum_endpoints(M: np.ndarray, rtol: float, shift: float) -> dict[str, float]:
    """lambda_max, smallest eigenvalue, rank and smallest kept eigenvalue under each definition (the pinv ones
    from the same eigenvalues as the pinv kappa)."""
    pinv, shifted = KAPPA_DEFINITIONS["pinv"], KAPPA_DEFINITIONS["shifted"]
    values, scale = spectrum(M, psd=True)
    lam = times_pow2(values[::-1], scale)  # ascending, in M's units
    kept_pinv = lam[pinv.rule(lam, rtol=rtol, shift=shift).kept]
    lam_s = shifted.eigenvalues(M, rtol=rtol, shift=shift, check=True)
    kept_s = lam_s[shifted.rule(lam_s, rtol=rtol, shift=shift).kept]
    return {"lambda_max": float(lam[-1]), "lambda_min_raw": float(lam[0]), "rank_pinv": int(kept_pinv.size),
            "lambda_min_pinv": float(kept_pinv.min()), "n_kept_shifted": int(kept_s.size),
            "lambda_min_shifted": float(kept_s.min()) if kept_s.size else float("nan")}


def evaluate(run_or_theta: Any, task: LinearTask, *, rtol: float | None = None, shift: float = DEFAULT_SHIFT,
             bias: np.ndarray | None = None, sensitivity: tuple[str, ...] = DEFINITIONS,
             endpoints: bool = True) -> dict[str, Any]:
    """Eq. 15 under the "pinv" (core, ``rtol``; None = D * eps) and "shifted" (official, ``shift``) kappas.

    ``run_or_theta``: an :class:`~kappalab.immunization.methods.ImmunizationRun` (its bias is used) or a
    ``D x D`` array (then ``bias`` may be given). The ``sensitivity`` block repeats the definitions it names with
    rtol (pinv) or shift (shifted) multiplied by 0.1 and 10; ``endpoints`` adds each Hessian's spectrum endpoints
    (``spectra``). Each is a D x D eigenvalue problem per Hessian and value, so a caller that does not report them
    (Table 2's sweep) leaves them out.
    """
    if hasattr(run_or_theta, "theta_I"):
        theta = run_or_theta.theta_I
        bias = run_or_theta.bias if bias is None else bias
    else:
        theta = run_or_theta
    theta = np.asarray(theta, dtype=np.float64)
    D = task.dim
    if theta.shape != (D, D) or not np.isfinite(theta).all():
        raise ValueError(f"run_or_theta must be a finite {D} x {D} matrix, got shape {theta.shape}")
    if bias is not None:
        bias = np.asarray(bias, dtype=np.float64)
        if bias.shape != (D,):
            raise ValueError(f"bias must have shape ({D},), got {bias.shape}")
    check_rtol(rtol)
    rtol = default_rtol(theta) if rtol is None else float(rtol)  # D * eps: the rule for the D x D Hessians
    if not shift > 0:
        raise ValueError(f"shift must be > 0, got {shift!r}")
    if not set(sensitivity) <= set(DEFINITIONS):
        raise ValueError(f"sensitivity must name definitions among {DEFINITIONS}, got {sensitivity!r}")
    H = hessians(theta, task, bias)
    base = {"rtol": rtol, "shift": shift}
    result: dict[str, Any] = {**base, "has_bias": bias is not None}
    for d in KAPPA_DEFINITIONS.values():
        result[d.name] = terms(H, d, rtol, shift)
    if endpoints:
        result["spectra"] = {name: spectrum_endpoints(M, rtol, shift) for name, M in H.items()}
    # each definition's block scales the one tolerance it reads: "rtol_x0.1", ..., "shift_x10"
    result["sensitivity"] = {
        d.name: {f"{d.parameter}_x{f:g}": terms(H, d, **{**base, d.parameter: base[d.parameter] * f})
                 for f in SENSITIVITY_FACTORS}
        for d in KAPPA_DEFINITIONS.values() if d.name in sensitivity}
    return result
