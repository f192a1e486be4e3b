#!/usr/bin/env bash
# Set up kappalab on a fresh machine: a virtual environment in .venv with the library (editable) and its test
# dependencies. torch is installed first and pinned to the CPU build (2.13.0) so that nothing downloads a
# multi-GB CUDA build; on a GPU machine install the torch build you want into .venv before running this.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet "torch==2.13.0"
fi
.venv/bin/python -m pip install --quiet -e ".[torch,test,mnist]"
