"""Spectra of a Table 2 run and kappa / Eq. 15 from them.

Rank tolerance. ``N = 500 < D = 784`` and many pixels are constant over a digit's images (rank(K) is 306 for
the 1s, 449 for the 0s), so ``K = X^T X`` and ``H(theta) = theta^T K theta`` are singular and kappa needs the
smallest NONZERO eigenvalue. Each run stores the squared singular values of ``X theta (+ 1 b^T)`` and ``X``,
ascending (:func:`stored_spectrum`, by SVD: accurate far below the ~1e-15 lambda_max floor of any eigenvalue
solver): the nonzero spectra of H and K without the D - N structural zeros. The headline kappa
(:func:`rir_from_spectra`) decides the rank k once per split, on K, at ``rtol = N eps`` (NumPy's convention), and
uses the same k for ``H(theta_I)`` (rank(H) = rank(K) for an invertible theta).

The rank rule, the pseudo-inverse kappa and Eq. 15's terms are :mod:`kappalab.kappa`'s; this module adds Table 2's
choices: spectra stored ascending, and the rank decided on K and reused for H(theta_I).
"""

from __future__ import annotations

import functools

import numpy as np

from kappalab import kappa as kp

from .data import mnist_task


def stored_spectrum(F: np.ndarray) -> np.ndarray:
    """The spectrum of ``H = F^T F`` as a Table 2 record stores it (``F = X theta (+ 1 b^T)``; ``F = X``: of ``K``):
    :func:`kappalab.kappa.feature_spectrum` (the ``min(N, D)`` squared singular values of ``F``, without the
    ``|D - N|`` structural zeros, descending) sorted ascending, as a NumPy array.

    By the SVD of F, not by ``eigvalsh`` of the Gram matrix ``F F^T``: the Gram eigensolver's absolute error is
    ~eps lambda_max, so it cannot resolve an eigenvalue below ~1e-15 lambda_max (kappa > ~1e15), whereas the SVD's
    absolute error is ~eps sigma_max on sigma, i.e. it resolves lambda_k / lambda_1 down to ~eps^2. Table 2's
    immunized H reach kappa ~1e17 (IMMA, Opt kappa): measured on pair 4-1, seed 0, IMMA, three runs whose theta_I
    differ by 1e-11 (two spectral routes, two Adam kernels) gave RIR 0.60, 0.60, 0.57 from Gram eigenvalues and
    3.66689 (all six digits equal) from the SVD (``tests/test_reproduce_table2.py`` checks the resolution against
    an exactly known spectrum)."""
    return np.sort(np.asarray(kp.feature_spectrum(F)))


def rank_of(spectrum: np.ndarray, rtol: float | None = None) -> int:
    """The numerical rank of a stored spectrum by :mod:`kappalab.kappa`'s rule (``rtol=None``: ``n eps``); a zero
    spectrum is an error."""
    lam = kp.descending(np.asarray(spectrum, dtype=np.float64))
    kp.check_nonzero(lam[0], "spectrum")
    return int(kp.rank_rule(lam, lam[0], kp.resolve_rtol(rtol, lam)).rank)


def rank_gap(spectrum: np.ndarray, rtol: float | None = None) -> tuple[int, float]:
    """``(k, decades)``: the rank by :func:`rank_of` and ``log10(lambda_k / lambda_{k+1})``, the width of the
    spectral gap the rank rule cuts in (``inf`` when nothing is cut or ``lambda_{k+1} = 0``). A wide gap (full
    MNIST's digits 0, 2, 3, 4, 6, 7, 8: 18-19 decades between the last nonzero eigenvalue and rounding) makes the
    rank independent of the tolerance; a narrow one (digit 1 on full MNIST, 3, 4, 6, 7, 8 on the subset) means the
    rule cuts a continuous tail."""
    lam = kp.descending(np.asarray(spectrum, dtype=np.float64))
    k = rank_of(spectrum, rtol)
    if k == len(lam) or lam[k] <= 0:
        return k, float("inf")
    return k, float(np.log10(lam[k - 1] / lam[k]))


def kappa_at_rank(spectrum: np.ndarray, rank: int) -> float:
    """``lambda_1 / lambda_rank`` (:func:`kappalab.kappa.kappa_of_spectrum`)."""
    return float(kp.kappa_of_spectrum(np.asarray(spectrum, dtype=np.float64), rank=int(rank)))


SPECTRA = ("K_P", "K_H", "H_P", "H_H")


def rir_from_spectra(spectra: dict[str, np.ndarray], rtol: float | None = None, *,
                     rank_from_K: bool = True) -> dict[str, float]:
    """Eq. 15 from stored spectra: (i) = kappa(H_H)/kappa(K_H), (ii) = kappa(H_P)/kappa(K_P), RIR = (i)/(ii).

    ``rank_from_K=True`` (the headline): the rank k of each split is decided once, on K, at ``rtol``
    (None: ``n eps``), and ``kappa(H(theta)) = lambda_1 / lambda_k`` with the same k, because
    ``rank(theta^T K theta) = rank(K)`` for every invertible theta (also with the official bias: the constant
    border pixels put the all-ones vector in range(X)). ``False``: each matrix gets its own numerical rank.
    """
    k = {}
    for split in ("P", "H"):
        rank = rank_of(spectra[f"K_{split}"], rtol)
        own = rank if rank_from_K else rank_of(spectra[f"H_{split}"], rtol)
        k[f"K_{split}"] = kappa_at_rank(spectra[f"K_{split}"], rank)
        k[f"H_{split}"] = kappa_at_rank(spectra[f"H_{split}"], own)
        k[f"rank_{split}"] = rank
    term_i, term_ii, rir = kp.rir_terms(k["H_H"], k["K_H"], k["H_P"], k["K_P"])
    return {"term_i": term_i, "term_ii": term_ii, "rir": rir,
            **{(n if n.startswith("rank") else f"kappa_{n}"): v for n, v in k.items()}}


def rtol_sensitivity(spectra: dict[str, np.ndarray], rtol: float | None = None) -> dict[str, float]:
    """RIR at ``rtol`` (None: ``n eps``) and at 10x / 0.1x of it, with the rank from K and with each matrix's own."""
    base = kp.default_rtol(spectra["K_P"]) if rtol is None else rtol
    out = {}
    for f in (0.1, 1.0, 10.0):
        out[f"rir_rtol_x{f:g}"] = rir_from_spectra(spectra, base * f)["rir"]
        out[f"rir_own_rank_rtol_x{f:g}"] = rir_from_spectra(spectra, base * f, rank_from_K=False)["rir"]
    return out



#: how the stored spectra are computed (records without the field hold Gram eigenvalues, "eigvalsh-gram")
SPECTRA_METHOD = "svd"


@functools.lru_cache(maxsize=8)
def data_spectra(a: int, b: int, seed: int, directory: str | None, pool: int, dataset: str = "mnist-subset"
                 ) -> dict[str, np.ndarray]:
    """K_P's and K_H's spectra of a task (theta-independent: shared by the four methods' runs in one worker)."""
    task = mnist_task(a, b, seed, directory, pool, dataset)
    return {name: stored_spectrum(X) for name, X in (("K_P", task.X_P), ("K_H", task.X_H))}


def run_spectra(task, theta: np.ndarray, bias: np.ndarray | None,
                data_spectra: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The four spectra of a run (:data:`SPECTRA`): K_P, K_H (``data_spectra`` when given: they do not depend on
    theta) and H_P, H_H at ``(theta, bias)``, each by :func:`stored_spectrum`."""
    from kappalab.immunization import features

    data = data_spectra if data_spectra is not None else {"K_P": stored_spectrum(task.X_P),
                                                          "K_H": stored_spectrum(task.X_H)}
    return {**data, "H_P": stored_spectrum(features(theta, task.X_P, bias)),
            "H_H": stored_spectrum(features(theta, task.X_H, bias))}
