#!/usr/bin/env bash
# heaptracectl load of a synthetic .etl (make-etl.py) against load of the .htevb that
# ht-convert makes of the same file, in one daemon: events per second of each and their
# ratio (target: the .etl at 0.5 of the .htevb or more), the ctl's peak RSS, the daemon's
# peak RSS once the .etl is loaded (target: within the session's memory budget, whatever the
# file's size), and the top-50 AIFO and AIFI stacks of both sessions compared (target:
# identical). Each variant's files are deleted after it.
# usage: bench/etl/bench-etl.sh BUILD_DIR PAIRS [--xpress] [--keys] [--all]
#   (from the repository root; PAIRS allocations and about as many frees; --all: the
#   variants one after the other: inline stacks, XPRESS buffers, stack keys)
set -euo pipefail
build=$1 pairs=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
ctl=$build/ctl/heaptracectl
T=$(mktemp -d "${TMPDIR:-/tmp}/bench-etl.XXXXXX")
dpid=
trap '[ -z "$dpid" ] || kill $dpid 2>/dev/null; rm -rf "$T"' EXIT
export HEAPTRACE_PIPE=$T/ht.sock

start_daemon() {
    "$build/daemon/heaptraced" --foreground >"$T/daemon.log" 2>&1 &
    dpid=$!
    for _ in $(seq 100); do "$ctl" ping >/dev/null 2>&1 && return; sleep 0.05; done
    echo "daemon did not start" >&2
    exit 1
}

stop_daemon() {
    kill $dpid
    wait $dpid 2>/dev/null || true
    dpid=
}

jq_() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# load FILE SESSION_NAME SESSION: sets wall, ev, rate, ctl_rss.
load() {
    /usr/bin/time -f "%e %M" -o "$T/time" "$ctl" load "$1" --name "$2" >"$T/load.out" 2>&1 ||
        { cat "$T/load.out"; exit 1; }
    read -r wall ctl_rss <"$T/time"
    ev=$("$ctl" --json status "$3" | jq_ 'd["quality"]["events"]')
    rate=$(python3 -c "print(round($ev / max($wall, 1e-3)))")
}

top50() {
    "$ctl" --json stacks "$1" --type "$2" --top 50 | "$build/tests/integration/ht-testtool" norm |
        grep -v '"session"'
}

variant() {
    local opts=$1 label=${1:-inline stacks}
    echo "== $pairs pairs, 4 CPUs, $label ($(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg))"
    local s=$SECONDS
    # shellcheck disable=SC2086
    python3 "$here/make-etl.py" "$T/b.etl" "$pairs" $opts
    "$build/daemon/ht-convert" --plain "$T/b.etl" "$T/b.htevb" 2>"$T/conv.out"
    echo "files: .etl $(stat -c %s "$T/b.etl") bytes, .htevb $(stat -c %s "$T/b.htevb") bytes (made in $((SECONDS - s)) s)"
    start_daemon
    # An .etl's session is named NAME.<pid> (make-etl.py's process is 4242).
    load "$T/b.etl" etl etl.4242
    local ewall=$wall eev=$ev erate=$rate ectl=$ctl_rss
    local hwm_etl budget
    hwm_etl=$(awk '/VmHWM/ {print $2}' /proc/$dpid/status)
    budget=$("$ctl" --json status etl.4242 | jq_ 'd["memory"]["budget"]')
    grep -h "stack-key" "$T/load.out" | sed 's/^/  load: /' || true
    echo "  etl session quality: $("$ctl" --json status etl.4242 | jq_ '{k: d["quality"][k] for k in ("no_stack", "lost", "stack_drops", "budget_drops")}')"
    load "$T/b.htevb" htevb htevb
    local hwm_all
    hwm_all=$(awk '/VmHWM/ {print $2}' /proc/$dpid/status)
    echo "  .etl:   $eev events in $ewall s: $erate events/s, ctl peak RSS $ectl KB"
    echo "  .htevb: $ev events in $wall s: $rate events/s, ctl peak RSS $ctl_rss KB"
    python3 -c "r = $erate / $rate; print('  ratio .etl/.htevb: %.2f (target >= 0.5: %s)' % (r, 'met' if r >= 0.5 else 'missed'))"
    python3 -c "h = $hwm_etl * 1024; b = $budget; print('  daemon peak RSS with the .etl session: %d KB, session budget %d KB (target: within it: %s); with both sessions: $hwm_all KB' % (h // 1024, b // 1024, 'met' if h <= b else 'missed'))"
    local t same=1
    for t in AIFO AIFI; do
        top50 etl.4242 $t >"$T/etl.$t"
        top50 htevb $t >"$T/htevb.$t"
        if cmp -s "$T/etl.$t" "$T/htevb.$t"; then
            echo "  top 50 $t stacks: identical ($(grep -c '"frames"' "$T/etl.$t" || true) rows)"
        else
            same=0
            echo "  top 50 $t stacks: DIFFER"
            diff "$T/etl.$t" "$T/htevb.$t" | head -10
        fi
    done
    [ "$eev" = "$ev" ] || { same=0; echo "  events differ: $eev against $ev"; }
    echo "  answers: $([ $same = 1 ] && echo 'identical (target met)' || echo 'DIFFER (target missed)')"
    stop_daemon
    rm -f "$T/b.etl" "$T/b.htevb"
}

opts=() all=0
for a in "$@"; do
    case $a in
    --all) all=1 ;;
    *) opts+=("$a") ;;
    esac
done
if [ $all = 1 ]; then
    variant ""
    variant --xpress
    variant --keys
else
    variant "${opts[*]}"
fi
