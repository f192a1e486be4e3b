"""Attackers that change a linear extractor ``theta`` (``D_in x D``) while training the probe ``W`` (``D x C``).

The model on D_H is ``X M W`` with ``M`` the attacked extractor; each step is one minibatch (``batch_size`` rows,
without replacement within an epoch, order drawn from the run's seed) of the loss ``||X_b M W - Y_b||^2 / (2b)``.
Each iterator yields an :class:`Extracted` after every step: the end-to-end map ``M W`` (``D_in x C``), on which the
harmful loss is measured from the inputs, ``loss(X, Y, M W)`` (:func:`kappalab.attack.problem.loss`), and what forms
the attacked extractor ``M``, on which D_P's utility is (:mod:`.utility`).

* ``finetune``: ``M = theta`` trained with the probe (``W_0 = 0``), by SGD or Adam.
* ``lora``: ``M = theta + B A`` with theta frozen, ``B`` (``D_in x r``) zero and ``A`` (``r x D``) uniform in
  ``+-1/sqrt(D)`` at the start (peft's LoRA initialisation with scaling ``alpha / r = 1``); B, A and W trained.

Gradients (chain rule of the batch loss, ``R = X_b M W - Y_b``): ``dW = (X_b M)^T R / b``,
``dM = X_b^T R W^T / b``; for LoRA ``dB = dM A^T`` and ``dA = B^T dM``. Every product is taken through
``g = X_b^T R / b`` (``D_in x C``) and ``M W``: ``R = X_b (M W) - Y_b``, ``dW = M^T g``, ``dM = g W^T``,
``dB = g (A W)^T``, ``dA = (B^T g) W^T``; the same values as the forms above, without the ``b x D_in x D``
products (``X_b M``) that those would form.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .probe_attackers import AdamState


@dataclass(frozen=True)
class Extracted:
    """One step's state of an extractor attacker: ``map = M W``, computed at the step (it never changes), and the
    live arrays the next step updates in place, from which :meth:`extractor` forms ``M``."""

    map: np.ndarray  #: M W
    theta: np.ndarray  #: fine-tuning: M itself; LoRA: the frozen theta
    B: np.ndarray | None = None  #: LoRA's factors (None: fine-tuning)
    A: np.ndarray | None = None

    def extractor(self) -> np.ndarray:
        """``M`` now, as a new array: theta (fine-tuning) or ``theta + B A`` (LoRA, formed only when asked for)."""
        return self.theta.copy() if self.B is None else self.theta + self.B @ self.A


class _Optimizer:
    """Plain SGD or Adam over a list of arrays, updated in place."""

    def __init__(self, name: str, lr: float, params: list[np.ndarray]) -> None:
        if name not in ("sgd", "adam"):
            raise ValueError(f"optimizer must be 'sgd' or 'adam', got {name!r}")
        self.lr = lr
        self.states = [AdamState.like(p) for p in params] if name == "adam" else None

    def update(self, params: list[np.ndarray], grads: list[np.ndarray]) -> None:
        for i, (p, g) in enumerate(zip(params, grads)):
            p -= g * self.lr if self.states is None else self.states[i].step(g, self.lr)


def minibatches(n: int, batch_size: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Row indices of each step's minibatch: ``batch_size`` rows (at most ``n``) without replacement within an
    epoch, a new order drawn from ``rng`` each epoch (the linear and the deep extractor attackers alike)."""
    b = min(batch_size, n)
    while True:
        order = rng.permutation(n)
        for i in range(n // b):
            yield order[i * b:(i + 1) * b]


def batch_grads(Xb: np.ndarray, Yb: np.ndarray, M: np.ndarray, W: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """The batch loss ``||Xb M W - Yb||^2 / (2b)`` and its gradients in M and W (module docstring)."""
    loss, g = _batch(Xb, Yb, M @ W)
    return loss, g @ W.T, M.T @ g


def lora_grads(Xb: np.ndarray, Yb: np.ndarray, theta: np.ndarray, B: np.ndarray, A: np.ndarray,
               W: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """The batch loss of ``M = theta + B A`` and its gradients in B, A and W (module docstring)."""
    AW = A @ W
    loss, g = _batch(Xb, Yb, theta @ W + B @ AW)
    Bg = B.T @ g
    return loss, g @ AW.T, Bg @ W.T, theta.T @ g + A.T @ Bg


def _batch(Xb: np.ndarray, Yb: np.ndarray, MW: np.ndarray) -> tuple[float, np.ndarray]:
    """The batch loss of the end-to-end map ``MW`` and ``g = Xb^T R / b``."""
    R = Xb @ MW - Yb
    b = Xb.shape[0]
    return float(np.sum(R * R)) / (2 * b), Xb.T @ R / b


def extractor_attack(X: np.ndarray, Y: np.ndarray, theta: np.ndarray, *, seed: int, optimizer: str, lr: float,
                     batch_size: int, rank: int | None = None) -> Iterator[Extracted]:
    """``finetune`` (``rank=None``) or ``lora`` of rank ``rank`` (module docstring); yields each step's
    :class:`Extracted`."""
    rng = np.random.default_rng(seed)
    D = theta.shape[1]
    W = np.zeros((D, Y.shape[1]))
    if rank is None:
        M = theta.copy()
        params = [M, W]
    else:
        if not 1 <= rank <= min(theta.shape):
            raise ValueError(f"LoRA rank must be in 1..{min(theta.shape)}, got {rank}")
        B = np.zeros((theta.shape[0], rank))
        A_ = rng.uniform(-1 / np.sqrt(D), 1 / np.sqrt(D), size=(rank, D))
        params = [B, A_, W]
    opt = _Optimizer(optimizer, lr, params)
    for rows in minibatches(X.shape[0], batch_size, rng):
        if rank is None:
            grads = batch_grads(X[rows], Y[rows], M, W)[1:]
        else:
            grads = lora_grads(X[rows], Y[rows], theta, B, A_, W)[1:]
        opt.update(params, list(grads))
        yield Extracted(M @ W, M) if rank is None else Extracted(theta @ W + B @ (A_ @ W), theta, B, A_)
