#!/usr/bin/env bash
# One real Windows-written trace through ht-convert --stats (tests/etl/CMakeLists.txt):
# unpacked (unzip / 7z) into a temporary directory, never into the tree; then the invariants
# every trace must hold, and for the PerfView trace the counts of its baseline
# (check-stats.py). usage: real-trace.sh HT_CONVERT TRACES_DIR FILE [BASELINE]
set -euo pipefail
conv=$1 dir=$2 file=$3 baseline=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "$dir/$file" ]; then
    echo "FAIL: $dir/$file is missing (the real traces are needed: HEAPTRACE_ETL_TRACES)" >&2
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case "$file" in
*.zip) unzip -q -d "$tmp" "$dir/$file" ;;
*.7z) 7z x -bd -y -o"$tmp" "$dir/$file" >/dev/null ;;
*) cp "$dir/$file" "$tmp/" ;;
esac
etl=$(find "$tmp" -name '*.etl' | head -n 1)
[ -n "$etl" ] || { echo "FAIL: no .etl inside $file" >&2; exit 1; }
rc=0
"$conv" --stats "$etl" >"$tmp/stats.json" || rc=$?
cat "$tmp/stats.json"
[ "$rc" = 0 ] || { echo "FAIL: ht-convert --stats exited $rc" >&2; exit 1; }
python3 "$here/check-stats.py" "$tmp/stats.json" ${baseline:+"$dir/$baseline"}
# The events path reads stack keys in one pass: each of the PerfView trace's references
# resolved, by definitions that mostly come after them, none dropped from the waiting list.
if [ -n "$baseline" ]; then
    "$conv" --plain "$etl" "$tmp/out.htevb" 2>"$tmp/conv.txt"
    cat "$tmp/conv.txt"
    grep -q "9107 stack-key references (0 unresolved, [0-9]* waited for a later definition, 0 dropped" "$tmp/conv.txt" ||
        { echo "FAIL: stack-key references of the events path" >&2; exit 1; }
fi
