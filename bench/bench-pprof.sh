#!/usr/bin/env bash
# The time to make a pprof profile of EVERY stack of a session of N distinct stacks (default
# 100000): a synthetic .htev (N allocations, each its own 8-frame stack, half of them freed)
# loaded into a private daemon, then `export --format pprof --top 0` timed end to end (query,
# profile, gzip, transfer, file), with the daemon's own figures (its debug log: the query
# worker's time, the loop's hold for the answer, the reply's frames, its bytes on the socket
# and its slowest frame) and the peak RSS of the ctl and of the daemon, once per transfer: raw
# chunks (the ctl's default) and base64 inside the JSON (--transfer base64, the old form).
# `go tool pprof -raw` (golang-go) then reads the file: its totals must equal `stacks`' for the
# same query.
# usage: bench/bench-pprof.sh BUILD_DIR [N]
set -euo pipefail
build=${1:?usage: bench/bench-pprof.sh BUILD_DIR [N]}
n=${2:-100000}
build=$(cd "$build" && pwd)
T=$(mktemp -d)
export HEAPTRACE_PIPE=$T/ht.sock
dpid=
cleanup() {
    [ -n "$dpid" ] && "$build/ctl/heaptracectl" shutdown >/dev/null 2>&1 && wait "$dpid" || true
    rm -rf "$T"
}
trap cleanup EXIT

python3 - "$n" >"$T/s.htev" <<'PY'
import json, sys
n = int(sys.argv[1])
print(json.dumps({"ev": "process", "pid": 4242, "name": "bench", "wall": "2026-11-22T10:00:00Z"}))
for i in range(n):
    stack = ["libc.so.6!malloc", "app!site%d" % i, "app!mid%d" % (i % 1000), "app!part%d" % (i % 100),
             "app!stage%d" % (i % 10), "app!run", "app!main", "libc.so.6!__libc_start_main"]
    print(json.dumps({"t": 1000 * (i + 1), "ev": "alloc", "tid": 7, "heap": "0x1",
                      "addr": "0x%x" % (0x10000 + 64 * i), "size": 16 + i % 512, "stack": stack}))
for i in range(0, n, 2):
    print(json.dumps({"t": 1000 * (n + i + 1), "ev": "free", "tid": 7, "heap": "0x1",
                      "addr": "0x%x" % (0x10000 + 64 * i)}))
PY

# Room for a profile of every stack: about 850 bytes are counted per 8-frame stack
# (docs/queries.md), so the default 256 MiB cap holds some 300,000.
echo "{\"pprof_max_bytes\": \"$(( (n / 1000 + 64) * 1024 ))KiB\"}" >"$T/conf.json"
"$build/daemon/heaptraced" --foreground --log-level debug --config "$T/conf.json" >"$T/daemon.log" 2>&1 &
dpid=$!
for _ in $(seq 100); do "$build/ctl/heaptracectl" ping >/dev/null 2>&1 && break; sleep 0.05; done
t0=$(date +%s%N)
"$build/ctl/heaptracectl" load "$T/s.htev" --name b >/dev/null
t1=$(date +%s%N)
"$build/ctl/heaptracectl" --json stacks b --top 1 >"$T/stacks.json"
echo "stacks in the session: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["groups"])' "$T/stacks.json") (loaded in $(( (t1 - t0) / 1000000 )) ms)"

hwm() { awk '/^VmHWM/ {print $2}' "/proc/$dpid/status"; }
# One export of every stack with the ctl's arguments $@; prints its figures.
run() {
    local what=$1 out=$2
    shift 2
    echo 5 >"/proc/$dpid/clear_refs" # the daemon's peak RSS from here (proc(5): clear_refs)
    local before=$(hwm) lines=$(wc -l <"$T/daemon.log")
    local t0=$(date +%s%N)
    /usr/bin/time -f %M -o "$T/ctl.rss" "$build/ctl/heaptracectl" export b --format pprof --top 0 \
        -o "$out" "$@" 2>"$T/err"
    local t1=$(date +%s%N)
    sleep 0.2 # the last debug lines
    local log=$(tail -n +"$((lines + 1))" "$T/daemon.log")
    local q=$(echo "$log" | grep 'export query' | tail -n 1 |
        sed -n 's/.*worker \([0-9.]* ms\), loop held \([0-9.]* ms\).*/worker \1, loop held \2 for the answer/p')
    local r=$(echo "$log" | grep 'reply sent as' | tail -n 1 |
        sed -n 's/.*sent as \([0-9]*\) frames, \([0-9]*\) bytes, slowest frame \([0-9.]* ms\).*/\2 bytes on the socket in \1 frames, slowest frame \3/p')
    local p=$(echo "$log" | grep 'pprof profile of' | tail -n 1 | sed -n 's/.*: \([0-9]*\) bytes counted.*/\1/p')
    echo "$what: $(( (t1 - t0) / 1000000 )) ms end to end, file $(stat -c %s "$out") bytes; daemon: $q; $r"
    echo "    peak RSS: ctl $(cat "$T/ctl.rss") KB; daemon $(hwm) KB (was $before KB before; profile counted $p bytes of pprof_max_bytes)"
    cat "$T/err"
}
# A first export grows the daemon's heap (page faults) that later ones reuse: not timed.
"$build/ctl/heaptracectl" export b --format pprof --top 0 -o /dev/null
run "chunks (raw)" "$T/p.pb.gz"
run "base64 (old)" "$T/b.pb.gz" --transfer base64
cmp "$T/p.pb.gz" "$T/b.pb.gz" && echo "both transfers wrote the same bytes"
if command -v go >/dev/null; then
    export HOME=$T
    t0=$(date +%s%N)
    got=$(go tool pprof -raw "$T/p.pb.gz" 2>/dev/null | awk '/^Samples:/ {s = 1; next} /^Locations/ {s = 0}
        s && /^ *[0-9-]+ +[0-9-]+ +[0-9-]+ +[0-9-]+:/ {a += $1; b += $2; c += $3; d += $4; k++}
        END {printf "%d %d %d %d %d\n", a, b, c, d, k}')
    t1=$(date +%s%N)
    want=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
t = d["total"]
print(t["count"], t["size"], t["outstanding_count"], t["outstanding"], d["groups"])' "$T/stacks.json")
    echo "go tool pprof -raw ($(( (t1 - t0) / 1000000 )) ms): alloc_objects alloc_space inuse_objects inuse_space samples = $got"
    echo "stacks' total for the same query:                       $want"
    [ "$got" = "$want" ] && echo "equal" || { echo "DIFFERENT"; exit 1; }
fi
