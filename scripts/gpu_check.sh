#!/usr/bin/env bash
# One command for a machine with CUDA: the issue's device checks, in priority order, within 8 minutes on one H200,
# each stage under a time guard, with a JSON report always written (scripts/gpu_check.py holds the stages).
#
#   scripts/gpu_check.sh [--device cuda|cuda:N|cpu] [--dry-run] [--json FILE] [--out FILE]
#
#   1. parity: tests/test_cuda_parity.py, tests/test_core_parity.py (KAPPALAB_TEST_DEVICE = the device),
#      tests/test_batched.py;
#   2. the tensor eigensolver on the hard stacks: tests/test_extremes_hard.py and tests/test_extremes.py;
#   3. one batched official step (Ours, R = 256 runs, D = 784, 64-row batches) as a fraction of the float64 GEMM
#      rate measured in the same process, and the 1080-run full-MNIST sweep extrapolated from it;
#   4-5. Table 1 (House Prices) under the paper and the official protocol, 5 seeds;
#   6. one real-network Table 3 run (TABLE3_ARCH, TABLE3_HARMFUL, TABLE3_WEIGHTS, TABLE3_IMAGENET,
#      TABLE3_HARMFUL_DIR; skipped without weights and data);
#   7. the host-synchronisation test: tests/test_deep_device.py -k reads.
#
# Each stage has a budget; a stage whose budget no longer fits in what is left of the total (480 s; the dry run 30 s,
# both counted from this script's start) is skipped and reported, and a stage past its budget is cut and reported.
# --dry-run: every stage at toy size on the CPU (what tests/test_gpu_check.py runs). The JSON report goes to --json
# (default results/gpu_check_<device>.json; results/gpu_check_dry.json for the dry run), its rendering by
# scripts/gpu_report.py to --out (default the same name, .md; docs/gpu.md's table block is rendered from a committed
# JSON by `scripts/gpu_report.py JSON --gpu-md docs/gpu.md`). Python: ${PYTHON:-.venv/bin/python}. Without CUDA,
# --device cuda stops at once with one line. Exit status: 0 when every stage passed or was skipped, 1 when one
# failed, 2 for bad usage or a missing torch/CUDA.
set -uo pipefail

STARTED=$(date +%s.%N)
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DEVICE=cuda DRY=0 JSON="" OUT=""

usage() { echo "gpu_check: $1 (usage: scripts/gpu_check.sh [--device cuda|cpu] [--dry-run] [--json FILE]" \
               "[--out FILE])" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --device|--json|--out) [ $# -ge 2 ] || usage "$1 needs a value" ;;&
        --device) DEVICE=$2; shift 2 ;;
        --json) JSON=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --dry-run) DRY=1; shift ;;
        *) usage "unknown argument $1" ;;
    esac
done
case "$DEVICE" in cpu|cuda|cuda:[0-9]*) ;; *) usage "--device must be cpu or cuda[:N], got '$DEVICE'" ;; esac
[ -x "$PY" ] || command -v "$PY" >/dev/null 2>&1 || usage "no Python at '$PY' (set PYTHON=...)"
if [ "$DRY" = 1 ]; then DEVICE=cpu; NAME=dry; else NAME=${DEVICE%%:*}; fi
# one interpreter start for both checks: status 3 when torch does not import, else non-zero when CUDA is wanted
# and not available
"$PY" -c "import sys
try:
    import torch
except Exception:
    sys.exit(3)
sys.exit(0 if sys.argv[1] == 'cpu' or torch.cuda.is_available() else 1)" "$DEVICE" 2>/dev/null
case $? in
    0) ;;
    3) echo "gpu_check: torch is not importable by $PY" >&2; exit 2 ;;
    *) echo "gpu_check: torch.cuda.is_available() is False on this machine (no CUDA device or a CPU-only torch);" \
            "nothing was run (use --dry-run for the CPU path)" >&2; exit 2 ;;
esac
[ -n "$JSON" ] || JSON=results/gpu_check_$NAME.json
[ -n "$OUT" ] || OUT=${JSON%.json}.md

args=(--device "$DEVICE" --json "$JSON" --started "$STARTED")
[ "$DRY" = 0 ] || args+=(--dry-run)
"$PY" scripts/gpu_check.py "${args[@]}"
status=$?
"$PY" scripts/gpu_report.py "$JSON" --out "$OUT" || status=1
echo "gpu_check: report $JSON, $OUT; status $status"
exit $status
