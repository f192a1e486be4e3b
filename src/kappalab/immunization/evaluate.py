"""Eq. 15 (RIR) of an immunized linear extractor under both kappa definitions, with a tolerance sensitivity block.

The Hessians are ``H(theta_I) = Phi^T Phi`` with ``Phi = X theta_I (+ 1 b^T)`` (biased features when the run has a
bias: the official code evaluates those) and ``H(I) = X^T X``; both are formed by the core
:func:`kappalab.hessian` (the bias enters as an extra input row: ``theta_aug = [theta; b^T]``,
``K_aug = [X 1]^T [X 1]``). kappa definitions: :mod:`kappalab.immunization.spectra`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kappalab.linear import hessian

from .spectra import DEFAULT_SHIFT, default_rtol, kappa
from .task import LinearTask

DEFINITIONS = ("pinv", "shifted")
SENSITIVITY_FACTORS = (0.1, 10.0)


def _augmented(theta: np.ndarray, bias: np.ndarray | None, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if bias is None:
        return theta, X.T @ X
    Xa = np.hstack([X, np.ones((X.shape[0], 1))])
    return np.vstack([theta, bias[None, :]]), Xa.T @ Xa


def hessians(theta: np.ndarray, task: LinearTask, bias: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The four Hessians of Eq. 15: ``H_P``/``H_H`` at theta_I (with bias) and at the identity (no bias)."""
    out = {}
    for which, X in (("P", task.X_P), ("H", task.X_H)):
        th, K = _augmented(theta, bias, X)
        out[f"H_{which}_immunized"] = hessian(th, 0.5 * (K + K.T))
        out[f"H_{which}_identity"] = hessian(np.eye(X.shape[1]), X.T @ X)
    return out


def rir_terms(H: dict[str, np.ndarray], definition: str, rtol: float, shift: float) -> dict[str, float]:
    """(i), (ii), RIR and the four kappas under one definition."""
    k = {name: kappa(M, definition, rtol=rtol, shift=shift) for name, M in H.items()}
    term_i = k["H_H_immunized"] / k["H_H_identity"]
    term_ii = k["H_P_immunized"] / k["H_P_identity"]
    return {"term_i": term_i, "term_ii": term_ii, "rir": term_i / term_ii,
            **{f"kappa_{name[2:]}": v for name, v in k.items()}}


def spectrum_endpoints(M: np.ndarray, rtol: float, shift: float) -> dict[str, float]:
    """lambda_max, smallest eigenvalue, rank and smallest kept eigenvalue under each definition."""
    lam = np.linalg.eigvalsh(M)
    kept_pinv = lam[lam > rtol * lam[-1]]
    lam_s = np.linalg.eigvalsh(M + shift * np.eye(M.shape[0]))
    kept_s = lam_s[lam_s > shift]
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
    rtol = default_rtol(D) if rtol is None else float(rtol)
    if not rtol > 0:
        raise ValueError(f"rtol must be > 0, got {rtol!r}")
    if not shift > 0:
        raise ValueError(f"shift must be > 0, got {shift!r}")
    if not set(sensitivity) <= set(DEFINITIONS):
        raise ValueError(f"sensitivity must name definitions among {DEFINITIONS}, got {sensitivity!r}")
    H = hessians(theta, task, bias)
    result: dict[str, Any] = {"rtol": rtol, "shift": shift, "has_bias": bias is not None}
    for d in DEFINITIONS:
        result[d] = rir_terms(H, d, rtol, shift)
    if endpoints:
        result["spectra"] = {name: spectrum_endpoints(M, rtol, shift) for name, M in H.items()}
    blocks = {
        "pinv": lambda: {f"rtol_x{f:g}": rir_terms(H, "pinv", rtol * f, shift) for f in SENSITIVITY_FACTORS},
        "shifted": lambda: {f"shift_x{f:g}": rir_terms(H, "shifted", rtol, shift * f) for f in SENSITIVITY_FACTORS},
    }
    result["sensitivity"] = {d: blocks[d]() for d in DEFINITIONS if d in sensitivity}
    return result
