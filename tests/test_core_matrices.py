"""Test matrices built from a chosen spectrum, the hypothesis strategies that draw them, and checks of both.

As in SciPy's ``symrand`` and PyTorch's ``make_fullrank_matrices_with_distinct_singular_values``, a test matrix
is ``S = U[:, :k] diag(s) V[:, :k]^T`` with random orthogonal ``U, V`` and a spectrum ``s`` chosen by the test:
so the expected singular values, rank, kappa and gaps are known exactly, and the hard corners (rank deficiency,
large kappa, extreme scale, ties) are reached on purpose. The other ``test_core_*`` modules import from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import event, given, note
from hypothesis import strategies as st

EPS = float(np.finfo(np.float64).eps)


def random_orthogonal(rng: np.random.Generator, n: int) -> np.ndarray:
    """A Haar-distributed ``n x n`` orthogonal matrix (QR of a Gaussian with the sign of R's diagonal fixed)."""
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.diag(r))


def from_spectrum(rng: np.random.Generator, m: int, n: int, spectrum: np.ndarray) -> np.ndarray:
    """``m x n`` matrix ``U[:, :k] diag(spectrum) V[:, :k]^T`` (``k = len(spectrum) <= min(m, n)``)."""
    k = len(spectrum)
    if k > min(m, n):
        raise ValueError(f"spectrum has {k} values, more than min(m, n) = {min(m, n)}")
    U, V = random_orthogonal(rng, m)[:, :k], random_orthogonal(rng, n)[:, :k]
    return (U * np.asarray(spectrum)) @ V.T


def psd_from_spectrum(rng: np.random.Generator, n: int, eigenvalues: np.ndarray) -> np.ndarray:
    """Symmetric PSD ``Q diag(eigenvalues, 0, ..., 0) Q^T`` (symmetrized exactly)."""
    k = len(eigenvalues)
    Q = random_orthogonal(rng, n)[:, :k]
    A = (Q * np.asarray(eigenvalues)) @ Q.T
    return 0.5 * (A + A.T)


def gapped_spectrum(rng: np.random.Generator, k: int, *, scale: float = 1.0, ratio: tuple[float, float] = (1.1, 3.0)
                    ) -> np.ndarray:
    """``k`` descending values, smallest ``scale``, consecutive ratios drawn from ``ratio``: all distinct."""
    ratios = rng.uniform(*ratio, size=k - 1)
    return scale * np.cumprod(np.concatenate([[1.0], ratios]))[::-1]


@dataclass(frozen=True)
class SpectralCase:
    """A test matrix and the spectrum it was built from (the nonzero singular values, descending)."""

    S: np.ndarray
    spectrum: np.ndarray

    @property
    def rank(self) -> int:
        return len(self.spectrum)

    @property
    def p(self) -> int:
        return min(self.S.shape)

    @property
    def kappa(self) -> float:
        return float(self.spectrum[0] / self.spectrum[-1])

    def __repr__(self) -> str:
        with np.printoptions(precision=17, linewidth=150):
            return f"SpectralCase(spectrum={self.spectrum!r},\nS={self.S!r})"


@st.composite
def spectral_cases(draw: st.DrawFn, *, psd: bool = False, max_dim: int = 6, min_rank: int = 1,
                   full_rank: bool = False, min_ratio: float = 1.05, max_ratio: float = 4.0,
                   log10_scale: tuple[float, float] = (-3.0, 3.0)) -> SpectralCase:
    """Matrices with a known spectrum whose consecutive nonzero singular values differ by at least the factor
    ``min_ratio`` (so s_max and s_min are unique, with a relative gap >= 1 - 1/min_ratio), kappa at most
    ``max_ratio ** (k - 1)``, the smallest nonzero value at ``10 ** log10_scale``, and rank ``k`` drawn between
    ``min_rank`` and ``p`` (exactly ``p`` with ``full_rank``)."""
    m = draw(st.integers(max(min_rank, 1), max_dim), label="m")
    n = m if psd else draw(st.integers(max(min_rank, 1), max_dim), label="n")
    p = min(m, n)
    k = p if full_rank else draw(st.integers(min_rank, p), label="rank")
    ratios = draw(st.lists(st.floats(min_ratio, max_ratio), min_size=k - 1, max_size=k - 1), label="ratios")
    scale = 10.0 ** draw(st.floats(*log10_scale), label="log10 s_min")
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    spectrum = scale * np.cumprod(np.concatenate([[1.0], ratios]))[::-1]
    rng = np.random.default_rng(seed)
    S = psd_from_spectrum(rng, n, spectrum) if psd else from_spectrum(rng, m, n, spectrum)
    return SpectralCase(S, spectrum)


# ---- checks of the generators themselves -----------------------------------------------------------------------

@given(case=spectral_cases())
def test_from_spectrum_has_requested_singular_values_and_rank(case: SpectralCase) -> None:
    note(repr(case))
    event("full rank" if case.rank == case.p else "rank-deficient")
    event("square" if case.S.shape[0] == case.S.shape[1] else "rectangular")
    s = np.linalg.svd(case.S, compute_uv=False)
    expected = np.concatenate([case.spectrum, np.zeros(case.p - case.rank)])
    # backward-stable SVD: each singular value is perturbed by at most ~ c * max(m, n) * eps * s_max
    np.testing.assert_allclose(s, expected, rtol=0, atol=20 * max(case.S.shape) * EPS * case.spectrum[0],
                               err_msg=repr(case))
    assert np.linalg.matrix_rank(case.S) == case.rank, repr(case)


@given(case=spectral_cases(psd=True))
def test_psd_from_spectrum_is_symmetric_psd_with_requested_eigenvalues(case: SpectralCase) -> None:
    note(repr(case))
    np.testing.assert_array_equal(case.S, case.S.T, err_msg="psd_from_spectrum must be exactly symmetric")
    lam = np.linalg.eigvalsh(case.S)[::-1]
    expected = np.concatenate([case.spectrum, np.zeros(case.p - case.rank)])
    np.testing.assert_allclose(lam, expected, rtol=0, atol=20 * case.p * EPS * case.spectrum[0], err_msg=repr(case))


def test_random_orthogonal_is_orthogonal(rng: np.random.Generator) -> None:
    Q = random_orthogonal(rng, 7)
    np.testing.assert_allclose(Q.T @ Q, np.eye(7), rtol=0, atol=20 * 7 * EPS, err_msg=repr(Q))


def test_gapped_spectrum_is_strictly_descending(rng: np.random.Generator) -> None:
    s = gapped_spectrum(rng, 5, scale=2.0)
    assert s[-1] == 2.0 and np.all(s[:-1] / s[1:] >= 1.1), s
