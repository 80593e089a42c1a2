#!/usr/bin/env bash
# heaptracectl load of a synthetic .etl (make-etl.py) against load of the .htevb that
# ht-convert makes of the same file: wall time, events per second, the ctl's and the
# daemon's peak RSS, and the top-50 stacks of both sessions compared.
# usage: bench/etl/bench-etl.sh BUILD_DIR PAIRS [--xpress]   (from the repository root)
set -euo pipefail
build=$1 pairs=$2 opt=${3:-}
T=$(mktemp -d)
export HEAPTRACE_PIPE=$T/ht.sock
"$build/daemon/heaptraced" --foreground >"$T/daemon.log" 2>&1 &
dpid=$!
trap 'kill $dpid 2>/dev/null; wait $dpid 2>/dev/null; rm -rf "$T"' EXIT
for _ in $(seq 100); do "$build/ctl/heaptracectl" ping >/dev/null 2>&1 && break; sleep 0.05; done
python3 "$(dirname "$0")/make-etl.py" "$T/b.etl" "$pairs" $opt
"$build/daemon/ht-convert" --plain "$T/b.etl" "$T/b.htevb" 2>/dev/null
echo "etl $(stat -c %s "$T/b.etl") bytes, htevb $(stat -c %s "$T/b.htevb") bytes"
load() {
    local s=$SECONDS
    /usr/bin/time -f "%e %M" -o "$T/time" "$build/ctl/heaptracectl" load "$1" --name "$2" \
        >/dev/null 2>&1
    local ev
    ev=$("$build/ctl/heaptracectl" --json status "$3" | python3 -c \
        'import json,sys; print(json.load(sys.stdin)["quality"]["events"])')
    read -r wall rss <"$T/time"
    echo "$3: $ev events in $wall s: $(python3 -c "print(round($ev / max($wall, 1e-3)))") events/s, ctl peak RSS $rss KB"
}
# An .etl's session is named NAME.<pid> (make-etl.py's process is 4242).
load "$T/b.etl" etl etl.4242
load "$T/b.htevb" htevb htevb
echo "daemon peak RSS $(awk '/VmHWM/ {print $2}' /proc/$dpid/status) KB"
for s in etl.4242 htevb; do
    "$build/ctl/heaptracectl" --json stacks "$s" --top 50 | "$build/tests/integration/ht-testtool" norm | grep -v "\"session\"" >"$T/${s%.*}.top"
done
cmp -s "$T/etl.top" "$T/htevb.top" && echo "top 50 stacks: identical" || { echo "top 50 stacks: DIFFER"; diff "$T/etl.top" "$T/htevb.top" | head -20; }
