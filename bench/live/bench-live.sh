#!/usr/bin/env bash
# Live-tracing benchmark (issue 9): ns per malloc+free pair of tests/apps/allocbench, 1 and 2
# threads, for each configuration:
#   plain      no tracer
#   heaptrace  attached by `heaptracectl start --pid` (default stacks); skipped with a note when
#              the daemon has no source serving pid
#   floor      the bare probe floor: the same probes with an empty BPF program (probe-floor.c;
#              Debian's bpftrace 0.17 refuses func+offset probes, so a libbpf helper does it)
#   memleak    bcc's memleak (bpfcc-tools) -p PID
#   heaptrack  heaptrack -p PID (injection through gdb)
# Configurations are interleaved (the order rotates each repetition); no best-of-N: the table
# gives the median of the repetitions and every value, ratios against plain and against the
# probe floor of the same run, and the events heaptrace reports lost.
#
# usage: bench/live/bench-live.sh [options]      (root; from the repository root)
#   --build DIR        heaptrace build directory (default: build)
#   --pairs N          malloc+free pairs per thread per traced run (default 30000)
#   --plain-pairs N    pairs per thread for the plain runs (default 1000000: a 30000-pair plain
#                      loop lasts ~2 ms and its figure is mostly noise; ns/pair is per pair)
#   --reps R           repetitions (default 3)
#   --threads "1 2"    thread counts
#   --configs LIST     comma list (default plain,heaptrace,floor,memleak,heaptrack)
#   --probes LIST      floor probes in the allocator library, SYMBOL+DELTA:entry|ret, comma
#                      separated. Default: the ones heaptrace really attaches on the functions
#                      allocbench calls (malloc entry and return, free entry), with the offsets
#                      `heaptracectl status --json` lists (source_status.probes) for a session on
#                      a throwaway allocbench; malloc+0:entry,malloc+0:ret,free+3:entry when
#                      heaptrace cannot run (docs/linux.md#probe-cost-emulated-or-single-stepped)
#   --stacks MODE      heaptrace's --stacks (default: its default)
#   --bcc-kernel-source DIR  BCC_KERNEL_SOURCE for memleak: bcc compiles its program at run time
#                      against kernel headers, and these hosts have none for their kernel. A merged
#                      tree of Debian's linux-headers-*-common and -amd64 (cp -rs both into DIR)
#                      gets it compiled; on this host memleak 0.26 then fails to attach its realloc
#                      uprobe (EINVAL) and the row stays empty with that reason.
#   --keep             keep the work directory (logs, raw results)
# Runtime with the defaults: about 2-4 minutes on these hosts (each probe hit costs 5-18 us).
set -u

BUILD=build
PAIRS=30000
PLAIN_PAIRS=1000000
REPS=3
THREADS="1 2"
CONFIGS=plain,heaptrace,floor,memleak,heaptrack
PROBES=
PROBES_FROM="--probes"
STACKS=
KEEP=0
BCC_SRC=
while [ $# -gt 0 ]; do
    case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --pairs) PAIRS=$2; shift 2 ;;
    --plain-pairs) PLAIN_PAIRS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --probes) PROBES=$2; shift 2 ;;
    --stacks) STACKS=$2; shift 2 ;;
    --bcc-kernel-source) BCC_SRC=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "bench-live: unknown option $1" >&2; exit 2 ;;
    esac
done

HERE=$(cd "$(dirname "$0")" && pwd)
[ -d "$BUILD" ] && BUILD=$(cd "$BUILD" && pwd)
BENCH=$BUILD/tests/apps/allocbench
DAEMON=$BUILD/daemon/heaptraced
CTL=$BUILD/ctl/heaptracectl
[ -x "$BENCH" ] || { echo "bench-live: $BENCH not built (cmake --build $BUILD --target allocbench)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "bench-live: needs root (uprobes, ptrace)" >&2; exit 2; }
W=$(mktemp -d /tmp/bench-live.XXXXXX)
export HEAPTRACE_PIPE=$W/ht.sock
DPID=
CHILDREN=()
RESULTS=$W/results.tsv
: >"$RESULTS"
declare -A NOTE # config -> why it has no numbers
declare -A RUNFAIL # config -> runs that failed (not in the table), and why

finish() {
    local p
    for p in "${CHILDREN[@]}"; do kill -KILL "$p" 2>/dev/null; done
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

# wait_for FILE PATTERN PID SECONDS: until FILE has PATTERN; 1 if PID died or time ran out.
wait_for() {
    local i
    for ((i = 0; i < $4 * 20; i++)); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

json_num() { grep -o "\"$2\":[0-9.]*" "$1" | head -n 1 | cut -d: -f2; }

# --- what can run here -------------------------------------------------------------------
configs=()
IFS=, read -r -a configs <<<"$CONFIGS"
has() { [[ ",$CONFIGS," == *",$1,"* ]]; }

if has floor; then
    if clang -O2 -g -target bpf -I/usr/include/"$(uname -m)"-linux-gnu -c "$HERE/probe-floor.bpf.c" -o "$W/probe-floor.bpf.o" 2>"$W/floor-build.log" &&
        cc -O2 -o "$W/probe-floor" "$HERE/probe-floor.c" -lbpf 2>>"$W/floor-build.log"; then
        :
    else
        NOTE[floor]="probe-floor did not build (clang, libbpf-dev): $(head -n 1 "$W/floor-build.log")"
    fi
fi
if has heaptrace; then
    if [ -x "$DAEMON" ] && [ -x "$CTL" ]; then
        "$DAEMON" --foreground >"$W/daemon.log" 2>&1 &
        DPID=$!
        for _ in $(seq 100); do "$CTL" ping >/dev/null 2>&1 && break; sleep 0.05; done
        "$CTL" --json version >"$W/version.json" 2>&1
        # A source serving pid: an object of "sources" listing "pid" among its modes (the list
        # holds arrays: matched on the modes array itself, not up to the first "]").
        if ! tr -d ' \t\n' <"$W/version.json" | grep -q '"modes":\[[^]]*"pid"'; then
            NOTE[heaptrace]="no source serves pid in this build ($(tr -d ' \t\n' <"$W/version.json" | grep -o '"name":"[a-z]*","modes":\[[^]]*\]' | paste -sd' '))"
        fi
    else
        NOTE[heaptrace]="heaptraced/heaptracectl not built in $BUILD"
    fi
fi
has memleak && ! command -v memleak-bpfcc >/dev/null && NOTE[memleak]="memleak-bpfcc missing (bpfcc-tools)"
has heaptrack && ! command -v heaptrack >/dev/null && NOTE[heaptrack]="heaptrack missing"

# probes_of_heaptrace: the probes heaptrace attaches on malloc and free, from the status of a
# session on a throwaway allocbench ("malloc+OFF:entry,malloc+OFF:ret,free+OFF:entry").
probes_of_heaptrace() {
    local apid out
    (cd "$W" && exec "$BENCH" 1000 1) >"$W/probes.out" 2>&1 </dev/null &
    apid=$!
    CHILDREN+=("$apid")
    wait_for "$W/probes.out" '"ready":true' "$apid" 10 || return 1
    "$CTL" start --source bpf --pid "$apid" --name probes >/dev/null 2>&1 || { kill "$apid"; wait "$apid" 2>/dev/null; return 1; }
    "$CTL" --json status probes >"$W/probes.status" 2>&1
    "$CTL" stop probes >/dev/null 2>&1
    "$CTL" drop probes >/dev/null 2>&1
    kill "$apid"
    wait "$apid" 2>/dev/null
    out=$(python3 - "$W/probes.status" <<'PY'
import json, sys
probes = json.load(open(sys.argv[1]))["source_status"]["probes"]
off = {p["function"]: p["probe_offset"] for p in probes if p["module"].endswith("/libc.so.6")}
print("malloc+%d:entry,malloc+%d:ret,free+%d:entry" % (off["malloc"], off["malloc"], off["free"]))
PY
) || return 1
    echo "$out"
}

# --- one run -----------------------------------------------------------------------------
# run_one CONFIG THREADS REP: one allocbench run under CONFIG; appends a line to results.tsv:
# CONFIG THREADS REP NS_PER_PAIR LOST (LOST "-" when the tool does not report it).
run_one() {
    local cfg=$1 t=$2 rep=$3 tag="$1-$2-$3" apid tpid= lost=- name
    local pairs=$PAIRS
    [ "$cfg" = plain ] && pairs=$PLAIN_PAIRS
    (cd "$W" && exec "$BENCH" "$pairs" "$t") >"$W/$tag.out" 2>&1 </dev/null &
    apid=$!
    CHILDREN+=("$apid")
    wait_for "$W/$tag.out" '"ready":true' "$apid" 10 || { log "$tag: allocbench did not start"; return 1; }
    case "$cfg" in
    plain) ;;
    heaptrace)
        name=b$t-$rep
        # shellcheck disable=SC2086
        if ! "$CTL" start --source bpf --pid "$apid" --name "$name" ${STACKS:+--stacks $STACKS} >"$W/$tag.tool" 2>&1; then
            NOTE[heaptrace]="start --pid failed: $(head -n 1 "$W/$tag.tool")"
            kill "$apid"; wait "$apid" 2>/dev/null; return 1
        fi ;;
    floor)
        local lib spec args=() p sym delta kind off
        lib=$(awk '$6 ~ /\/libc\.so\.6$/ { print $6; exit }' "/proc/$apid/maps")
        IFS=, read -r -a spec <<<"$PROBES"
        for p in "${spec[@]}"; do
            kind=${p##*:}; sym=${p%:*}; delta=${sym##*+}; sym=${sym%+*}
            [ "$delta" = "$sym" ] && delta=0
            off=$(file_offset "/proc/$apid/root$lib" "$sym" "$delta") || { NOTE[floor]="no $sym in $lib"; return 1; }
            args+=("/proc/$apid/root$lib:$off:$kind")
        done
        "$W/probe-floor" "$W/probe-floor.bpf.o" "$apid" "${args[@]}" >"$W/$tag.tool" 2>&1 &
        tpid=$!
        CHILDREN+=("$tpid")
        wait_for "$W/$tag.tool" '"attached"' "$tpid" 20 || {
            NOTE[floor]="probe-floor: $(head -n 1 "$W/$tag.tool")"; kill "$apid"; wait "$apid" 2>/dev/null; return 1; } ;;
    memleak)
        # It prints "Attaching" before attaching: a probe it cannot attach (EINVAL while a
        # uprobe with another ref_ctr_offset is registered at the same libc offset, dmesg
        # "ref_ctr_offset mismatch": another tracer, or the previous configuration's probes
        # not yet gone) ends it. Tried three times, 2 s apart; a run where it never attached
        # measured the plain loop and is not counted.
        local try
        for try in 1 2 3; do
            sleep 2
            env ${BCC_SRC:+BCC_KERNEL_SOURCE=$BCC_SRC} memleak-bpfcc -p "$apid" 3600 >"$W/$tag.tool" 2>&1 &
            tpid=$!
            CHILDREN+=("$tpid")
            wait_for "$W/$tag.tool" 'Attaching to pid' "$tpid" 60 || {
                NOTE[memleak]="memleak-bpfcc failed: $(grep -m1 -i 'unable\|error\|cannot' "$W/$tag.tool")"
                kill "$tpid" 2>/dev/null; kill "$apid"; wait "$apid" 2>/dev/null; return 1; }
            sleep 1
            kill -0 "$tpid" 2>/dev/null && ! grep -q 'Traceback\|cannot attach' "$W/$tag.tool" && break
            log "$tag: memleak did not attach (try $try): $(grep -m1 -i 'cannot attach' "$W/$tag.tool")"
            kill "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null
            tpid=
        done
        if [ -z "$tpid" ]; then
            RUNFAIL[memleak]="${RUNFAIL[memleak]:-}$tag "
            kill "$apid"; wait "$apid" 2>/dev/null; return 1
        fi ;;
    heaptrack)
        (cd "$W" && exec heaptrack -p "$apid") >"$W/$tag.tool" 2>&1 &
        tpid=$!
        CHILDREN+=("$tpid")
        wait_for "$W/$tag.tool" 'injection finished' "$tpid" 60 || {
            NOTE[heaptrack]="heaptrack -p failed: $(tail -n 1 "$W/$tag.tool")"; kill "$apid"; wait "$apid" 2>/dev/null; return 1; } ;;
    esac
    kill -USR1 "$apid"
    wait "$apid"
    local ns
    ns=$(json_num "$W/$tag.out" ns_per_pair)
    case "$cfg" in
    heaptrace)
        # Wait until the session took every event (the count stays put), then read what was lost.
        local a b
        a=$("$CTL" --json status "$name" | grep -o '"events":[0-9]*' | head -n 1)
        for _ in $(seq 100); do
            sleep 0.3
            b=$("$CTL" --json status "$name" | grep -o '"events":[0-9]*' | head -n 1)
            [ "$a" = "$b" ] && break
            a=$b
        done
        "$CTL" --json status "$name" >"$W/$tag.status" 2>&1
        # quality.lost: what every reply reports (the kernel ring's drops, and what never became an event)
        lost=$(tr -d ' \t\n' <"$W/$tag.status" | grep -o '"quality":{[^}]*}' | grep -o '"lost":[0-9]*' | cut -d: -f2)
        [ -n "$lost" ] || lost="?"
        "$CTL" stop "$name" >/dev/null 2>&1
        "$CTL" drop "$name" >/dev/null 2>&1 ;;
    # SIGTERM: a background job of a script starts with SIGINT ignored (python would never see it).
    floor | memleak) kill -TERM "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null ;;
    heaptrack) wait "$tpid" 2>/dev/null ;;
    esac
    [ -n "$ns" ] || { log "$tag: no result: $(cat "$W/$tag.out")"; return 1; }
    printf '%s\t%s\t%s\t%s\t%s\n' "$cfg" "$t" "$rep" "$ns" "$lost" >>"$RESULTS"
    log "$tag: $ns ns/pair${lost:+ (lost $lost)}"
}

if [ -z "$PROBES" ]; then
    if [ -z "${NOTE[heaptrace]:-}" ] && [ -n "$DPID" ] && PROBES=$(probes_of_heaptrace) && [ -n "$PROBES" ]; then
        PROBES_FROM="heaptracectl status --json of a session (source_status.probes)"
    else
        PROBES=malloc+0:entry,malloc+0:ret,free+3:entry
        PROBES_FROM="built-in default (heaptrace's own probes could not be read)"
    fi
fi
log "floor probes: $PROBES, from $PROBES_FROM"

# --- the matrix, interleaved -------------------------------------------------------------
log "allocbench $PAIRS pairs/thread ($PLAIN_PAIRS plain), threads: $THREADS, $REPS repetitions, configs: $CONFIGS"
n=${#configs[@]}
for ((rep = 1; rep <= REPS; rep++)); do
    for t in $THREADS; do
        for ((k = 0; k < n; k++)); do
            cfg=${configs[$(((k + rep - 1) % n))]}
            [ -n "${NOTE[$cfg]:-}" ] && continue
            run_one "$cfg" "$t" "$rep"
        done
    done
done

# --- the table ---------------------------------------------------------------------------
echo
echo "allocbench: $PAIRS malloc+free pairs per thread ($PLAIN_PAIRS for plain), mixed sizes, 6 noinline frames; ns per pair"
echo "(per thread with 2 threads); median of $REPS interleaved repetitions; x = ratio of medians"
echo "$(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
printf '%-10s %7s %12s %9s %9s %7s  %s\n' config threads "median ns" "x plain" "x floor" lost "all runs (ns/pair)"
for t in $THREADS; do
    median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
    plain=$(awk -v t="$t" '$1 == "plain" && $2 == t { print $4 }' "$RESULTS" | median)
    floor=$(awk -v t="$t" '$1 == "floor" && $2 == t { print $4 }' "$RESULTS" | median)
    for cfg in "${configs[@]}"; do
        if [ -n "${NOTE[$cfg]:-}" ] && ! awk -v c="$cfg" -v t="$t" '$1 == c && $2 == t { f = 1 } END { exit !f }' "$RESULTS"; then
            printf '%-10s %7s %12s   skipped: %s\n' "$cfg" "$t" - "${NOTE[$cfg]}"
            continue
        fi
        vals=$(awk -v c="$cfg" -v t="$t" '$1 == c && $2 == t { print $4 }' "$RESULTS")
        if [ -z "$vals" ]; then
            printf '%-10s %7s %12s   no run counted (see below)\n' "$cfg" "$t" -
            continue
        fi
        med=$(echo "$vals" | median)
        lost=$(awk -v c="$cfg" -v t="$t" '$1 == c && $2 == t { print $5 }' "$RESULTS" | sort -u | paste -sd/)
        xp=$(awk -v a="$med" -v b="${plain:-0}" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "-" }')
        xf=$(awk -v a="$med" -v b="${floor:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
        printf '%-10s %7s %12s %9s %9s %7s  %s\n' "$cfg" "$t" "$med" "$xp" "$xf" "$lost" "$(echo "$vals" | paste -sd' ')"
    done
done
for cfg in "${!NOTE[@]}"; do echo "note: $cfg: ${NOTE[$cfg]}"; done
for cfg in "${!RUNFAIL[@]}"; do echo "runs not counted: $cfg: ${RUNFAIL[$cfg]}(the tool never attached: cannot attach uprobe, EINVAL, dmesg ref_ctr_offset mismatch)"; done
echo "floor probes: $PROBES (in the target's libc), from $PROBES_FROM"
