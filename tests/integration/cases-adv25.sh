# The adversary of the .etl reader (issue 25): `load FILE.etl` against an independent model
# (etl-model.py), and what a hostile or changing file does to it. Sourced by run.sh.

ETL_MODEL=$HERE/etl-model.py

# Random heap allocations, frees, reallocs (in place and moving) and VirtualAlloc commits
# over four processes (one 32-bit, two with the same image) and three processors, plain and
# XPRESS: every session's status, stacks (whole trace, four random windows, each --type)
# and timeline equal to the model computed from the events generated.
case_adv25_model_seeds() {
    local seed x
    for seed in 1 2 3 4 5 6; do
        start_daemon
        x=
        [ $((seed % 2)) = 0 ] && x=--xpress
        python3 "$ETL_MODEL" gen "$T/m.etl" "$T/m.json" "$seed" $x --events 1500 ||
            fail "etl-model.py gen $seed"
        ctl load "$T/m.etl" >"$T/load.out" 2>&1 || fail "seed $seed load: $(cat "$T/load.out")"
        python3 "$ETL_MODEL" check "$T/m.json" >"$T/check.out" 2>&1 ||
            fail "seed $seed $x: $(cat "$T/check.out")"
        stop_clean
    done
}

# Windows reuses process ids: pid 500 is first.exe, ends, then second.exe, then first.exe
# again. Each is its own session (the k-th process of a pid in the trace is <image>.<pid>.<k>),
# with only its own blocks (and the stacks of its keys, defined after it ended): second.exe's
# block at first.exe's address did not replace it,
# and its free of an address of first.exe's did not free it. They were one session
# "first.exe.500" holding 50 B.
case_adv25_pid_reuse() {
    start_daemon
    python3 "$ETL_MODEL" reuse "$T/r.etl" || fail "etl-model.py reuse"
    ctl load "$T/r.etl" >"$T/load.out" 2>&1 || fail "load: $(cat "$T/load.out")"
    eq "$(etlsess_names)" "first.exe.500 first.exe.500.3 second.exe.500.2 " "sessions"
    eq "$(ctl --json status first.exe.500 | jget heap.outstanding)" 101 "first.exe live bytes"
    # Its key's definition comes after it ended (a Rundown at the trace's end): still its.
    ctl --json stacks first.exe.500 --by stack >"$T/s" || fail "stacks first.exe.500"
    grep -q '0x7ff000777000' "$T/s" || fail "the key's stack lost: $(cat "$T/s")"
    eq "$(ctl --json status first.exe.500 | jget heap.outstanding_count)" 2 "first.exe blocks"
    eq "$(ctl --json status first.exe.500 | jget process.exited)" true "first.exe exited"
    eq "$(ctl --json status second.exe.500.2 | jget process.name)" second.exe "second's name"
    eq "$(ctl --json status second.exe.500.2 | jget heap.outstanding)" 1000 "second.exe bytes"
    eq "$(ctl --json status second.exe.500.2 | jget heap.outstanding_count)" 1 "second's blocks"
    eq "$(ctl --json status first.exe.500.3 | jget heap.outstanding)" 50 "the third's bytes"
    eq "$(ctl --json status first.exe.500.3 | jget process.exited)" false "the third runs"
    # Past the 4096 processes the ctl lists, a later process of a listed pid is not loaded
    # into the earlier one's session (it was: second.exe's 1000 B in first.exe.500).
    python3 "$ETL_MODEL" reuse-full "$T/rf.etl" || fail "etl-model.py reuse-full"
    ctl load "$T/rf.etl" --pid 500 --name rf >"$T/load.out" 2>&1 || fail "$(cat "$T/load.out")"
    grep -q 'more than 4096 processes' "$T/load.out" || fail "the cap not said: $(cat "$T/load.out")"
    eq "$(ctl --json status rf.500 | jget heap.outstanding)" 100 "first.exe's bytes alone"
    ctl drop rf.500 >/dev/null || fail "drop"
    # --pid takes every process that had the pid.
    ctl load "$T/r.etl" --pid 500 --name p >"$T/load.out" 2>&1 || fail "--pid 500"
    eq "$(ctl ls | grep -c ' p\.500')" 3 "--pid 500 sessions"
    stop_clean
}

# An image name longer than a session name (63 bytes) was refused by the daemon and its
# process not loaded (EBADARG); the name is cut now, and said. Names with a terminal escape
# or a newline are written escaped on the ctl's stderr (they went raw to the terminal).
case_adv25_hostile_names() {
    start_daemon
    python3 "$ETL_MODEL" names "$T/n.etl" || fail "etl-model.py names"
    ctl load "$T/n.etl" >"$T/load.out" 2>"$T/load.err" || fail "load: $(cat "$T/load.err")"
    eq "$(ctl ls | grep -c 'LLLL')" 1 "the long name's session"
    grep -q 'name cut' "$T/load.err" || fail "the cut not said: $(cat "$T/load.err")"
    eq "$(ctl --json ls | grep -c '"name"')" 3 "three sessions"
    if grep -q "$(printf '\033')" "$T/load.err" "$T/load.out"; then
        fail "a raw escape on the terminal: $(cat -A "$T/load.err")"
    fi
    grep -q 'new\\nline.exe' "$T/load.err" || fail "the newline not escaped: $(cat "$T/load.err")"
    stop_clean
}

# The file shrinks between the scan of its processes and their conversion (the daemon
# stopped meanwhile, so that the ctl waits there): each session held a quarter of its events,
# exit 0, nothing said; with the file mapped (h27-etlfast) the ctl died of SIGBUS. Now the
# change is named and the exit status is 1.
case_adv25_file_shrinks() {
    start_daemon
    python3 "$ETL_MODEL" gen "$T/s.etl" "$T/s.json" 7 --events 20000 || fail "etl-model.py"
    kill -STOP "$DPID"
    ctl load "$T/s.etl" >"$T/load.out" 2>"$T/load.err" &
    local lpid=$!
    sleep 1
    truncate -s 500000 "$T/s.etl"
    kill -CONT "$DPID"
    wait "$lpid"
    eq "$?" 1 "exit status of a load whose file shrank (0: unsaid; 135: SIGBUS in the mapping)"
    grep -q 'changed while' "$T/load.err" || fail "the change not said: $(cat "$T/load.err")"
    ctl ping >/dev/null || fail "the daemon"
    stop_clean
}

# A file cut at a buffer's end walked cleanly: `ht-convert --stats` and `load` exited 0 with
# two buffers of it gone, nothing said. The header's BuffersWritten says how many there were.
case_adv25_cut_at_buffer_end() {
    start_daemon
    python3 "$ETL_MODEL" gen "$T/c.etl" "$T/c.json" 9 --events 3000 || fail "etl-model.py"
    truncate -s $(($(stat -c %s "$T/c.etl") - 2 * 8192)) "$T/c.etl"
    "$HT_CONVERT" --stats "$T/c.etl" >"$T/stats" 2>&1 && fail "--stats of a cut file: exit 0"
    grep -q '"BUFFERS_MISSING"' "$T/stats" || fail "--stats: $(grep -A8 '"errors"' "$T/stats")"
    ctl load "$T/c.etl" >"$T/load.out" 2>"$T/load.err" && fail "load of a cut file: exit 0"
    grep -q 'BUFFERS_MISSING' "$T/load.err" || fail "load: $(cat "$T/load.err")"
    stop_clean
}

# Stack keys (h27-etlfast's one pass): references to 16 key values whose Delete comes after
# them, each value used again for other frames, a Rundown at the end; every allocation on the
# stack of the first definition of its key after it. Then 300000 references never defined
# among them, past the 262144 that may wait: the defined ones keep their stacks, the others
# have none (no_stack; those that gave up waiting stack_drops), the drops said, the ctl's
# memory bounded.
case_adv25_keys_model() {
    local seed
    start_daemon
    for seed in 1 2 3; do
        # Seed 3: Creates (0x1822) as keys enter the cache, and keys created again.
        python3 "$ETL_MODEL" keys "$T/k$seed.etl" "$T/k.json" "$seed" 3000 --undefined 500 \
            $([ "$seed" = 3 ] && echo --creates) ||
            fail "etl-model.py keys $seed"
        ctl load "$T/k$seed.etl" >"$T/load.out" 2>&1 || fail "load: $(cat "$T/load.out")"
        python3 "$ETL_MODEL" check-keys "$T/k.json" >"$T/check.out" 2>&1 ||
            fail "seed $seed: $(cat "$T/check.out")"
        ctl drop keys.exe.4321 >/dev/null || fail "drop"
    done
    # An inline stack forged as the reader's inner mark of a key reference takes no stack.
    python3 "$ETL_MODEL" forged "$T/f.etl" "$T/f.json" || fail "etl-model.py forged"
    ctl load "$T/f.etl" >"$T/load.out" 2>&1 || fail "load: $(cat "$T/load.out")"
    python3 "$ETL_MODEL" check-keys "$T/f.json" >"$T/check.out" 2>&1 ||
        fail "forged: $(cat "$T/check.out")"
    ctl drop keys.exe.4321 >/dev/null || fail "drop"
    python3 "$ETL_MODEL" keys "$T/ku.etl" "$T/ku.json" 4 3000 --undefined 300000 || fail "keys"
    /usr/bin/time -f "%M" -o "$T/rss" "$HT_CTL" load "$T/ku.etl" >"$T/load.out" 2>&1 ||
        fail "load: $(cat "$T/load.out")"
    local dropped
    dropped=$(sed -n 's/.*unresolved, \([1-9][0-9]*\) dropped.*/\1/p' "$T/load.out")
    [ -n "$dropped" ] || fail "drops: $(cat "$T/load.out")"
    # Those that gave up waiting are stack_drops in every reply (a cap), the rest no_stack.
    python3 "$ETL_MODEL" check-keys "$T/ku.json" "$dropped" >"$T/check.out" 2>&1 ||
        fail "300000 undefined: $(cat "$T/check.out")"
    # The bound is the plain build's: under TSan the ctl's RSS is mostly its shadow (333 MB).
    if ! ldd "$HT_CTL" 2>/dev/null | grep -q 'libasan\|libtsan'; then
        [ "$(tail -1 "$T/rss")" -lt 200000 ] || fail "the ctl's peak RSS: $(tail -1 "$T/rss") KB"
    fi
    stop_clean
}

# An .etl from a pipe or a FIFO went to the daemon as .htev text: 0 events, a malformed line
# per 1 KiB, exit 0. The ctl sees the trace's start now: nothing sent, said, exit 1.
case_adv25_etl_from_pipe() {
    start_daemon
    python3 "$ETL_MODEL" reuse "$T/r.etl" || fail "etl-model.py reuse"
    ctl load - <"$T/r.etl" >"$T/o" 2>&1 && fail "an .etl on stdin: exit 0 ($(cat "$T/o"))"
    cat "$T/r.etl" | ctl load - >"$T/o" 2>&1 && fail "an .etl on a pipe: exit 0 ($(cat "$T/o"))"
    grep -q 'Windows trace (.etl) on a pipe' "$T/o" || fail "not said: $(cat "$T/o")"
    mkfifo "$T/fifo"
    cat "$T/r.etl" >"$T/fifo" &
    ctl load "$T/fifo" >"$T/o" 2>&1 && fail "an .etl in a FIFO: exit 0 ($(cat "$T/o"))"
    grep -q 'Windows trace (.etl) on a pipe' "$T/o" || fail "not said: $(cat "$T/o")"
    grep -q ' [1-9][0-9]* malformed' "$T/o" && fail "sent: $(cat "$T/o")"
    stop_clean
}

# A record at the clock's last tick (2^64-1, a hostile or damaged time) was taken for one
# past the process's time window and dropped unsaid (a reused pid's window ends there).
case_adv25_ts_max() {
    start_daemon
    python3 "$ETL_MODEL" ts-max "$T/t.etl" || fail "etl-model.py ts-max"
    ctl load "$T/t.etl" >"$T/load.out" 2>&1 || fail "load: $(cat "$T/load.out")"
    grep -q 'process 700 (late.exe): 2 events' "$T/load.out" || fail "$(cat "$T/load.out")"
    stop_clean
}

# A processor's records going back in time (a damaged clock or file): the merge by time
# cannot order them, and the events came out of order unsaid. Counted and said now (load,
# and --stats: records_backwards_on_processor).
case_adv25_ts_backwards() {
    start_daemon
    python3 "$ETL_MODEL" ts-back "$T/b.etl" || fail "etl-model.py ts-back"
    ctl load "$T/b.etl" >"$T/load.out" 2>&1 || fail "load: $(cat "$T/load.out")"
    grep -q '1 records earlier than the record before them' "$T/load.out" ||
        fail "not said: $(cat "$T/load.out")"
    "$HT_CONVERT" --stats "$T/b.etl" | grep -q '"records_backwards_on_processor":.1,' ||
        fail "--stats: $("$HT_CONVERT" --stats "$T/b.etl" | grep backwards)"
    stop_clean
}
