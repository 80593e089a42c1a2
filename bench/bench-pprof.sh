#!/usr/bin/env bash
# The time to make a pprof profile of a session of N distinct stacks (default 100000): a
# synthetic .htev (N allocations, each its own 8-frame stack, half of them freed) loaded into a
# private daemon, then `export --format pprof` timed end to end (query, profile, gzip, transfer,
# file) and the daemon's own figure for it (the export's loop hold, from its debug log).
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

"$build/daemon/heaptraced" --foreground --log-level debug >"$T/daemon.log" 2>&1 &
dpid=$!
for _ in $(seq 100); do "$build/ctl/heaptracectl" ping >/dev/null 2>&1 && break; sleep 0.05; done
"$build/ctl/heaptracectl" load "$T/s.htev" --name b >/dev/null
groups=$("$build/ctl/heaptracectl" --json stacks b --top 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["groups"])')
t0=$(date +%s%N)
"$build/ctl/heaptracectl" export b --format pprof -o "$T/p.pb.gz" 2>"$T/err"
t1=$(date +%s%N)
held=$(grep 'export query' "$T/daemon.log" | tail -n 1 | sed -n 's/.*worker \([0-9.]* ms\), loop held \([0-9.]* ms\).*/worker \1, loop held \2/p')
echo "stacks in the session: $groups"
echo "pprof export: $(( (t1 - t0) / 1000000 )) ms end to end, $(stat -c %s "$T/p.pb.gz") bytes gzip'd; daemon: $held"
cat "$T/err"
if command -v go >/dev/null; then
    export HOME=$T
    echo "go tool pprof reads $(go tool pprof -raw "$T/p.pb.gz" 2>/dev/null | awk '/^Samples:/{s=1;next} /^Locations/{s=0} s && /:/{k++} END{print k}') samples"
fi
