"""The paper's deep nets (timm ``resnet18`` and ``vit_base_patch16_clip_224``) split for immunization.

Needs the optional extra ``kappalab[deep]`` (timm, torchvision); importing this module does not import timm.
Weights come from a local file (no hub access at run time): the model is built with ``pretrained=False`` and
``load_state_dict`` reads the file (``.safetensors`` via the ``safetensors`` package, anything else via
``torch.load(weights_only=True)``).

Splits (Sec. 5.2, rebuttal Q2), with ``trainable`` names from the config (``choices.trainable_modules``):

* ResNet18: frozen = everything up to the trainable blocks; trainable = e.g. ``layer4.0``, ``layer4.1``;
  neck = ``forward_head(pre_logits=True)`` (global pool + flatten, 512 features); classifier = ``fc``.
* ViT: frozen = patch embedding, position embedding, ``blocks[:-1]``; trainable = ``blocks[-1]``; neck = final
  ``norm`` + ``forward_head(pre_logits=True)`` (token pooling, ``fc_norm``; 768 features); classifier = ``head``.
* ViT, the authors' trainable set (``trainable_modules = ["blocks.-1", "norm", "head"]``, ``--protocol official``;
  their ``models/vit.py`` trains a parameter whose name contains ``blocks.11``, ``norm`` or ``head``): nothing
  frozen outright; trainable = the whole trunk (patch embedding to the final ``norm``) of which only the last
  block, every LayerNorm (``norm1``/``norm2`` of every block, the final ``norm``) and the head are trained, the rest
  kept at theta_0 with gradients flowing through it; neck = ``forward_head(pre_logits=True)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from torch import nn

from .model import ImmunizableModel

TIMM_NAMES = {"resnet18": "resnet18", "vit": "vit_base_patch16_clip_224"}
#: the authors' ViT trainable set (see the module docstring)
AUTHORS_VIT_TRAINABLE = ["blocks.-1", "norm", "head"]
INSTALL_HINT = ("the paper's deep-net experiments need timm and torchvision: pip install 'kappalab[deep]' "
                "(a torchvision build matching your torch)")


def require_timm():
    """Import and return timm, or raise ImportError saying what to install."""
    try:
        import timm  # noqa: F401
    except Exception as error:  # ImportError, or torchvision failing to import beside this torch
        raise ImportError(f"{INSTALL_HINT}; importing timm failed with: {error!r}") from error
    return timm


def load_weights(model: nn.Module, weights: str | Path) -> None:
    """Load a user-supplied state dict into ``model`` (strict), with a clear error for a missing file."""
    path = Path(weights).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"weights {path} not found: download the timm checkpoint of {type(model).__name__} (e.g. from the "
            "Hugging Face hub: timm/resnet18.a1_in1k or timm/vit_base_patch16_clip_224.openai_ft_in1k, file "
            "model.safetensors or pytorch_model.bin) and pass its local path with --weights")
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
        except ImportError as error:
            raise ImportError("weights is a .safetensors file: pip install safetensors") from error
        state = load_file(str(path))
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
        state = state.get("state_dict", state) if isinstance(state, dict) else state
    model.load_state_dict(state, strict=True)


class _Sequence(nn.Module):
    """Run a list of callables (modules or bound methods of a registered module) in order."""

    def __init__(self, owner: nn.Module, steps: list) -> None:
        super().__init__()
        self.owner = owner  # registers the parameters the steps use
        self._steps = steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for step in self._steps:
            x = step(x)
        return x


Split = tuple[nn.Module, nn.Module, nn.Module, Callable[[str], bool] | None]


def _resnet_split(net: nn.Module, trainable: list[str]) -> Split:
    names = ["conv1", "bn1", "act1", "maxpool", "layer1", "layer2", "layer3", "layer4"]
    blocks: list[tuple[str, nn.Module]] = []
    for name in names:
        module = getattr(net, name)
        if name.startswith("layer"):
            blocks += [(f"{name}.{i}", b) for i, b in enumerate(module)]
        else:
            blocks.append((name, module))
    unknown = set(trainable) - {n for n, _ in blocks} - set(names)
    if unknown:
        raise ValueError(f"trainable_modules: {sorted(unknown)} are not ResNet blocks ({[n for n, _ in blocks]})")
    first = min(i for i, (n, _) in enumerate(blocks) if n in trainable or n.split(".")[0] in trainable)
    frozen = _Sequence(net, [m for _, m in blocks[:first]])
    train = nn.Sequential(*[m for _, m in blocks[first:]])
    neck = _Sequence(net, [lambda x: net.forward_head(x, pre_logits=True)])
    return frozen, train, neck, None


def _vit_split(net: nn.Module, trainable: list[str]) -> Split:
    embed = [net.patch_embed, net._pos_embed, getattr(net, "patch_drop", nn.Identity()), net.norm_pre]
    pooled = lambda x: net.forward_head(x, pre_logits=True)  # noqa: E731
    if trainable == ["blocks.-1"]:
        frozen = _Sequence(net, [*embed, *list(net.blocks)[:-1]])
        return frozen, net.blocks[-1], _Sequence(net, [net.norm, pooled]), None
    if trainable == AUTHORS_VIT_TRAINABLE:
        last = f"blocks.{len(net.blocks) - 1}."
        trunk = _Sequence(net, [*embed, *net.blocks, net.norm])
        return nn.Identity(), trunk, _Sequence(net, [pooled]), lambda name: (
            last in name or "norm" in name or "head" in name)
    raise ValueError(f"trainable_modules: ViT supports ['blocks.-1'] (Sec. 5.2) or {AUTHORS_VIT_TRAINABLE} (the "
                     f"authors' code), got {trainable}")


def build_timm_model(arch: str, weights: str | Path | None, *, trainable: list[str],
                     dtype: torch.dtype = torch.float64, dummy: bool = True, ridge: float = 1e-6, side: str = "input",
                     load: bool = True, check: bool = True, timm_name: str | None = None,
                     **timm_kwargs) -> tuple[ImmunizableModel, nn.Module]:
    """The paper's ``arch`` ("resnet18" or "vit") as an :class:`ImmunizableModel`, and the timm model itself
    (for its data config). ``load=False`` keeps the random initialisation (smoke runs and tests; ``weights`` is
    then ignored). ``timm_name`` replaces the paper's model by another timm model of the same family (e.g.
    ``vit_tiny_patch16_224`` standing in for ViT-B/16-CLIP in a CPU smoke run); ``timm_kwargs`` go to
    ``timm.create_model`` (e.g. ``img_size``). ``check``: see :class:`ImmunizableModel`."""
    if arch not in TIMM_NAMES:
        raise ValueError(f"arch must be one of {sorted(TIMM_NAMES)}, got {arch!r}")
    timm = require_timm()
    net = timm.create_model(timm_name or TIMM_NAMES[arch], pretrained=False, num_classes=1000, **timm_kwargs)
    if load:
        if weights is None:
            raise ValueError("weights: a local timm state dict is required unless load=False")
        load_weights(net, weights)
    net = net.to(dtype)
    frozen, train, neck, trains = (_resnet_split if arch == "resnet18" else _vit_split)(net, list(trainable))
    classifier = net.get_classifier()
    model = ImmunizableModel(frozen, train, neck, classifier, int(net.num_features), dummy=dummy, ridge=ridge,
                             side=side, check=check, trains=trains)  # type: ignore[arg-type]
    return model, net
