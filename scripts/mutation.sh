#!/usr/bin/env bash
# Mutation testing of the core formula modules with mutmut 3 (not part of CI: minutes per module).
#
#   scripts/mutation.sh [MODULE...]                e.g. scripts/mutation.sh bounds eq10
#   scripts/mutation.sh --survivors [MODULE...]    re-check the last run's survivors that are not explained as
#                                                  equivalent (after adding tests)
#
# Default: every core module (regularizers spectral linear gram bounds eq10 rir kappa; a missing one is skipped
# with a message). Configuration: [tool.mutmut] in pyproject.toml (the oracle is the core test files; mutmut runs
# per mutant only the tests that executed the mutated function, fastest first, with the hypothesis profile
# "mutation" of scripts/mutation_plugin.py). One child process under nice, one BLAS thread.
# Writes docs/mutation.json and docs/mutation.md (killed / survived / timeout per module, each survivor with its
# reason from scripts/mutation_reasons.json, or UNEXPLAINED). MUTMUT names the mutmut executable (default: mutmut).
set -euo pipefail
cd "$(dirname "$0")/.."
MUTMUT=${MUTMUT:-mutmut}
PYTHON=${PYTHON:-$(dirname "$(command -v "$MUTMUT")")/python}
DEFAULT=(regularizers spectral linear gram bounds eq10 rir kappa)
survivors_only=0
if [ "${1:-}" = "--survivors" ]; then
    survivors_only=1
    shift
fi
modules=("$@")
[ ${#modules[@]} -eq 0 ] && modules=("${DEFAULT[@]}")
mkdir -p mutants
times=mutants/times.tsv
touch "$times"
for m in "${modules[@]}"; do
    if [ ! -f "src/kappalab/$m.py" ]; then
        echo "mutation.sh: src/kappalab/$m.py does not exist, skipped" >&2
        continue
    fi
    targets=("kappalab.$m.*")
    if [ $survivors_only -eq 1 ]; then
        # the survivors (and mutants no test reached) not explained as equivalent in scripts/mutation_reasons.json
        mapfile -t targets < <("$MUTMUT" results | sed -n "s/^ *\(kappalab\.$m\.[^:]*\): \(survived\|no tests\)\$/\1/p" |
            "$PYTHON" -c 'import json, sys; r = json.load(open("scripts/mutation_reasons.json"))
print("".join(n for n in sys.stdin if not r.get(n.strip(), "").startswith("equivalent")), end="")')
        [ ${#targets[@]} -eq 0 ] && continue
    fi
    start=$(date +%s)
    PYTHONPATH="$PWD/scripts" KAPPALAB_HYPOTHESIS_PROFILE=mutation OMP_NUM_THREADS=1 \
        nice -n 10 "$MUTMUT" run --max-children 1 "${targets[@]}" || true
    wall=$(( $(date +%s) - start ))
    # a survivors-only re-check adds its time to the module's full run
    if [ $survivors_only -eq 1 ]; then
        before=$(sed -n "s/^$m\t//p" "$times" | head -1)
        wall=$(( wall + ${before:-0} ))
    fi
    grep -v "^$m	" "$times" > "$times.new" || true
    printf '%s\t%s\n' "$m" "$wall" >> "$times.new"
    mv "$times.new" "$times"
done
"$PYTHON" scripts/mutation_report.py --mutmut "$MUTMUT" --times "$times" "${modules[@]}"
