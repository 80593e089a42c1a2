# heaptracectl load FILE.etl (issue 25 item 3): one session per process with heap or
# VirtualAlloc events, named <image>.<pid> (ctl/load-etl.c, ctl/etl-procs.c). The file
# (make-etl-procs.py): Alpha.exe (pid 8: 4 allocs, a free, a VirtualAlloc), beta.exe (pid 99:
# 2 allocs), idle.exe (pid 77: a Process event only), over 3 s of trace time.
# Sourced by run.sh.

etlsess_file() {
    python3 "$HERE/make-etl-procs.py" "$T/p.etl" || fail "make-etl-procs.py"
}

# The session names `ctl ls` lists, sorted, one line.
etlsess_names() {
    ctl --json ls | grep '"name"' | sed 's/.*"name":[[:space:]]*"\([^"]*\)".*/\1/' |
        sort | tr '\n' ' '
}

# Two sessions with their image names, each the same as ht-convert --pid N of the file
# loaded as an .htevb; idle.exe (no heap event) gets none; --name N gives N.<pid>.
case_etlsess_two_sessions() {
    start_daemon
    etlsess_file
    ctl load "$T/p.etl" >"$T/load.out" 2>"$T/load.err" || fail "load: $(cat "$T/load.err")"
    eq "$(grep -c '^session ' "$T/load.out")" 2 "one line per session made"
    grep -q '"Alpha.exe.8": 8 events' "$T/load.out" || fail "Alpha.exe.8: $(cat "$T/load.out")"
    grep -q '"beta.exe.99": 4 events' "$T/load.out" || fail "beta.exe.99: $(cat "$T/load.out")"
    eq "$(etlsess_names)" "Alpha.exe.8 beta.exe.99 " "sessions"
    local pid s k
    for pid in 8 99; do
        "$HT_CONVERT" --plain --pid "$pid" "$T/p.etl" "$T/c$pid.htevb" 2>"$T/conv.err" ||
            fail "ht-convert --pid $pid: $(cat "$T/conv.err")"
        ctl load "$T/c$pid.htevb" --name "c$pid" >/dev/null 2>&1 || fail "load c$pid"
        s=$([ "$pid" = 8 ] && echo Alpha.exe.8 || echo beta.exe.99)
        eq "$(ctl --json status "$s" | jget process.pid)" "$pid" "$s pid"
        for k in process.name quality.events quality.lost quality.no_stack heap.outstanding \
            heap.outstanding_count heap.peak commits.committed; do
            eq "$(ctl --json status "$s" | jget "$k")" "$(ctl --json status "c$pid" | jget "$k")" \
                "$s status $k"
        done
    done
    eq "$(ctl --json status Alpha.exe.8 | jget heap.outstanding_count)" 3 "Alpha.exe live blocks"
    eq "$(ctl --json status beta.exe.99 | jget heap.outstanding)" 3000 "beta.exe live bytes"
    ctl load "$T/p.etl" --name n >"$T/load2.out" 2>&1 || fail "load --name: $(cat "$T/load2.out")"
    grep -q '"n.8"' "$T/load2.out" && grep -q '"n.99"' "$T/load2.out" ||
        fail "--name n: $(cat "$T/load2.out")"
    stop_clean
}

# --pid and --process (any case) pick one; an unknown one errors with the processes there
# are and makes no session; --pid of a stream that is not an .etl is a usage error.
case_etlsess_pick() {
    start_daemon
    etlsess_file
    ctl load "$T/p.etl" --pid 99 >"$T/o" 2>&1 || fail "--pid 99: $(cat "$T/o")"
    eq "$(etlsess_names)" "beta.exe.99 " "--pid 99"
    ctl load "$T/p.etl" --process ALPHA.EXE --name a >"$T/o" 2>&1 || fail "--process: $(cat "$T/o")"
    eq "$(etlsess_names)" "a.8 beta.exe.99 " "--process ALPHA.EXE"
    ctl load "$T/p.etl" --process nope.exe >"$T/o" 2>&1 && fail "--process nope.exe succeeded"
    grep -q 'no process named nope.exe' "$T/o" || fail "unknown process: $(cat "$T/o")"
    grep -q 'Alpha.exe (pid 8, 6 events), beta.exe (pid 99, 2 events)' "$T/o" ||
        fail "the list of processes: $(cat "$T/o")"
    ctl load "$T/p.etl" --pid 77 >"$T/o" 2>&1 && fail "--pid 77 (no heap event) succeeded"
    grep -q 'no process 77 with heap' "$T/o" || fail "--pid 77: $(cat "$T/o")"
    eq "$(etlsess_names)" "a.8 beta.exe.99 " "no session for a process not there"
    "$HT_CONVERT" --plain --pid 8 "$T/p.etl" "$T/c.htevb" 2>/dev/null || fail "ht-convert"
    ctl load "$T/c.htevb" --pid 8 >"$T/o" 2>&1
    eq "$?" 2 "--pid of an .htevb"
    grep -q 'for Windows traces' "$T/o" || fail "--pid of an .htevb: $(cat "$T/o")"
    ctl load "$T/p.etl" --pid 0 >"$T/o" 2>&1
    eq "$?" 2 "--pid 0"
    grep -q 'expected a process id' "$T/o" || fail "--pid 0: $(cat "$T/o")"
    stop_clean
}

# A process the daemon refuses (max_sessions 1) is reported and does not lose the other.
case_etlsess_one_refused() {
    printf '{"max_sessions": 1}\n' >"$T/cfg.json"
    start_daemon --config "$T/cfg.json"
    etlsess_file
    ctl load "$T/p.etl" >"$T/o" 2>&1 && fail "load past max_sessions succeeded"
    grep -q '"Alpha.exe.8": 8 events' "$T/o" || fail "the first process lost: $(cat "$T/o")"
    grep -q '1 of 2 processes loaded, 1 failed' "$T/o" || fail "the failure untold: $(cat "$T/o")"
    eq "$(etlsess_names)" "Alpha.exe.8 " "the session made stays"
    stop_clean
}

# Queries by trace time on an .etl session: --range 1s:2s holds Alpha.exe's allocations at
# 1.4 s and 1.6 s (500 B); the timeline's samples at 1 s and 2 s; beta.exe's at 1.2 s.
case_etlsess_time_queries() {
    start_daemon
    etlsess_file
    ctl load "$T/p.etl" >/dev/null 2>&1 || fail "load"
    ctl --json stacks Alpha.exe.8 --range 1s:2s >"$T/s" || fail "stacks --range"
    eq "$(jget total.count <"$T/s")" 2 "allocations in 1s:2s"
    eq "$(jget total.size <"$T/s")" 500 "bytes in 1s:2s"
    eq "$(jget total.outstanding_count <"$T/s")" 3 "live at 2s"
    ctl --json stacks Alpha.exe.8 >"$T/s" || fail "stacks"
    eq "$(jget total.count <"$T/s")" 4 "allocations in the whole trace"
    eq "$(ctl --json stacks beta.exe.99 --range 1s:2s | jget total.size)" 1000 "beta.exe 1s:2s"
    ctl --json timeline Alpha.exe.8 --step 1s >"$T/tl" || fail "timeline"
    eq "$(jget samples.1.heap <"$T/tl")" 100 "heap at 1s"
    eq "$(jget samples.2.heap <"$T/tl")" 600 "heap at 2s"
    eq "$(jget samples.2.committed <"$T/tl")" 65536 "the VirtualAlloc owned by pid 8"
    stop_clean
}

# A damaged file (a partial buffer after the last one): every session is made from what could be
# read, the reader's error is named, and the exit status is 1 (the file was not read whole), as
# ht-convert --stats says.
case_etlsess_damaged_exit() {
    start_daemon
    etlsess_file
    cp "$T/p.etl" "$T/d.etl"
    head -c 100 /dev/urandom >>"$T/d.etl"
    ctl load "$T/d.etl" >"$T/load.out" 2>"$T/load.err" && fail "a damaged file loaded with exit 0"
    grep -q "errors in the file" "$T/load.err" || fail "the damage not said: $(cat "$T/load.err")"
    eq "$(etlsess_names)" "Alpha.exe.8 beta.exe.99 " "sessions made from what could be read"
    eq "$(ctl --json status Alpha.exe.8 | jget heap.outstanding_count)" 3 "Alpha.exe live blocks"
}
