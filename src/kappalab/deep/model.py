"""A feature extractor split for immunization: frozen layers, immunized layers, a dummy layer and a classifier.

``x -> frozen -> trainable -> neck -> dummy -> features F -> classifier``:

* ``frozen``: layers kept as in theta_0 (run under ``no_grad``, always in eval mode so e.g. BatchNorm statistics
  stay those of theta_0).
* ``trainable``: the immunized layers (ResNet18: the last two conv blocks; ViT: the last transformer block).
* ``neck``: parameter-free or frozen glue after them (pooling, flatten, final norm).
* ``dummy``: the dummy layer of Appendix C.3 / rebuttal Q8, a square :class:`~kappalab.dummy_layer.DummyLinear`
  initialised to the identity (so theta_0's features are unchanged) and treated as the linear extractor
  ``theta_L`` of ``f = x(theta_1..L-1)^T theta_L``. Regularizer gradients reaching its weight through a call with
  ``precondition=True`` are multiplied by ``(K + ridge I)^{-1}``, K the covariance of the dummy layer's input
  batch: Alg. 1's ``theta - eta K^{-1} grad_theta R`` (``side="input"``).
* ``classifier``: the D_P head (e.g. the pre-trained ImageNet ``fc``); linear probing on D_H replaces it.

The features of Eq. 18 are the dummy layer's outputs ``F``; ``H~ = F^T F``.
"""

from __future__ import annotations

from typing import Callable, Iterator, Literal

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from ..dummy_layer import DummyLinear, Route, Side
from ..immunization.spectra import FeatureGram


class ImmunizableModel(nn.Module):
    """See the module docstring.

    Args:
        frozen: layers kept frozen (may be ``nn.Identity()``).
        trainable: the immunized layers.
        neck: glue between ``trainable`` and the features (``nn.Identity()`` when none); its parameters are frozen.
        classifier: the D_P head, applied to the features.
        feature_dim: dimension D_hid of the features (the dummy layer is D_hid x D_hid).
        dummy: insert the dummy layer (True) or use the neck's output as the features (False: no preconditioning).
        ridge: ridge of the dummy layer's preconditioner.
        side: "input" (Alg. 1) or "output" (the authors' public code); see :mod:`kappalab.dummy_layer`.
        check: the dummy layer checks that ``K + ridge I`` is positive definite (one host read per
            preconditioned backward); ``False`` for a hot loop that must not read back.
        trains: which parameters of ``trainable`` are trained, by name (``trainable.named_parameters()``); None:
            all. The others stay at theta_0 but gradients flow through them (e.g. the authors' ViT: every LayerNorm
            of every block and the last block, with ``trainable`` the whole trunk).
        norm_statistics: ``"batch"`` (default, the paper's training): BatchNorm layers of ``trainable`` normalise
            with each batch's statistics in training mode and update their running statistics; ``"frozen"``: they
            stay in eval mode, normalising with theta_0's running statistics and never updating them (their affine
            weights still train), to tell what the statistics alone do to the features.

    The neck's output is cast to the classifier's dtype: a float32 tail (``trainable``, ``neck``) gives float64
    features where the classifier is float64, so the dummy layer, the heads and the spectra stay in float64.

    A new model is in training mode with ``frozen`` and ``neck`` in eval mode (see :meth:`train`).
    """

    def __init__(self, frozen: nn.Module, trainable: nn.Module, neck: nn.Module, classifier: nn.Module,
                 feature_dim: int, *, dummy: bool = True, ridge: float = 1e-6, side: Side = "input",
                 check: bool = True, trains: Callable[[str], bool] | None = None,
                 norm_statistics: Literal["batch", "frozen"] = "batch") -> None:
        super().__init__()
        if not (isinstance(feature_dim, int) and feature_dim >= 1):
            raise ValueError(f"feature_dim must be a positive int, got {feature_dim!r}")
        if norm_statistics not in ("batch", "frozen"):
            raise ValueError(f"norm_statistics must be 'batch' or 'frozen', got {norm_statistics!r}")
        self.norm_statistics = norm_statistics
        self.frozen, self.trainable, self.neck, self.classifier = frozen, trainable, neck, classifier
        self.feature_dim = feature_dim
        self.dummy: DummyLinear | None = None
        if dummy:
            ref = next(iter(classifier.parameters()), None)
            dtype = ref.dtype if ref is not None else torch.get_default_dtype()
            self.dummy = DummyLinear(feature_dim, feature_dim, bias=False, ridge=ridge, side=side, check=check,
                                     dtype=dtype, device=ref.device if ref is not None else None)
            with torch.no_grad():
                self.dummy.weight.copy_(torch.eye(feature_dim, dtype=dtype))
        # Order matters: ``frozen`` may contain ``trainable``/``classifier`` (a timm model split by reference).
        self.frozen.requires_grad_(False)
        self.neck.requires_grad_(False)
        self.trainable.requires_grad_(True)
        if trains is not None:
            for name, p in self.trainable.named_parameters():
                p.requires_grad_(trains(name))
        self.classifier.requires_grad_(True)
        self.train()  # frozen layers (e.g. BatchNorm statistics of theta_0) never run in training mode

    def train(self, mode: bool = True) -> "ImmunizableModel":
        """Train mode for ``trainable``/``classifier``; ``frozen`` and ``neck`` always stay in eval mode, and so do
        ``trainable``'s BatchNorm layers under ``norm_statistics="frozen"``."""
        super().train(mode)
        self.frozen.eval()
        self.neck.eval()
        self.trainable.train(mode)
        self.classifier.train(mode)
        if self.norm_statistics == "frozen":
            for module in self.trainable.modules():
                if isinstance(module, _BatchNorm):
                    module.eval()
        return self

    @torch.no_grad()
    def estimate_norm_statistics(self, X: torch.Tensor, batch_size: int = 256) -> None:
        """Re-estimate the running statistics of ``trainable``'s BatchNorm layers on the inputs ``X`` (e.g. D_P's
        training data): reset, then one pass in training mode with ``momentum=None`` (torch's cumulative average
        over the batches, each weighted equally), then the layers' own momentum back. Nothing else changes."""
        norms = [m for m in self.trainable.modules() if isinstance(m, _BatchNorm)]
        momenta = [m.momentum for m in norms]
        was_training = self.training
        for m in norms:
            m.reset_running_stats()
            m.momentum = None
            m.train()
        try:
            for chunk in X.split(batch_size):
                self.pre_features(chunk)
        finally:
            for m, momentum in zip(norms, momenta):
                m.momentum = momentum
            self.train(was_training)

    def extractor_parameters(self) -> Iterator[nn.Parameter]:
        """The immunized parameters theta: the trained ones of ``trainable`` (the classifier's excluded, should
        ``trainable`` reach it) and the dummy layer (weight decay 0 in Appendix C.2)."""
        head = {id(p) for p in self.classifier.parameters()}
        yield from (p for p in self.trainable.parameters() if p.requires_grad and id(p) not in head)
        if self.dummy is not None:
            yield from self.dummy.parameters()

    def classifier_parameters(self) -> Iterator[nn.Parameter]:
        """The D_P head omega (weight decay 2e-5 in Appendix C.2)."""
        yield from self.classifier.parameters()

    def pre_features(self, x: torch.Tensor) -> torch.Tensor:
        """The dummy layer's input ``x(theta_1..L-1)`` (batch x D_hid)."""
        with torch.no_grad():
            h = self.frozen(x)
        z = self.neck(self.trainable(h))
        if z.ndim != 2 or z.shape[1] != self.feature_dim:
            raise ValueError(f"the neck must output (batch, {self.feature_dim}) features, got {tuple(z.shape)}")
        ref = next(iter(self.classifier.parameters()), None)
        return z if ref is None else z.to(ref.dtype)  # a float32 tail's features in the head's float64

    def head_features(self, z: torch.Tensor, precondition: bool = False, route: Route = "dense") -> torch.Tensor:
        """Features ``F`` from the dummy layer's input; ``precondition`` and ``route`` as in :class:`DummyLinear`."""
        return z if self.dummy is None else self.dummy(z, precondition=precondition, route=route)

    def features(self, x: torch.Tensor, precondition: bool = False, route: Route = "dense") -> torch.Tensor:
        """Features ``f_theta(x)`` of Eq. 18 (batch x D_hid)."""
        return self.head_features(self.pre_features(x), precondition, route)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of the D_P classifier."""
        return self.classifier(self.features(x))


def hessian_tilde(F: torch.Tensor) -> torch.Tensor:
    """Eq. 18: ``H~ = F^T F`` for stacked features ``F`` (N x D_hid), symmetrized against rounding."""
    if F.ndim != 2:
        raise ValueError(f"F must be a 2-D (samples x features) matrix, got shape {tuple(F.shape)}")
    H = F.T @ F
    return 0.5 * (H + H.T)


def feature_matrix(F: torch.Tensor, route: Route) -> "torch.Tensor | FeatureGram":
    """``H~ = F^T F`` as the spectral core reads it: formed (``route="dense"``, or ``N >= D_hid`` where ``H~`` is
    the smaller matrix) or held as its ``N x N`` Gram matrix (``route="gram"`` with ``N < D_hid``:
    :class:`~kappalab.immunization.spectra.FeatureGram`)."""
    if route == "gram" and F.shape[0] < F.shape[1]:
        return FeatureGram(F)
    return hessian_tilde(F)


class SmallCNN(nn.Module):
    """A 3-block CNN for 28x28 single-channel images (the CPU proxy's stand-in for ResNet18).

    Block 1 is frozen during immunization; blocks 2 and 3 are "the last two conv blocks". Features: global average
    pooling of block 3 (``width * 4`` channels). Block 3 ends in tanh, not ReLU: with ReLU about half of the 32
    channels of a net this small die in pre-training, and with no activation the pooled features are nearly a
    linear image of block 2's 16 channels; either way ``H~`` is numerically rank-deficient (kappa ~ 1e8-1e13) for
    reasons unrelated to immunization. With tanh kappa(H~) ~ 1e4-1e5 (ResNet18's 512 post-ReLU channels do
    not have this problem).
    """

    def __init__(self, num_classes: int, width: int = 8, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        if not (isinstance(width, int) and width >= 1):
            raise ValueError(f"width must be a positive int, got {width!r}")

        def block(cin: int, cout: int, last: bool) -> nn.Sequential:
            conv = nn.Conv2d(cin, cout, 3, padding=1)
            return nn.Sequential(conv, nn.Tanh()) if last else nn.Sequential(conv, nn.ReLU(), nn.MaxPool2d(2))

        self.block1 = block(1, width, False)
        self.block2 = block(width, 2 * width, False)
        self.block3 = block(2 * width, 4 * width, True)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(4 * width, num_classes)
        self.feature_dim = 4 * width
        self.to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.block3(self.block2(self.block1(x)))))

    def split(self, *, dummy: bool = True, ridge: float = 1e-6, side: Side = "input") -> ImmunizableModel:
        """This network as an :class:`ImmunizableModel` (block 1 frozen, blocks 2-3 immunized, ``fc`` the head)."""
        return ImmunizableModel(self.block1, nn.Sequential(self.block2, self.block3), self.pool, self.fc,
                                self.feature_dim, dummy=dummy, ridge=ridge, side=side)
