#!/usr/bin/env bash
# Recorded-trace analysis side by side with heaptrack (issue 10): the same events in both tools.
#
#   1. record an allocation-heavy program with `heaptrack --raw` (the pointers are kept);
#   2. interpret it as heaptrack itself does without --raw (`zstd -dc < RAW |
#      heaptrack_interpret | zstd -c > FILE`, the command heaptrack prints): FILE is heaptrack's
#      recording, what heaptrack_print reads;
#   3. convert RAW (names from FILE) to .htevb with ht-from-heaptrack (not timed against anything);
#   4. in one go: `heaptrack_print --print-leaks 1` on FILE (the leak report only: -p 0 -a 0 -T 0)
#      vs `heaptracectl load FILE.htevb` + `heaptracectl stacks --type AIFO` on a fresh heaptraced.
#      heaptrack_print: wall and peak RSS from /usr/bin/time -v. heaptrace: wall of load + query
#      (the daemon already running), the daemon's VmHWM after the query (its RSS before the load
#      is printed too), the session's memory by structure (status --json).
# Prints one JSON line with every figure and the ratios against the issue's targets:
#   wall_ratio = (load + query) / heaptrack_print  (target <= 0.5)
#   rss_ratio  = daemon VmHWM / heaptrack_print max RSS  (target <= 1)
#   file_ratio = .htevb bytes / heaptrack's file bytes  (target <= 1)
#   file_ratio_z = the same .htevb in zstd frames (ht-convert's default) / heaptrack's file
# The leak totals of both are printed side by side (bytes and blocks): the same events must
# give the same leak, and the script exits 1 when the leaked blocks differ (or the answer is
# incomplete). Missing a target does not fail it: those are figures.
#
# usage: bench/heaptrack/bench-heaptrack.sh [options]     (from the repository root)
#   --build DIR       heaptrace build directory (default: build)
#   --app NAME        allocbench (default: malloc+free pairs over a window of 256 live blocks,
#                     6 frames deep) or mtalloc (9 leaking and 6 churning sites per round)
#   --pairs N         allocbench: pairs per thread (default 10000000: 20 M events)
#   --iterations N    mtalloc: rounds per thread (default 200000)
#   --threads T       threads (default 1)
#   --daemon-config F heaptraced --config F (default: its defaults)
#   --reps N          repetitions of the side-by-side part (default 1), alternating which tool
#                     goes first; figures are medians, every value listed ("runs")
#   --life-ring N     also run the heaptrace side again on a fresh daemon whose lifetime ring holds
#                     N completed blocks ({"limits":{"life_ring":N}}); its figures go under
#                     "life_ring_N" (the ring is most of the daemon's RSS on a long recording)
#   --keep            keep the work directory
# Runtime with the defaults: recording ~30 s, interpreting ~30 s, conversion ~10 s, the
# comparison itself under a minute.
set -u

BUILD=build
APP=allocbench
PAIRS=10000000
ITERATIONS=200000
THREADS=1
DCONFIG=
LIFE_RING=
REPS=1
KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --app) APP=$2; shift 2 ;;
    --pairs) PAIRS=$2; shift 2 ;;
    --iterations) ITERATIONS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --daemon-config) DCONFIG=$2; shift 2 ;;
    --life-ring) LIFE_RING=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "bench-heaptrack: unknown option $1" >&2; exit 2 ;;
    esac
done

die() { echo "bench-heaptrack: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

[ -d "$BUILD" ] || die "no build directory $BUILD"
BUILD=$(cd "$BUILD" && pwd)
DAEMON=$BUILD/daemon/heaptraced
CTL=$BUILD/ctl/heaptracectl
CONV=$BUILD/bench/heaptrack/ht-from-heaptrack
HTCONVERT=$BUILD/daemon/ht-convert
INTERPRET=/usr/lib/heaptrack/libexec/heaptrack_interpret
for x in "$DAEMON" "$CTL" "$CONV" "$HTCONVERT" "$BUILD/tests/apps/$APP"; do
    [ -x "$x" ] || die "$x not built"
done
command -v heaptrack >/dev/null && command -v heaptrack_print >/dev/null ||
    die "heaptrack missing (apt-get install heaptrack)"
[ -x "$INTERPRET" ] || die "$INTERPRET missing (libheaptrack)"
command -v zstd >/dev/null || die "zstd missing: heaptrack would write gzip (this script reads zstd)"
[ -x /usr/bin/time ] || die "/usr/bin/time missing (apt-get install time)"

W=$(mktemp -d /tmp/bench-heaptrack.XXXXXX)
DPID=
finish() {
    if [ -n "$DPID" ]; then
        "$CTL" --pipe "$W/ht.sock" shutdown >/dev/null 2>&1 || kill "$DPID" 2>/dev/null
        wait "$DPID" 2>/dev/null
    fi
    if [ "$KEEP" = 1 ]; then echo "work directory: $W" >&2; else rm -rf "$W"; fi
}
trap finish EXIT

# time_v FIELD FILE: a field of /usr/bin/time -v's report.
time_v() { grep -F "$1" "$2" | head -n 1 | awk -F': ' '{ print $NF }'; }
# seconds of "h:mm:ss" or "m:ss.ss"
to_s() { awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; printf "%.3f", s }' <<<"$1"; }
now_ns() { date +%s%N; }
vm() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$DPID/status"; }

# --- 1. record ---------------------------------------------------------------------------------
case "$APP" in
allocbench) ARGS=(--no-wait "$PAIRS" "$THREADS") ;;
mtalloc) ARGS=(--no-pause "$THREADS" "$ITERATIONS") ;;
*) die "--app: allocbench or mtalloc" ;;
esac
log "recording $APP ${ARGS[*]} with heaptrack --raw"
# mtalloc waits for a byte on stdin (app-sync.h) before it runs.
t0=$(now_ns)
printf 'go' | (cd "$W" && heaptrack -r -o "$W/rec" "$BUILD/tests/apps/$APP" "${ARGS[@]}") >"$W/record.log" 2>&1 ||
    die "heaptrack failed: $(tail -n 3 "$W/record.log")"
record_s=$(awk -v a="$t0" -v b="$(now_ns)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
RAW=$W/rec.raw.zst
[ -s "$RAW" ] || die "no $RAW: $(tail -n 3 "$W/record.log")"
APP_PID=$(grep -o '"pid":[0-9]*' "$W/record.log" | head -n 1 | cut -d: -f2)

# --- 2. heaptrack's own file ---------------------------------------------------------------------
log "interpreting (heaptrack's pipeline)"
FILE=$W/rec.zst
zstd -dcq <"$RAW" | "$INTERPRET" 2>"$W/interpret.log" | zstd -qc >"$FILE" || die "heaptrack_interpret failed"

# --- 3. the same events as .htevb ----------------------------------------------------------------
log "converting to .htevb"
HTEVB=$W/rec.htevb
/usr/bin/time -v "$CONV" --pid "${APP_PID:-0}" "$RAW" "$FILE" "$HTEVB" 2>"$W/convert.log" ||
    die "ht-from-heaptrack failed: $(grep -v '^\s' "$W/convert.log" | tail -n 2)"
conv_json=$(grep '^{' "$W/convert.log" | head -n 1)
events=$(grep -o '"allocs":[0-9]*\|"frees":[0-9]*' <<<"$conv_json" | cut -d: -f2 | paste -sd+ | bc)
conv_s=$(to_s "$(time_v 'Elapsed (wall clock)' "$W/convert.log")")
# The same stream as a recording is written (zstd frames, ht-convert's default level).
"$HTCONVERT" "$HTEVB" "$W/rec.htevbz" 2>"$W/htconvert.log" || die "ht-convert failed: $(tail -n 2 "$W/htconvert.log")"

# --- 4. side by side -----------------------------------------------------------------------------
sync
# Files read once before either side, so neither pays the first read from disk.
cat "$FILE" "$HTEVB" >/dev/null

# heaptrack_side TAG: heaptrack_print's leak report; TAG.hp holds "wall_s max_rss_kb".
heaptrack_side() {
    local tag=$1
    log "heaptrack_print --print-leaks 1 (-p 0 -a 0 -T 0)"
    /usr/bin/time -v heaptrack_print -p 0 -a 0 -T 0 -l 1 "$FILE" >"$W/print.out" 2>"$W/$tag.time" ||
        die "heaptrack_print failed: $(tail -n 3 "$W/$tag.time")"
    echo "$(to_s "$(time_v 'Elapsed (wall clock)' "$W/$tag.time")") $(time_v 'Maximum resident set size' "$W/$tag.time")" >"$W/$tag.hp"
}

# heaptrace_side TAG [CONFIG]: a fresh daemon, load + AIFO query timed; TAG.side holds
# "load_ns query_ns rss_before_kb vmhwm_kb rss_after_kb", TAG.aifo.json and TAG.status.json.
heaptrace_side() {
    local tag=$1 cfg=${2:-} t0 t1 t2 before
    log "heaptraced${cfg:+ --config $cfg}: load + stacks --type AIFO"
    "$DAEMON" --foreground --pipe "$W/ht.sock" ${cfg:+--config "$cfg"} >"$W/$tag.daemon.log" 2>&1 &
    DPID=$!
    for _ in $(seq 100); do "$CTL" --pipe "$W/ht.sock" ping >/dev/null 2>&1 && break; sleep 0.05; done
    "$CTL" --pipe "$W/ht.sock" ping >/dev/null 2>&1 || die "daemon did not start: $(tail -n 3 "$W/$tag.daemon.log")"
    before=$(vm VmRSS)
    t0=$(now_ns)
    "$CTL" --pipe "$W/ht.sock" load "$HTEVB" --name ht >"$W/$tag.load.out" 2>&1 || die "load failed: $(cat "$W/$tag.load.out")"
    t1=$(now_ns)
    "$CTL" --pipe "$W/ht.sock" --json stacks ht --type AIFO >"$W/$tag.aifo.json" 2>&1 ||
        die "query failed: $(head -n 3 "$W/$tag.aifo.json")"
    t2=$(now_ns)
    echo "$((t1 - t0)) $((t2 - t1)) $before $(vm VmHWM) $(vm VmRSS)" >"$W/$tag.side"
    "$CTL" --pipe "$W/ht.sock" --json status ht >"$W/$tag.status.json" 2>&1
    "$CTL" --pipe "$W/ht.sock" shutdown >/dev/null 2>&1
    wait "$DPID"
    DPID=
}
for ((rep = 1; rep <= REPS; rep++)); do
    if ((rep % 2)); then
        heaptrack_side "main-$rep"
        heaptrace_side "main-$rep" "$DCONFIG"
    else
        heaptrace_side "main-$rep" "$DCONFIG"
        heaptrack_side "main-$rep"
    fi
done
if [ -n "$LIFE_RING" ]; then
    printf '{"limits": {"life_ring": %s}}\n' "$LIFE_RING" >"$W/life-ring.json"
    heaptrace_side ring "$W/life-ring.json"
fi
# "total memory leaked: 4.42K" (heaptrack's own units) and the number of leaked allocations.
hp_leak=$(grep -m1 'total memory leaked' "$W/print.out" | awk -F': ' '{ print $2 }')
hp_leaked_blocks=$(grep -m1 'leaked allocations' "$W/interpret.log" | awk '{ print $NF }')

# --- the line ------------------------------------------------------------------------------------
python3 - "$W" <<PY
import json, os, sys
w = sys.argv[1]
import statistics
reps = $REPS
aifo = json.load(open(os.path.join(w, "main-1.aifo.json")))
st = json.load(open(os.path.join(w, "main-1.status.json")))
mem = st.get("memory", {})
runs = []
for r in range(1, reps + 1):
    l_ns, q_ns, before, hwm, after = map(int, open(os.path.join(w, "main-%d.side" % r)).read().split())
    hs, hk = open(os.path.join(w, "main-%d.hp" % r)).read().split()
    runs.append({"heaptrack_print_s": float(hs), "heaptrack_print_max_rss_kb": int(hk),
                 "load_s": l_ns / 1e9, "aifo_query_s": q_ns / 1e9, "daemon_vmhwm_kb": hwm,
                 "daemon_rss_before_kb": before, "daemon_rss_after_kb": after})
med = lambda k: statistics.median(x[k] for x in runs)
load_s, query_s, hp_s = med("load_s"), med("aifo_query_s"), med("heaptrack_print_s")
hp_kb, hwm_kb = int(med("heaptrack_print_max_rss_kb")), int(med("daemon_vmhwm_kb"))
file_b = os.path.getsize(os.path.join(w, "rec.zst"))
raw_b = os.path.getsize(os.path.join(w, "rec.raw.zst"))
htevb_b = os.path.getsize(os.path.join(w, "rec.htevb"))
htevbz_b = os.path.getsize(os.path.join(w, "rec.htevbz"))
events = int("$events" or 0)
out = {
    "app": "$APP", "args": "${ARGS[*]}", "events": events,
    "record_s": float("$record_s"), "convert_s": float("$conv_s"),
    "heaptrack_print_s": hp_s, "heaptrack_print_max_rss_kb": hp_kb,
    "load_s": round(load_s, 3), "aifo_query_s": round(query_s, 3),
    "load_query_s": round(load_s + query_s, 3),
    "daemon_rss_before_kb": int(med("daemon_rss_before_kb")), "daemon_vmhwm_kb": hwm_kb,
    "daemon_rss_after_kb": int(med("daemon_rss_after_kb")), "reps": reps,
    "heaptrack_file_bytes": file_b, "heaptrack_raw_bytes": raw_b, "htevb_bytes": htevb_b,
    "htevb_bytes_per_event": round(htevb_b / events, 2) if events else None,
    "htevbz_bytes": htevbz_b,
    "htevbz_bytes_per_event": round(htevbz_b / events, 2) if events else None,
    "heaptrack_bytes_per_event": round(file_b / events, 2) if events else None,
    "wall_ratio": round((load_s + query_s) / hp_s, 3) if hp_s else None,
    "rss_ratio": round(hwm_kb / hp_kb, 3) if hp_kb else None,
    "file_ratio": round(htevb_b / file_b, 3),
    "file_ratio_z": round(htevbz_b / file_b, 3),
    "targets": {"wall_ratio": "<= 0.5", "rss_ratio": "<= 1", "file_ratio": "<= 1"},
    "leak": {"heaptrack_print": "$hp_leak", "heaptrack_leaked_blocks": "$hp_leaked_blocks",
             "heaptrace_aifo_bytes": aifo.get("total", {}).get("size"),
             "heaptrace_aifo_blocks": aifo.get("total", {}).get("count"),
             "complete": aifo.get("complete")},
    "session_memory_by_structure": mem.get("by_structure"),
    "session_rings": st.get("rings"),
    "quality": {k: v for k, v in st.get("quality", {}).items() if v},
}
out["pass"] = {
    "wall": out["wall_ratio"] is not None and out["wall_ratio"] <= 0.5,
    "rss": out["rss_ratio"] is not None and out["rss_ratio"] <= 1,
    "file": out["file_ratio"] <= 1,
    "file_z": out["file_ratio_z"] <= 1,
}
out["runs"] = [{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for r in runs]
ring = os.path.join(w, "ring.side")
if os.path.exists(ring):
    l_ns, q_ns, before, hwm, after = map(int, open(ring).read().split())
    ra = json.load(open(os.path.join(w, "ring.aifo.json")))
    rs = json.load(open(os.path.join(w, "ring.status.json")))
    out["life_ring_$LIFE_RING"] = {
        "load_query_s": round((l_ns + q_ns) / 1e9, 3), "daemon_vmhwm_kb": hwm,
        "wall_ratio": round((l_ns + q_ns) / 1e9 / hp_s, 3) if hp_s else None,
        "rss_ratio": round(hwm / hp_kb, 3) if hp_kb else None,
        "aifo_bytes": ra.get("total", {}).get("size"), "aifo_blocks": ra.get("total", {}).get("count"),
        "lifetimes_bytes": rs.get("memory", {}).get("by_structure", {}).get("lifetimes"),
        "heap_lifetimes": rs.get("rings", {}).get("heap_lifetimes"),
    }
print(json.dumps(out, separators=(",", ":")))
leak = out["leak"]
if str(leak["heaptrace_aifo_blocks"]) != leak["heaptrack_leaked_blocks"] or not leak["complete"]:
    sys.stderr.write("bench-heaptrack: the leaks differ: heaptrack %s blocks, heaptrace %s (complete %s)\n"
                     % (leak["heaptrack_leaked_blocks"], leak["heaptrace_aifo_blocks"], leak["complete"]))
    sys.exit(1)
PY
