# Counts (issue 8, items 12-16): realloc counts per window, commit pieces, the complete
# flag, the cull list and windows past the end. Sourced by run.sh.

# load FILE NAME: load a stream and wait for its end.
counts_load() {
    ctl load "$1" --name "$2" >/dev/null 2>&1 || fail "load $1"
}

# Item 12: realloc events outside the window are not the window's.
case_counts_realloc_window() {
    start_daemon
    cat >"$T/re.htev" <<'EOF'
{"t":1000000,"ev":"alloc","heap":"0x1","addr":"0x5a10","size":40,"stack":["app!Grow","app!main"]}
{"t":5000000,"ev":"realloc","heap":"0x1","addr":"0x5a10","old_addr":"0x5a10","size":80,"stack":["app!Grow","app!main"]}
{"t":1000000,"ev":"alloc","heap":"0x1","addr":"0x7000","size":40,"stack":["app!Move","app!main"]}
{"t":6000000,"ev":"alloc","heap":"0x1","addr":"0x8000","size":8,"stack":["app!Other","app!main"]}
EOF
    counts_load "$T/re.htev" inplace
    eq "$(ctl --json stacks --range 0:2ms | jget total.reallocs)" 0 "in-place realloc at 5 ms, window 0:2ms"
    eq "$(ctl --json stacks --range 4ms:6ms | jget total.reallocs)" 1 "window 4ms:6ms"
    eq "$(ctl --json stacks | jget total.reallocs)" 1 "whole session"
    cat >"$T/mv.htev" <<'EOF'
{"t":1000000,"ev":"alloc","heap":"0x1","addr":"0x5a10","size":40,"stack":["app!Grow","app!main"]}
{"t":2000000,"ev":"realloc","heap":"0x1","addr":"0x6000","old_addr":"0x5a10","size":80,"stack":["app!Grow","app!main"]}
{"t":9000000,"ev":"alloc","heap":"0x1","addr":"0x8000","size":8,"stack":["app!Other","app!main"]}
EOF
    counts_load "$T/mv.htev" moving
    eq "$(ctl --json stacks moving --range 3ms:4ms | jget total.reallocs)" 0 "moving realloc at 2 ms, window 3ms:4ms"
    eq "$(ctl --json stacks moving --range 0:3ms | jget total.reallocs)" 1 "window 0:3ms"
    eq "$(ctl --json stacks moving --range 3ms:4ms --sort src | jget complete)" true "complete"
    stop_clean
}

# Item 13: every committed piece is a block, the same in commits, status and the ctl's line.
case_counts_commit_pieces() {
    start_daemon
    cat >"$T/c.htev" <<'EOF'
{"t":1000,"ev":"commit","addr":"0x100000","size":40960,"stack":["app!Reserve","app!main"]}
{"t":2000,"ev":"decommit","addr":"0x104000","size":8192}
{"t":3000,"ev":"decommit","addr":"0x100000","size":4096}
EOF
    counts_load "$T/c.htev" pieces
    ctl --json commits >"$T/j" || fail "commits"
    eq "$(jget total.types.AIFO.count <"$T/j")" 2 "AIFO count"
    eq "$(jget total.types.AIFO.size <"$T/j")" 28672 "AIFO size"
    eq "$(jget total.outstanding_count <"$T/j")" 2 "outstanding count"
    eq "$(jget total.types.AIFI.count <"$T/j")" 2 "decommitted pieces"
    eq "$(ctl --json status | jget commits.ranges)" 2 "status ranges"
    ctl commits | grep -q "outstanding 28.0 KiB in 2 blocks" || fail "ctl line: $(ctl commits | grep total)"
    ctl status | grep -q "committed    28.0 KiB in 2 ranges" || fail "status line"
    eq "$(ctl --json commits --list | jget groups)" 4 "list: one row per block"
    stop_clean
}

# Item 14: whole-session answers by type are exact, and say so, after the ring evicted.
case_counts_whole_session_complete() {
    printf '{"limits": {"life_ring": 4}}\n' >"$T/cfg.json"
    start_daemon --config "$T/cfg.json"
    for i in $(seq 0 19); do
        printf '{"t":%d,"ev":"alloc","heap":"0x1","addr":"0x%x","size":100,"stack":["app!S%d","app!main"]}\n' \
            $((10 + i)) $((4096 + 16 * i)) $((i % 2))
    done >"$T/w.htev"
    for i in $(seq 0 11); do
        printf '{"t":%d,"ev":"free","heap":"0x1","addr":"0x%x"}\n' $((100 + i)) $((4096 + 16 * i))
    done >>"$T/w.htev"
    counts_load "$T/w.htev" evicted
    eq "$(ctl --json status | jget rings.heap_lifetimes.evicted)" true "ring evicted"
    ctl --json stacks --type AIFI >"$T/j"
    eq "$(jget complete <"$T/j")" true "--type AIFI complete"
    eq "$(jget total.count <"$T/j")" 12 "--type AIFI count"
    ctl --json stacks --type AOFI >"$T/j"
    eq "$(jget complete <"$T/j")" true "--type AOFI complete"
    eq "$(jget total.count <"$T/j")" 0 "--type AOFI count"
    ctl --json stacks --by type >"$T/j"
    eq "$(jget complete <"$T/j")" true "--by type complete"
    eq "$(jget total.count <"$T/j")" 20 "--by type count"
    ctl stacks --by type | grep -q INCOMPLETE && fail "--by type printed INCOMPLETE"
    # Only where exact: a window before the horizon is still incomplete.
    eq "$(ctl --json stacks --range 50ns: --type AOFI | jget complete)" false "windowed AOFI"
    stop_clean
}

# Item 15: a long --cull-list never pushes out the default list.
case_counts_cull_list_long() {
    start_daemon
    cat >"$T/new.htev" <<'EOF'
{"t":1000,"ev":"alloc","heap":"0x0","addr":"0x1000","size":64,"stack":["libstdc++.so.6!operator new(unsigned long)","app!Build","app!main"]}
EOF
    counts_load "$T/new.htev" cxx
    for i in $(seq 1 480); do echo "nomatch$i!f"; done >"$T/cull480.txt"
    eq "$(ctl --json stacks --by frame --cull-list "$T/cull480.txt" | jget rows.0.frame)" "app!Build" \
        "480 patterns + defaults: operator new culled"
    for i in $(seq 1 1024); do echo "m$i!"; done >"$T/cull1024.txt"
    eq "$(ctl --json stacks --by frame --cull-list "$T/cull1024.txt" | jget rows.0.frame)" "app!Build" \
        "1024 patterns + defaults"
    for i in $(seq 1 1025); do echo "m$i!"; done >"$T/cull1025.txt"
    ctl stacks --cull-list "$T/cull1025.txt" >"$T/out" 2>&1 && fail "1025 patterns accepted"
    grep -q "more than 1024 --cull and --cull-list patterns" "$T/out" || fail "message: $(cat "$T/out")"
    stop_clean
}

# Item 16: a window that starts after the latest event is refused the same way however
# its end is written; an end past it ends at the latest event.
case_counts_range_past_end() {
    start_daemon
    cat >"$T/short.htev" <<'EOF'
{"t":1000,"ev":"alloc","heap":"0x0","addr":"0x1000","size":64,"stack":["app!main"]}
{"t":9000,"ev":"alloc","heap":"0x0","addr":"0x2000","size":64,"stack":["app!main"]}
EOF
    counts_load "$T/short.htev" short
    local rc1 rc2
    ctl stacks --range 1s:100s >"$T/a" 2>&1
    rc1=$?
    ctl stacks --range 9001ns: >"$T/b" 2>&1
    rc2=$?
    eq "$rc1" 1 "1s:100s exit code"
    eq "$rc2" 1 "9001ns: exit code"
    grep -q '(1000000000 ns), after the session.s latest event at .* (9000 ns)' "$T/a" ||
        fail "1s:100s: $(cat "$T/a")"
    grep -q '(9001 ns), after the session.s latest event at .* (9000 ns)' "$T/b" ||
        fail "9001ns:: $(cat "$T/b")"
    ctl --json stacks --range 0:100s >"$T/j" || fail "0:100s refused"
    eq "$(jget window.t2 <"$T/j")" 9000 "end clamped to the latest event"
    eq "$(jget total.count <"$T/j")" 2 "0:100s count"
    eq "$(ctl --json stacks --range 9000ns: | jget total.count)" 1 "start at the latest event"
    ctl stacks --range 5us:2us 2>&1 | grep -q reversed || fail "reversed window"
    stop_clean
}
