#!/usr/bin/env bash
# Live tracing of a real allocator-heavy server (issue 21 item 0): Debian's redis-server (linked
# with jemalloc) under redis-benchmark, SET and GET, pipelined, for each configuration:
#   plain      no tracer
#   floor      an empty BPF program at exactly the sites heaptrace probes (entry, and return
#              where heaptrace has a return probe): the bare cost of the probes (probe-floor.c)
#   heaptrace  heaptracectl start --pid, default stacks
#   nostacks   heaptracectl start --source bpf --pid --stacks none
#   fp, dwarf  (not by default) heaptracectl start --source bpf --pid --stacks fp / dwarf: the default (auto)
#              picks one of the two per process; these show what each costs
#   floor0     (not by default: slow) the empty program at each function's entry (+0), where
#              heaptrace probed before it walked the prologues: what single-stepping costs
# One redis-server serves every run; configurations are interleaved (the order rotates each
# repetition); the table gives the median requests/s of SET and GET over the repetitions, every
# value, the ratio to plain and to the floor of the same run, and what heaptrace reports lost.
#
# usage: bench/live/bench-redis.sh [options]      (root; from the repository root)
#   --build DIR     heaptrace build directory (default: build)
#   -n N            requests per test per traced run (default 100000)
#   --plain-n N     requests per test per plain run (default 500000: 100000 plain requests last
#                   ~0.2 s and their figure is mostly noise; requests/s is per request)
#   --reps R        repetitions (default 5)
#   --configs LIST  comma list (default plain,floor,heaptrace,nostacks; floor0 on request)
#   --port P        redis port on 127.0.0.1 (default 16379)
#   --keep          keep the work directory
# Runtime with the defaults: 1-3 minutes on these hosts.
set -u

BUILD=build
N=100000
PLAIN_N=500000
REPS=5
CONFIGS=plain,floor,heaptrace,nostacks
PORT=16379
KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build) BUILD=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    --plain-n) PLAIN_N=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "bench-redis: unknown option $1" >&2; exit 2 ;;
    esac
done

HERE=$(cd "$(dirname "$0")" && pwd)
[ -d "$BUILD" ] && BUILD=$(cd "$BUILD" && pwd)
DAEMON=$BUILD/daemon/heaptraced
CTL=$BUILD/ctl/heaptracectl
[ "$(id -u)" -eq 0 ] || { echo "bench-redis: needs root (uprobes)" >&2; exit 2; }
for c in redis-server redis-benchmark redis-cli clang readelf; do
    command -v "$c" >/dev/null || { echo "bench-redis: $c missing (scripts/install-deps.sh --bench)" >&2; exit 2; }
done
[ -x "$DAEMON" ] && [ -x "$CTL" ] || { echo "bench-redis: no heaptraced/heaptracectl in $BUILD" >&2; exit 2; }
W=$(mktemp -d /tmp/bench-redis.XXXXXX)
export HEAPTRACE_PIPE=$W/ht.sock
RPID= DPID= FPID=
RESULTS=$W/results.tsv
: >"$RESULTS"

finish() {
    [ -n "$FPID" ] && kill -TERM "$FPID" 2>/dev/null
    [ -n "$RPID" ] && kill "$RPID" 2>/dev/null && wait "$RPID" 2>/dev/null
    if [ -n "$DPID" ]; then
        "$CTL" shutdown >/dev/null 2>&1 || kill "$DPID" 2>/dev/null
        wait "$DPID" 2>/dev/null
    fi
    if [ "$KEEP" = 1 ]; then echo "work directory: $W"; else rm -rf "$W"; fi
}
trap finish EXIT
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# file_offset LIB SYMBOL DELTA: the file offset of SYMBOL+DELTA in LIB (what uprobes take).
file_offset() {
    local lib=$1 sym=$2 delta=$3 va typ off v fs
    va=$(readelf -W --dyn-syms "$lib" | awk -v s="$sym" '$4 == "FUNC" && ($8 == s || index($8, s "@") == 1) { print $2; exit }')
    [ -n "$va" ] || return 1
    va=$((0x$va + delta))
    while read -r typ off v _ fs _; do
        [ "$typ" = LOAD ] || continue
        if [ "$va" -ge $((v)) ] && [ "$va" -lt $((v + fs)) ]; then
            printf '0x%x\n' $((va - v + off))
            return 0
        fi
    done < <(readelf -lW "$lib")
    return 1
}

# --- the server, the tools ---------------------------------------------------------------
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --dir "$W" >"$W/redis.log" 2>&1 &
RPID=$!
for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
redis-cli -p "$PORT" ping >/dev/null 2>&1 || { echo "bench-redis: redis-server did not start: $(tail -n 2 "$W/redis.log")" >&2; exit 1; }
ALLOCATOR=$(redis-cli -p "$PORT" info memory | tr -d '\r' | awk -F: '$1 == "mem_allocator" { print $2 }')
"$DAEMON" --foreground >"$W/daemon.log" 2>&1 &
DPID=$!
for _ in $(seq 100); do "$CTL" ping >/dev/null 2>&1 && break; sleep 0.05; done
clang -O2 -g -target bpf -I/usr/include/"$(uname -m)"-linux-gnu -c "$HERE/probe-floor.bpf.c" -o "$W/probe-floor.bpf.o" &&
    cc -O2 -o "$W/probe-floor" "$HERE/probe-floor.c" -lbpf || { echo "bench-redis: probe-floor did not build" >&2; exit 1; }

# The sites heaptrace probes in this redis-server, from a session's status: one line per probe,
# "function module probe_offset as site".
"$CTL" start --source bpf --pid "$RPID" --name sites >"$W/sites.start" 2>&1 || { echo "bench-redis: heaptracectl start: $(cat "$W/sites.start")" >&2; exit 1; }
"$CTL" --json status sites >"$W/sites.json"
"$CTL" stop sites >/dev/null 2>&1
"$CTL" drop sites >/dev/null 2>&1
python3 - "$W/sites.json" >"$W/sites.txt" <<'PY' || exit 1
import json, sys
st = json.load(open(sys.argv[1]))["source_status"]
for p in st["probes"]:
    print(p["function"], p["module"], p["probe_offset"], p["as"], p.get("site", "?"))
PY
# floor_args DELTA0: probe-floor's FILE:OFFSET:entry|ret list, at heaptrace's sites (or +0).
floor_args() {
    local fn mod off as site
    while read -r fn mod off as site; do
        [ "$1" = 0 ] && off=0
        o=$(file_offset "/proc/$RPID/root$mod" "$fn" "$off") || continue
        echo "/proc/$RPID/root$mod:$o:entry"
        case "$as" in free | hint) ;; *) echo "/proc/$RPID/root$mod:$o:ret" ;; esac
    done <"$W/sites.txt"
}
floor_args 1 >"$W/floor.args"
floor_args 0 >"$W/floor0.args"

# --- one run -----------------------------------------------------------------------------
# bench_run TAG N: redis-benchmark SET and GET, N requests each: "SET_RPS GET_RPS".
bench_run() {
    redis-benchmark -h 127.0.0.1 -p "$PORT" -t set,get -P 16 -d 100 -r 10000 -n "$2" -q --csv \
        >"$W/$1.csv" 2>"$W/$1.err"
    awk -F, '{ gsub(/"/, "") } $1 == "SET" { s = $2 } $1 == "GET" { g = $2 } END { if (s && g) print s, g; else exit 1 }' "$W/$1.csv"
}

run_one() {
    local cfg=$1 rep=$2 tag="$1-$2" rps lost=- name="b-$1-$2"
    case "$cfg" in
    heaptrace | nostacks | fp | dwarf)
        local opt=()
        [ "$cfg" = nostacks ] && opt=(--stacks none)
        [ "$cfg" = fp ] && opt=(--stacks fp)
        [ "$cfg" = dwarf ] && opt=(--stacks dwarf)
        "$CTL" start --source bpf --pid "$RPID" --name "$name" "${opt[@]}" >"$W/$tag.tool" 2>&1 ||
            { log "$tag: start failed: $(cat "$W/$tag.tool")"; return 1; } ;;
    floor | floor0)
        mapfile -t args <"$W/$cfg.args"
        "$W/probe-floor" "$W/probe-floor.bpf.o" "$RPID" "${args[@]}" >"$W/$tag.tool" 2>&1 &
        FPID=$!
        for _ in $(seq 200); do grep -q attached "$W/$tag.tool" && break; kill -0 "$FPID" 2>/dev/null || break; sleep 0.05; done
        grep -q attached "$W/$tag.tool" || { log "$tag: probe-floor: $(cat "$W/$tag.tool")"; FPID=; return 1; } ;;
    esac
    local n=$N
    [ "$cfg" = plain ] && n=$PLAIN_N
    rps=$(bench_run "$tag" "$n") || { log "$tag: redis-benchmark failed: $(cat "$W/$tag.err")"; rps=; }
    case "$cfg" in
    heaptrace | nostacks | fp | dwarf)
        local a b
        a=$("$CTL" --json status "$name" | grep -o '"events":[0-9]*' | head -n 1)
        for _ in $(seq 100); do
            sleep 0.2
            b=$("$CTL" --json status "$name" | grep -o '"events":[0-9]*' | head -n 1)
            [ "$a" = "$b" ] && break
            a=$b
        done
        "$CTL" --json status "$name" >"$W/$tag.status" 2>&1
        lost=$(tr -d ' \t\n' <"$W/$tag.status" | grep -o '"quality":{[^}]*}' | grep -o '"lost":[0-9]*' | cut -d: -f2)
        "$CTL" stop "$name" >/dev/null 2>&1
        "$CTL" drop "$name" >/dev/null 2>&1 ;;
    floor | floor0) kill -TERM "$FPID"; wait "$FPID" 2>/dev/null; FPID= ;;
    esac
    [ -n "$rps" ] || return 1
    echo "$cfg $rep $rps ${lost:-?}" >>"$RESULTS"
    log "$tag: SET GET requests/s: $rps, lost ${lost:-?}"
}

IFS=, read -r -a configs <<<"$CONFIGS"
n=${#configs[@]}
log "redis-server $(redis-server --version | grep -o 'v=[^ ]*') ($ALLOCATOR), $N requests per test ($PLAIN_N plain), $REPS repetitions: $CONFIGS"
for ((rep = 1; rep <= REPS; rep++)); do
    for ((k = 0; k < n; k++)); do
        run_one "${configs[$(((k + rep - 1) % n))]}" "$rep"
    done
done

# --- the table ---------------------------------------------------------------------------
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
med() { awk -v c="$1" -v f="$2" '$1 == c { print $f }' "$RESULTS" | median; }
echo
echo "redis-server $(redis-server --version | grep -o 'v=[^ ]*') ($ALLOCATOR) on 127.0.0.1, redis-benchmark -t set,get -P 16 -d 100 -r 10000 -n $N ($PLAIN_N plain);"
echo "requests/s, median of $REPS interleaved repetitions; x = ratio of medians (throughput: higher is better)"
echo "$(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
printf '%-10s %10s %10s %8s %8s %8s %8s %8s  %s\n' config "SET/s" "GET/s" "SET/pl" "GET/pl" "fl/SET" "fl/GET" lost "all runs (SET GET)"
ps=$(med plain 3) pg=$(med plain 4) fs=$(med floor 3) fg=$(med floor 4)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b; else print "-" }'; }
for cfg in "${configs[@]}"; do
    s=$(med "$cfg" 3) g=$(med "$cfg" 4)
    [ -n "$s" ] || { printf '%-10s no run\n' "$cfg"; continue; }
    lost=$(awk -v c="$cfg" '$1 == c { print $5 }' "$RESULTS" | sort -u | paste -sd/)
    runs=$(awk -v c="$cfg" '$1 == c { printf "%s%s/%s", sep, $3, $4; sep = " " }' "$RESULTS")
    # floor/config: how many times the floor's throughput the configuration costs (<= 1.3 wanted).
    printf '%-10s %10.0f %10.0f %8s %8s %8s %8s %8s  %s\n' "$cfg" "$s" "$g" "$(ratio "$s" "$ps")" "$(ratio "$g" "$pg")" \
        "$(ratio "$fs" "$s")" "$(ratio "$fg" "$g")" "$lost" "$runs"
done
echo
echo "SET/pl, GET/pl: throughput as a fraction of plain. fl/SET, fl/GET: floor throughput / this"
echo "configuration's (1.00 = costs no more than the empty probes at the same sites)."
echo "probe sites (function module +offset as site), from heaptracectl status --json:"
awk '{ printf "  %s %s +%s %s %s\n", $1, $2, $3, $4, $5 }' "$W/sites.txt"
