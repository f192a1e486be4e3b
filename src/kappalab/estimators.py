"""Three estimators of RIR_theta0 (Eq. 17) from features, each with a bootstrap 95% interval.

Notation. theta_0 is the pre-trained extractor, theta_I the immunized one; ``p0``, ``pi`` are their features on D_P
samples (``N_P x D``, row n of both is the same sample), ``h0``, ``hi`` on D_H (``N_H x D``). ``H~ = F^T F``.
Eq. 17: ``(i) = kappa(H~_H(theta_I)) / kappa(H~_H(theta_0))``, ``(ii)`` likewise on D_P, ``RIR = (i) / (ii)``.

* ``"exact"``: Eq. 17 on all samples at once, with the pseudo-inverse kappa of ``H~`` from the SVD of ``F``
  (:func:`kappalab.kappa.kappa_of_features`: the rank rule of :mod:`kappalab.kappa` on the singular values of F) and
  :func:`kappalab.kappa.rir_terms`. It needs ``N >= D`` per task: with fewer samples ``H~`` has rank ``N < D`` and
  its kappa is that of an N-dimensional slice of the spectrum. Interval: a bootstrap over samples (rows drawn with
  replacement, the same rows for theta_0 and theta_I), when affordable (:data:`EXACT_BOOT_BUDGET`) and when a
  resample keeps the rank (a resample of N rows holds about ``0.632 N`` distinct ones; below D its ``H~`` loses rank
  where the full one has none, and the bootstrap would measure another quantity). Otherwise ``ci95 = None`` and
  ``ci_note`` says why.
* ``"groups"``: the paper's estimator (Sec. 5.2) with our kappa: ``groups`` random groups of ``group_size`` samples
  per task (:func:`random_groups`, D_H's groups drawn first, then D_P's, from ``default_rng(seed)``), per group
  ``(i)_g``, ``(ii)_g`` and ``RIR_g = (i)_g / (ii)_g``, reported as the means over the groups (so ``rir`` is the mean
  of the ``RIR_g``, not ``term_i / term_ii``).
* ``"authors"``: the same groups with the authors' shifted kappa (:func:`log_kappa_authors`: the eigenvalues of
  ``H~ + 1e-6 I`` in float64, the largest over the smallest one above 1e-6), per group ``exp(log kappa_I -
  log kappa_0)``, the means over the groups.

The group estimators' interval is a bootstrap over the groups (the ``RIR_g`` resampled with replacement, percentile
interval of their mean): how far the average would move with other groups. It says nothing of their bias. When
``D > group_size`` a group's ``H~`` has at least ``D - group_size`` zero eigenvalues: ours then sees only the
group_size-dimensional slice of the spectrum a group spans (biased towards 1 for a change in the weak directions),
and the authors' smallest kept eigenvalue is the 1e-6 floor or a rounding of it, so their kappa is about
``lambda_max / 1e-6``: a measure of the features' *scale*, not their conditioning (doubling the features reads as
RIR 4). :func:`scale_test` shows both on given features (docs/reproduction/table3.md, docs/measure.md).

The group code here is also what :func:`kappalab.deep.metrics.rir_theta0` runs (on torch tensors, unconverted);
:func:`estimate_all` converts torch tensors to float64 NumPy arrays once.
"""

from __future__ import annotations

import hashlib
import math
import sys
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Callable, Literal

import numpy as np

from ._backend import Array, is_torch, namespace
from .kappa import DEFAULT_SHIFT, RIRTerms, kappa_of_features, kappa_shifted, rir_terms
from .validation import matrix

#: the authors' diagonal shift (their ``lambda_diag``)
AUTHORS_SHIFT = DEFAULT_SHIFT

Kappa = Literal["pinv", "authors"]
KAPPAS: tuple[str, ...] = ("pinv", "authors")

#: the estimators of :func:`estimate_all`, in the order of every table
ESTIMATOR_NAMES: tuple[str, ...] = ("exact", "groups", "authors")

#: the exact estimator's bootstrap runs only when ``n_boot_exact * sum over the four matrices of N D min(N, D)``
#: (the work of their SVDs, in multiply-adds; one 2560 x 1280 SVD is 4.2e9 of these units) stays below this: about 70
#: such SVDs. 200 resamples of 2 x 2560 samples of 1280 features cost 3.4e12: pass ``n_boot_exact`` ~15, or a larger
#: ``exact_budget``.
EXACT_BOOT_BUDGET = 3e11

#: the expected fraction of distinct rows in a bootstrap resample of N rows, ``1 - (1 - 1/N)^N -> 1 - 1/e``
DISTINCT_FRACTION = 1 - math.exp(-1)

_BOOT_STREAM = 1  # the bootstrap's random stream: default_rng((seed, 1)), apart from the groups' default_rng(seed)


@dataclass(frozen=True)
class Estimate:
    """One estimator's Eq. 17 terms with its settings.

    ``ci95``: the bootstrap 95% interval of ``rir`` (percentiles 2.5 and 97.5), or None (``ci_note`` says why);
    ``per_group_i`` / ``per_group_ii``: the groups' ``(i)_g`` and ``(ii)_g`` (empty for ``"exact"``)."""

    name: str
    term_i: float
    term_ii: float
    rir: float
    ci95: tuple[float, float] | None
    ci_note: str
    kappa: str
    n_P: int
    n_H: int
    dim: int
    seed: int
    n_boot: int
    groups: int | None = None
    group_size: int | None = None
    rtol: float | None = None
    shift: float | None = None
    per_group_i: tuple[float, ...] = ()
    per_group_ii: tuple[float, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``ci95`` a list or None)."""
        out = asdict(self)
        out["ci95"] = None if self.ci95 is None else list(self.ci95)
        out["per_group_i"], out["per_group_ii"] = list(self.per_group_i), list(self.per_group_ii)
        return out


# ---- kappas and their ratios (NumPy arrays or torch tensors) -----------------------------------------------------

def _float64(F: Array) -> Array:
    if is_torch(F):
        return F.detach().to(sys.modules["torch"].float64)
    return np.asarray(F, dtype=np.float64)


def log_kappa_authors(F: Array, shift: float = AUTHORS_SHIFT) -> Array:
    """log kappa(H~) as the authors' code computes it (see the module docstring): float64,
    ``e = eigvalsh(F^T F + shift I)``, ``log max(e) - log min(e[e > shift])``. A 0-d array or tensor (on ``F``'s
    device)."""
    if F.ndim != 2:
        raise ValueError(f"F must be a 2-D (samples x features) matrix, got shape {tuple(F.shape)}")
    F = _float64(F)
    return namespace(F).log(kappa_shifted(F.T @ F, shift))  # the official rule's one home: kappalab.kappa


#: the reference features' kappas by content: a run measures theta_0's same groups (and the same whole features)
#: at every checkpoint, and each value costs an SVD or a D x D eigendecomposition ((rule, dtype, shape, bytes)
#: digest -> value)
_REFERENCE: OrderedDict[bytes, float] = OrderedDict()
_REFERENCE_CACHE_SIZE = 512


def _reference(rule: str, value: Callable[[np.ndarray], float], F: np.ndarray) -> float:
    """``value(F)`` of a NumPy reference ``F``, computed once per (``rule``, content): the same rule on the same
    bytes gives the same value. ``rule`` names the function and its parameters (``"pinv 1e-06"``); at most
    :data:`_REFERENCE_CACHE_SIZE` values are kept, the oldest dropped."""
    F = np.ascontiguousarray(F)
    key = hashlib.blake2b(f"{rule}|{F.dtype.str}{F.shape}".encode() + F.tobytes(), digest_size=20).digest()
    if key not in _REFERENCE:
        _REFERENCE[key] = value(F)
        if len(_REFERENCE) > _REFERENCE_CACHE_SIZE:
            _REFERENCE.popitem(last=False)
    return _REFERENCE[key]


def _kappa_pinv(F: Array, rtol: float | None, reference: bool = False) -> float:
    """:func:`kappalab.kappa.kappa_of_features` at ``rtol`` as a float; once per content for a NumPy
    ``reference``."""
    if reference and not is_torch(F):
        return _reference(f"pinv {rtol!r}", lambda G: float(kappa_of_features(G, rtol)), F)
    return float(kappa_of_features(F, rtol))


def kappa_ratio(kappa: Kappa, rtol: float | None = None) -> Callable[[Array, Array], float]:
    """``(F_I, F_0) -> kappa(H~(F_I)) / kappa(H~(F_0))`` for ``kappa``: ``"pinv"`` (ours,
    :func:`kappalab.kappa.kappa_of_features` at ``rtol``) or ``"authors"`` (``exp(log kappa_I - log kappa_0)`` of
    :func:`log_kappa_authors`); a NumPy reference ``F_0``'s value is computed once per content."""
    if kappa == "pinv":
        return lambda FI, F0: _kappa_pinv(FI, rtol) / _kappa_pinv(F0, rtol, reference=True)
    if kappa == "authors":
        def ratio(FI: Array, F0: Array) -> float:
            reference = (log_kappa_authors(F0) if is_torch(F0)
                         else _reference("authors", lambda G: float(log_kappa_authors(G)), F0))
            return float(namespace(FI).exp(log_kappa_authors(FI) - reference))
        return ratio
    raise ValueError(f"estimator must be one of {KAPPAS}, got {kappa!r}")


# ---- the paper's groups -----------------------------------------------------------------------------------------

def random_groups(n: int, groups: int, group_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``groups`` index sets of ``group_size`` distinct samples each (independent draws, without replacement
    within a group)."""
    if not (isinstance(groups, int) and groups >= 1):
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    if not (isinstance(group_size, int) and 1 <= group_size <= n):
        raise ValueError(f"group_size must be an int in [1, {n}] (the number of samples), got {group_size!r}")
    return [np.sort(rng.choice(n, size=group_size, replace=False)) for _ in range(groups)]


def _rows(F: Array, rows: np.ndarray) -> Array:
    if is_torch(F):
        return F[sys.modules["torch"].as_tensor(rows, device=F.device)]
    return F[rows]


def group_terms(hi: Array, h0: Array, pi: Array, p0: Array, ratio: Callable[[Array, Array], float], *,
                groups: int, group_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``((i)_g, (ii)_g)`` over the paper's random groups (D_H's drawn first, then D_P's, from
    ``default_rng(seed)``), with ``ratio`` from :func:`kappa_ratio`; NumPy arrays or torch tensors."""
    rng = np.random.default_rng(seed)
    gH = random_groups(hi.shape[0], groups, group_size, rng)
    gP = random_groups(pi.shape[0], groups, group_size, rng)
    i_g = np.array([ratio(_rows(hi, g), _rows(h0, g)) for g in gH])
    ii_g = np.array([ratio(_rows(pi, g), _rows(p0, g)) for g in gP])
    return i_g, ii_g


# ---- bootstrap ----------------------------------------------------------------------------------------------------

def percentile_ci(values: np.ndarray) -> tuple[float, float]:
    """The 2.5 and 97.5 percentiles of bootstrap replicates."""
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def bootstrap_mean_ci(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> tuple[float, float]:
    """Percentile 95% interval of the mean of ``values`` over ``n_boot`` resamples with replacement."""
    values = np.asarray(values, dtype=np.float64)
    idx = rng.integers(0, values.shape[0], size=(n_boot, values.shape[0]))
    return percentile_ci(values[idx].mean(axis=1))


def exact_boot_cost(n_P: int, n_H: int, dim: int, n_boot: int) -> float:
    """The work of the exact estimator's bootstrap: ``n_boot`` times two SVDs per task of ``N x D``."""
    return n_boot * 2 * sum(n * dim * min(n, dim) for n in (n_P, n_H))


def _exact_rir(hi: np.ndarray, h0: np.ndarray, pi: np.ndarray, p0: np.ndarray, rtol: float | None, *,
               reference: bool = True) -> RIRTerms:
    """Eq. 17 on all rows; theta_0's kappas once per content where ``reference`` (not for bootstrap resamples,
    each seen once)."""
    return rir_terms(_kappa_pinv(hi, rtol), _kappa_pinv(h0, rtol, reference), _kappa_pinv(pi, rtol),
                     _kappa_pinv(p0, rtol, reference))


def _exact_ci(hi: np.ndarray, h0: np.ndarray, pi: np.ndarray, p0: np.ndarray, rtol: float | None, n_boot: int,
              seed: int, budget: float) -> tuple[tuple[float, float] | None, str]:
    """The exact estimator's percentile interval over sample resamples (or None) and a note on how or why not."""
    n_H, n_P, dim = h0.shape[0], p0.shape[0], h0.shape[1]
    if n_boot < 1:
        return None, "no bootstrap over samples (n_boot_exact = 0)"
    short = [f"D_{t} ({n})" for t, n in (("P", n_P), ("H", n_H)) if DISTINCT_FRACTION * n < dim]
    if short:
        return None, (f"no bootstrap over samples: a resample of N rows holds ~0.632 N distinct ones, fewer than "
                      f"D = {dim} for {', '.join(short)}, so its H~ would lose rank where the full one has none")
    cost = exact_boot_cost(n_P, n_H, dim, n_boot)
    if cost > budget:
        return None, (f"no bootstrap over samples: {n_boot} resamples x 4 SVDs cost {cost:.2g} multiply-adds, above "
                      f"the budget {budget:.2g} (exact_budget)")
    rng = np.random.default_rng((seed, _BOOT_STREAM))
    reps = []
    for _ in range(n_boot):
        rH, rP = rng.integers(0, n_H, n_H), rng.integers(0, n_P, n_P)
        reps.append(float(_exact_rir(hi[rH], h0[rH], pi[rP], p0[rP], rtol, reference=False).rir))
    return percentile_ci(np.array(reps)), f"bootstrap over samples, {n_boot} resamples"


# ---- the three estimators -----------------------------------------------------------------------------------------

def check_features(p0: object, h0: object, pi: object, hi: object, *, group_size: int = 100, exact: bool = True
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The four feature matrices as float64 NumPy arrays (torch tensors converted once), checked: 2-D, finite,
    one feature dimension D, the same samples for theta_0 and theta_I, ``N >= D`` (the exact estimator, where
    ``exact``) and ``N >= group_size`` per task. Raises ValueError naming the argument."""
    out = {}
    for name, F in (("p0", p0), ("h0", h0), ("pi", pi), ("hi", hi)):
        out[name] = np.asarray(_float64(F).cpu().numpy() if is_torch(F) else _float64(F))
        matrix(out[name], name)
    check_feature_shapes({name: F.shape for name, F in out.items()}, group_size, exact=exact)
    return out["p0"], out["h0"], out["pi"], out["hi"]


def check_feature_shapes(shapes: Mapping[str, tuple[int, ...]], group_size: int, *,
                         group_size_name: str = "the group size", exact: bool = True) -> None:
    """The four feature matrices' shape contract: one feature dimension D, the same samples for theta_0 and
    theta_I, ``N >= D`` (the exact estimator, where ``exact``) and ``N >= group_size`` per task. ``shapes``: the
    2-D shapes of p0, h0, pi, hi in that order, keyed by the name the message gives each (``p0`` here, ``--p0`` on
    the command line); ``group_size_name`` names the group size. Raises ValueError naming the argument."""
    p0, h0, pi, hi = shapes
    dims = {name: shape[1] for name, shape in shapes.items()}
    if len(set(dims.values())) != 1:
        raise ValueError("the four feature matrices must have the same number of columns D, got "
                         + ", ".join(f"{name} {d}" for name, d in dims.items()))
    dim = dims[p0]
    for a, b, task in ((p0, pi, "D_P"), (h0, hi, "D_H")):
        n, m = shapes[a][0], shapes[b][0]
        if n != m:
            raise ValueError(f"{a} and {b} must hold the same {task} samples (one row each), got {n} and {m} rows")
        if exact and n < dim:
            raise ValueError(f"{a}: {n} {task} samples for D = {dim}: the exact estimator needs N >= D (pass at "
                             f"least {max(dim, group_size)} samples)")
        if n < group_size:
            raise ValueError(f"{a}: {n} {task} samples, fewer than {group_size_name} {group_size} (pass at least "
                             f"{group_size} samples)")


def estimate_all(p0: object, h0: object, pi: object, hi: object, *, seed: int = 0, groups: int = 20,
                 group_size: int = 100, n_boot: int = 1000, n_boot_exact: int = 200, rtol: float | None = None,
                 exact_budget: float = EXACT_BOOT_BUDGET, exact: bool = True) -> dict[str, Estimate]:
    """RIR_theta0 by the three estimators of the module docstring: ``{"exact", "groups", "authors"}`` ->
    :class:`Estimate`. ``n_boot``: the group estimators' resamples; ``n_boot_exact``: the exact one's (run only
    within ``exact_budget``); ``rtol``: the pinv kappa's rank tolerance (default ``max(N, D) eps``). ``exact``
    False: fewer samples than features are allowed and the exact estimator, undefined there, is NaN (its note
    says why)."""
    p0, h0, pi, hi = check_features(p0, h0, pi, hi, group_size=group_size, exact=exact)
    common = dict(n_P=p0.shape[0], n_H=h0.shape[0], dim=p0.shape[1], seed=seed)
    if exact:
        whole = _exact_rir(hi, h0, pi, p0, rtol)
        ci, note = _exact_ci(hi, h0, pi, p0, rtol, n_boot_exact, seed, exact_budget)
        terms = (float(whole.term_i), float(whole.term_ii), float(whole.rir))
    else:
        nan = float("nan")
        terms, ci, note = (nan, nan, nan), None, "not computed: the exact estimator needs N >= D"
    out = {"exact": Estimate("exact", *terms, ci, note, "pinv", n_boot=n_boot_exact if ci else 0, rtol=rtol,
                             **common)}
    for name, kappa in (("groups", "pinv"), ("authors", "authors")):
        i_g, ii_g = group_terms(hi, h0, pi, p0, kappa_ratio(kappa, rtol), groups=groups, group_size=group_size,
                                seed=seed)
        rir_g = i_g / ii_g
        ci = bootstrap_mean_ci(rir_g, n_boot, np.random.default_rng((seed, _BOOT_STREAM)))
        out[name] = Estimate(name, float(i_g.mean()), float(ii_g.mean()), float(rir_g.mean()), ci,
                             f"bootstrap over the {groups} groups, {n_boot} resamples", kappa, n_boot=n_boot,
                             groups=groups, group_size=group_size, rtol=rtol if kappa == "pinv" else None,
                             shift=AUTHORS_SHIFT if kappa == "authors" else None,
                             per_group_i=tuple(map(float, i_g)), per_group_ii=tuple(map(float, ii_g)), **common)
    return out


# ---- the synthetic scale test of docs/reproduction/table3.md on given features ------------------------------------

def shrink_weak_half(F: np.ndarray, factor: float) -> np.ndarray:
    """``F V diag(c) V^T``: the weakest half of F's right singular directions (``V``) scaled by ``factor``."""
    _, _, Vt = np.linalg.svd(F, full_matrices=False)
    c = np.ones(Vt.shape[0])
    c[Vt.shape[0] // 2:] = factor
    return F @ (Vt.T * c) @ Vt


@dataclass(frozen=True)
class ScaleTest:
    """theta_I's D_H features made from theta_0's, D_P unchanged (``pi = p0``), through the three estimators.

    ``doubled``: ``hi = scale x h0``: kappa is scale-free, every conditioning measure reads RIR 1
    (``expected_doubled``).
    ``weak_half``: ``hi`` = h0 with the weakest half of its spectrum x ``shrink``: the exact RIR is
    ``shrink^-2`` (``expected_weak_half``; the smallest singular value falls by ``shrink``, the largest stays)."""

    scale: float
    shrink: float
    doubled: dict[str, Estimate]
    weak_half: dict[str, Estimate]

    @property
    def expected_doubled(self) -> float:
        return 1.0

    @property
    def expected_weak_half(self) -> float:
        return self.shrink ** -2


def scale_test(p0: object, h0: object, *, scale: float = 2.0, shrink: float = 0.2, **kwargs: Any) -> ScaleTest:
    """:class:`ScaleTest` on theta_0's features ``p0`` (D_P) and ``h0`` (D_H); ``kwargs`` go to
    :func:`estimate_all`."""
    p0, h0, _, _ = check_features(p0, h0, p0, h0, group_size=kwargs.get("group_size", 100))
    return ScaleTest(scale, shrink, estimate_all(p0, h0, p0, scale * h0, **kwargs),
                     estimate_all(p0, h0, p0, shrink_weak_half(h0, shrink), **kwargs))
