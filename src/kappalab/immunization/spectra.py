"""The two condition-number definitions of Table 1 and the official code's regularizers r1, r2.

kappa definitions (for a symmetric PSD ``H``; both live in :mod:`kappalab.kappa`'s registry,
:func:`~kappalab.kappa.kappa_definition`, which documents them):

* ``"pinv"`` (Eq. 1 with the pseudo-inverse): ``lambda_1 / lambda_k`` with ``lambda_k`` the smallest eigenvalue
  above ``rtol * lambda_1`` (:func:`kappalab.kappa.condition_number` with ``psd=True``, default ``rtol = D * eps``).
* ``"shifted"`` (the authors' code, :func:`kappalab.kappa.kappa_shifted`): eigenvalues of ``H + shift I``
  (``shift = 1e-6``), those ``> shift`` kept, ``kappa = max / min`` of the kept ones. An exact zero eigenvalue of H
  becomes ``shift + rounding``, and rounding of a zero eigenvalue is about ``D * eps * lambda_1``, which for
  ``lambda_1 ~ 1e3`` is ~1e-11: a coin flip decides whether a null direction is kept, and if it is, kappa jumps
  to ``~lambda_1 / shift``. Table 1's sensitivity block exists to expose exactly that.

Official regularizers (on a minibatch's ``S = Phi^T Phi``, ``D = S.shape[0]``; ``s_max``, ``s_min`` the largest
and smallest kept eigenvalue of ``S + shift I`` as above):

* ``r1(S) = s_max^2 / 2 - ||S||_F^2 / (2 D)``: the core's R_well formula with ``p = D`` (as in Eq. 3).
* ``r2(S) = 1 / (||S||_F^2 / (2 D) - s_min^2 / 2)``: the core's R_ill formula, but with ``k = D`` (the dimension)
  where Eq. 12 has ``k = rank(S)``. With rank(S) < D (always here: the features have rank 74 of 79) the
  denominator is smaller than Eq. 12's by ``||S||_F^2 (1/(2 rank) - 1/(2 D))``, so r2 > R_ill, and its minimizer
  is not Eq. 12's. Both are built from :func:`kappalab.regularizers.r_well_from_extremes` and
  :func:`kappalab.regularizers.ill_denominator` (one specification of the formulas).

Gradients flow through ``torch.linalg.eigvalsh`` (whose backward ``V diag(g) V^T`` has no eigen-gap division). Every
eigenproblem here goes through :func:`kappalab.extremes.batched_eigh` (``method="auto"``: ``eigvalsh`` on the CPU,
bit for bit what these functions computed before; the tensor-op Jacobi on CUDA, whose values carry the same
gradient, and LAPACK's values for a matrix it did not converge on, counted).
"""

from __future__ import annotations

from kappalab.extremes import batched_eigh
from kappalab.kappa import DEFAULT_SHIFT, kappa_definition, kappa_shifted
from kappalab.regularizers import ill_denominator, r_well_from_extremes
from kappalab.spectral import Extremes

__all__ = ["DEFAULT_SHIFT", "kappa", "kappa_shifted", "torch_kappa", "official_r1", "official_r2",
           "FeatureGram", "gram_extremes_shifted", "SPECTRAL_ROUTES", "torch_extremes", "kappa_of_extremes",
           "official_r2_of_extremes", "extremes_of_gram_spectrum", "top_projector", "official_r1_coefficient",
           "official_r2_coefficient", "shifted_kappa_coefficient", "gram_shifted_kappa",
           "features_lambda_max", "shifted_extremes"]


def kappa(H: object, definition: str, *, rtol: float | None = None, shift: float = DEFAULT_SHIFT) -> float:
    """kappa of a PSD ``H`` under the registered ``definition`` ("pinv" or "shifted"), as a float."""
    return float(kappa_definition(definition).of_matrix(H, rtol=rtol, shift=shift))


# ---- differentiable (torch) versions used in training -----------------------------------------------------------

def torch_extremes(S, definition: str, *, rtol: float | None = None, shift: float = DEFAULT_SHIFT,
                   rank: int | None = None, dim: int | None = None) -> Extremes:
    """Differentiable ``s_max``, ``s_min`` and ``||S||_F^2`` of a symmetric PSD torch ``S`` as an
    :class:`~kappalab.spectral.Extremes` (singular vectors are not needed by the scalar formulas: left None).

    The registered ``definition`` (:func:`kappalab.kappa.kappa_definition`) names the matrix whose eigenvalues are
    read and the rule that keeps them: ``"pinv"``, eigenvalues of S kept by the rank rule at ``rtol``;
    ``"shifted"``, eigenvalues of ``S + shift I`` kept above ``shift``. ``rank`` overrides the ``k`` the formulas
    use (the official code: ``k = D``). ``dim``: the size of the matrix whose spectrum this is, when ``S`` is the
    Gram matrix ``F F^T`` of features ``F`` (``N x D``, ``N < D``) standing for ``F^T F`` (the same nonzero
    eigenvalues; the rank rule's default ``rtol`` is then ``D * eps``, and ``p = D``); ``"pinv"`` only, as the
    shifted rule reads the zero eigenvalues the Gram matrix does not hold. The kept set is found on the device (no
    host sync). A stack of matrices (leading run dimension) gives one value per matrix in each field.
    """
    import torch

    n = S.shape[-1]
    d, D = kappa_definition(definition), n if dim is None else dim
    if D != n and definition != "pinv":
        raise ValueError(f"dim != S.shape[-1] (a Gram matrix) needs the 'pinv' definition, got {definition!r}")
    lam = _eigenvalues(d.matrix(S, shift=shift))
    threshold, keep, k = d.rule(lam.detach(), rtol=rtol, shift=shift, dim=D)
    first = torch.argmax(keep.to(torch.int8), dim=-1, keepdim=True)  # ascending order: first kept = smallest kept
    s_min = lam.gather(-1, first).squeeze(-1)
    s_km1 = lam.gather(-1, torch.clamp(first + 1, max=n - 1)).squeeze(-1)
    k_used = k if rank is None else torch.full((), rank, dtype=torch.int64, device=S.device)
    return Extremes(s_max=lam[..., -1], u_max=None, v_max=None, s_2=lam[..., -2], s_min=s_min, u_min=None,
                    v_min=None, s_km1=s_km1, rank=k_used, fro2=(S * S).sum(dim=(-2, -1)), p=D, threshold=threshold)


def torch_kappa(S, definition: str, *, rtol: float | None = None, shift: float = DEFAULT_SHIFT):
    """Differentiable kappa of a symmetric PSD torch ``S`` (autograd through ``eigvalsh``; :mod:`kappalab.kappa`):
    Opt-kappa's objective. ``S`` may be a :class:`FeatureGram` (gram route; ``"shifted"`` only)."""
    if isinstance(S, FeatureGram):
        if definition != "shifted":
            raise ValueError(f"the gram route implements the 'shifted' kappa only, got {definition!r}")
        return gram_shifted_kappa(_eigenvalues(S.G)[..., -1], shift)
    # one run or a stack (the batched engine): kappa_of_spectrum's / kappa_shifted's ratio, the same eigenvalues and
    # kept set (the largest over the smallest kept value)
    return kappa_of_extremes(torch_extremes(S, definition, rtol=rtol, shift=shift))


def _eigenvalues(S):
    """The ascending eigenvalues of a symmetric torch ``S`` (or stack), differentiable:
    :func:`kappalab.extremes.batched_eigh` without vectors."""
    return batched_eigh(S, vectors=False)[0]


def kappa_of_extremes(e: Extremes):
    """``s_max / s_min`` of the kept spectrum (:func:`torch_kappa` of a :class:`FeatureGram` or a stack)."""
    return e.s_max / e.s_min


def official_r1(S, shift: float = DEFAULT_SHIFT):
    """The official code's well-conditioning term ``s_max^2/2 - ||S||_F^2/(2D)`` (core R_well formula, p = D).
    ``S`` may be a :class:`FeatureGram` (gram route, :func:`gram_extremes_shifted`)."""
    return r_well_from_extremes(shifted_extremes(S, shift))


def official_r2(S, shift: float = DEFAULT_SHIFT):
    """The official code's ill-conditioning term ``1 / (||S||_F^2/(2D) - s_min^2/2)``: core R_ill denominator
    with ``k = D`` (the dimension) instead of Eq. 12's ``k = rank(S)``. ``S`` may be a :class:`FeatureGram`
    (gram route: ``s_min := shift``, see :func:`gram_extremes_shifted`)."""
    return official_r2_of_extremes(shifted_extremes(S, shift, rank=S.shape[-1]))


def official_r2_of_extremes(e: Extremes):
    """:func:`official_r2` from the extremes of S (``e.rank`` = D, the official code's k)."""
    return 1.0 / ill_denominator(e, check=False)


# ---- the gram route: the same quantities from the N x N Gram matrix of a minibatch's features -----------------

#: ``extra.spectral_route`` values: "dense" (eigvalsh of the D x D S = Phi^T Phi; the default, Table 1), "gram"
#: (eigvalsh of the N x N Phi Phi^T when N < D) or "features" (the gram route with theta's gradient assembled in
#: feature space; Table 2's 64-row minibatches of 784-dim features), all three for the official protocol, or
#: "closed_form" (paper protocol: Thm 4.2's theta-gradients without autograd, :mod:`.paper_step`). See
#: :mod:`kappalab.immunization.protocols`.
SPECTRAL_ROUTES: tuple[str, ...] = ("dense", "gram", "features", "closed_form")


class FeatureGram:
    """``S = Phi^T Phi`` (``D x D``) held as its features ``Phi`` (``N x D``, ``N < D``) and Gram matrix
    ``G = Phi Phi^T`` (``N x N``, symmetrized). S is never formed: its nonzero eigenvalues are G's,
    ``||S||_F^2 = ||G||_F^2``, and an eigenvector ``u`` of G (eigenvalue ``s > 0``) maps to the eigenvector
    ``v = Phi^T u / sqrt(s)`` of S. Autograd through ``eigvalsh(G)`` gives ``ds/dPhi = 2 u u^T Phi =
    2 sqrt(s) u v^T = 2 Phi v v^T``, the dense route's gradient."""

    def __init__(self, Phi, *, copy_right_factor: bool = True) -> None:
        if not Phi.shape[-2] < Phi.shape[-1]:
            raise ValueError(f"Phi must have fewer rows than columns (N < D) for the gram route, got "
                             f"{tuple(Phi.shape)}")
        self.Phi = Phi
        # a contiguous right factor gives the same backward GEMMs for one run and a stack; without a backward (the
        # closed-form step) the transposed view is multiplied directly (no copy)
        G = Phi @ (Phi.mT.contiguous() if copy_right_factor else Phi.mT)
        self.G = 0.5 * (G + G.mT)

    @property
    def dim(self) -> int:
        """D, the size of S."""
        return int(self.Phi.shape[-1])

    @property
    def shape(self) -> tuple[int, int]:
        """S's shape ``(D, D)``."""
        return (self.dim, self.dim)


def gram_extremes_shifted(F: FeatureGram, shift: float = DEFAULT_SHIFT, rank: int | None = None) -> Extremes:
    """:func:`torch_extremes` of ``S = Phi^T Phi`` under the ``"shifted"`` rule, from the ``N x N`` Gram matrix.

    * ``s_max = lambda_max(G) + shift`` and ``s_2 = lambda_2(G) + shift``: the dense rule's largest eigenvalues
      of ``S + shift I`` (differentiable through ``eigvalsh(G)``).
    * ``fro2 = ||G||_F^2 = ||S||_F^2``.
    * ``s_min := shift`` (a constant, no gradient). Here ``rank(S) <= N < D``, so ``S + shift I`` has
      ``D - rank`` eigenvalues equal to ``shift`` in exact arithmetic, each computed by the dense ``eigvalsh`` as
      ``shift +- O(eps ||S||)``; the dense rule keeps those that round above ``shift`` (hundreds of them on a 64-row
      MNIST batch: measured 422 kept, minimum ``1.0000000000157e-06``, while the smallest nonzero eigenvalue of
      ``Phi Phi^T`` is 1.16), so its ``s_min`` is ``shift`` plus rounding noise of ~1e-17, whose eigenvector lies
      in null(S) (gradient ~0). The gram route makes that documented outcome deterministic: ``s_min = shift``
      exactly. The s_min terms of r2 (``s_min^2/2 ~ 5e-13``) are then ~1e-12 of its denominator, and the
      shifted kappa is ``(lambda_max(G) + shift) / shift``. (On the rare batch where no null eigenvalue rounds
      above ``shift`` the dense rule would take the smallest nonzero eigenvalue instead; the gram route does not
      emulate that coin flip.)
    * ``rank``: the dense rule's kept count depends on rounding; the route reports ``rank`` if given (r2: D),
      else D. ``s_km1`` (only used by degeneracy checks, which the official protocol does not make) = shift.
    """
    return extremes_of_gram_spectrum(_eigenvalues(F.G), F, shift, rank)


def extremes_of_gram_spectrum(lam, F: FeatureGram, shift: float = DEFAULT_SHIFT, rank: int | None = None
                              ) -> Extremes:
    """:func:`gram_extremes_shifted` from the eigenvalues ``lam`` of ``F.G`` (ascending), e.g. from an ``eigh``
    that also gave the eigenvectors (:mod:`kappalab.immunization.official_step`). ``lam=None``: no eigenvalue is
    known, ``s_max`` and ``s_2`` are NaN, and only what r2 reads (``fro2``, ``rank``, ``s_min = shift``) is set:
    r2 needs no eigenproblem on the gram route."""
    import torch

    D, G = F.dim, F.G
    const = lambda x: torch.full((), x, dtype=G.dtype, device=G.device)
    if lam is None:
        s_max = s_2 = torch.full(G.shape[:-2], float("nan"), dtype=G.dtype, device=G.device)
    else:
        s_max = lam[..., -1] + shift
        s_2 = lam[..., -2] + shift if lam.shape[-1] > 1 else const(shift)
    k = torch.full((), D if rank is None else rank, dtype=torch.int64, device=G.device)
    return Extremes(s_max=s_max, u_max=None, v_max=None, s_2=s_2, s_min=const(shift), u_min=None, v_min=None,
                    s_km1=const(shift), rank=k, fro2=(G * G).sum(dim=(-2, -1)), p=D, threshold=const(shift))


def gram_shifted_kappa(lam_max, shift: float = DEFAULT_SHIFT):
    """The gram route's shifted kappa of ``S = Phi^T Phi`` from ``lambda_max(G)`` alone: ``s_max / s_min`` with
    ``s_max = lambda_max + shift`` and ``s_min = shift`` (:func:`gram_extremes_shifted`), i.e.
    ``(lambda_max + shift) / shift``; :func:`torch_kappa` of a :class:`FeatureGram`."""
    return (lam_max + shift) / shift


#: :func:`features_lambda_max`: the accepted relative residual of the top Ritz pair, the Lanczos steps between two
#: convergence checks (each reads one flag on the host) and the most steps before it gives up
LANCZOS_RTOL, LANCZOS_CHECK_EVERY, LANCZOS_MAX_STEPS = 1e-12, 5, 60


def features_lambda_max(X, theta, bias=None, *, rtol: float = LANCZOS_RTOL, max_steps: int = LANCZOS_MAX_STEPS):
    """``lambda_max(S)`` for ``S = Phi^T Phi``, ``Phi = X theta (+ 1 b^T)`` (one value per stacked run), without
    forming Phi, S or the Gram matrix: Lanczos on ``v -> Phi^T (Phi v)`` (products with theta and X only, ~4
    ``D x D``-sized matrix-vector products a step instead of the ``N x D x D`` features product, the ``N x D x N``
    Gram and an ``N x N`` ``eigvalsh``), with full reorthogonalization, from a fixed pseudo-random start vector.

    Accepted when, for every run, the top Ritz pair ``(t, y)`` has the residual ``||S y - t y|| <= rtol * t``
    (read from the tridiagonal matrix every :data:`LANCZOS_CHECK_EVERY` steps): ``t <= lambda_max`` (a Rayleigh
    quotient) and some eigenvalue of S lies within the residual of ``t``, which is ``lambda_max`` unless the start
    vector is orthogonal to its eigenspace (probability zero for the random start); the error is then about
    ``residual^2 / gap`` (~1e-16 relative, measured). Returns None when the residual is not reached within
    ``max_steps`` steps (a top eigenvalue nearly repeated) or the Krylov space becomes invariant first (rank(S) at
    most the steps taken): the caller then takes the dense eigensolver."""
    import torch

    D, lead = theta.shape[-1], theta.shape[:-2]
    start = torch.randn(D, 1, generator=torch.Generator().manual_seed(0), dtype=theta.dtype).to(theta.device)
    Q = [(start / torch.linalg.vector_norm(start)).expand(*lead, D, 1)]
    alphas, betas = [], []

    def S_times(v):
        u = X @ (theta @ v)  # Phi v
        if bias is not None:
            u = u + bias.unsqueeze(-2) @ v
        w = theta.mT @ (X.mT @ u)  # Phi^T u
        return w if bias is None else w + bias.unsqueeze(-1) * u.sum(dim=-2, keepdim=True)

    for step in range(1, max_steps + 1):
        w = S_times(Q[-1])
        alphas.append((Q[-1] * w).sum(dim=(-2, -1)))
        basis = torch.cat(Q, dim=-1)
        for _ in range(2):  # full reorthogonalization, twice ("twice is enough")
            w = w - basis @ (basis.mT @ w)
        betas.append(torch.linalg.vector_norm(w, dim=(-2, -1)))
        if step % LANCZOS_CHECK_EVERY == 0 or step == max_steps:
            a, b = torch.stack(alphas, dim=-1), torch.stack(betas, dim=-1)
            T = torch.diag_embed(a) + torch.diag_embed(b[..., :-1], 1) + torch.diag_embed(b[..., :-1], -1)
            ritz, vecs = torch.linalg.eigh(T)
            top = ritz[..., -1]
            if bool((b[..., :-1] <= rtol * top.unsqueeze(-1)).any()):
                return None  # an (almost) invariant Krylov space: the later vectors carry no information
            if bool((b[..., -1] * vecs[..., -1, -1].abs() <= rtol * top).all()):
                return top
        Q.append(w / betas[-1].clamp_min(torch.finfo(w.dtype).tiny)[..., None, None])  # 0 / tiny = 0 if S v = 0
    return None


def shifted_extremes(S, shift: float = DEFAULT_SHIFT, rank: int | None = None) -> Extremes:
    """:func:`torch_extremes` under the ``"shifted"`` rule of a torch ``S`` or a :class:`FeatureGram` (its gram
    route, :func:`gram_extremes_shifted`)."""
    if isinstance(S, FeatureGram):
        return gram_extremes_shifted(S, shift, rank)
    return torch_extremes(S, "shifted", shift=shift, rank=rank)


# ---- closed-form gradients of the gram route's values with respect to the features Phi ----------------------------
# Each gradient is ``A @ Phi`` with an N x N coefficient ``A`` (one per value), so that a step sums the coefficients
# of a task's terms and multiplies by Phi once. The two derivatives they are built from (G = Phi Phi^T, u a unit
# eigenvector of lambda_max(G), sign-free since it enters as u u^T): d lambda_max(G)/dPhi = 2 u u^T Phi and
# d||G||_F^2/dPhi = 4 G Phi. They are what autograd gives through ``eigvalsh(G)`` and ``(G * G).sum()``
# (tests/test_official_step.py compares both, and the coefficients against an mpmath finite difference).

def top_projector(V):
    """``u u^T`` for ``u = V[..., -1]``, the eigenvector of the largest eigenvalue of an ascending ``eigh``."""
    u = V[..., -1:]
    return u @ u.mT


def official_r1_coefficient(e: Extremes, G, uuT):
    """``A`` with ``d r1/dPhi = A Phi``: ``r1 = s_max^2/2 - ||G||_F^2/(2D)`` with ``s_max = lambda_max(G) + shift``
    (:func:`official_r1`), so ``A = 2 s_max u u^T - (2/D) G``."""
    return 2.0 * e.s_max[..., None, None] * uuT - (2.0 / e.p) * G


def official_r2_coefficient(e: Extremes, G):
    """``A`` with ``d r2/dPhi = A Phi``: ``r2 = 1/d``, ``d = ||G||_F^2/(2k) - s_min^2/2`` with ``k = e.rank`` and
    ``s_min = shift`` a constant (:func:`official_r2_of_extremes`), so ``A = -r2^2 (2/k) G``."""
    r2 = official_r2_of_extremes(e)
    k = e.rank.to(G.dtype)
    return (-2.0 * r2 * r2 / k)[..., None, None] * G


def shifted_kappa_coefficient(e: Extremes, uuT):
    """``A`` with ``d kappa/dPhi = A Phi`` for the gram route's ``kappa = s_max / s_min``
    (:func:`kappa_of_extremes`; ``s_min = shift`` a constant): ``A = 2 u u^T / s_min``."""
    return (2.0 / e.s_min)[..., None, None] * uuT
