#!/usr/bin/env bash
# GET /metrics under load (issue 26): 50 clients scrape every 100 ms while a
# program traced with eBPF (tests/apps/allocbench, attached with start --pid)
# runs, against the same program with no scraper, in one run and one daemon.
# Prints every figure:
#   the longest an HTTP request held the loop (heaptrace_http_longest_hold_seconds,
#   measured in the daemon), the worst control-socket ping meanwhile, scrapes made,
#   and the ingest ratio: the traced program's pairs per second with scrapers over
#   without (events counted and lost printed for each run).
# usage: bench/bench-metrics.sh [BUILD_DIR] [--pairs N] [--reps N]
set -euo pipefail
BUILD=build PAIRS=20000 REPS=3 CLIENTS=50 EVERY=0.1
while [ $# -gt 0 ]; do
    case "$1" in
    --pairs) PAIRS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    -*) echo "bench-metrics: unknown option $1" >&2; exit 2 ;;
    *) BUILD=$1; shift ;;
    esac
done
BUILD=$(cd "$BUILD" && pwd)
CTL=$BUILD/ctl/heaptracectl
AB=$BUILD/tests/apps/allocbench
[ "$(id -u)" -eq 0 ] || { echo "bench-metrics: tracing with eBPF needs root" >&2; exit 2; }
W=$(mktemp -d /tmp/bench-metrics.XXXXXX)
export HEAPTRACE_PIPE=$W/ht.sock
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf '{"metrics_listen": "127.0.0.1:%s"}\n' "$PORT" >"$W/cfg.json"
"$BUILD/daemon/heaptraced" --foreground --log-level warn --config "$W/cfg.json" 2>"$W/daemon.log" &
DPID=$!
SPID=
trap '[ -n "$SPID" ] && kill $SPID 2>/dev/null; kill $DPID 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 100); do "$CTL" ping >/dev/null 2>&1 && break; sleep 0.05; done

# A traced allocbench run: "pairs_per_s events lost".
traced_run() {
    local name=$1
    "$AB" "$PAIRS" 1 </dev/null >"$W/ab.out" 2>/dev/null &
    local p=$!
    for _ in $(seq 200); do grep -q ready "$W/ab.out" && break; sleep 0.05; done
    "$CTL" start --pid "$p" --source bpf --name "$name" >/dev/null
    kill -USR1 "$p"
    wait "$p"
    "$CTL" stop "$name" >/dev/null 2>&1 || true
    for _ in $(seq 100); do
        "$CTL" --json status "$name" | grep -q '"state":[[:space:]]*"running"' || break
        sleep 0.05
    done
    local st ns
    st=$("$CTL" --json status "$name" | tr -d ' \t\n')
    ns=$(sed -n 's/.*"ns_per_pair":\([0-9.]*\).*/\1/p' "$W/ab.out")
    echo "$(echo "1000000000 / $ns" | bc -l) $(echo "$st" | sed -n 's/.*"quality":{"events":\([0-9]*\),"lost":\([0-9]*\).*/\1 \2/p')"
    "$CTL" drop "$name" >/dev/null
}

# CLIENTS threads, each a GET /metrics every EVERY seconds until killed; counts to $W/scrapes.
scrapers() {
    exec python3 - "$PORT" "$CLIENTS" "$EVERY" "$W/scrapes" <<'PY'
import socket, sys, threading, time
port, n, every, out = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
done = [0, 0]
lock = threading.Lock()
def client():
    while True:
        t0 = time.monotonic()
        ok = 0
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            r = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                r += b
            s.close()
            ok = r.startswith(b"HTTP/1.1 200")
        except OSError:
            pass
        with lock:
            done[0 if ok else 1] += 1
            open(out, "w").write("%d %d\n" % (done[0], done[1]))
        time.sleep(max(0, every - (time.monotonic() - t0)))
for _ in range(n):
    threading.Thread(target=client, daemon=True).start()
while True:
    time.sleep(3600)
PY
}

worst_ping() {
    local worst=0 t0 ms
    while [ ! -e "$W/stop" ]; do
        t0=$(date +%s%N)
        "$CTL" ping >/dev/null
        ms=$((($(date +%s%N) - t0) / 1000000))
        [ "$ms" -gt "$worst" ] && worst=$ms
        echo "$worst" >"$W/ping"
        sleep 0.05
    done
}

metric() { curl -s "http://127.0.0.1:$PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

echo "allocbench $PAIRS pairs, 1 thread, traced with eBPF; $REPS runs each, alternating"
declare -a none with
for r in $(seq "$REPS"); do
    read -r rate ev lost <<<"$(traced_run "none$r")"
    echo "  no scraper:        $(printf '%.0f' "$rate") pairs/s, events $ev, lost $lost"
    none+=("$rate")
    scrapers &
    SPID=$!
    sleep 1
    read -r rate ev lost <<<"$(traced_run "scraped$r")"
    echo "  $CLIENTS scrapers/100ms: $(printf '%.0f' "$rate") pairs/s, events $ev, lost $lost"
    with+=("$rate")
    kill "$SPID"
    wait "$SPID" 2>/dev/null || true
    SPID=
done
median() { sort -n | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
mn=$(printf '%s\n' "${none[@]}" | median)
mw=$(printf '%s\n' "${with[@]}" | median)
echo "ingest ratio (median pairs/s scraped / none): $(echo "$mw / $mn" | bc -l | cut -c1-5)"

# The loop while 50 clients scrape for 10 s with a session loaded (a replay).
"$CTL" load "$(dirname "$0")/../tests/data/memorytestapp.htev" --name demo >/dev/null
rm -f "$W/stop"
worst_ping &
PP=$!
scrapers &
SPID=$!
sleep 10
kill "$SPID"
wait "$SPID" 2>/dev/null || true
SPID=
touch "$W/stop"
wait "$PP"
echo "scrapes in 10 s: $(cut -d' ' -f1 "$W/scrapes") answered 200, $(cut -d' ' -f2 "$W/scrapes") failed"
echo "longest loop hold by one HTTP request: $(metric heaptrace_http_longest_hold_seconds) s"
echo "worst control ping meanwhile: $(cat "$W/ping") ms"
echo "HTTP counters: refused_full $(metric heaptrace_http_refused_full_total), idle_closed $(metric heaptrace_http_idle_closed_total)"
