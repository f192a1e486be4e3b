"""CombinedLoader, kappa of H~, RIR_theta0 (exact vs the paper's 20x100 estimator), linear probing."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kappalab import condition_number  # noqa: E402
from kappalab.deep import CombinedLoader, hessian_tilde, kappa_autograd, kappa_tilde, linear_probe_curve  # noqa: E402
from kappalab.deep import rir_theta0  # noqa: E402

torch.set_num_threads(1)


def test_combined_loader_epochs_on_harmful_and_cycles_the_other() -> None:
    P, H = list(range(10)), ["a", "b", "c"]
    loader = CombinedLoader(P, H)  # lists are re-iterable loaders with len()
    epochs = [list(loader) for _ in range(4)]
    assert [len(e) for e in epochs] == [3] * 4
    assert [h for e in epochs for _, h in e] == H * 4, "each epoch is one full pass over D_H"
    assert [p for e in epochs for p, _ in e] == P + P[:2], "D_P continues across epochs and restarts when out"
    longer = CombinedLoader(P, H, epoch_on="longer")
    first = list(longer)
    assert len(first) == 10 and [h for _, h in first][:4] == ["a", "b", "c", "a"]
    with pytest.raises(ValueError, match="epoch_on"):
        CombinedLoader(P, H, epoch_on="shorter")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="loader_H"):
        CombinedLoader(P, [])


def test_kappa_tilde_is_kappa_of_FtF(rng: np.random.Generator) -> None:
    F = torch.as_tensor(rng.standard_normal((50, 8)) * np.logspace(0, 1.5, 8))
    H = hessian_tilde(F)
    ref = float(condition_number(H, psd=True))
    assert kappa_tilde(F) == pytest.approx(ref, rel=1e-9)
    assert float(kappa_autograd(H)) == pytest.approx(ref, rel=1e-9)
    # rank-deficient H~ (5 samples in 8 dims): kappa over the nonzero spectrum only
    G = F[:5]
    s = np.linalg.svd(G.numpy(), compute_uv=False)
    assert kappa_tilde(G) == pytest.approx((s[0] / s[-1]) ** 2, rel=1e-9)
    assert float(kappa_autograd(hessian_tilde(G), rtol=1e-10)) == pytest.approx((s[0] / s[-1]) ** 2, rel=1e-6)


def _features(rng: np.random.Generator, n: int, d: int, scale: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(rng.standard_normal((n, d)) * scale)


def test_rir_theta0_exact_cases(rng: np.random.Generator) -> None:
    """One group holding every sample reproduces the exact Eq. 17; theta_I = theta_0 gives exactly 1."""
    FH0, FP0 = _features(rng, 120, 6, np.ones(6)), _features(rng, 120, 6, np.ones(6))
    FHI, FPI = FH0 * torch.linspace(1, 4, 6), FP0 * torch.linspace(1, 1.5, 6)
    one = rir_theta0(FHI, FH0, FPI, FP0, groups=1, group_size=120)
    assert one.est_i == pytest.approx(one.exact_i, rel=1e-12) and one.est_rir == pytest.approx(one.exact_rir, rel=1e-12)
    same = rir_theta0(FH0, FH0, FP0, FP0, groups=5, group_size=30)
    assert (same.exact_rir, same.est_i, same.est_ii, same.est_rir, same.std_rir) == (1.0, 1.0, 1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="group_size"):
        rir_theta0(FHI, FH0, FPI, FP0, group_size=121)
    with pytest.raises(ValueError, match="F_H_I and F_H_0"):
        rir_theta0(FHI[:-1], FH0, FPI, FP0)


def test_rir_theta0_estimator_bias_documented(rng: np.random.Generator) -> None:
    """The paper's estimator (20 groups of 100) is biased: kappa of a 100-sample H~ is not kappa of the full H~.

    Isotropic features in D = 20 dimensions: the full-sample (N = 20000) kappa(H~) is close to 1, but a
    100-sample H~ has the Marchenko-Pastur edges (1 +- sqrt(D/n))^2, kappa ~ (1.447/0.553)^2 ~ 6.8. So a group
    estimate of an individual kappa is inflated ~5x here; Eq. 17's *ratios* partly cancel it (same groups for
    theta_I and theta_0) but not exactly: below, theta_I stretches one feature by 3, the exact term (i) is
    ~kappa ratio of the full H~, the estimate differs. The test pins the direction and size of both effects."""
    D, n = 20, 100
    F0 = _features(rng, 20000, D, np.ones(D))
    k_full, k_group = kappa_tilde(F0), np.mean([kappa_tilde(F0[i * n:(i + 1) * n]) for i in range(20)])
    assert k_full < 1.2 and 4.5 < k_group < 10, (k_full, k_group)
    stretch = torch.ones(D)
    stretch[0] = 3.0
    r = rir_theta0(F0 * stretch, F0, F0, F0, groups=20, group_size=n, seed=0)
    # exact (i) = kappa(full stretched)/kappa(full) ~ 9; estimated (i): ratio of two inflated group kappas, smaller
    assert 7.5 < r.exact_i < 10.5 and r.est_i < 0.8 * r.exact_i, (r.exact_i, r.est_i, r.std_i)
    assert r.est_ii == 1.0 and r.exact_ii == 1.0


def test_linear_probe_curve_learns_and_is_scale_free(rng: np.random.Generator) -> None:
    y = torch.as_tensor(rng.integers(0, 3, 300))
    F = torch.as_tensor(rng.standard_normal((300, 5))) + 3.0 * torch.nn.functional.one_hot(y, 5)[:, :5].double()
    curve = linear_probe_curve(F[:200], y[:200], F[200:], y[200:], epochs=30, num_classes=3)
    assert len(curve) == 31 and curve[-1] > 0.9 and curve[-1] > curve[0]
    scaled = linear_probe_curve(10 * F[:200], y[:200], 10 * F[200:], y[200:], epochs=30, num_classes=3)
    assert scaled == pytest.approx(curve), "step 1/s_max makes the curve invariant to the features' scale"
    with pytest.raises(ValueError, match="step"):
        linear_probe_curve(F, y, F, y, epochs=1, num_classes=3, step="fixed")
