# Adversarial review of issue 8's fixes: what broke under hostile or careless use.
# Sourced by run.sh (gen_deep comes from cases-out.sh).

# top refreshes big frames (1000 rows of 48 frames of 240-character names:
# 11 MiB each) every 10 ms: a client that reads is never cut off at
# client_output_cap; refreshes it has not read yet are skipped and counted.
case_top_big_frames_reader() {
    start_daemon
    gen_deep 1000 240 >"$T/big.htev"
    ctl load "$T/big.htev" --name big >/dev/null 2>&1 || fail "load big"
    ctl top big --top 1000 --interval 10ms --count 5 >"$T/top.out" 2>"$T/top.err" ||
        fail "top was cut off: $(cat "$T/top.err")"
    eq "$(grep -c "heaptrace top" "$T/top.out")" 5 "top frames"
    local skipped
    skipped=$(ctl --json version | jget clients.top_frames_skipped)
    [ "$skipped" -ge 1 ] || fail "no refresh counted as skipped ($skipped)"
    eq "$(ctl --json version | jget clients.dropped_slow)" 0 "clients dropped as slow"
    # Each frame's rows are made on the query worker (issue 10): building
    # them on the loop held it ~100 ms (one of 5 refreshes).
    local h
    h=$(ctl --json status big | jget queries.longest_loop_hold_ms)
    awk -v h="$h" -v f="${HT_TIME_FACTOR:-1}" 'BEGIN { exit !(h < 40 * f) }' ||
        fail "a top refresh held the loop $h ms"
    stop_clean
}

# A stacks reply held for a client that does not read keeps its query's rows
# (10,000 rows: 1.2 MB) until its last frame: they count in the daemon's
# queued output (and so its budget). Before, 20 such clients held 24 MB that
# queued_output showed as about 1.3 MB (one frame each).
case_held_replies_counted() {
    start_daemon
    gen_deep 10000 24 >"$T/deep.htev"
    ctl load "$T/deep.htev" --name deep >/dev/null 2>&1 || fail "load deep"
    local before
    before=$(ctl --json version | jget memory.queued_output)
    "$HT_TOOL" holdreplies "$HEAPTRACE_PIPE" 20 \
        '{"v":1,"id":1,"cmd":"stacks","args":{"session":"deep","top":10000,"no_default_cull":true}}' \
        "$T/stop" >"$T/hold.out" &
    local hpid=$! q=0
    # 20 x 10,000 rows of at least 100 bytes each.
    local want=$((20 * 10000 * 100))
    for _ in $(seq 600); do
        q=$(ctl --json version | jget memory.queued_output)
        [ "$q" -ge "$want" ] && break
        sleep 0.05
    done
    touch "$T/stop"
    wait "$hpid" || fail "holdreplies: $(cat "$T/hold.out")"
    [ "$q" -ge "$want" ] || fail "queued_output $q with 20 held replies (want at least $want)"
    # Every held byte is given back once the clients are gone.
    for _ in $(seq 200); do
        q=$(ctl --json version | jget memory.queued_output)
        [ "$q" -eq "$before" ] && break
        sleep 0.05
    done
    eq "$q" "$before" "queued_output after the clients left"
    stop_clean
}

# load reads with read(2): a directory opens with fopen on Linux and fails
# at the first read. It is refused before a session is made, with why; an
# empty file is an empty session; stdin from a pipe streams.
case_load_not_a_file() {
    start_daemon
    mkdir "$T/dir"
    ctl load "$T/dir" --name d >"$T/o" 2>&1 && fail "load of a directory succeeded"
    grep -qi "directory" "$T/o" || fail "no reason given: $(cat "$T/o")"
    ctl --json ls >"$T/j"
    grep -q '"name":[[:space:]]*"d"' "$T/j" && fail "a session was made for a directory: $(cat "$T/j")"
    : >"$T/empty.htev"
    ctl load "$T/empty.htev" --name e >"$T/o" 2>&1 || fail "empty file: $(cat "$T/o")"
    head -n 50 "$DEMO" | ctl load - --name p >"$T/o" 2>&1 || fail "stdin: $(cat "$T/o")"
    eq "$(ctl --json status p | jget ingest.lines)" 50 "lines from stdin"
    stop_clean
}
