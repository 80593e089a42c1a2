#!/bin/sh
# Quick eBPF probe cost (not part of the suite): ns per malloc+free pair of
# bpf-pairs plain, attached with the default stacks, and attached with empty
# programs (the probe floor), in the same run. Needs root.
# usage: measure.sh BUILD_DIR [PAIRS]
set -eu
b=${1:?build dir}
n=${2:-20000}
pairs=$b/tests/unit/bpf/bpf-pairs
dump=$b/daemon/source/bpf/ht-bpf-dump
run() { # $1: label, rest: ht-bpf-dump options or "plain"
    label=$1
    shift
    fifo=$(mktemp -u)
    mkfifo "$fifo"
    out=$(mktemp)
    "$pairs" "$n" <"$fifo" >"$out" &
    pid=$!
    exec 3>"$fifo"
    while ! grep -q ready "$out"; do sleep 0.05; done
    dumpout=$(mktemp)
    if [ "$1" != plain ]; then
        "$dump" --pid "$pid" --quiet "$@" >"$dumpout" &
        dpid=$!
        while ! grep -q attached "$dumpout"; do
            kill -0 "$dpid" 2>/dev/null || { echo "$label: ht-bpf-dump failed" >&2; kill "$pid"; return 1; }
            sleep 0.05
        done
    fi
    echo go >&3
    while ! grep -q ns_per_pair "$out"; do sleep 0.05; done
    echo x >&3
    exec 3>&-
    wait "$pid" || true
    if [ "$1" != plain ]; then wait "$dpid" || true; fi
    printf '%-22s %s   %s\n' "$label" "$(grep ns_per_pair "$out" | cut -d' ' -f2)" \
        "$(grep summary "$dumpout" | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^(alloc|records|attach_ms)=/) printf "%s ", $i; for (i = NF; i > 0; i--) if ($i ~ /^lost=/) { printf "%s", $i; break } }')"
    rm -f "$fifo" "$out" "$dumpout"
}
echo "configuration          ns/pair   (allocs seen, records, attach, events lost)"
run plain plain
run "probe floor (empty)" --floor
run "attached, fp stacks" --stacks fp
run "attached, no stacks" --stacks none
run "attached, dwarf" --stacks dwarf
