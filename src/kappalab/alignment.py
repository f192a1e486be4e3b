"""How the covariances of the two tasks sit relative to each other (Sec. 3.1), and the best RIR any theta reaches.

Notation: ``K_P = X_P^T X_P`` and ``K_H = X_H^T X_H`` (``D x D``, symmetric PSD) with eigenvalues
``lambda_1 >= ... >= lambda_D`` (K_P, eigenvectors ``q_i``) and ``mu_1 >= ... >= mu_D`` (K_H, ``r_j``). Ranks ``k_P``,
``k_H`` follow the core rank rule (:mod:`kappalab.spectral`: eigenvalues above ``rtol * lambda_1``).

* :func:`principal_angles` - the angles ``0 <= phi_1 <= ... <= phi_m <= pi/2`` between two SUBSPACES (given by
  orthonormal bases): invariant to the basis chosen inside each subspace, hence to eigenvector signs and to any
  rotation inside a repeated eigenvalue's eigenspace. Cosines from the SVD of ``A^T B``, sines from the SVD of
  ``B - A A^T B``; an angle below pi/4 is taken from its sine (arcsin), the others from their cosine, so that both
  tiny and near-right angles keep full relative accuracy (Knyazev & Argentati, SIAM J. Sci. Comput. 2002).
* :func:`leading_eigenspace` / :func:`eigenspace_angles` - the span of the r leading eigenvectors; it is a
  well-defined subspace only when ``lambda_r > lambda_{r+1}``. A gap at or below ``gap_rtol * lambda_1`` (default
  ``sqrt(eps)``, the core's uniqueness tolerance) is a :class:`~kappalab.errors.DegenerateSpectrumError`: the r
  vectors would be an arbitrary pick from a larger eigenspace. Subspace perturbation theory (Davis-Kahan) bounds the
  computed subspace's angular error by about ``eps * lambda_1 / gap``, so above the tolerance the angles are
  accurate to about ``sqrt(eps)``.
* :func:`weighted_alignment` - ``sum_ij lambda_i mu_j (q_i^T r_j)^2 = tr(K_P K_H)``, normalised by its largest
  possible value over all relative rotations, ``sum_i lambda_i mu_i`` (von Neumann's trace inequality). It is 1
  exactly when K_P and K_H share an eigenbasis with both spectra sorted in the same order (the paper's "singular
  vectors (sorted by the singular values) all perfectly aligned") and ``sum_i lambda_i mu_{D+1-i} / sum_i lambda_i
  mu_i`` when the orders are reversed. Computed from the traces, it uses no eigenvector at all.
* :func:`best_rir` - the supremum of Eq. 15's RIR over every invertible theta (exact; see its docstring). It is
  finite only when range(K_H) lies inside range(K_P) (or rank K_H = 1), whatever the angles between eigenvectors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._backend import Array, eps, eye_like, namespace, to_scalar
from .errors import DegenerateSpectrumError
from .regularizers import condition_number
from .spectral import check_gap_rtol, default_gap_rtol, psd_extremes
from .validation import matrix, same_kind, symmetric


def _psd(K: object, name: str) -> Array:
    K = matrix(K, name, square=True)
    symmetric(K, name)
    return K


@dataclass(frozen=True)
class Eigensystem:
    """One symmetric PSD ``K`` decomposed once: eigenvalues (descending), eigenvectors (columns, same order), the
    rank by the core rule at ``rtol`` and the pinv kappa (:func:`kappalab.condition_number`). Every function of
    this module that takes a covariance accepts a matrix or an Eigensystem (so that a covariance shared by many
    pairs is decomposed once)."""

    K: Array
    values: Array
    vectors: Array
    rank: int
    kappa: float
    rtol: float | None


def eigensystem(K: object, *, rtol: float | None = None, name: str = "K") -> Eigensystem:
    """:class:`Eigensystem` of a symmetric PSD ``K`` (checked: finite, symmetric, PSD, nonzero)."""
    if isinstance(K, Eigensystem):
        if rtol is not None and rtol != K.rtol:
            raise ValueError(f"{name} was decomposed with rtol={K.rtol!r}, not the requested rtol={rtol!r}")
        return K
    K = _psd(K, name)
    rank = int(to_scalar(psd_extremes(K, rtol=rtol, name=name).rank))  # validates rtol too
    kappa = to_scalar(condition_number(K, rtol, psd=True))
    lam, V = _eigh_desc(K)
    return Eigensystem(K, lam, V, rank, kappa, rtol)


def _pair(K_P: object, K_H: object, rtol: float | None = None) -> tuple[Eigensystem, Eigensystem]:
    P, H = eigensystem(K_P, rtol=rtol, name="K_P"), eigensystem(K_H, rtol=rtol, name="K_H")
    same_kind(P.K, H.K)
    if P.K.shape != H.K.shape:
        raise ValueError(f"K_P and K_H must have the same shape, got {tuple(P.K.shape)} and {tuple(H.K.shape)}")
    return P, H


def _eigh_desc(K: Array) -> tuple[Array, Array]:
    """Eigenvalues (descending) and eigenvectors (columns, same order) of a symmetric K."""
    xp = namespace(K)
    lam, V = xp.linalg.eigh(K)
    return xp.flip(lam, (0,)), xp.flip(V, (1,))


def _svdvals(M: Array) -> Array:
    xp = namespace(M)
    if xp.__name__ == "numpy":
        return xp.linalg.svd(M, compute_uv=False)
    return xp.linalg.svdvals(M)


def principal_angles(A: object, B: object) -> Array:
    """Principal angles (radians, ascending) between ``span(A)`` and ``span(B)``; ``A`` (``D x a``) and ``B``
    (``D x b``) must have orthonormal columns (checked to ``100 * D * eps``). Returns ``min(a, b)`` angles."""
    A, B = matrix(A, "A"), matrix(B, "B")
    same_kind(A, B)
    if A.shape[0] != B.shape[0]:
        raise ValueError(f"A and B must have the same number of rows, got {A.shape[0]} and {B.shape[0]}")
    xp = namespace(A)
    for name, Q in (("A", A), ("B", B)):
        if Q.shape[1] > Q.shape[0]:
            raise ValueError(f"{name} has more columns ({Q.shape[1]}) than rows ({Q.shape[0]}): not a basis")
        dev = to_scalar(xp.abs(Q.T @ Q - eye_like(Q, Q.shape[1])).max())
        if dev > 100 * Q.shape[0] * eps(Q):
            raise ValueError(f"{name} must have orthonormal columns: max |{name}^T {name} - I| = {dev:.3e}")
    if A.shape[1] < B.shape[1]:
        A, B = B, A
    C = A.T @ B
    cos = xp.clip(_svdvals(C), 0.0, 1.0)  # descending: the cosines of the ascending angles
    sin = xp.clip(xp.flip(_svdvals(B - A @ C), (0,)), 0.0, 1.0)  # ascending: the sines of the ascending angles
    small = cos * cos > 0.5
    return xp.where(small, xp.arcsin(sin), xp.arccos(cos))


def leading_eigenspace(K: object, r: int, *, gap_rtol: float | None = None, rtol: float | None = None,
                       name: str = "K") -> Array:
    """Orthonormal basis (``D x r``) of the span of ``K``'s r leading eigenvectors.

    ``r`` must satisfy ``1 <= r <= rank(K)`` or ``r = D``; the subspace must be determined, i.e.
    ``lambda_r - lambda_{r+1} > gap_rtol * lambda_1`` (default ``gap_rtol = sqrt(eps)``), else
    :class:`DegenerateSpectrumError` names the eigenvalue cluster that r cuts through."""
    es = eigensystem(K, rtol=rtol, name=name)
    check_gap_rtol(gap_rtol)
    lam, D = es.values, es.K.shape[0]
    if not isinstance(r, int) or isinstance(r, bool) or not 1 <= r <= D:
        raise ValueError(f"r must be an integer in 1..{D}, got {r!r}")
    if es.rank < r < D:
        raise ValueError(f"r = {r} exceeds rank({name}) = {es.rank}: the leading {r}-dimensional eigenspace would "
                         f"include an arbitrary part of {name}'s null space")
    if r < D:
        gap_rtol = default_gap_rtol(es.K) if gap_rtol is None else gap_rtol
        gap = to_scalar(lam[r - 1] - lam[r])
        if not gap > gap_rtol * to_scalar(lam[0]):
            raise DegenerateSpectrumError(
                f"the leading {r}-dimensional eigenspace of {name} is not determined: lambda_{r} - lambda_{r + 1} = "
                f"{gap:.3e} <= gap_rtol * lambda_1 = {gap_rtol * to_scalar(lam[0]):.3e} (gap_rtol = {gap_rtol:.1e}); "
                f"choose r at a gap in the spectrum")
    return es.vectors[:, :r]


def range_basis(K: object, *, rtol: float | None = None, name: str = "K") -> tuple[Array, Array]:
    """Orthonormal basis of ``range(K)`` (``D x k``, k = rank by the core rule) and the k nonzero eigenvalues
    (descending). The range is always determined: the gap below lambda_k is lambda_k itself."""
    es = eigensystem(K, rtol=rtol, name=name)
    return es.vectors[:, :es.rank], es.values[:es.rank]


def eigenspace_angles(K_P: object, K_H: object, r: int, *, gap_rtol: float | None = None,
                      rtol: float | None = None) -> Array:
    """Principal angles (ascending) between the leading r-dimensional eigenspaces of K_P and K_H."""
    P, H = _pair(K_P, K_H, rtol)
    return principal_angles(leading_eigenspace(P, r, gap_rtol=gap_rtol, name="K_P"),
                            leading_eigenspace(H, r, gap_rtol=gap_rtol, name="K_H"))


def weighted_alignment(K_P: object, K_H: object) -> Array:
    """``tr(K_P K_H) / sum_i lambda_i mu_i`` (both spectra descending; see the module docstring): 1 for aligned
    eigenvectors with spectra in the same order, smaller otherwise. Negative eigenvalues within rounding are
    clipped to 0 in the normaliser; both matrices must be nonzero."""
    P, H = _pair(K_P, K_H)
    xp = namespace(P.K)
    top = (xp.clip(P.values, 0.0, None) * xp.clip(H.values, 0.0, None)).sum()
    if not to_scalar(top) > 0:
        raise ValueError("weighted_alignment needs nonzero K_P and K_H (sum_i lambda_i mu_i = 0)")
    return (P.K * H.K).sum() / top


@dataclass(frozen=True)
class BestRIR:
    """Result of :func:`best_rir` (Python numbers; ``theta`` of the input's kind, or None).

    ``value`` is ``sup_theta RIR(theta)`` over invertible theta (``math.inf`` when unbounded); ``ratio`` the
    supremum of ``kappa(H_H(theta)) / kappa(H_P(theta))``; ``escape_dim`` the number of principal angles between
    range(K_H) and range(K_P) whose sine exceeds ``angle_tol`` (directions of range(K_H) outside range(K_P); at
    least ``k_H - k_P``), ``max_escape_sine`` the largest sine; ``theta`` a maximiser when the supremum is finite."""

    value: float
    ratio: float
    kappa_K_P: float
    kappa_K_H: float
    rank_P: int
    rank_H: int
    escape_dim: int
    max_escape_sine: float
    theta: Array | None


def best_rir(K_P: object, K_H: object, *, rtol: float | None = None, angle_tol: float | None = None) -> BestRIR:
    """The largest Eq. 15 RIR (reference theta = I) any invertible theta achieves, with kappa the pinv definition.

    With ``L = K_P^{1/2}`` and ``M = (L^+) K_H (L^+)`` (``^+``: pseudo-inverse):

    * range(K_H) inside range(K_P): ``sup_theta kappa(H_H)/kappa(H_P) = kappa(M)``, attained at
      ``theta* = L^+ + (I - Pi_P)`` (``Pi_P`` the projector onto range(K_P)), where ``H_P = Pi_P`` (kappa 1) and
      ``H_H = M``. Upper bound: ``H_H = Y^T M Y`` with ``Y = L theta``, ``H_P = Y^T Y``, and the nonzero
      eigenvalues of ``Y^T M Y`` lie in ``[mu_min(M) s_min(Y)^2, mu_max(M) s_max(Y)^2]``. So
      ``best RIR = kappa(M) kappa(K_P) / kappa(K_H)``; for invertible K_P, M's eigenvalues are the generalised
      eigenvalues of (K_H, K_P).
    * ``k_H = 1``: kappa(H_H) = 1 always, so the supremum is ``kappa(K_P)`` (whitening theta).
    * otherwise (range(K_H) not inside range(K_P), ``k_H >= 2``) the supremum is infinite: take a unit ``u`` in
      null(K_P) with ``K_H u != 0`` and ``theta_t = I + (t - 1) u u^T``. Then ``H_P(theta_t) = K_P`` for every t,
      ``lambda_max(H_H) >= t^2 u^T K_H u``, and, since ``theta_t x = x`` for ``x`` orthogonal to u, Cauchy
      interlacing with the t-independent compression of K_H to ``u^perp`` keeps
      ``lambda_{k_H}(H_H) <= lambda_{k_H - 1}(K_H|u^perp)`` (rank(H_H) = k_H for t != 0): kappa(H_H) grows like t^2
      while kappa(H_P) stays.

    Containment is decided on the principal angles between the two ranges: a sine above ``angle_tol``
    (default ``sqrt(eps)``) is a direction of range(K_H) outside range(K_P). kappa uses the core rank rule at ``rtol``.
    """
    P, H = _pair(K_P, K_H, rtol)
    angle_tol = math.sqrt(eps(P.K)) if angle_tol is None else float(angle_tol)
    if not 0 <= angle_tol < 1:
        raise ValueError(f"angle_tol must be in [0, 1), got {angle_tol!r}")
    Q_P, lam_P = range_basis(P)
    Q_H, _ = range_basis(H)
    k_P, k_H, kappa_P, kappa_H = P.rank, H.rank, P.kappa, H.kappa
    outside = Q_H - Q_P @ (Q_P.T @ Q_H)  # the part of range(K_H) outside range(K_P)
    sines = _svdvals(outside)
    max_sine = to_scalar(sines.max()) if sines.shape[0] else 0.0
    escape = int(to_scalar((sines > angle_tol).sum()))  # k_H > k_P forces at least k_H - k_P unit sines
    if k_H < 2:  # kappa(H_H) = 1 for every theta; whitening makes kappa(H_P) = 1, its least value
        theta = _whitening(Q_P, lam_P)[1]
        return BestRIR(kappa_P / kappa_H, 1.0, kappa_P, kappa_H, k_P, k_H, escape, max_sine, theta)
    if escape > 0:
        return BestRIR(math.inf, math.inf, kappa_P, kappa_H, k_P, k_H, escape, max_sine, None)
    L_pinv, theta = _whitening(Q_P, lam_P)
    M = L_pinv @ H.K @ L_pinv
    ratio = to_scalar(condition_number(0.5 * (M + M.T), rtol, psd=True))
    return BestRIR(ratio * kappa_P / kappa_H, ratio, kappa_P, kappa_H, k_P, k_H, 0, max_sine, theta)


def _whitening(Q: Array, lam: Array) -> tuple[Array, Array]:
    """``L^+ = Q diag(lam^-1/2) Q^T`` and ``theta = L^+ + I - Q Q^T`` from K_P's range basis and eigenvalues."""
    xp = namespace(Q)
    L_pinv = (Q / xp.sqrt(lam)[None, :]) @ Q.T
    return L_pinv, L_pinv + eye_like(Q, Q.shape[0]) - Q @ Q.T


def whitening_theta(K_P: object, *, rtol: float | None = None) -> Array:
    """``L^+ + (I - Pi_P)`` with ``L = K_P^{1/2}``: a theta that is a function of K_P alone, makes ``H_P`` an
    orthogonal projector (kappa 1) and is :func:`best_rir`'s maximiser whenever range(K_H) lies in range(K_P)."""
    return _whitening(*range_basis(K_P, rtol=rtol, name="K_P"))[1]
