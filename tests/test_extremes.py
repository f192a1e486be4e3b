"""kappalab.batched_extremes: the tensor path (parallel Jacobi) against LAPACK's eigh in float64.

Stacks are built from their spectrum (``Q diag(lambda) Q^T``, random orthogonal Q) or as Gram matrices ``X^T X`` of
random ``N x D`` rows, so the hard corners are there on purpose: clustered extremes, near-ties at the top, rank
deficiency (``N < D``), and scales ``2^-500 .. 2^500``. The spectra keep ``lambda_min(kept) / lambda_max >= 1e-2``,
where LAPACK's own error (``~ n eps lambda_max``) is below 1e-12 of every compared value, so 1e-12 relative is a
bound on the tensor path's error, not on the reference's. Eigenvectors are compared as projectors ``v v^T`` only
where the eigenvalue is simple, within ``C n eps ||S|| / gap`` (Davis-Kahan with a backward error of ``n eps ||S||``
for both solvers, C = 10).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from kappalab import batched_extremes, extremes
from kappalab.extremes import batched_eigh, count_fallbacks, forced_method, resolve_method, sweep_count

torch = pytest.importorskip("torch")

EPS = np.finfo(np.float64).eps
REL = 1e-12
BACKENDS = ("numpy", "torch-cpu", "torch-cuda")


def _backend(name: str, S: np.ndarray):
    if name == "numpy":
        return S
    device = name.split("-")[1]
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA not available: the torch-cuda case of the batched extremes needs a GPU "
                    "(scripts/gpu_check.sh runs it)")
    return torch.as_tensor(S, device=device)


def _np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _from_spectra(spectra: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    R, n = spectra.shape
    Q, _ = np.linalg.qr(rng.standard_normal((R, n, n)))
    S = (Q * spectra[:, None, :]) @ Q.swapaxes(-1, -2)
    return 0.5 * (S + S.swapaxes(-1, -2))


def _stack(kind: str) -> np.ndarray:
    """Four 20 x 20 (or 21: an odd n) stacks of each kind."""
    rng = np.random.default_rng(sum(map(ord, kind)))
    R, n = 4, 20
    if kind == "clustered":  # the three largest and three smallest within 1e-9 relative of each other
        body = rng.uniform(0.1, 0.5, (R, n - 6))
        top = 1.0 + 1e-9 * rng.random((R, 3))
        bottom = 0.02 * (1.0 + 1e-9 * rng.random((R, 3)))
        return _from_spectra(np.concatenate([top, body, bottom], 1), 1)
    if kind == "near-tie":  # lambda_1 and lambda_2 a few ulps apart
        body = rng.uniform(0.05, 0.9, (R, n - 2))
        return _from_spectra(np.concatenate([np.ones((R, 1)), np.full((R, 1), 1 - 4 * EPS), body], 1), 2)
    if kind == "gram-wide":  # N = 6 < D = 21 rows: rank 6, fifteen zero eigenvalues
        X = rng.standard_normal((R, 6, 21))
        return X.swapaxes(-1, -2) @ X
    if kind == "gram-tall":  # N = 60 > D = 20: full rank
        X = rng.standard_normal((R, 60, n))
        return X.swapaxes(-1, -2) @ X
    raise AssertionError(kind)


KINDS = ("clustered", "near-tie", "gram-wide", "gram-tall")


def _reference(S: np.ndarray):
    lam, V = np.linalg.eigh(S)
    n = S.shape[-1]
    keep = lam > n * EPS * lam[..., -1:]
    first = np.argmax(keep, -1)
    rows = np.arange(S.shape[0])
    return lam, V, lam[..., -1], lam[rows, first], V[..., -1], V[rows, :, first], first


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
def test_extreme_values_equal_lapack_to_1e_12(kind: str, backend: str) -> None:
    S = _stack(kind)
    lam, V, top, bottom, v_top, v_bottom, first = _reference(S)
    assert (bottom / top).min() >= 1e-2, "the stack must keep LAPACK's own error below 1e-12 (module docstring)"
    e = batched_extremes(_backend(backend, S), method="tensor")
    assert _np(e.converged).all()
    np.testing.assert_allclose(_np(e.largest), top, rtol=REL, atol=0, err_msg=kind)
    np.testing.assert_allclose(_np(e.smallest), bottom, rtol=REL, atol=0, err_msg=kind)
    if backend != "numpy":
        assert e.largest.device == e.converged.device == _backend(backend, S).device


@pytest.mark.parametrize("kind", KINDS)
def test_vectors_equal_lapack_as_projectors_where_simple(kind: str) -> None:
    S = _stack(kind)
    lam, V, top, bottom, v_top, v_bottom, first = _reference(S)
    e = batched_extremes(S, method="tensor")
    n, norm = S.shape[-1], np.linalg.norm(S, 2, axis=(-2, -1))
    rows = np.arange(S.shape[0])
    gap_top = lam[:, -1] - lam[:, -2]
    gap_bottom = np.minimum(lam[rows, first + 1] - bottom, np.where(first > 0, bottom - lam[rows, first - 1], np.inf))
    checked = 0
    for got, want, gap in ((e.largest_vector, v_top, gap_top), (e.smallest_vector, v_bottom, gap_bottom)):
        tol = 10 * n * EPS * norm / gap
        for r in range(S.shape[0]):
            if tol[r] < 1e-3:  # a simple eigenvalue: its projector is defined to that tolerance
                P, Q = np.outer(got[r], got[r]), np.outer(want[r], want[r])
                assert np.linalg.norm(P - Q) <= tol[r], (kind, r, np.linalg.norm(P - Q), tol[r])
                checked += 1
    # every returned pair is an eigenpair of S (the residual bound behind the projector comparison)
    for value, vec in ((e.largest, e.largest_vector), (e.smallest, e.smallest_vector)):
        res = np.linalg.norm(S @ vec[..., None] - value[:, None, None] * vec[..., None], axis=(-2, -1))
        assert (res <= 10 * n * EPS * norm).all(), res / norm
    # simple: both ends of the Grams; the top of "clustered" (gap 1e-9 lambda) but not its bottom (2e-11 lambda),
    # the bottom of "near-tie" but not its top
    assert checked == (4 if kind in ("near-tie", "clustered") else 8)


@pytest.mark.parametrize("backend", ("numpy", "torch-cpu"))
@pytest.mark.parametrize("power", (-500, 500))
def test_scales_2_to_the_plus_minus_500(power: int, backend: str) -> None:
    """Scaling by a power of two is exact on the tensor path: the values scale bit for bit, and equal LAPACK's on the
    scaled stack to 1e-12."""
    S = _stack("gram-tall")
    base = batched_extremes(_backend(backend, S), method="tensor")
    scaled = batched_extremes(_backend(backend, np.ldexp(S, power)), method="tensor")
    assert _np(scaled.converged).all()
    np.testing.assert_array_equal(_np(scaled.largest), np.ldexp(_np(base.largest), power))
    np.testing.assert_array_equal(_np(scaled.smallest), np.ldexp(_np(base.smallest), power))
    ref = batched_extremes(np.ldexp(S, power), method="lapack")
    np.testing.assert_allclose(_np(scaled.largest), ref.largest, rtol=REL, atol=0)
    np.testing.assert_allclose(_np(scaled.smallest), ref.smallest, rtol=REL, atol=0)


def test_non_convergence_is_flagged_and_recomputed_by_lapack() -> None:
    """One sweep cannot diagonalize a 20 x 20 Gram stack: every matrix is flagged, counted, and its values and vectors
    are LAPACK's (numpy's eigh of the same matrices, bit for bit), never NaN."""
    S = _stack("gram-tall")
    with count_fallbacks() as count:
        e = batched_extremes(S, method="tensor", sweeps=1)
    ref = batched_extremes(S, method="lapack")
    assert not e.converged.any() and count.total == 4 and count.by_leading == {0: 1, 1: 1, 2: 1, 3: 1}
    for name in ("largest", "smallest", "largest_vector", "smallest_vector"):
        np.testing.assert_array_equal(getattr(e, name), getattr(ref, name), err_msg=name)
    ok = batched_extremes(S, method="tensor")
    assert ok.converged.all() and sweep_count(20, EPS) == 11


def test_mixed_stack_recomputes_only_the_unconverged_matrix() -> None:
    """A diagonal matrix converges in zero sweeps, a dense one does not: the flag, the count and LAPACK's values are
    per matrix."""
    S = np.stack([np.diag(np.arange(1.0, 21.0)), _stack("gram-tall")[0]])
    with count_fallbacks() as count:
        e = batched_extremes(S, method="tensor", sweeps=0)
    assert e.converged.tolist() == [True, False] and count.total == 1 and count.by_leading == {1: 1}
    assert e.largest[0] == 20.0 and e.smallest[0] == 1.0
    assert e.largest[1] == np.linalg.eigh(S[1])[0][-1]  # eigh: the fallback of a call that asks for vectors


def test_zero_matrix_keeps_nothing() -> None:
    for method in ("tensor", "lapack"):
        e = batched_extremes(np.zeros((2, 5, 5)), method=method)
        assert (e.largest == 0).all() and np.isnan(e.smallest).all() and e.converged.all(), method


def test_rank_rule_rtol_is_kappas() -> None:
    """``rtol`` keeps values ``> rtol * lambda_max`` (kappa.py's rule): with rtol = 0.05 the 0.04 is dropped."""
    S = _from_spectra(np.array([[1.0, 0.5, 0.04, 0.3]]), 3)
    for method in ("tensor", "lapack"):
        assert batched_extremes(S, rtol=0.05, method=method).smallest[0] == pytest.approx(0.3, rel=REL)
        assert batched_extremes(S, rtol=0.03, method=method).smallest[0] == pytest.approx(0.04, rel=REL)
    with pytest.raises(ValueError, match="rtol"):
        batched_extremes(S, rtol=1.5)


def test_bad_input_names_the_argument() -> None:
    with pytest.raises(ValueError, match="method must be one of"):
        batched_extremes(np.eye(3), method="jacobi")
    with pytest.raises(ValueError, match="S must be a stack of square"):
        batched_extremes(np.ones((3, 4)))
    with pytest.raises(TypeError, match="S must be a NumPy array or a torch tensor"):
        batched_extremes([[1.0]])
    with pytest.raises(ValueError, match="sweeps must be"):
        batched_extremes(np.eye(3), method="tensor", sweeps=-1)


def test_auto_is_lapack_on_the_cpu_and_forced_method_switches_it() -> None:
    S = torch.as_tensor(_stack("gram-tall"))
    assert resolve_method(S, "auto") == "lapack" and resolve_method(S.numpy(), "auto") == "lapack"
    lam, V, ok = batched_eigh(S)
    assert torch.equal(lam, torch.linalg.eigh(S)[0]) and torch.equal(V, torch.linalg.eigh(S)[1]) and ok.all()
    assert torch.equal(batched_eigh(S, vectors=False)[0], torch.linalg.eigvalsh(S))
    with forced_method("tensor"):
        assert resolve_method(S, "auto") == "tensor" and resolve_method(S, "lapack") == "lapack"
    assert resolve_method(S, "auto") == "lapack"


def test_tensor_path_gradient_is_eigvalshs() -> None:
    """d lambda / dS = v v^T for a simple eigenvalue: the tensor path's autograd equals eigvalsh's backward."""
    S = torch.as_tensor(_stack("gram-tall")).requires_grad_(True)
    e = batched_extremes(S, method="tensor")
    (e.largest.sum() + 3 * e.smallest.sum()).backward()
    got, S.grad = S.grad.clone(), None
    lam = torch.linalg.eigvalsh(S)
    (lam[..., -1].sum() + 3 * lam[..., 0].sum()).backward()
    assert torch.linalg.matrix_norm(got - S.grad).max() <= 1e-12 * torch.linalg.matrix_norm(S.grad).max()


def forbid_host_reads(m: pytest.MonkeyPatch, reads: list[str]) -> None:
    """Inside ``m``: every torch eigen solver and host read of a tensor (item, cpu, tolist, numpy, bool, float, int)
    raises, except the tensor path's convergence test (:func:`kappalab.extremes.read_unconverged`, called directly),
    whose reads are appended to ``reads``."""
    def forbidden(*args, **kwargs):
        raise AssertionError("host read or eigen solver outside the tensor path's convergence test")

    def guarded(original):
        def read(self, *args, **kwargs):
            if sys._getframe(1).f_code is not extremes.read_unconverged.__code__:
                forbidden()
            reads.append(original.__name__)
            return original(self, *args, **kwargs)
        return read

    for name in ("eigh", "eigvalsh", "eig", "eigvals", "svd", "svdvals"):
        m.setattr(torch.linalg, name, forbidden)
    for name in ("item", "cpu", "tolist", "numpy", "__bool__", "__float__", "__int__"):
        m.setattr(torch.Tensor, name, guarded(getattr(torch.Tensor, name)))


def test_tensor_path_reads_only_its_convergence_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """No eigen solver, and one host read (the convergence test's flags) when every matrix converges by the first
    test; a stack that needs more sweeps reads once per test, at most ``1 + cap - first`` times."""
    S = torch.as_tensor(_stack("gram-wide"))
    reads: list[str] = []
    with monkeypatch.context() as m:
        forbid_host_reads(m, reads)
        e = batched_extremes(S, method="tensor")
    assert e.converged.all() and reads == ["tolist"]
    hard = torch.as_tensor(_from_spectra(np.logspace(-12, 0, 64)[None], 4))  # kappa 1e12: needs 15-18 sweeps
    first, cap = extremes.sweep_plan(64, EPS, None)
    reads.clear()
    with monkeypatch.context() as m:
        forbid_host_reads(m, reads)
        e = batched_extremes(hard, method="tensor")
    took = first + len(reads) - 1  # one test after the first sweeps, then one after each further sweep
    assert e.converged.all() and first < took <= cap, (first, took, cap)
    assert not batched_extremes(hard, method="tensor", sweeps=took - 1).converged.any()
    assert batched_extremes(hard, method="tensor", sweeps=took).converged.all()


def test_tensor_path_synchronizes_cuda_only_in_its_convergence_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA, torch's own detector (``set_sync_debug_mode("error")``) raises on any synchronizing call outside the
    convergence test (which reads the flags back once when every matrix converges by the first test); the first
    call of a size copies the round-robin indices to the device once (outside the checked call)."""
    S = _backend("torch-cuda", _stack("gram-tall"))
    batched_extremes(S, method="tensor")  # warm: the index arrays reach the device
    real, reads = extremes.read_unconverged, []

    def read(converged):
        torch.cuda.set_sync_debug_mode("default")
        try:
            reads.append(1)
            return real(converged)
        finally:
            torch.cuda.set_sync_debug_mode("error")

    monkeypatch.setattr(extremes, "read_unconverged", read)
    torch.cuda.set_sync_debug_mode("error")
    try:
        e = batched_extremes(S, method="tensor")
        e_auto = batched_extremes(S)  # "auto" on CUDA is the tensor path
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert e.converged.all() and torch.equal(e.largest, e_auto.largest) and len(reads) == 2


def test_rank_deficient_gram_converges_in_the_fixed_sweeps() -> None:
    """A 64 x 64 Gram of 16 rows (48 zero eigenvalues): parallel Jacobi alone leaves the kept rows' residual ~1e4
    times the flag's bound after 12 sweeps (the null cluster slows it to linear); the decoupling steps converge it."""
    X = np.random.default_rng(16).standard_normal((2, 16, 64))
    S = X.swapaxes(-1, -2) @ X
    e, ref = batched_extremes(S, method="tensor"), batched_extremes(S, method="lapack")
    assert e.converged.all()
    np.testing.assert_allclose(e.largest, ref.largest, rtol=REL, atol=0)
    np.testing.assert_allclose(e.smallest, ref.smallest, rtol=REL, atol=0)
