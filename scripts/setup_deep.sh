#!/usr/bin/env bash
# The deep-net environment (Table 3's timm ResNet18 / ViT path): a separate virtual environment in .venv-deep with
# torch 2.14.1, torchvision 0.29.1, timm 1.0.31 and peft 0.21.2 (LoRA on the tail: kappalab.attack.deep_attackers; it
# pulls transformers), then kappalab (editable) with its test, MNIST and cluster extras.
# torch 2.14.1 is the CUDA 13 build (~5.5 GB installed; it also runs on CPU): the CPU build of torch 2.13.0 in .venv
# has no torchvision that imports beside it, and timm needs torchvision. Cost measured here: ~3 min for the
# three pinned packages, ~2 min for kappalab and its extras, 5.5 GB on disk.
# Usage: bash scripts/setup_deep.sh, then e.g.
#   .venv-deep/bin/python -m pytest tests/test_deep_pipeline.py tests/test_deep_device.py
#   .venv-deep/bin/kappalab reproduce table3 --arch resnet18 --smoke
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv-deep/bin/python ]; then
  "$PYTHON" -m venv .venv-deep
fi
.venv-deep/bin/python -m pip install --quiet --upgrade pip
.venv-deep/bin/python -m pip install --quiet "torch==2.14.1" "torchvision==0.29.1" "timm==1.0.31" "peft==0.21.2"
# the constraint keeps pip from replacing the torch above while it resolves kappalab's extras
.venv-deep/bin/python -m pip install --quiet -e ".[test,mnist,cluster]" "torch==2.14.1"
.venv-deep/bin/python -c "import torch, torchvision, timm, peft; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'timm', timm.__version__, 'peft', peft.__version__)"
