# Memory budgets, the name-length cap, drop counters and allocation-failure back-off (issue 8 items 4, 5, 17).
# Sourced by run.sh: start_daemon, stop_clean, ctl, fail, eq, jget, $T and the tool paths come from there.

# Under a sanitizer the process's memory is the sanitizer's as much as ours
# (shadow, quarantine): RSS and address-space limits mean nothing there.
sanitized() { ldd "$HT_DAEMON" 2>/dev/null | grep -q 'libasan\|libtsan'; }

# Peak resident size of the daemon, in KiB.
daemon_hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$DPID/status"; }

MIB=1048576

# The issue's stream scaled down: 100 events, each with 256 new names of 4,000
# bytes (102 MB of names; kept whole, both interners would hold 205 MB). The
# session's 64 MiB budget holds: RSS stays under it plus a fixed 48 MiB
# (the daemon itself, the loader's line buffer, the allocator's slack), the
# names that do not fit are counted, every event is applied and the daemon
# stays up.
case_mem_session_budget() {
    printf '{"session_memory_budget":"64MiB","limits":{"max_name_len":4096}}\n' >"$T/cfg.json"
    "$HT_TOOL" longnames 100 256 4000 >"$T/ln.htev" || fail "generator"
    start_daemon --config "$T/cfg.json"
    ctl load "$T/ln.htev" --name big >/dev/null || fail "load failed"
    ctl --json status big >"$T/s" || fail "status"
    eq "$(jget memory.budget <"$T/s")" $((64 * MIB)) "session budget"
    local used drops
    used=$(jget memory.used <"$T/s")
    [ "$used" -gt 0 ] && [ "$used" -le $((64 * MIB)) ] || fail "session use $used over its budget"
    eq "$(jget ingest.events <"$T/s")" 100 "events"
    eq "$(jget quality.events <"$T/s")" 100 "events applied"
    eq "$(jget quality.no_stack <"$T/s")" 0 "no_stack (dropped stacks are stack_drops)"
    drops=$(jget quality.budget_drops <"$T/s")
    [ "$drops" -gt 0 ] || fail "nothing counted as over budget"
    # Every event's stack is either interned (perhaps cut) or counted as dropped.
    eq $(($(jget quality.stack_drops <"$T/s") + $(jget memory.distinct_stacks <"$T/s"))) 100 \
        "stack_drops + distinct stacks"
    [ "$(jget memory.by_structure.strings <"$T/s")" -gt $((4 * MIB)) ] || fail "strings not counted"
    ctl status big | grep -q "budget .* of 64.0 MiB used" || fail "human status shows no budget"
    if ! sanitized; then
        local hwm
        hwm=$(daemon_hwm_kib)
        [ "$hwm" -lt $(((64 + 48) * 1024)) ] || fail "peak RSS ${hwm} KiB over budget + 48 MiB"
    fi
    ctl ping | grep -q answers || fail "daemon down after the budget was reached"
    stop_clean
}

# Two sessions of 64 MiB each under a daemon-wide 40 MiB: the daemon's budget
# binds (each session is refused by it, not by its own), and the sum stays under it.
case_mem_daemon_budget() {
    printf '{"session_memory_budget":"64MiB","daemon_memory_budget":"40MiB","limits":{"max_name_len":4096}}\n' \
        >"$T/cfg.json"
    "$HT_TOOL" longnames 40 256 4000 >"$T/ln.htev" || fail "generator" # 41 MB of names, held twice
    start_daemon --config "$T/cfg.json"
    ctl load "$T/ln.htev" --name one >/dev/null || fail "load one"
    ctl load "$T/ln.htev" --name two >/dev/null || fail "load two"
    ctl --json version >"$T/v" || fail "version"
    eq "$(jget memory.budget <"$T/v")" $((40 * MIB)) "daemon budget"
    eq "$(jget memory.session_budget <"$T/v")" $((64 * MIB)) "session budget"
    [ "$(jget memory.refusals <"$T/v")" -gt 0 ] || fail "the daemon budget refused nothing"
    local u1 u2
    u1=$(ctl --json status one | jget memory.used)
    u2=$(ctl --json status two | jget memory.used)
    [ $((u1 + u2)) -le $((40 * MIB)) ] || fail "sessions hold $u1 + $u2, over the daemon budget"
    [ "$(jget memory.used <"$T/v")" -le $((40 * MIB)) ] || fail "daemon use over its budget"
    for s in one two; do
        ctl --json status $s >"$T/s"
        eq "$(jget memory.daemon.budget <"$T/s")" $((40 * MIB)) "$s: daemon budget in status"
        [ "$(jget quality.budget_drops <"$T/s")" -gt 0 ] || fail "$s: no budget drops"
        eq "$(jget quality.events <"$T/s")" 40 "$s: events"
    done
    if ! sanitized; then
        local hwm
        hwm=$(daemon_hwm_kib)
        [ "$hwm" -lt $(((40 + 48) * 1024)) ] || fail "peak RSS ${hwm} KiB over budget + 48 MiB"
    fi
    stop_clean
}

# One name's length is capped: 6 distinct 300-byte names cut to 100 bytes,
# counted once each, on the text path and the binary one.
case_mem_name_cap() {
    printf '{"limits":{"max_name_len":100}}\n' >"$T/cfg.json"
    "$HT_TOOL" longnames 3 2 300 >"$T/n.htev" || fail "generator"
    cat "$T/n.htev" "$T/n.htev" >"$T/n2.htev" # the same names again: not counted again
    "$HT_CONVERT" "$T/n2.htev" "$T/n2.htevb" 2>/dev/null || fail "ht-convert"
    start_daemon --config "$T/cfg.json"
    for f in n2.htev n2.htevb; do
        ctl load "$T/$f" --name "${f#*.}" >/dev/null || fail "load $f"
        ctl --json status "${f#*.}" >"$T/s"
        eq "$(jget quality.long_names <"$T/s")" 6 "$f: long_names"
        eq "$(jget quality.truncated_stacks <"$T/s")" 0 "$f: truncated_stacks"
        ctl --json stacks "${f#*.}" --by frame >"$T/q" || fail "stacks"
        local frame
        frame=$(jget rows.0.frame <"$T/q")
        eq "${#frame}" 100 "$f: frame name length"
        case "$frame" in f*_*_xxxx*) ;; *) fail "$f: frame name $frame" ;; esac
    done
    stop_clean
}

# Past max_strings and max_stacks, text and binary count the same drops under
# their own names (the decoder's interner is the one that drops): 6 stacks of
# two new names, then 3 of addresses, with room for 4 names and 3 stacks.
case_mem_drop_counters() {
    printf '{"limits":{"max_strings":5,"max_stacks":4}}\n' >"$T/cfg.json"
    {
        for k in 0 1 2 3 4 5; do
            printf '{"t":%d,"ev":"alloc","heap":1,"addr":%d,"size":8,"stack":["mod!name%d","mod!name%d"]}\n' \
                $((k + 1)) $((4096 + 16 * k)) $((2 * k)) $((2 * k + 1))
        done
        for k in 0 1 2; do
            printf '{"t":%d,"ev":"alloc","heap":1,"addr":%d,"size":8,"stack":["0x%x","0x99"]}\n' \
                $((k + 10)) $((8192 + 16 * k)) $((16 + k))
        done
    } >"$T/d.htev"
    "$HT_CONVERT" "$T/d.htev" "$T/d.htevb" 2>/dev/null || fail "ht-convert"
    start_daemon --config "$T/cfg.json"
    for f in d.htev d.htevb; do
        local s=${f#*.}
        ctl load "$T/$f" --name "$s" >/dev/null || fail "load $f"
        ctl --json status "$s" >"$T/s"
        eq "$(jget quality.no_stack <"$T/s")" 0 "$f: no_stack"
        eq "$(jget quality.stack_drops <"$T/s")" 6 "$f: stack_drops"
        eq "$(jget quality.truncated_stacks <"$T/s")" 4 "$f: truncated_stacks"
        eq "$(jget quality.string_drops <"$T/s")" 8 "$f: string_drops"
        eq "$(jget quality.stack_table_drops <"$T/s")" 2 "$f: stack_table_drops"
        ctl --json stacks "$s" >"$T/q" || fail "stacks" # by stack: the frames of each
        grep -q '"0x0"' "$T/q" && fail "$f: a made-up 0x0 frame"
        ctl status "$s" | grep -q "stack_drops=6" || fail "$f: human status"
    done
    stop_clean
}

# Under an address-space limit the table's 2 MiB chunks stop coming: the load
# goes on, the allocations that find no room are counted, and the allocator
# is tried a handful of times, not once per event (the fix for ~50x slower
# loads: 47k failed mmaps in 3 s).
case_mem_alloc_failure() {
    sanitized && { echo "skip: address-space limits and sanitizers do not mix"; exit 77; }
    command -v prlimit >/dev/null || { echo "skip: no prlimit"; exit 77; }
    "$HT_TOOL" manyallocs 6000000 >"$T/many.htevb" || fail "generator"
    # The daemon alone maps ~80 MiB (threads' stacks and arenas); 6M live
    # allocations need ~220 MiB of table: a 160 MiB limit runs out midway.
    prlimit --as=$((160 * MIB)) "$HT_DAEMON" --foreground --log-level debug >>"$T/daemon.log" 2>&1 &
    DPID=$!
    for _ in $(seq 100); do
        "$HT_CTL" ping >/dev/null 2>&1 && break
        sleep 0.05
    done
    ctl load "$T/many.htevb" --name big >/dev/null || fail "load failed"
    ctl --json status big >"$T/s" || fail "status"
    eq "$(jget quality.events <"$T/s")" 6000000 "events applied"
    local nomem fails live
    nomem=$(jget quality.no_memory_drops <"$T/s")
    fails=$(jget memory.alloc_failures <"$T/s")
    live=$(jget heap.outstanding_count <"$T/s")
    [ "$nomem" -gt 100000 ] || fail "only $nomem allocations refused: the limit did not bite"
    [ "$fails" -ge 1 ] && [ "$fails" -le 40 ] || fail "$fails failed allocator calls for $nomem refusals"
    [ $((live + $(jget memory.no_memory.table <"$T/s"))) -ge 6000000 ] || fail "allocations lost uncounted"
    ctl ping | grep -q answers || fail "daemon down"
    stop_clean
}

# A snapshot's cJSON tree counts in the session's budget (an estimate of its
# nodes and strings) and is given back when the session goes.
case_mem_snapshot_counted() {
    start_daemon
    ctl load "$DEMO" --name demo --snapshot-when 'duration>1s' >/dev/null 2>&1 || fail "load failed"
    ctl --json status demo >"$T/s"
    eq "$(jget snapshots.0.seq <"$T/s")" 1 "one snapshot"
    local snap used0
    snap=$(jget memory.by_structure.snapshots <"$T/s")
    [ "$snap" -gt 1000 ] || fail "snapshot bytes not counted ($snap)"
    [ "$(jget memory.used <"$T/s")" -gt "$snap" ] || fail "snapshot not in the session's use"
    used0=$(ctl --json version | jget memory.sessions)
    [ "$used0" -ge "$snap" ] || fail "daemon-wide use $used0 misses the snapshot"
    ctl drop demo >/dev/null || fail "drop"
    eq "$(ctl --json version | jget memory.sessions)" 0 "daemon-wide use after the drop"
    stop_clean
}
