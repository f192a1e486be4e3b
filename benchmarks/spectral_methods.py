"""Problems and methods shared by the timed benchmarks and their plain accuracy tests.

A *problem* is one shape ``(D, N)``: data ``X`` (``N x D``), ``theta = I + 0.3 G / sqrt(D)``, ``K = X^T X``,
``H = theta^T K theta`` and the next optimizer-like step ``theta' = theta - 1e-3 G' / sqrt(D)`` (for warm starts),
with a float64 reference of the extreme eigenvalues of ``H'`` by an algorithm that no method uses: LAPACK's
bisection ``syevx`` (SciPy ``eigh(driver="evx")``, all eigenvalues), rank by kappalab's documented rule
(eigenvalues above ``D * eps * lambda_max``); ``benchmarks/test_accuracy.py`` checks that reference against
mpmath at small D. A *method* maps a problem to
``(s_max, s_min)`` of ``H'`` (``s_min = None`` where the method cannot give it) and documents its tolerance:
the relative error it must meet against the reference (``None``: reported, not checked, for methods known not
to converge; see ``docs/benchmarks.md``).
"""

from __future__ import annotations

import copy
import functools
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from kappalab.gram import regularizers_from_covariance, regularizers_from_data
from kappalab.regularizers import (grad_r_ill_from_extremes, grad_r_well_from_extremes, r_ill_from_extremes,
                                   r_well_from_extremes)
from kappalab.spectral import psd_extremes
from kappalab.tracker import ExtremeTracker

EXACT = 1e-8  #: the issue's goal for float64 methods


@dataclass
class Problem:
    D: int
    N: int
    X: np.ndarray
    theta0: np.ndarray
    theta: np.ndarray  #: the step that is timed (warm methods were seeded on theta0)
    K: np.ndarray
    H0: np.ndarray
    H: np.ndarray
    ref_max: float
    ref_min: float
    rank: int
    device: str = "cpu"
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def full_rank(self) -> bool:
        return self.rank == self.D


def _sym(A: np.ndarray) -> np.ndarray:
    return 0.5 * (A + A.T)


@functools.lru_cache(maxsize=4)
def make_problem(D: int, N: int, seed: int = 0) -> Problem:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D))
    theta0 = np.eye(D) + 0.3 * rng.standard_normal((D, D)) / np.sqrt(D)
    theta = theta0 - 1e-3 * rng.standard_normal((D, D)) / np.sqrt(D)
    K = X.T @ X
    H0, H = _sym(theta0.T @ K @ theta0), _sym(theta.T @ K @ theta)
    ref_max, ref_min, rank = reference_extremes(H)
    return Problem(D, N, X, theta0, theta, K, H0, H, ref_max, ref_min, rank)


def reference_extremes(H: np.ndarray) -> tuple[float, float, int]:
    """``(lambda_max, lambda_k, k)`` of the PSD matrix H by bisection (``syevx``, independent of every method:
    NumPy/torch use divide and conquer ``syevd``, the ``evr`` method MRRR); k counts eigenvalues above
    ``D * eps * lambda_max``."""
    from scipy.linalg import eigh

    lam = eigh(H, driver="evx", eigvals_only=True, check_finite=False)[::-1]
    nonzero = lam[lam > H.shape[0] * np.finfo(float).eps * lam[0]]
    return float(lam[0]), float(nonzero[-1]), int(nonzero.size)


@dataclass(frozen=True)
class Method:
    """A benchmarked way to get the extremes (or the whole regularizer step) of ``H(theta)``."""

    name: str
    run: Callable[[Problem], tuple[float, float | None]]
    tol_max: float | None = EXACT
    tol_min: float | None = EXACT
    applies: Callable[[int, int], bool] = lambda D, N: True  #: from the shape (D, N) alone, at collection time
    setup: Callable[[Problem], Any] | None = None  #: untimed per-round setup (warm starts); its result -> run
    torch: bool = False
    max_D: int = 1 << 30  #: skipped above this D (documented as too slow / not converging)
    kind: str = "solver"  #: "solver" (extremes of a given H), "step" (value + gradients from theta), "baseline"
    goal: bool = False  #: also run in the dedicated D = 4096, N = 8192 goal group (few methods: ~1 min a round)


def applicable(m: Method, D: int, N: int) -> bool:
    """Whether ``m`` runs on shape ``(D, N)``: its ``applies`` and ``max_D``; used to generate only the
    (method, shape) pairs that run, so that nothing is collected only to be skipped."""
    return m.applies(D, N) and D <= m.max_D


def relative_errors(p: Problem, out: tuple[float, float | None]) -> dict[str, float]:
    """Relative errors of ``(s_max, s_min)`` against the float64 dense reference (NaN where not computed)."""
    s_max, s_min = out
    return {"max": abs(s_max / p.ref_max - 1), "min": float("nan") if s_min is None else abs(s_min / p.ref_min - 1)}


# ---- torch helpers ------------------------------------------------------------------------------------------

def _t(p: Problem, a: np.ndarray, dtype: str = "float64"):
    import torch

    key = (id(a), dtype)
    if key not in p.cache:
        p.cache[key] = torch.as_tensor(a, dtype=getattr(torch, dtype), device=p.device)
    return p.cache[key]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _torch_eigh(dtype: str):
    def run(p: Problem):
        import torch

        lam = torch.linalg.eigh(_t(p, p.H, dtype))[0]
        sync(p.device)
        lam = lam.double().cpu().numpy()
        k = int((lam > p.D * np.finfo(np.float64).eps * lam[-1]).sum()) if dtype == "float64" else p.rank
        return float(lam[-1]), float(lam[p.D - k])
    return run


def _torch_lobpcg(warm: bool):
    def setup(p: Problem):
        import torch

        if not warm:
            return None
        w, V = torch.linalg.eigh(_t(p, p.H0))
        return V[:, -3:].flip(1).clone()

    def run(p: Problem, X0=None):
        import torch

        A = _t(p, p.H)
        if X0 is None:
            g = torch.Generator(device=p.device).manual_seed(0)
            X0 = torch.randn(p.D, 3, dtype=A.dtype, device=p.device, generator=g)
        w, _ = torch.lobpcg(A, X=X0, largest=True, niter=200, tol=1e-12)
        sync(p.device)
        return float(w[0]), None
    return setup, run


# ---- NumPy / SciPy methods ------------------------------------------------------------------------------------

def _ext(solver: str):
    def run(p: Problem):
        e = psd_extremes(p.H, solver=solver, check=False)
        return float(e.s_max), float(e.s_min)
    return run


def _scipy_eigh(driver: str):
    def run(p: Problem):
        from scipy.linalg import eigh

        lam = eigh(p.H, driver=driver, check_finite=False)[0]
        k = int((lam > p.D * np.finfo(np.float64).eps * lam[-1]).sum())
        return float(lam[-1]), float(lam[p.D - k])
    return run


def _numpy_eigh(p: Problem):
    lam = np.linalg.eigh(p.H)[0]
    k = int((lam > p.D * np.finfo(np.float64).eps * lam[-1]).sum())
    return float(lam[-1]), float(lam[p.D - k])


def _arpack(bottom: str):
    """ARPACK top pair (``which="LA"``) and bottom pair by ``which="SA"`` or shift-invert (Cholesky of H)."""
    def run(p: Problem):
        from scipy.sparse.linalg import ArpackNoConvergence, eigsh

        top = float(eigsh(p.H, k=2, which="LA", tol=1e-14, return_eigenvectors=False).max())
        try:
            if bottom == "SA":
                lo = eigsh(p.H, k=2, which="SA", tol=1e-14, maxiter=1500 // 20, return_eigenvectors=False)
            else:
                from kappalab.iterative import _cholesky_inverse

                lo = eigsh(p.H, k=2, sigma=0.0, which="LM", OPinv=_cholesky_inverse(p.H), tol=1e-14,
                           return_eigenvectors=False)
        except ArpackNoConvergence as exc:
            lo = exc.eigenvalues if len(exc.eigenvalues) else np.array([np.nan])
        return top, float(np.min(lo))
    return run


def _scipy_lobpcg_cold(precondition: bool):
    def run(p: Problem):
        from scipy.sparse.linalg import lobpcg

        from kappalab.iterative import _cholesky_inverse

        rng = np.random.default_rng(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wt, _ = lobpcg(p.H, rng.standard_normal((p.D, 3)), largest=True, tol=1e-10 * p.ref_max, maxiter=200)
            M = _cholesky_inverse(p.H) if precondition else None
            wb, _ = lobpcg(p.H, rng.standard_normal((p.D, 2)), M=M, largest=False, tol=1e-10 * p.ref_min,
                           maxiter=200)
        return float(wt.max()), float(wb.min())
    return run


def _tracker(method: str):
    def setup(p: Problem):
        key = f"tracker-{method}"
        if key not in p.cache:
            tr = ExtremeTracker(method=method)
            tr(p.H0, check=False)  # the previous optimizer step seeds the warm start (untimed)
            p.cache[key] = tr
        return copy.deepcopy(p.cache[key])

    def run(p: Problem, tr: ExtremeTracker):
        e = tr(p.H, check=False)
        if tr.fallbacks:
            raise AssertionError(f"warm {method} fell back to dense: {tr.last_fallback}")
        return float(e.s_max), float(e.s_min)
    return setup, run


def _rsvd(p: Problem):
    """Randomized SVD (Halko et al.): rank 2 + 10 oversampling, 7 power iterations; top value only."""
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(p.H @ rng.standard_normal((p.D, 12)))
    for _ in range(7):
        Q, _ = np.linalg.qr(p.H @ Q)
    s = np.linalg.svd(Q.T @ p.H @ Q, compute_uv=False)
    return float(s[0]), None


def _gram_extremes(p: Problem):
    """Gram route: ``F = X theta`` and the ``N x N`` spectrum of ``F F^T`` (includes forming F and F F^T)."""
    from kappalab.gram import feature_extremes

    e = feature_extremes(p.X @ p.theta, check=False)
    return float(e.s_max), float(e.s_min)


# ---- whole steps: value + gradient of both regularizers, from theta ------------------------------------------

def _step_naive(p: Problem):
    """The naive step: form H, full dense ``eigh``, closed-form values and the two Thm 4.2 gradients
    ``2 (K theta) G`` (two products, as the official code's autograd would do)."""
    M = p.K @ p.theta
    H = _sym(p.theta.T @ M)
    e = psd_extremes(H, solver="eigh", check=False)
    _ = r_well_from_extremes(e), r_ill_from_extremes(e, check=False)
    _ = 2.0 * (M @ grad_r_well_from_extremes(e, H)), 2.0 * (M @ grad_r_ill_from_extremes(e, H, check=False))
    return float(e.s_max), float(e.s_min)


def _step_from_K(solver: str | None):
    """``kappalab.gram.regularizers_from_covariance``: ``M = K theta``, ``H = theta^T M``, the spectrum by
    ``solver`` (``None``: the warm tracker), values and both gradients from ``S = M H`` (shared)."""
    def setup(p: Problem):
        return _tracker("shift")[0](p) if solver is None else None

    def run(p: Problem, tr: ExtremeTracker | None = None):
        r = regularizers_from_covariance(p.theta, p.K, solver=solver or "auto", tracker=tr, check=False)
        if tr is not None and tr.fallbacks:
            raise AssertionError(f"warm tracker fell back to dense: {tr.last_fallback}")
        return float(r.extremes.s_max), float(r.extremes.s_min)
    return setup, run


def _step_from_data(p: Problem):
    r = regularizers_from_data(p.theta, p.X, check=False)
    return float(r.extremes.s_max), float(r.extremes.s_min)


def _baseline(p: Problem):
    """The products no method avoids: N >= D: H = theta^T (K theta) and two gradient products (K theta) G;
    N < D: F = X theta and two products X^T (F G)."""
    G = p.cache.setdefault("G", _sym(np.ones((p.D, p.D))) / p.D)
    if p.N >= p.D:
        M = p.K @ p.theta
        _ = p.theta.T @ M, M @ G, M @ G
    else:
        F = p.X @ p.theta
        FG = p.cache.setdefault("FG", np.ones((p.N, p.D)) / p.D)
        _ = F, p.X.T @ FG, p.X.T @ FG
    return p.ref_max, p.ref_min


_full = lambda D, N: N >= D  # noqa: E731  (X standard normal: full rank iff N >= D; asserted by the tests)
_gram = lambda D, N: N < D  # noqa: E731
_lobpcg_t_cold, _lobpcg_t_warm = _torch_lobpcg(False), _torch_lobpcg(True)
_warm = {m: _tracker(m) for m in ("shift", "lobpcg", "arpack")}
_step_warm = _step_from_K(None)

#: Every benchmarked method; the accuracy tests and the timed benchmarks iterate over this list.
METHODS: list[Method] = [
    Method("baseline_products", _baseline, None, None, kind="baseline", goal=True),
    Method("numpy_eigh", _numpy_eigh),
    Method("scipy_eigh_evd", _scipy_eigh("evd")),
    Method("scipy_eigh_evr", _scipy_eigh("evr")),
    Method("torch_eigh_f64", _torch_eigh("float64"), torch=True),
    Method("torch_eigh_f32", _torch_eigh("float32"), 1e-4, 1e-1, torch=True),
    Method("subset_by_index", _ext("subset")),
    Method("tridiag", _ext("tridiag")),
    Method("arpack_SA", _arpack("SA"), EXACT, None, max_D=784),
    Method("arpack_shift_invert", _arpack("shift"), applies=_full),
    Method("lobpcg_scipy_cold_noprec", _scipy_lobpcg_cold(False), EXACT, None, max_D=784),
    Method("lobpcg_scipy_cold_chol", _scipy_lobpcg_cold(True), applies=_full, max_D=2048),
    Method("lobpcg_torch_cold_top", _lobpcg_t_cold[1], 1e-6, None, torch=True, max_D=2048),
    Method("lobpcg_torch_warm_top", _lobpcg_t_warm[1], 1e-6, None, setup=_lobpcg_t_warm[0], torch=True,
           max_D=2048),
    Method("warm_tracker_shift", _warm["shift"][1], setup=_warm["shift"][0], applies=_full, goal=True),
    # unpreconditioned LOBPCG misses the sqrt(eps)*gap residual test in 50 iterations for D >= 512 (measured)
    Method("warm_tracker_lobpcg", _warm["lobpcg"][1], setup=_warm["lobpcg"][0], applies=_full, max_D=256),
    Method("warm_tracker_arpack", _warm["arpack"][1], setup=_warm["arpack"][0], applies=_full, max_D=2048),
    Method("randomized_svd_top", _rsvd, 5e-2, None),  # approximate: measured 2e-5 (D=79) .. 2e-2 (D>=512)
    Method("gram_route_extremes", _gram_extremes, applies=_gram),
    Method("step_naive_eigh", _step_naive, kind="step", goal=True),
    Method("step_auto", _step_from_K("auto")[1], kind="step", goal=True),
    Method("step_warm_tracker", _step_warm[1], setup=_step_warm[0], applies=_full, kind="step", goal=True),
    Method("step_from_data", _step_from_data, kind="step"),
]
