#!/usr/bin/env bash
# Issue 37's "Done when" check, by hand (needs root: it mounts tmpfs disks). For each command below: an undisturbed
# run on a free disk; then, for tmpfs disks of 1, 2 and 3 MiB, the command with --out on the small disk (it must end
# with one line and exit status 2, or finish, with every store line a whole JSON record), then the same command over
# a copy of that output on a free disk (it must exit 0 and end with the run keys of the undisturbed run).
# Prints one Markdown row per disk (docs/reliability.md's table) and keeps every run's stderr under WORK.
# Usage: bash scripts/tmpfs_faults.sh [WORK] (default /tmp/kappalab-tmpfs; run from the repository root);
# COMMANDS="table2 table3" and SIZES="256k 512k" (mount's size option) choose other commands and disks.
set -u
cd "$(dirname "$0")/.."
K=.venv/bin/kappalab
WORK=${1:-/tmp/kappalab-tmpfs}
declare -A ARGS=(
  [table1]="reproduce table1 --protocol official --epochs 5 --no-progress"
  [table2]="reproduce table2 --quick --no-progress"
  [table3]="reproduce table3 --proxy --quick"
)
declare -A STORE=([table1]=runs_official.jsonl [table2]=runs_official.jsonl [table3]=runs.jsonl)

keys() {  # the sorted run keys of a store; exit 1 if a line is not a whole JSON record
  .venv/bin/python - "$1" <<'EOF'
import json, sys
data = open(sys.argv[1], "rb").read() if __import__("os").path.exists(sys.argv[1]) else b""
assert data == b"" or data.endswith(b"\n"), "torn last line"
print(" ".join(sorted(json.loads(line)["key"] for line in data.splitlines())))
EOF
}

[ -e "$WORK" ] && { echo "$WORK exists: choose another WORK" >&2; exit 2; }
mkdir -p "$WORK"
echo "| command | disk | exit | stderr lines | its last line | store lines valid (runs stored) | resumed: exit | run keys = undisturbed |"
echo "|---|---|---|---|---|---|---|---|"
for name in ${COMMANDS:-table1 table2 table3}; do
  args=${ARGS[$name]}
  free="$WORK/$name/free"
  $K $args --out "$free" >"$WORK/$name.free.out" 2>"$WORK/$name.free.err"
  echo "# $name undisturbed: exit $? ($(keys "$free/${STORE[$name]}" | wc -w) runs)" >&2
  want=$(keys "$free/${STORE[$name]}")
  for size in ${SIZES:-1m 2m 3m}; do
    disk="$WORK/$name/tmpfs$size" copy="$WORK/$name/resumed$size"
    mkdir -p "$disk" && mount -t tmpfs -o "size=$size" tmpfs "$disk" || exit 1
    $K $args --out "$disk/out" >"$WORK/$name.$size.out" 2>"$WORK/$name.$size.err"
    code=$?
    stored=$(keys "$disk/out/${STORE[$name]}") && valid="yes ($(echo "$stored" | wc -w))" || valid=NO
    lines=$(wc -l <"$WORK/$name.$size.err")  # a progress bar's carriage returns end no line
    last=$( ((lines)) && tail -n 1 "$WORK/$name.$size.err" | tr '\r' '\n' | tail -1 | sed "s|$WORK|WORK|g")
    cp -a "$disk/out" "$copy"
    umount "$disk"
    $K $args --out "$copy" >"$WORK/$name.$size.resume.out" 2>"$WORK/$name.$size.resume.err"
    resumed=$?
    [ "$(keys "$copy/${STORE[$name]}")" = "$want" ] && same=yes || same=NO
    echo "| \`$name\` | $size | $code | $lines | \`${last:0:150}\` | $valid | $resumed | $same |"
  done
done
