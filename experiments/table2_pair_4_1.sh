#!/usr/bin/env bash
# Pair 4-1, seed 0, Ours on full MNIST: the figures docs/reproduction/table2.md quotes for one official run (its CPU
# and wall time, its RIR) and for the paper protocol's ridge of (K + ridge I)^-1 (RIR with the shipped 1e-3 and
# with 1). One thread, no probing measures; each run's store is written under OUT.
#
#   bash experiments/table2_pair_4_1.sh OUT > docs/reproduction/table2/pair_4_1/pair_4_1.log 2>&1
# (then copy each OUT/<run>/runs_*.jsonl and spectra/ into docs/reproduction/table2/pair_4_1/<run>/)
set -euo pipefail
OUT=${1:?usage: bash experiments/table2_pair_4_1.sh OUT_DIR}
KAPPALAB=${KAPPALAB:-kappalab}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "host: $(uname -srm), $(nproc --all) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)"
echo "code: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo ' (src modified)')"

run() {
    local name=$1; shift
    local cmd=("$KAPPALAB" reproduce table2 --data mnist --pairs 4-1 --seeds 0 --methods ours --no-probe --no-progress
               --out "$OUT/$name" "$@")
    echo "== $name: ${cmd[*]}"
    /usr/bin/time -f "$name: %U s user, %S s system, %e s wall, %M KB peak RSS" "${cmd[@]}" > "$OUT/$name.stdout"
}

mkdir -p "$OUT"
run official --protocol official
run paper_ridge_1e-3 --protocol paper
run paper_ridge_1 --protocol paper --set ridge_P=1 --set ridge_H=1

python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
for store in sorted(Path(sys.argv[1]).glob("*/runs_*.jsonl")):
    for line in store.read_text().splitlines():
        rec = json.loads(line)
        r, g = rec["result"], rec["result"]["gram"]
        print(f"{store.parent.name}: {rec['key']}: (i) {g['term_i']:.6g}, (ii) {g['term_ii']:.6g}, RIR {g['rir']:.6g}; "
              f"train_s {r['train_s']:.1f}, total_s {r['total_s']:.1f}, steps {r['n_steps']}, "
              f"route {r.get('spectral_route')}, degenerate steps {r['degenerate_count']}")
PY
