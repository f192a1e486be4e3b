#!/usr/bin/env bash
# Set up kappalab on a fresh machine: a virtual environment in .venv with the library (editable), its test
# dependencies and submitit (the cluster extra: the tests run Table 2's job-array launcher through its local
# executor). torch is installed first (2.13.0) so that the torch extra does not pull another build; set
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu to get the CPU build from PyTorch's index (PyPI's Linux
# wheel brings a multi-GB CUDA stack). On a GPU machine install the torch build you want into .venv first.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet "torch==2.13.0" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
fi
.venv/bin/python -m pip install --quiet -e ".[torch,test,mnist,cluster]"
