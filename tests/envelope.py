"""Rounding envelopes: the interval in which a kappa, a term of Eq. 15 or an RIR must lie when it is recomputed from
the same inputs by another BLAS kernel, LAPACK build or torch build.

A stored number and its recomputation differ only by rounding, but by how much depends on the number's condition:
the pinv kappa of a D x D Hessian with kappa ~ 1e8 moves in its 8th digit, the official shifted kappa of a Hessian
with null eigenvalues can jump by orders of magnitude (docs/core/kappa.md). So the tests that check a committed store
or an earlier engine's numbers compare each value with this interval, not bit for bit.

Where the interval comes from. A Hessian ``M = A^T K A`` with ``K = X^T X`` (``X``: N x D data; ``A``: theta, or
``[theta; b^T]`` against ``[X 1]``, or the identity) is formed by matrix products and its eigenvalues come from a
backward-stable symmetric solver. No matrix in that computation is larger than ``s = ||A||_2^2 ||X||_2^2`` (>= ||M||_2,
= ||M||_2 when A is orthogonal), and rounding errors of independent operations add like a random walk: a chain of
about D operations errs by about ``sqrt(D) eps`` times the size of what it handles, not the worst case ``D eps``
(Higham and Mary, "A new approach to probabilistic rounding error analysis", SIAM J. Sci. Comput. 41, 2019). So each
computed eigenvalue is taken to lie within ``delta = sqrt(D) eps s`` of the exact one (Weyl's theorem), and two
computations on two kernels within ``2 delta`` of each other. This is the error model of the rank rule itself, whose
threshold ``D eps lambda_1`` sits above ``2 delta`` so that rounded null eigenvalues are dropped; the worst-case
constant would put ``2 delta`` above that threshold and leave every rank undecided. Measured on the committed Table 1
Hessians: null eigenvalues at ~1e-17 lambda_1, kappas moved by at most 2.4e-9 relative between OpenBLAS's SkylakeX and
Haswell kernels, well inside this envelope.

From eigenvalue intervals ``[lambda - 2 delta, lambda + 2 delta]`` this module bounds each kappa definition (the rank
rule's and the shifted rule's decisions included: an eigenvalue whose interval straddles the threshold may be kept or
dropped, so an undetermined quantity gets a wide interval rather than a false precision), then (i), (ii), RIR by
interval arithmetic (all positive). A value outside its envelope is not rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPS = float(np.finfo(np.float64).eps)


def hessian_delta(A: np.ndarray, X: np.ndarray, M: np.ndarray) -> float:  # noqa: ARG001 (M: its size D)
    """``delta``: the bound on |computed - exact| of every eigenvalue of ``M = A^T (X^T X) A`` (module docstring)."""
    size = np.linalg.norm(A, 2) ** 2 * np.linalg.norm(X, 2) ** 2  # >= ||M||_2; ||K||_2 = ||X||_2^2
    return float(np.sqrt(M.shape[0]) * EPS * size)


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float

    def __contains__(self, value: float) -> bool:
        return self.lo <= value <= self.hi

    def __truediv__(self, other: Interval) -> Interval:  # positive intervals only
        return Interval(self.lo / other.hi, self.hi / other.lo if other.lo > 0 else np.inf)


def pinv_kappa_interval(lam: np.ndarray, delta: float, rtol: float) -> Interval:
    """Where ``lambda_1 / lambda_k`` (k: the rank at ``rtol``, values ``> rtol lambda_1`` kept) can lie when every
    eigenvalue of ``lam`` (any order, as computed here) may be off by ``2 delta`` on another kernel."""
    lam, d = np.sort(np.asarray(lam, dtype=np.float64))[::-1], 2 * delta
    top = Interval(lam[0] - d, lam[0] + d)
    threshold = Interval(rtol * top.lo, rtol * top.hi)
    surely = int(np.sum(lam - d > threshold.hi))
    maybe = int(np.sum(lam + d > threshold.lo))
    if surely < 1:
        raise ValueError("the largest eigenvalue is not resolved at this delta: no envelope")
    # smallest kept value: between the last surely kept one (ambiguous ones dropped) and the threshold
    low = max(threshold.lo, lam[maybe - 1] - d) if maybe > surely else lam[surely - 1] - d
    return top / Interval(low, lam[surely - 1] + d)


def shifted_kappa_interval(lam_shifted: np.ndarray, delta: float, shift: float) -> Interval:
    """Where the official shifted kappa ``mu_max / min{mu > shift}`` (``mu``: eigenvalues of ``M + shift I``, any
    order) can lie when each ``mu`` may be off by ``2 delta``; always finite: a kept value exceeds the shift."""
    mu, d = np.sort(np.asarray(lam_shifted, dtype=np.float64)), 2 * delta
    surely = mu[mu - d > shift]
    candidates = mu[mu + d > shift]
    if surely.size == 0:
        raise ValueError("no eigenvalue is surely above the shift at this delta: no envelope")
    low = max(shift, candidates[0] - d)
    return Interval(mu[-1] - d, mu[-1] + d) / Interval(low, surely[0] + d)


def terms_intervals(kappas: dict[str, Interval]) -> dict[str, Interval]:
    """(i), (ii), RIR from the intervals of ``H_H_immunized``, ``H_H_identity``, ``H_P_immunized``,
    ``H_P_identity``, with the four kappas themselves (keys ``kappa_<...>`` as in the records)."""
    term_i = kappas["H_H_immunized"] / kappas["H_H_identity"]
    term_ii = kappas["H_P_immunized"] / kappas["H_P_identity"]
    return {"term_i": term_i, "term_ii": term_ii, "rir": term_i / term_ii,
            **{f"kappa_{name[2:]}": v for name, v in kappas.items()}}


def evaluation_envelope(theta: np.ndarray, bias: np.ndarray | None, X_P: np.ndarray, X_H: np.ndarray, *,
                        rtol: float, shift: float, factors: tuple[float, ...] = (0.1, 10.0)
                        ) -> dict[tuple[str, ...], dict[str, Interval]]:
    """The envelope of every number of an ``evaluate`` record (``pinv`` at ``rtol``, ``shifted`` at ``shift`` and
    the sensitivity block at ``factors``), computed here in plain NumPy from the stored theta and data (not through
    kappalab), keyed by the path of the record's block: ``("pinv",)``, ``("sensitivity", "pinv", "rtol_x0.1")``..."""
    A = theta if bias is None else np.vstack([theta, bias[None, :]])
    mats = {}
    for which, X in (("P", X_P), ("H", X_H)):
        Xa = X if bias is None else np.hstack([X, np.ones((len(X), 1))])
        M = A.T @ (Xa.T @ Xa) @ A
        mats[f"H_{which}_immunized"] = (0.5 * (M + M.T), hessian_delta(A, Xa, M))
        K = X.T @ X
        mats[f"H_{which}_identity"] = (K, hessian_delta(np.eye(X.shape[1]), X, K))
    lam = {n: np.linalg.eigvalsh(M) for n, (M, _) in mats.items()}

    def pinv(r: float) -> dict[str, Interval]:
        return terms_intervals({n: pinv_kappa_interval(lam[n], d, r) for n, (_, d) in mats.items()})

    def shifted(s: float) -> dict[str, Interval]:
        return terms_intervals({n: shifted_kappa_interval(np.linalg.eigvalsh(M + s * np.eye(len(M))), d, s)
                                for n, (M, d) in mats.items()})

    out = {("pinv",): pinv(rtol), ("shifted",): shifted(shift)}
    for f in factors:
        out[("sensitivity", "pinv", f"rtol_x{f:g}")] = pinv(rtol * f)
        out[("sensitivity", "shifted", f"shift_x{f:g}")] = shifted(shift * f)
    return out


def outside(envelope: dict[tuple[str, ...], dict[str, Interval]], evaluation: dict) -> tuple[list[str], int]:
    """The numbers of an ``evaluate`` record outside their envelope, as readable lines (empty: all inside), and how
    many numbers were checked (blocks the record lacks are not checked)."""
    bad, checked = [], 0
    for path, intervals in envelope.items():
        values = evaluation
        for part in path:
            values = values.get(part) if isinstance(values, dict) else None
        if values is None:
            continue
        for name, interval in intervals.items():
            checked += 1
            if values[name] not in interval:
                bad.append(f"{'.'.join(path)}.{name} = {values[name]!r} outside [{interval.lo!r}, {interval.hi!r}]")
    return bad, checked
