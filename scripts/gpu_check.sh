#!/usr/bin/env bash
# One command for a machine with CUDA: parity tests, the batched-step benchmarks, a Table 2 official-protocol
# sweep with the batched engine and the command line's batched, sharded and merged sweep, reported in docs/gpu.md
# (on CUDA; the CPU path writes results/gpu_check_cpu.md, so that it never replaces the GPU report; --out to choose).
#
#   scripts/gpu_check.sh [--device cuda|cpu] [--data subset|mnist] [--data-dir DIR] [--runs N] [--epochs E]
#                        [--batch-size R] [--out FILE]
#
#   1. parity: tests/test_cuda_parity.py (every core public function, NumPy vs torch on the device, float64, 1e-12),
#      tests/test_core_parity.py with KAPPALAB_TEST_DEVICE set to the device, tests/test_batched.py (batched vs
#      single engine, CPU);
#   2. benchmarks: benchmarks/test_bench_batched.py --benchmark-only --device DEVICE (one official step, single vs
#      batched, achieved GFLOP/s vs the device's float64 GEMM rate in the same run);
#   3. sweep: benchmarks/sweep_table2.py (Table 2 official protocol, 1080 runs by default, Eq. 15 per run; the first
#      CHECK_SINGLE (default 8) runs also through the single engine: agreement and per-run time), against its products' time. It starts no
#      new batch after SWEEP_SECONDS (default 300, so that the whole check stays within 10 minutes); the report
#      then gives the runs timed and the extrapolated time of the whole sweep;
#   4. the command line: `kappalab reproduce table2 --engine batched --shard K/2` for K = 1, 2 into two stores,
#      `--merge` of both, the same runs with `--engine single`, and `--compare-with` between the two: run-by-run
#      differences of (i), (ii), RIR between the engines on the device (pairs CLI_PAIRS, default 0-1,7-3,4-9, seed
#      0, CLI_EPOCHS epochs, default 2); and the same runs batched one at a time (--batch-size 1) against the
#      merged ones: whether the batch size changes a run's numbers on the device (it is not part of the identity).
#
# Defaults: --device cuda, --data subset (the embedded 500-per-digit MNIST subset), all 1080 runs, batches of 256
# runs on CUDA (64 on the CPU). Python: ${PYTHON:-.venv/bin/python}. Without CUDA, --device cuda stops at once with
# one line; --device cpu runs the same steps on the CPU (use --runs / --epochs to keep it short). Exit status: 0 when
# every step passed, 1 when a test failed, 2 for bad usage or a missing torch/CUDA.
set -uo pipefail

cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DEVICE=cuda DATA=subset DATA_DIR="" RUNS="" EPOCHS="" BATCH="" OUT=""
SWEEP_SECONDS=${SWEEP_SECONDS:-300}  # the sweep starts no new batch after this; the rest is extrapolated
CHECK_SINGLE=${CHECK_SINGLE:-8}  # the first runs also trained by the single engine (agreement, per-run time)
CLI_PAIRS=${CLI_PAIRS:-0-1,7-3,4-9} CLI_EPOCHS=${CLI_EPOCHS:-2}  # step 4's runs (x 4 methods, seed 0)

usage() { echo "gpu_check: $1 (usage: scripts/gpu_check.sh [--device cuda|cpu] [--data subset|mnist]" \
               "[--data-dir DIR] [--runs N] [--epochs E] [--batch-size R] [--out FILE])" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --device|--data|--data-dir|--runs|--epochs|--batch-size|--out) [ $# -ge 2 ] || usage "$1 needs a value" ;;&
        --device) DEVICE=$2; shift 2 ;;
        --data) DATA=$2; shift 2 ;;
        --data-dir) DATA_DIR=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --epochs) EPOCHS=$2; shift 2 ;;
        --batch-size) BATCH=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) usage "unknown argument $1" ;;
    esac
done
case "$DEVICE" in cpu|cuda|cuda:[0-9]*) ;; *) usage "--device must be cpu or cuda[:N], got '$DEVICE'" ;; esac
case "$DATA" in subset|mnist) ;; *) usage "--data must be subset or mnist, got '$DATA'" ;; esac
for v in "$RUNS" "$EPOCHS" "$BATCH"; do
    [ -z "$v" ] || [[ "$v" =~ ^[1-9][0-9]*$ ]] ||
        usage "--runs, --epochs and --batch-size take a positive integer, got '$v'"
done
[ -x "$PY" ] || command -v "$PY" >/dev/null 2>&1 || usage "no Python at '$PY' (set PYTHON=...)"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import torch" 2>/dev/null || { echo "gpu_check: torch is not importable by $PY" >&2; exit 2; }
if [ "$DEVICE" != cpu ]; then
    "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
        echo "gpu_check: torch.cuda.is_available() is False on this machine (no CUDA device or a CPU-only torch);" \
             "nothing was run (use --device cpu for the CPU path)" >&2; exit 2; }
fi
[ -n "$BATCH" ] || { [ "$DEVICE" = cpu ] && BATCH=64 || BATCH=256; }
[ -n "$OUT" ] || { [ "$DEVICE" = cpu ] && OUT=results/gpu_check_cpu.md || OUT=docs/gpu.md; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
status=0
start=$(date +%s)

echo "== 1/4 parity tests ($DEVICE)"
KAPPALAB_TEST_DEVICE=$DEVICE "$PY" -m pytest tests/test_cuda_parity.py tests/test_core_parity.py tests/test_batched.py \
    -q -rs -p no:cacheprovider >"$WORK/parity.txt" 2>&1 || status=1
tail -n 25 "$WORK/parity.txt"

echo "== 2/4 batched-step benchmarks ($DEVICE)"
"$PY" -m pytest benchmarks/test_bench_batched.py --benchmark-only --device "$DEVICE" -q -p no:cacheprovider \
    --benchmark-json "$WORK/bench.json" --benchmark-columns=min,mean,rounds >"$WORK/bench.txt" 2>&1 || status=1
tail -n 30 "$WORK/bench.txt"

echo "== 3/4 Table 2 sweep, official protocol, batched engine ($DEVICE, data $DATA)"
sweep=(benchmarks/sweep_table2.py --device "$DEVICE" --data "$DATA" --batch-size "$BATCH" --finish rir
       --check-single "$CHECK_SINGLE" --max-seconds "$SWEEP_SECONDS" --json "$WORK/sweep.json")
[ -z "$DATA_DIR" ] || sweep+=(--data-dir "$DATA_DIR")
[ -z "$RUNS" ] || sweep+=(--runs "$RUNS")
[ -z "$EPOCHS" ] || sweep+=(--epochs "$EPOCHS")
"$PY" "${sweep[@]}" >"$WORK/sweep.txt" 2>&1 || status=1
tail -n 12 "$WORK/sweep.txt"

echo "== 4/4 the command line: batched shards, merge, single engine, comparison ($DEVICE, data $DATA)"
cli=("$PY" -m kappalab.cli reproduce table2 --protocol official --pairs "$CLI_PAIRS" --seeds 0 --epochs "$CLI_EPOCHS"
     --no-probe --no-progress --device "$DEVICE")
if [ "$DATA" = mnist ]; then cli+=(--data mnist); [ -z "$DATA_DIR" ] || cli+=(--data-dir "$DATA_DIR")
else cli+=(--data mnist-subset); fi
{ "${cli[@]}" --engine batched --batch-size "$BATCH" --shard 1/2 --out "$WORK/shard1" &&
  "${cli[@]}" --engine batched --batch-size "$BATCH" --shard 2/2 --out "$WORK/shard2" &&
  "${cli[@]}" --engine batched --merge "$WORK/shard1" "$WORK/shard2" --out "$WORK/merged" &&
  "${cli[@]}" --engine single --out "$WORK/single" &&
  "${cli[@]}" --engine batched --out "$WORK/merged" --report-only --compare-with "$WORK/single" &&
  "${cli[@]}" --engine batched --batch-size 1 --out "$WORK/alone" &&
  "${cli[@]}" --engine batched --out "$WORK/alone" --report-only --compare-with "$WORK/merged"
} >"$WORK/cli.txt" 2>&1 || status=1
tail -n 12 "$WORK/cli.txt"

elapsed=$(( $(date +%s) - start ))
"$PY" - "$WORK" "$OUT" "$DEVICE" "$DATA" "$status" "$elapsed" <<'EOF'
import json, pathlib, platform, subprocess, sys

work, out, device, data, status, elapsed = sys.argv[1:]
work = pathlib.Path(work)
import torch

def read(name):
    path = work / name
    return json.loads(path.read_text()) if path.exists() else None

def tail(name, n):
    path = work / name
    return "\n".join(path.read_text().splitlines()[-n:]) if path.exists() else "(no output)"

commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
gpu = torch.cuda.get_device_name() if device != "cpu" else platform.processor() or platform.machine()
lines = [f"# GPU check ({device})", "",
         f"`scripts/gpu_check.sh --device {device} --data {data}` on {gpu}, torch {torch.__version__}, commit "
         f"{commit}; {elapsed} s in all; overall status {'passed' if status == '0' else 'FAILED'}. Float64 "
         "throughout, TF32 off, timers synchronized.", "", "## 1. Parity tests", "", "```",
         tail("parity.txt", 8), "```", "", "## 2. One official-protocol step (D = 784, 64-row batches)", ""]
bench = read("bench.json")
if bench:
    lines += ["| method | step | runs R | step (ms) | per run (ms) | GFLOP/s on the GEMMs | GEMM rate (GFLOP/s) | "
              "fraction |", "|---|---|---|---|---|---|---|---|"]
    for b in sorted(bench["benchmarks"], key=lambda b: (b["group"], b["extra_info"].get("step", ""),
                                                        b["extra_info"].get("runs", 0))):
        e = b["extra_info"]
        lines.append(f"| {b['group'].removeprefix('batched_')} | {e.get('step', 'autograd')} | {e['runs']} | "
                     f"{1e3 * b['stats']['min']:.2f} | "
                     f"{1e3 * e['per_run_s']:.3f} | {e['gflops']:.0f} | {e['gemm_gflops']:.0f} | "
                     f"{e['fraction_of_gemm']:.2f} |")
else:
    lines += ["(no benchmark results)", "", "```", tail("bench.txt", 20), "```"]
lines += ["", "## 3. Table 2 sweep (official protocol, batched engine)", ""]
sweep = read("sweep.json")
if sweep:
    lines += [f"{sweep['runs_timed']} of {sweep['runs']} runs timed ({sweep['epochs']} epochs, data {sweep['data']}, "
              f"batches of <= {sweep['batch_size']} runs): training {sweep['train_s']:.1f} s, Eq. 15 of every run "
              f"{sweep['finish_s']:.1f} s, "
              f"wall {sweep['wall_s']:.1f} s; the same steps' unavoidable float64 products alone "
              f"{sweep['products_s']:.1f} s ({sweep['products_gflops']:.0f} GFLOP/s; square GEMM "
              f"{sweep['gemm_gflops']:.0f} GFLOP/s): training / products = {sweep['train_over_products']:.2f}, "
              f"(training + Eq. 15) / products = {sweep['total_over_products']:.2f}. All {sweep['runs']} runs at this "
              f"rate: {sweep['extrapolated_sweep_s']:.0f} s.", "",
              f"Per run: batched {sweep['per_run_train_batched_s']:.3f} s training"
              + (f", single engine {sweep['per_run_train_single_s']:.3f} s (on the {len(sweep['check_single'])} "
                 f"runs trained by both: batched / single = {sweep['batched_over_single']:.2f})"
                 if "batched_over_single" in sweep else "") + ".", ""]
    if sweep.get("table"):
        lines += ["Medians over the runs (Eq. 15):", "", "| method | (i) | (ii) | RIR |", "|---|---|---|---|"]
        lines += [f"| {m} | {r['term_i']:.4g} | {r['term_ii']:.4g} | {r['rir']:.4g} |"
                  for m, r in sweep["table"].items()]
        lines.append("")
    if sweep.get("check_single"):
        lines += ["Batched vs single engine on the device (relative max difference):", "",
                  "| run | theta_I | Eq. 15 (i), (ii), RIR |", "|---|---|---|"]
        lines += [f"| {r['job']} | {r['theta_rel']:.1e} | {r['rir_rel']:.1e} |" for r in sweep["check_single"]]
else:
    lines += ["(no sweep results)", "", "```", tail("sweep.txt", 20), "```"]
lines += ["", "## 4. The command line: batched shards, merge, comparison with the single engine", ""]
merged, compared = read("merged/merge_official.json"), read("merged/reproducibility_official.json")
if merged and compared:
    lines += [f"`kappalab reproduce table2 --engine batched --shard K/2` for K = 1, 2, merged with `--merge`: "
              f"{merged['merged']} of {merged['expected']} runs "
              f"({', '.join(str(s['records']) for s in merged['sources'])} per shard); the same runs with `--engine single`, compared run by run with `--compare-with` "
              f"({compared['n_common']} runs; relative difference of each number, max over the runs):", "",
              "| method | runs | (i) | (ii) | RIR |", "|---|---|---|---|---|"]
    lines += [f"| {m} | {e['n']} | " + " | ".join(f"{e[c]['max']:.1e}" for c in ("term_i", "term_ii", "rir")) + " |"
              for m, e in compared["per_method"].items()]
    alone = read("alone/reproducibility_official.json")
    if alone:
        worst = max((e[c]["max"] for e in alone["per_method"].values() for c in ("term_i", "term_ii", "rir")),
                    default=float("nan"))
        lines += ["", f"Batch size 1 vs the shards' batches (at most R per batch), {alone['n_common']} runs: largest "
                  f"relative difference of (i), (ii), RIR {worst:.1e} (0 means the batch size changes no bit here; "
                  "it is not part of a run's identity)."]
    lines += ["", "```", tail("cli.txt", 8).replace(str(work), "WORK"), "```"]
else:
    lines += ["(no command-line results)", "", "```", tail("cli.txt", 20), "```"]
pathlib.Path(out).parent.mkdir(parents=True, exist_ok=True)
pathlib.Path(out).write_text("\n".join(lines) + "\n")
print(f"gpu_check: wrote {out}")
EOF
echo "gpu_check: done in ${elapsed} s, status $status"
exit $status
