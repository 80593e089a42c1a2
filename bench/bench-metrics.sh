#!/usr/bin/env bash
# GET /metrics under load (issue 26): 50 clients scrape every 100 ms while a
# program traced with eBPF (tests/apps/allocbench, attached with start --pid)
# runs, against the same program with no scraper, in one run and one daemon.
# The scrapers are one C thread (build/bench/ht-bench-scrape, keep-alive
# connections, poll), so they take little of the host's CPU, and their CPU
# time is printed apart from the daemon's (/proc/PID/stat) for every run.
# Prints every figure:
#   the longest an HTTP request held the loop (heaptrace_http_longest_hold_seconds,
#   measured in the daemon), the worst control-socket ping meanwhile, scrapes made,
#   and the ingest ratio: the traced program's pairs per second with scrapers over
#   without (events counted and lost printed for each run), next to the target (0.9).
# The daemon's own ingest of a replayed stream under the same scrapers is
# ht-bench-daemon --loads none,metrics50 (bench/README.md).
# Then 10 s of the same scrapers with --sessions replayed sessions loaded: the daemon's CPU per
# scrape, the longest loop hold, the worst control ping.
# usage: bench/bench-metrics.sh [BUILD_DIR] [--pairs N] [--reps N] [--sessions N]
set -euo pipefail
BUILD=build PAIRS=200000 REPS=3 CLIENTS=50 EVERY_MS=100 SESSIONS=1
while [ $# -gt 0 ]; do
    case "$1" in
    --pairs) PAIRS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --sessions) SESSIONS=$2; shift 2 ;;
    -*) echo "bench-metrics: unknown option $1" >&2; exit 2 ;;
    *) BUILD=$1; shift ;;
    esac
done
BUILD=$(cd "$BUILD" && pwd)
CTL=$BUILD/ctl/heaptracectl
AB=$BUILD/tests/apps/allocbench
SCRAPE=$BUILD/bench/ht-bench-scrape
[ "$(id -u)" -eq 0 ] || { echo "bench-metrics: tracing with eBPF needs root" >&2; exit 2; }
W=$(mktemp -d /tmp/bench-metrics.XXXXXX)
export HEAPTRACE_PIPE=$W/ht.sock
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf '{"metrics_listen": "127.0.0.1:%s", "max_sessions": %s}\n' "$PORT" \
    "$((SESSIONS + 16))" >"$W/cfg.json"
"$BUILD/daemon/heaptraced" --foreground --log-level warn --config "$W/cfg.json" 2>"$W/daemon.log" &
DPID=$!
SPID=
trap '[ -n "$SPID" ] && kill $SPID 2>/dev/null; kill $DPID 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 100); do "$CTL" ping >/dev/null 2>&1 && break; sleep 0.05; done

# utime + stime of a process in clock ticks (proc(5) fields 14 and 15).
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
HZ=$(getconf CLK_TCK)

# A traced allocbench run: "pairs_per_s events lost daemon_cpu_s".
traced_run() {
    local name=$1 c0
    c0=$(cpu_ticks "$DPID")
    "$AB" "$PAIRS" 1 </dev/null >"$W/ab.out" 2>/dev/null &
    local p=$!
    for _ in $(seq 200); do grep -q ready "$W/ab.out" && break; sleep 0.05; done
    "$CTL" start --pid "$p" --source bpf --name "$name" >/dev/null
    kill -USR1 "$p"
    wait "$p"
    local dcpu
    dcpu=$(echo "($(cpu_ticks "$DPID") - $c0) / $HZ" | bc -l)
    "$CTL" stop "$name" >/dev/null 2>&1 || true
    for _ in $(seq 100); do
        "$CTL" --json status "$name" | grep -q '"state":[[:space:]]*"running"' || break
        sleep 0.05
    done
    local st ns
    st=$("$CTL" --json status "$name" | tr -d ' \t\n')
    ns=$(sed -n 's/.*"ns_per_pair":\([0-9.]*\).*/\1/p' "$W/ab.out")
    echo "$(echo "1000000000 / $ns" | bc -l) $(echo "$st" | sed -n 's/.*"quality":{"events":\([0-9]*\),"lost":\([0-9]*\).*/\1 \2/p') $dcpu"
    "$CTL" drop "$name" >/dev/null
}

# CLIENTS scrapers on one thread, each a GET /metrics every EVERY_MS ms until
# stopped (scrapers_stop): their JSON line in $W/scrapes.
scrapers() {
    "$SCRAPE" --port "$PORT" --clients "$CLIENTS" --every-ms "$EVERY_MS" --secs 0 \
        --pid "$DPID" >"$W/scrapes" &
    SPID=$!
}
scrapers_stop() {
    kill -TERM "$SPID"
    wait "$SPID" || true
    SPID=
}
sj() { sed -n "s/.*\"$1\":\([-0-9.]*\).*/\1/p" "$W/scrapes"; }

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

echo "allocbench $PAIRS pairs, 1 thread, traced with eBPF; $REPS runs each, alternating;"
echo "CPU seconds over each traced run: the daemon's (every thread), the scrapers' (one thread)"
declare -a none with
for r in $(seq "$REPS"); do
    read -r rate ev lost dcpu <<<"$(traced_run "none$r")"
    printf '  no scraper:          %8.0f pairs/s, events %s, lost %s, daemon CPU %.2f s\n' \
        "$rate" "$ev" "$lost" "$dcpu"
    none+=("$rate")
    scrapers
    sleep 1
    read -r rate ev lost dcpu <<<"$(traced_run "scraped$r")"
    scrapers_stop
    printf '  %s scrapers/%sms: %8.0f pairs/s, events %s, lost %s, daemon CPU %.2f s (whole scrape %.1f s: daemon %.2f s, scrapers %.2f s; %s answered 200, %s failed, %s late)\n' \
        "$CLIENTS" "$EVERY_MS" "$rate" "$ev" "$lost" "$dcpu" "$(sj secs)" "$(sj daemon_cpu_s)" \
        "$(sj scrapers_cpu_s)" "$(sj ok)" "$(sj failed)" "$(sj late)"
    with+=("$rate")
    echo "    ratio this run: $(echo "$rate / ${none[-1]}" | bc -l | cut -c1-5)"
done
median() { sort -n | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
mn=$(printf '%s\n' "${none[@]}" | median)
mw=$(printf '%s\n' "${with[@]}" | median)
ratio=$(echo "$mw / $mn" | bc -l | cut -c1-5)
met=$(echo "$ratio >= 0.9" | bc)
echo "ingest ratio (median pairs/s scraped / none): $ratio (target >= 0.9: $([ "$met" = 1 ] && echo met || echo MISSED))"

# The loop while 50 clients scrape for 10 s with SESSIONS sessions loaded (replays).
for i in $(seq "$SESSIONS"); do
    "$CTL" load "$(dirname "$0")/../tests/data/memorytestapp.htev" --name "demo$i" >/dev/null 2>&1
done
rm -f "$W/stop"
worst_ping &
PP=$!
scrapers
sleep 10
scrapers_stop
touch "$W/stop"
wait "$PP"
echo "$SESSIONS sessions, scrapes in $(sj secs) s: $(sj ok) answered 200, $(sj failed) failed, $(sj late) late, $(sj connects) connections, $(sj retries) retries; daemon CPU $(sj daemon_cpu_s) s ($(echo "$(sj daemon_cpu_s) * 1000000 / $(sj ok)" | bc) us per scrape), scrapers CPU $(sj scrapers_cpu_s) s"
echo "longest loop hold by one HTTP request: $(metric heaptrace_http_longest_hold_seconds) s"
echo "worst control ping meanwhile: $(cat "$W/ping") ms"
echo "HTTP counters: refused_full $(metric heaptrace_http_refused_full_total), idle_closed $(metric heaptrace_http_idle_closed_total)"
