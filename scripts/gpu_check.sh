#!/usr/bin/env bash
# One command for a machine with CUDA: every table and every device check in under 10 minutes on one H200, reported
# in docs/gpu.md (on CUDA only; the CPU path writes results/gpu_check_cpu.md, so that it never replaces the GPU
# report; --out to choose).
#
#   scripts/gpu_check.sh [--device cuda|cpu] [--data subset|mnist] [--data-dir DIR] [--runs N] [--epochs E]
#                        [--batch-size R] [--out FILE]
#
#   1. parity: tests/test_cuda_parity.py (every core public function, NumPy vs torch on the device, float64, 1e-12),
#      tests/test_core_parity.py with KAPPALAB_TEST_DEVICE set to the device, tests/test_batched.py (batched vs
#      single engine, mixed-pair batches included);
#   2. batched extreme eigenpairs: tests/test_extremes.py on the device (accuracy against LAPACK); skipped when the
#      file is absent;
#   3. host synchronisation: tests/test_deep_device.py -k reads on the device (a training step reads nothing back);
#   4. benchmarks: benchmarks/test_bench_batched.py --benchmark-only --device DEVICE (one official step, single vs
#      batched, achieved GFLOP/s vs the device's float64 GEMM rate in the same run);
#   5. Table 1: `kappalab reproduce table1` for both protocols on the device, TABLE1_ARGS (default: 5 seeds, the
#      configs' epochs; the CPU path: --quick), each within TABLE1_SECONDS (default 100);
#   6. Table 2 sweep: benchmarks/sweep_table2.py (official protocol, 1080 runs by default; on full MNIST, the default
#      on CUDA, the pairs' row counts differ and share batches: mixed-pair batches; the first CHECK_SINGLE (default
#      4) runs also through the single engine: agreement and per-run time). It starts no new batch after
#      SWEEP_SECONDS (default 100); the report gives runs per second, the fraction of the float64 GEMM rate and the
#      extrapolated 1080-run time;
#   7. the command line: `kappalab reproduce table2 --engine batched --shard K/2` for K = 1, 2 into two stores,
#      `--merge` of both, the same runs with `--engine single`, and `--compare-with` between the two: run-by-run
#      differences of (i), (ii), RIR between the engines on the device (the embedded subset, pairs CLI_PAIRS,
#      default 0-1,7-3,4-9, seed 0, CLI_EPOCHS epochs, default 2); and the same runs batched one at a time
#      (--batch-size 1) against the merged ones: whether the batch size changes a run's numbers on the device;
#   8. Table 3's real network: `kappalab reproduce table3 --arch TABLE3_ARCH --harmful TABLE3_HARMFUL --weights
#      TABLE3_WEIGHTS --imagenet TABLE3_IMAGENET --harmful-dir TABLE3_HARMFUL_DIR` on the device within
#      TABLE3_SECONDS (default 60; cut there, its log says how far it got); skipped unless the weights, both data
#      folders and timm are present.
#
# Defaults: --device cuda, --data mnist on CUDA (full MNIST; subset on the CPU), all 1080 runs, batches of 256 runs
# on CUDA (64 on the CPU). Python: ${PYTHON:-.venv/bin/python}. Without CUDA, --device cuda stops at once with one
# line; --device cpu runs the same steps on the CPU (use --runs / --epochs to keep it short). Exit status: 0 when
# every step passed or was skipped, 1 when a step failed, 2 for bad usage or a missing torch/CUDA.
set -uo pipefail

cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DEVICE=cuda DATA="" DATA_DIR="" RUNS="" EPOCHS="" BATCH="" OUT=""
# Time on one H200: of the steps without a limit, the parity tests took ~20 s and the benchmarks ~50 s in call 1
# (docs/gpu.md); the limits below add at most 2 x 100 + 100 (+ the sweep's finish) + 60 s
SWEEP_SECONDS=${SWEEP_SECONDS:-100}  # the sweep starts no new batch after this; the rest is extrapolated
TABLE1_SECONDS=${TABLE1_SECONDS:-100} TABLE3_SECONDS=${TABLE3_SECONDS:-60}  # per protocol / for the network
CHECK_SINGLE=${CHECK_SINGLE:-4}  # the first runs also trained by the single engine (agreement, per-run time)
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
case "$DATA" in ""|subset|mnist) ;; *) usage "--data must be subset or mnist, got '$DATA'" ;; esac
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
[ -n "$DATA" ] || { [ "$DEVICE" = cpu ] && DATA=subset || DATA=mnist; }
if [ -z "${TABLE1_ARGS+x}" ]; then [ "$DEVICE" = cpu ] && TABLE1_ARGS="--quick" || TABLE1_ARGS="--seeds 0 1 2 3 4"; fi
[ -n "$OUT" ] || { [ "$DEVICE" = cpu ] && OUT=results/gpu_check_cpu.md || OUT=docs/gpu.md; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
status=0
start=$(date +%s)

# run_step NAME LOG SECONDS CMD...: CMD within SECONDS (0: no limit); its status, time and log name go to steps.tsv
# (passed, FAILED, or "cut at the time limit" for status 124 when the step is time-bounded by design: CUT_OK=1)
run_step() {
    local name=$1 log=$2 seconds=$3; shift 3
    local t0=$(date +%s) rc
    if [ "$seconds" -gt 0 ]; then timeout --signal=INT --kill-after=20 "$seconds" "$@" >"$WORK/$log" 2>&1
    else "$@" >"$WORK/$log" 2>&1; fi
    rc=$?
    local result=passed
    if [ $rc -eq 124 ] && [ "${CUT_OK:-0}" = 1 ]; then result="cut at its time limit (${seconds} s)"
    elif [ $rc -ne 0 ]; then result="FAILED (status $rc)"; status=1; fi
    printf '%s\t%s\t%s\t%s\n' "$name" "$result" "$(( $(date +%s) - t0 ))" "$log" >>"$WORK/steps.tsv"
    tail -n 12 "$WORK/$log"
}
skip_step() { printf '%s\tskipped: %s\t0\t-\n' "$1" "$2" >>"$WORK/steps.tsv"; echo "skipped: $2"; }

echo "== 1/8 parity tests ($DEVICE)"
run_step "parity" parity.txt 0 env KAPPALAB_TEST_DEVICE="$DEVICE" "$PY" -m pytest tests/test_cuda_parity.py \
    tests/test_core_parity.py tests/test_batched.py -q -rs -p no:cacheprovider

echo "== 2/8 batched extreme eigenpairs, accuracy ($DEVICE)"
if [ -f tests/test_extremes.py ]; then
    run_step "extremes" extremes.txt 0 env KAPPALAB_TEST_DEVICE="$DEVICE" "$PY" -m pytest tests/test_extremes.py -q -rs \
        -p no:cacheprovider
else skip_step "extremes" "tests/test_extremes.py is not in this checkout"; fi

echo "== 3/8 host synchronisation in a training step ($DEVICE)"
run_step "sync" sync.txt 0 env KAPPALAB_TEST_DEVICE="$DEVICE" "$PY" -m pytest tests/test_deep_device.py -k reads -q -rs \
    -p no:cacheprovider

echo "== 4/8 batched-step benchmarks ($DEVICE)"
run_step "benchmarks" bench.txt 0 "$PY" -m pytest benchmarks/test_bench_batched.py --benchmark-only --device "$DEVICE" \
    -q -p no:cacheprovider --benchmark-json "$WORK/bench.json" --benchmark-columns=min,mean,rounds

echo "== 5/8 Table 1, both protocols ($DEVICE: $TABLE1_ARGS)"
for protocol in paper official; do
    # shellcheck disable=SC2086  # TABLE1_ARGS is a list of arguments
    run_step "table1 $protocol" "table1_$protocol.txt" "$TABLE1_SECONDS" "$PY" -m kappalab.cli reproduce table1 \
        --protocol "$protocol" --device "$DEVICE" --no-progress --out "$WORK/table1" $TABLE1_ARGS
done

echo "== 6/8 Table 2 sweep, official protocol, batched engine ($DEVICE, data $DATA)"
sweep=(benchmarks/sweep_table2.py --device "$DEVICE" --data "$DATA" --batch-size "$BATCH" --finish rir
       --check-single "$CHECK_SINGLE" --max-seconds "$SWEEP_SECONDS" --json "$WORK/sweep.json")
[ -z "$DATA_DIR" ] || sweep+=(--data-dir "$DATA_DIR")
[ -z "$RUNS" ] || sweep+=(--runs "$RUNS")
[ -z "$EPOCHS" ] || sweep+=(--epochs "$EPOCHS")
run_step "table2 sweep" sweep.txt 0 "$PY" "${sweep[@]}"

echo "== 7/8 the command line: batched shards, merge, single engine, comparison ($DEVICE, subset)"
cli=("$PY" -m kappalab.cli reproduce table2 --protocol official --pairs "$CLI_PAIRS" --seeds 0 --epochs "$CLI_EPOCHS"
     --no-probe --no-progress --device "$DEVICE" --data mnist-subset)
cli_steps() {
    "${cli[@]}" --engine batched --batch-size "$BATCH" --shard 1/2 --out "$WORK/shard1" &&
    "${cli[@]}" --engine batched --batch-size "$BATCH" --shard 2/2 --out "$WORK/shard2" &&
    "${cli[@]}" --engine batched --merge "$WORK/shard1" "$WORK/shard2" --out "$WORK/merged" &&
    "${cli[@]}" --engine single --out "$WORK/single" &&
    "${cli[@]}" --engine batched --out "$WORK/merged" --report-only --compare-with "$WORK/single" &&
    "${cli[@]}" --engine batched --batch-size 1 --out "$WORK/alone" &&
    "${cli[@]}" --engine batched --out "$WORK/alone" --report-only --compare-with "$WORK/merged"
}
run_step "table2 command line" cli.txt 0 cli_steps

echo "== 8/8 Table 3, the real network ($DEVICE)"
T3_ARCH=${TABLE3_ARCH:-resnet18} T3_HARMFUL=${TABLE3_HARMFUL:-cars}
if [ -z "${TABLE3_WEIGHTS:-}" ] || [ ! -f "${TABLE3_WEIGHTS:-}" ]; then
    skip_step "table3 $T3_ARCH/$T3_HARMFUL" "no pretrained weights (TABLE3_WEIGHTS names no file)"
elif [ ! -d "${TABLE3_IMAGENET:-}" ] || [ ! -d "${TABLE3_HARMFUL_DIR:-}" ]; then
    skip_step "table3 $T3_ARCH/$T3_HARMFUL" "TABLE3_IMAGENET or TABLE3_HARMFUL_DIR is not a folder"
elif ! "$PY" -c "import timm" 2>/dev/null; then
    skip_step "table3 $T3_ARCH/$T3_HARMFUL" "timm is not importable by $PY (scripts/setup_deep.sh)"
else
    CUT_OK=1 run_step "table3 $T3_ARCH/$T3_HARMFUL" table3.txt "$TABLE3_SECONDS" "$PY" -m kappalab.cli reproduce \
        table3 --arch "$T3_ARCH" --harmful "$T3_HARMFUL" --weights "$TABLE3_WEIGHTS" --imagenet "$TABLE3_IMAGENET" \
        --harmful-dir "$TABLE3_HARMFUL_DIR" --device "$DEVICE" --out "$WORK/table3"
fi

elapsed=$(( $(date +%s) - start ))
"$PY" - "$WORK" "$OUT" "$DEVICE" "$DATA" "$status" "$elapsed" <<'EOF'
import datetime, json, pathlib, platform, subprocess, sys

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
def fenced(name, n):
    return ["```", tail(name, n).replace(str(work), "WORK"), "```"]

steps = [line.split("\t") for line in (work / "steps.tsv").read_text().splitlines()] \
    if (work / "steps.tsv").exists() else []
result = {name: (outcome, seconds) for name, outcome, seconds, _ in steps}

def section(title, step, log, n=8):
    outcome = result.get(step, ("did not run", "0"))[0]
    body = [f"## {title}", "", f"{outcome} ({result.get(step, ('', '0'))[1]} s)."]
    return body + ([""] + fenced(log, n) if not outcome.startswith("skipped") else []) + [""]

lines = [f"# GPU check ({device})", "",
         f"`scripts/gpu_check.sh --device {device} --data {data}` on {gpu}, torch {torch.__version__}, commit "
         f"{commit}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {elapsed} s in all; overall "
         f"status {'passed' if status == '0' else 'FAILED'}. Float64 throughout, TF32 off, timers synchronized.", "",
         "| step | result | seconds |", "|---|---|---|"]
lines += [f"| {name} | {outcome} | {seconds} |" for name, outcome, seconds, _ in steps]
lines += [""] + section("1. Parity tests", "parity", "parity.txt")
lines += section("2. Batched extreme eigenpairs (tests/test_extremes.py)", "extremes", "extremes.txt")
lines += section("3. Host synchronisation in a training step (tests/test_deep_device.py -k reads)", "sync",
                 "sync.txt")
lines += ["## 4. One official-protocol step (D = 784, 64-row batches)", ""]
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
lines += ["", "## 5. Table 1 (House Prices), both protocols", ""]
for protocol in ("paper", "official"):
    md = work / "table1" / f"table1_{protocol}.md"
    outcome, seconds = result.get(f"table1 {protocol}", ("did not run", "0"))
    lines += [f"Protocol `{protocol}`: {outcome} ({seconds} s).", ""]
    if md.exists():
        text = md.read_text().splitlines()
        first = next((i for i, line in enumerate(text) if line.startswith("## kappa definition")), None)
        lines += [line for line in text[2:3]] + [""]
        if first is not None:
            table = []
            for line in text[first + 2:]:  # the first kappa definition's table
                if not line.startswith("|"):
                    break
                table.append(line)
            lines += [text[first].removeprefix("## "), ""] + table + [""]
    else:
        lines += fenced(f"table1_{protocol}.txt", 8) + [""]
lines += ["## 6. Table 2 sweep (official protocol, batched engine)", ""]
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
              f"**{sweep['runs_per_s']:.3f} runs/s** (training and Eq. 15); the products' FLOPs over the training time "
              f"reach **{sweep['fraction_of_gemm']:.4f} of the float64 GEMM rate**; the whole 1080-run sweep at this "
              f"rate: **{sweep['extrapolated_1080_s'] / 60:.1f} min**. The timed batches held tasks of "
              f"{sweep['row_counts']} distinct (P, H) row counts"
              + (" (mixed-pair batches: each run takes its own steps)" if sweep["row_counts"] > 1 else "") + ".", "",
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
lines += ["", "## 7. The command line: batched shards, merge, comparison with the single engine (subset)", ""]
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
lines += [""] + section("8. Table 3, the real network", next((n for n in result if n.startswith("table3")), "table3"),
                         "table3.txt", 15)
pathlib.Path(out).parent.mkdir(parents=True, exist_ok=True)
pathlib.Path(out).write_text("\n".join(lines) + "\n")
print(f"gpu_check: wrote {out}")
EOF
echo "gpu_check: done in ${elapsed} s, status $status"
exit $status
