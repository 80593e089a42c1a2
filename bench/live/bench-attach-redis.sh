#!/usr/bin/env bash
# Tracing attached to a running redis-server (issue 23): Debian's redis-server (jemalloc) under
# redis-benchmark SET+GET, -P 16, 100-byte values, on 127.0.0.1. Each repetition starts a fresh
# server, measures it untraced, then attaches one configuration and measures again (the ratio is
# to that same server's untraced figure):
#   agent        start --pid --source agent (default stacks)
#   agent-none   start --pid --source agent --stacks none
#   heaptrack    heaptrack -p (its gdb injector)
# Configurations rotate across repetitions; every value is printed, then the median ratios and
# the agent's ratio over heaptrack's. Not a timed test: figures for people.
#
# usage: bench/live/bench-attach-redis.sh [--build DIR] [--reps R] [-n N] [--port PORT]
set -u
BUILD=build REPS=3 N=100000 PORT=16489
while [ $# -gt 0 ]; do
    case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "bench-attach-redis: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -d "$BUILD" ] && BUILD=$(cd "$BUILD" && pwd)
CTL=$BUILD/ctl/heaptracectl
for c in redis-server redis-benchmark redis-cli heaptrack; do
    command -v "$c" >/dev/null || { echo "bench-attach-redis: $c missing (scripts/install-deps.sh --bench)" >&2; exit 2; }
done
W=$(mktemp -d /tmp/bench-attach-redis.XXXXXX)
export HEAPTRACE_PIPE=$W/ht.sock
RP= HP=
"$BUILD/daemon/heaptraced" --foreground --log-level warn 2>"$W/daemon.log" &
DPID=$!
trap 'kill $RP $HP 2>/dev/null; kill $DPID 2>/dev/null; wait $DPID 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 100); do "$CTL" ping >/dev/null 2>&1 && break; sleep 0.05; done

# requests/s of SET and GET together (the mean of the two rates).
rate() {
    redis-benchmark -h 127.0.0.1 -p "$PORT" -t set,get -P 16 -d 100 -n "$N" -q 2>/dev/null |
        tr '\r' '\n' | awk '/^(SET|GET): [0-9]/ {s += $2; n++} END {if (n == 2) printf "%.0f", s / 2}'
}

server() {
    redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$W" \
        >"$W/redis.log" 2>&1 &
    RP=$!
    for _ in $(seq 100); do redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && return 0; sleep 0.05; done
    echo "redis-server did not start: $(cat "$W/redis.log")" >&2
    exit 1
}

attach() {
    case "$1" in
    agent) "$CTL" start --pid "$RP" --source agent --name "s$2" >/dev/null ;;
    agent-none) "$CTL" start --pid "$RP" --source agent --stacks none --name "s$2" >/dev/null ;;
    heaptrack)
        # (Its output file goes to the current directory: the scratch one.)
        (cd "$W" && exec heaptrack -p "$RP") >"$W/ht.log" 2>&1 &
        HP=$!
        # Attached once its gdb is gone and the library is in the server.
        for _ in $(seq 600); do grep -q libheaptrack "/proc/$RP/maps" && ! pgrep -P "$HP" gdb >/dev/null && return 0; sleep 0.05; done
        return 1 ;;
    esac
}

detach() {
    case "$1" in
    agent | agent-none)
        "$CTL" --json status "s$2" | "$BUILD/tests/integration/ht-testtool" get quality.lost >"$W/lost"
        "$CTL" stop "s$2" >/dev/null ;;
    esac
    kill "$RP"
    wait "$RP" 2>/dev/null
    [ -n "$HP" ] && { wait "$HP" 2>/dev/null; HP=; }
}

CONFIGS=(agent agent-none heaptrack)
for ((r = 0; r < REPS; r++)); do
    for ((c = 0; c < ${#CONFIGS[@]}; c++)); do
        cfg=${CONFIGS[$(((c + r) % ${#CONFIGS[@]}))]}
        server
        plain=$(rate)
        attach "$cfg" "$r$c" || { echo "$cfg: attach failed" >&2; exit 1; }
        traced=$(rate)
        detach "$cfg" "$r$c"
        ratio=$(awk -v a="$traced" -v b="$plain" 'BEGIN {printf "%.3f", a / b}')
        extra=
        [ -s "$W/lost" ] && extra=" (lost $(cat "$W/lost"))" && : >"$W/lost"
        echo "rep $((r + 1)) $cfg: untraced $plain req/s, attached $traced req/s, ratio $ratio$extra"
        echo "$cfg $ratio" >>"$W/ratios"
    done
done
med() {
    awk -v c="$1" '$1 == c {print $2}' "$W/ratios" | sort -n |
        awk '{a[NR] = $1} END {if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'
}
echo "median ratio to untraced:"
for cfg in "${CONFIGS[@]}"; do echo "  $cfg $(med "$cfg")"; done
awk -v a="$(med agent)" -v h="$(med heaptrack)" 'BEGIN {printf "agent / heaptrack: %.2fx (target >= 1.2x; agent target >= 0.5 of untraced)\n", a / h}'
