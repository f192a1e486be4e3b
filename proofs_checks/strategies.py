"""Hypothesis strategies shared by every claim: matrices built from a drawn spectrum, ``U diag(s) V^T``.

The spectrum is drawn as ``s_1 = 10^scale`` (``scale`` in [-6, 6]) followed by ``k - 1`` ratios
``r_i = s_i / s_{i+1} >= 1`` (``log10 r_i`` bounded so that ``kappa <= 10^max_log_kappa``); ``p - k`` zeros make it
rank-deficient. Corners are reached on purpose: ``near-tie-top`` (``r_1 = 1 + 10^-j``), ``near-tie-bottom``
(``r_{k-1} = 1 + 10^-j``), exact ties (``r = 1``, only with ``ties=True``), dimensions :data:`DIMS` (2-4 under the ``ci`` profile, 2-8 under
``deep``), rectangular shapes,
and diagonal matrices (identity factors; hypothesis shrinks towards them, so minimal counterexamples are
readable). Orthogonal factors are Haar-distributed, generated from a drawn seed (QR of a Gaussian with the sign
fix of Mezzadri 2007).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from .profiles import profile_name

#: the default range of matrix dimensions: 2-4 under the ``ci`` profile (CI's time), 2-8 under ``deep``
DIMS: tuple[int, int] = (2, 4) if profile_name() == "ci" else (2, 8)


def haar_orthogonal(n: int, seed: int) -> np.ndarray:
    """A Haar-distributed ``n x n`` orthogonal matrix from ``seed`` (seed 0 gives the identity)."""
    if seed == 0:
        return np.eye(n)
    rng = np.random.default_rng(seed)
    Q, R = np.linalg.qr(rng.standard_normal((n, n)))
    return Q * np.sign(np.diag(R))


@dataclass(frozen=True)
class SpectralMatrix:
    """``U[:, :p] diag(s) V[:, :p]^T`` with ``s`` descending (zeros at the end) and its provenance."""

    s: np.ndarray  #: all p singular values, descending, exact zeros for the rank deficiency
    U: np.ndarray  #: m x m orthogonal
    V: np.ndarray  #: n x n orthogonal
    family: str  #: label recorded in the evidence

    @property
    def rank(self) -> int:
        return int(np.count_nonzero(self.s))

    @property
    def matrix(self) -> np.ndarray:
        p = self.s.shape[0]
        return (self.U[:, :p] * self.s) @ self.V[:, :p].T

    def __repr__(self) -> str:
        with np.printoptions(precision=17):
            return (f"SpectralMatrix(family={self.family!r}, s={self.s!r},\n  matrix=\n{self.matrix!r})")


@st.composite
def spectra(draw, p: int, *, rank: str = "full", min_rank: int = 1, ties: bool = False,
            min_gap: float = 0.0, max_log_kappa: float = 8.0, scale: tuple[float, float] = (-6.0, 6.0),
            corners: tuple[str, ...] | None = None) -> tuple[np.ndarray, str]:
    """A descending spectrum of length ``p`` and its family label.

    ``rank``: ``"full"`` (k = p), ``"deficient"`` (min_rank <= k < p) or ``"any"``. ``min_gap``: the relative
    gaps ``(s_1 - s_2)/s_1`` and ``(s_{k-1} - s_k)/s_{k-1}`` are at least this (for gradient checks).
    ``corners``: restrict the corner drawn when k > 1 (e.g. ``("near-tie-top", "near-tie-bottom")``).
    """
    lo_k = max(1, min_rank)
    if rank == "full":
        k = p
    elif rank == "deficient":
        k = draw(st.integers(lo_k, p - 1))
    else:
        k = draw(st.integers(min(lo_k, p), p))
    log_top = draw(st.floats(*scale))
    corner = "generic"
    log_r = []
    if k > 1:
        per = max_log_kappa / (k - 1)
        lo = np.log10(1 + min_gap) if min_gap > 0 else 0.0
        log_r = [draw(st.floats(0.0 if not ties else 0.0, per)) for _ in range(k - 1)]
        choices = ["generic", "near-tie-top", "near-tie-bottom", "huge-kappa"] + (["tie"] if ties else [])
        if min_gap > 0:
            choices = ["generic", "huge-kappa"]
        if corners is not None:
            choices = [c for c in choices if c in corners]
        corner = draw(st.sampled_from(choices))
        j = draw(st.integers(1, 12))
        if corner == "huge-kappa":
            log_r = [per] * (k - 1)
        elif corner == "near-tie-top":
            log_r[0] = np.log10(1 + 10.0 ** -j)
        elif corner == "near-tie-bottom":
            log_r[-1] = np.log10(1 + 10.0 ** -j)
        elif corner == "tie":
            idx = draw(st.sampled_from([0, k - 2]))
            log_r[idx] = 0.0
            corner = "tie-top" if idx == 0 else "tie-bottom"
        if min_gap > 0:
            log_r[0] = max(log_r[0], lo)
            log_r[-1] = max(log_r[-1], lo)
        elif not ties:
            log_r = [max(r, 5e-14) for r in log_r]  # strictly descending (relative gap >= 1e-13) unless ties
    log_s = log_top - np.concatenate([[0.0], np.cumsum(log_r)])
    s = np.concatenate([10.0 ** log_s, np.zeros(p - k)])
    log_kappa = log_s[0] - log_s[-1]
    bucket = "kappa<1e1" if log_kappa < 1 else ("kappa<1e4" if log_kappa < 4 else "kappa>=1e4")
    return s, f"{'full' if k == p else 'rank-deficient'},{corner},{bucket}"


@st.composite
def spectral_matrices(draw, *, shape: str = "any", dims: tuple[int, int] = DIMS, psd: bool = False,
                      diagonal: bool | None = None, **spectrum_kw) -> SpectralMatrix:
    """A matrix ``U diag(s) V^T`` (``V = U`` when ``psd``) with a spectrum from :func:`spectra`.

    ``shape``: ``"square"``, ``"rect"`` or ``"any"`` (ignored when ``psd``). ``diagonal``: force (True) or
    forbid (False) identity factors; ``None`` lets hypothesis choose (it shrinks towards diagonal).
    """
    min_rank = spectrum_kw.get("min_rank", 1)
    lo = max(dims[0], min_rank + 1 if spectrum_kw.get("rank") == "deficient" else min_rank)
    m = draw(st.integers(lo, dims[1]))
    if psd or shape == "square":
        n = m
    elif shape == "rect":
        n = draw(st.integers(lo, dims[1]).filter(lambda x: x != m))
    else:
        n = draw(st.integers(lo, dims[1]))
    p = min(m, n)
    s, fam = draw(spectra(p, **spectrum_kw))
    seeds = st.just(0) if diagonal else (st.integers(1, 2**32 - 1) if diagonal is False
                                          else st.integers(0, 2**32 - 1))
    su = draw(seeds)
    U = haar_orthogonal(m, su)
    V = U if psd else haar_orthogonal(n, draw(seeds) if su else 0)
    kind = "psd" if psd else ("square" if m == n else "rect")
    return SpectralMatrix(s=s, U=U, V=V, family=f"{kind},{fam},{'diagonal' if su == 0 else 'rotated'}")


def near_bound_fractions() -> st.SearchStrategy[float]:
    """Fractions ``f`` of a step bound: ``1 - 10^-j`` (very close to it), or anywhere in (0, 1)."""
    return st.one_of(st.integers(1, 12).map(lambda j: 1.0 - 10.0 ** -j),
                     st.floats(1e-6, 1.0, exclude_max=True))


def directions(m: int, n: int, seed: int) -> np.ndarray:
    """A unit-Frobenius-norm Gaussian direction for finite differences."""
    E = np.random.default_rng(seed).standard_normal((m, n))
    return E / np.linalg.norm(E)


@dataclass(frozen=True)
class ThetaK:
    """A square feature extractor theta and a data covariance K of the same size D."""

    theta: SpectralMatrix
    K: SpectralMatrix

    @property
    def family(self) -> str:
        return f"theta[{self.theta.family}]|K[{self.K.family}]"

    def __repr__(self) -> str:
        with np.printoptions(precision=17):
            return f"ThetaK(\ntheta={self.theta!r},\nK={self.K!r})"


@st.composite
def thetas_and_covariances(draw, *, dims: tuple[int, int] = DIMS, diagonal: bool | None = None,
                           theta_kw: dict | None = None, K_kw: dict | None = None) -> ThetaK:
    """theta (square, D x D) and K (symmetric positive definite by default) of a common size D."""
    D = draw(st.integers(*dims))
    theta = draw(spectral_matrices(shape="square", dims=(D, D), diagonal=diagonal, **(theta_kw or {})))
    K = draw(spectral_matrices(psd=True, dims=(D, D), diagonal=diagonal, **({"rank": "full", "max_log_kappa": 6}
                                                                           | (K_kw or {}))))
    return ThetaK(theta, K)


def diagonal_theta_k(theta_diag, K_diag) -> ThetaK:
    """An explicit diagonal ThetaK (for ``@example`` regressions)."""
    t, k = np.asarray(theta_diag, float), np.asarray(K_diag, float)
    order_t, order_k = np.argsort(-t), np.argsort(-k)
    It, Ik = np.eye(t.size)[:, order_t], np.eye(k.size)[:, order_k]
    return ThetaK(SpectralMatrix(t[order_t], It, It, "regression"), SpectralMatrix(k[order_k], Ik, Ik, "regression"))


@st.composite
def thetas_with_h_spectrum(draw, *, dims: tuple[int, int] = DIMS, **spectrum_kw) -> ThetaK:
    """theta and K with the spectrum h of ``H = theta^T K theta`` DRAWN (:func:`spectra`, full rank):
    ``K = Q diag(g) Q^T`` (g drawn, kappa(K) <= 1e3), ``theta = Q diag(sqrt(h/g)) V^T``, so that
    ``H = V diag(h) V^T`` and ``h = theta.s^2 * K.s``. Drawing theta's and K's spectra (as
    :func:`thetas_and_covariances` does) reaches near-ties or gaps of H only by chance."""
    D = draw(st.integers(*dims))
    h, fam = draw(spectra(D, rank="full", **spectrum_kw))
    g, _ = draw(spectra(D, rank="full", max_log_kappa=3.0, scale=(-1.0, 1.0)))
    Q, V = (haar_orthogonal(D, draw(st.integers(0, 2**32 - 1))) for _ in range(2))
    theta = SpectralMatrix(np.sqrt(h / g), Q, V, f"H[{fam}]")
    return ThetaK(theta, SpectralMatrix(g, Q, Q, "psd,drawn-with-H"))


def h_near_ties(dims: tuple[int, int] = DIMS) -> st.SearchStrategy[ThetaK]:
    """:func:`thetas_with_h_spectrum` with a near-tie (relative gap 10^-j, j = 1..12) in H's top or bottom pair."""
    return thetas_with_h_spectrum(dims=dims, max_log_kappa=3.0, scale=(-3.0, 3.0),
                                  corners=("near-tie-top", "near-tie-bottom"))
