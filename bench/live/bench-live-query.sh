#!/usr/bin/env bash
# Live queries under load with the eBPF source (issue 10: "no event lost by any source because
# of a query (measure with the eBPF source too)").
#
# Each run: a fresh tests/apps/allocbench allocating as fast as it can under `heaptracectl start
# --pid` (one session per run, on one daemon), and meanwhile one client issuing one query kind
# every 100 ms (the period starts when the previous reply arrived late):
#   none       no queries
#   top50      heaptracectl stacks                 (whole session, top 50)
#   aifo       heaptracectl stacks --type AIFO
#   window_5s  heaptracectl stacks --range -5s:
#   window_1s  heaptracectl stacks --range -1s:
# Loads rotate order every repetition. For each run: the target's allocation rate (allocbench's
# own loop timing: threads x 1e9 / ns_per_pair mallocs per second), the session's events, what
# the eBPF source lost (source_status.lost: kernel ring full; undelivered: records it could not
# hand on; returns_without_entry) and quality.lost, and the queries' client latency (p50, p99,
# max) with their count. Prints a table, then one JSON line with every run and, per load, the
# median allocation rate over the no-query median of the same repetitions (rate_ratio) and the
# total lost (target: 0).
#
# usage: bench/live/bench-live-query.sh [options]      (root; from the repository root)
#   --build DIR      heaptrace build directory (default: build)
#   --pairs N        malloc+free pairs per thread (default 600000: ~6 s traced on the host of 2026-11-26,
#                    so -5s: is a real window)
#   --threads T      allocbench threads (default 1)
#   --reps R         repetitions (default 3)
#   --loads LIST     comma list (default none,top50,aifo,window_5s,window_1s)
#   --interval-ms N  query period (default 100)
#   --keep           keep the work directory
set -u

BUILD=build
PAIRS=600000
THREADS=1
REPS=3
LOADS=none,top50,aifo,window_5s,window_1s
INTERVAL_MS=100
KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --pairs) PAIRS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --loads) LOADS=$2; shift 2 ;;
    --interval-ms) INTERVAL_MS=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "bench-live-query: unknown option $1" >&2; exit 2 ;;
    esac
done

die() { echo "bench-live-query: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
[ -d "$BUILD" ] || die "no build directory $BUILD"
BUILD=$(cd "$BUILD" && pwd)
BENCH=$BUILD/tests/apps/allocbench
DAEMON=$BUILD/daemon/heaptraced
CTL=$BUILD/ctl/heaptracectl
for x in "$BENCH" "$DAEMON" "$CTL"; do [ -x "$x" ] || die "$x not built"; done
[ "$(id -u)" -eq 0 ] || die "needs root (uprobes)"

W=$(mktemp -d /tmp/bench-live-query.XXXXXX)
SOCK=$W/ht.sock
DPID=
CHILDREN=()
finish() {
    local p
    for p in "${CHILDREN[@]}"; do kill -KILL "$p" 2>/dev/null; done
    if [ -n "$DPID" ]; then
        "$CTL" --pipe "$SOCK" shutdown >/dev/null 2>&1 || kill "$DPID" 2>/dev/null
        wait "$DPID" 2>/dev/null
    fi
    if [ "$KEEP" = 1 ]; then echo "work directory: $W" >&2; else rm -rf "$W"; fi
}
trap finish EXIT
ctl() { "$CTL" --pipe "$SOCK" "$@"; }

wait_for() { # FILE PATTERN PID SECONDS
    local i
    for ((i = 0; i < $4 * 20; i++)); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

"$DAEMON" --foreground --pipe "$SOCK" >"$W/daemon.log" 2>&1 &
DPID=$!
for _ in $(seq 100); do ctl ping >/dev/null 2>&1 && break; sleep 0.05; done
ctl ping >/dev/null 2>&1 || die "daemon did not start: $(tail -n 3 "$W/daemon.log")"
tr -d ' \t\n' < <(ctl --json version) | grep -q '"modes":\[[^]]*"pid"' ||
    die "no source serves pid in this build (HEAPTRACE_WITH_BPF=ON, root, a kernel with BPF)"

# client SESSION LOAD OUT STOPFILE: one connection, one query every INTERVAL_MS until STOPFILE
# exists (at once when the last took longer), sent as `heaptracectl stacks` sends them (top 50,
# the daemon's default cull list); one line per query: client latency in ns and 0 (an ok reply)
# or 1. A persistent client: a ctl process per query would take CPU from the target.
client() {
    python3 - "$SOCK" "$1" "$2" "$3" "$4" "$INTERVAL_MS" <<'PY'
import os, socket, sys, time
sock, session, load, out, stop, interval = sys.argv[1:7]
args = {"top50": '"top":50', "aifo": '"top":50,"type":["AIFO"]',
        "window_5s": '"top":50,"range":"-5s:"', "window_1s": '"top":50,"range":"-1s:"'}[load]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock)
f = s.makefile("rb")
open(out + ".ready", "w").close()
period = int(interval) / 1000
n = 0
with open(out, "w") as o:
    while not os.path.exists(stop):
        n += 1
        req = '{"v":1,"id":%d,"cmd":"stacks","args":{"session":"%s",%s}}\n' % (n, session, args)
        t0 = time.monotonic_ns()
        s.sendall(req.encode())
        first = None
        while True:
            line = f.readline()
            if not line:
                break
            if first is None:
                first = line
            more, data = line.find(b'"more":true'), line.find(b'"data":')
            if not (more >= 0 and (data < 0 or more < data)):
                break
        t1 = time.monotonic_ns()
        ok = first is not None and b'"ok":true' in first
        o.write("%d %d\n" % (t1 - t0, 0 if ok else 1))
        o.flush()
        if first is None:
            break
        left = period - (t1 - t0) / 1e9
        if left > 0:
            time.sleep(left)
PY
}

# run_one LOAD REP: appends one JSON object to runs.jsonl.
run_one() {
    local load=$1 rep=$2 tag="$1-$2" apid cpid= name
    name=q-$tag
    (cd "$W" && exec "$BENCH" "$PAIRS" "$THREADS") >"$W/$tag.out" 2>&1 </dev/null &
    apid=$!
    CHILDREN+=("$apid")
    wait_for "$W/$tag.out" '"ready":true' "$apid" 10 || { log "$tag: allocbench did not start"; return 1; }
    ctl start --source bpf --pid "$apid" --name "$name" >"$W/$tag.start" 2>&1 ||
        { log "$tag: start --pid failed: $(head -n 1 "$W/$tag.start")"; kill "$apid"; wait "$apid" 2>/dev/null; return 1; }
    rm -f "$W/$tag.stop"
    if [ "$load" != none ]; then
        client "$name" "$load" "$W/$tag.lat" "$W/$tag.stop" 2>"$W/$tag.client.err" &
        cpid=$!
        CHILDREN+=("$cpid")
        # The target goes once the client is connected (python starts slowly on a busy host).
        for _ in $(seq 400); do
            [ -e "$W/$tag.lat.ready" ] || ! kill -0 "$cpid" 2>/dev/null && break
            sleep 0.05
        done
        [ -e "$W/$tag.lat.ready" ] || log "$tag: the query client did not connect: $(tail -n 2 "$W/$tag.client.err")"
    fi
    kill -USR1 "$apid"
    wait "$apid"
    touch "$W/$tag.stop"
    [ -n "$cpid" ] && wait "$cpid"
    # Until the session took every event (the count stays put), then what was lost.
    local a b
    a=$(ctl --json status "$name" | grep -o '"events":[0-9]*' | head -n 1)
    for _ in $(seq 100); do
        sleep 0.3
        b=$(ctl --json status "$name" | grep -o '"events":[0-9]*' | head -n 1)
        [ "$a" = "$b" ] && break
        a=$b
    done
    ctl --json status "$name" >"$W/$tag.status" 2>&1
    ctl stop "$name" >/dev/null 2>&1
    ctl drop "$name" >/dev/null 2>&1
    python3 - "$W" "$tag" "$load" "$rep" "$THREADS" >>"$W/runs.jsonl" <<'PY'
import json, os, sys
w, tag, load, rep, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
res = [json.loads(l) for l in open(os.path.join(w, tag + ".out")) if l.startswith("{") and "ns_per_pair" in l]
st = json.load(open(os.path.join(w, tag + ".status")))
ss = st.get("source_status", {})
lat = []
p = os.path.join(w, tag + ".lat")
failed = 0
if os.path.exists(p):
    for l in open(p):
        ns, rc = l.split()
        lat.append(int(ns) / 1e6)
        failed += rc != "0"
lat.sort()
pct = lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 1) if lat else None
ns_pair = res[0]["ns_per_pair"] if res else None
print(json.dumps({
    "load": load, "rep": rep,
    "allocs_per_s": round(threads * 1e9 / ns_pair) if ns_pair else None,
    "events": st.get("quality", {}).get("events"),
    "source_lost": ss.get("lost"), "undelivered": ss.get("undelivered"),
    "returns_without_entry": ss.get("returns_without_entry"),
    "quality_lost": st.get("quality", {}).get("lost"),
    "queries": len(lat), "queries_failed": failed,
    "latency_ms": {"p50": pct(0.5), "p99": pct(0.99), "max": round(lat[-1], 1) if lat else None},
}, separators=(",", ":")))
PY
    log "$tag: $(tail -n 1 "$W/runs.jsonl")"
}

IFS=, read -r -a loads <<<"$LOADS"
n=${#loads[@]}
log "allocbench $PAIRS pairs x $THREADS threads, $REPS repetitions, loads: $LOADS, one query every $INTERVAL_MS ms"
for ((rep = 1; rep <= REPS; rep++)); do
    for ((k = 0; k < n; k++)); do
        run_one "${loads[$(((k + rep - 1) % n))]}" "$rep"
    done
done

python3 - "$W/runs.jsonl" "$PAIRS" "$THREADS" "$INTERVAL_MS" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
loads = []
for r in runs:
    if r["load"] not in loads:
        loads.append(r["load"])
med = lambda xs: statistics.median(xs) if xs else None
base = med([r["allocs_per_s"] for r in runs if r["load"] == "none" and r["allocs_per_s"]])
print("%-10s %14s %8s %10s %12s %10s %9s  %s" % ("load", "allocs/s med", "x none", "lost", "undelivered", "quality", "queries", "latency ms p50/p99/max"))
summary = {}
for l in loads:
    rs = [r for r in runs if r["load"] == l]
    rate = med([r["allocs_per_s"] for r in rs if r["allocs_per_s"]])
    lost = sum(r["source_lost"] or 0 for r in rs)
    und = sum(r["undelivered"] or 0 for r in rs)
    ql = sum(r["quality_lost"] or 0 for r in rs)
    nq = sum(r["queries"] for r in rs)
    lat = [r["latency_ms"] for r in rs if r["queries"]]
    ratio = round(rate / base, 3) if rate and base else None
    summary[l] = {"allocs_per_s_median": rate, "rate_ratio": ratio, "source_lost": lost,
                  "undelivered": und, "quality_lost": ql, "queries": nq,
                  "queries_failed": sum(r["queries_failed"] for r in rs),
                  "latency_p99_ms_max": max((x["p99"] for x in lat), default=None)}
    print("%-10s %14s %8s %10d %12d %10d %9d  %s" % (l, rate, ratio if ratio is not None else "-", lost, und, ql, nq,
          " ".join("%s/%s/%s" % (x["p50"], x["p99"], x["max"]) for x in lat) or "-"))
print(json.dumps({"pairs": int(sys.argv[2]), "threads": int(sys.argv[3]), "interval_ms": int(sys.argv[4]),
                  "target": "lost = 0 for every load", "summary": summary, "runs": runs},
                 separators=(",", ":")))
PY
