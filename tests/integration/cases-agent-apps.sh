# Issue 22, "exact mode equals the ground truth of every tests/apps program": the live cases the
# eBPF source passes (cases-live.sh, cases-stacks.sh, cases-adv-live.sh, cases-server.sh,
# cases-advgen.sh), each under `heaptracectl run` (the agent) in its default stack mode, and
# Debian's redis-server with a count the test knows. Sourced by run.sh; agent_setup, agent_run
# and agent_ended come from cases-agent.sh, xmlleak_bin, stacks_frames and stacks_bare_frames
# from cases-stacks.sh.

# libxml2 without frame pointers (tests/apps/xmlleak): every block leak_xml_docs leaked (the
# program counts them) is under that frame, and no frame is outside a module.
case_agent_app_libxml2() {
    agent_setup
    [ -x "$(xmlleak_bin)" ] || fail "no xmlleak at $(xmlleak_bin) (libxml2-dev: scripts/install-deps.sh)"
    mkfifo "$T/xin"
    "$HT_CTL" run --name axml -- "$(xmlleak_bin)" 100 0 <"$T/xin" >"$T/axml.out" 2>"$T/axml.err" &
    APID=$!
    LIVE_PIDS+=("$APID")
    exec 8>"$T/xin"
    live_wait_line axml '"ready"'
    printf g >&8 # the go-signal (app-sync.h)
    live_wait_line axml '"done"'
    live_settle axml
    local leaked
    leaked=$(grep done "$T/axml.out" | jget leaked_blocks)
    [ "$leaked" -gt 1000 ] || fail "xmlleak leaked only $leaked blocks"
    ctl --json status axml >"$T/status.json"
    eq "$(jget quality.lost <"$T/status.json")" 0 "lost events"
    eq "$(jget source_status.stacks <"$T/status.json")" dwarf "default stack mode"
    ctl --json stacks axml --require leak_xml_docs >"$T/req.json" || fail "stacks --require"
    eq "$(jget total.outstanding_count <"$T/req.json")" "$leaked" \
        "blocks outstanding under leak_xml_docs (the program counted $leaked)"
    stacks_frames axml
    eq "$(stacks_bare_frames)" 0 "frames outside every module"
    grep -q '^libxml2.so.2!' "$T/frames.txt" || fail "no libxml2 frame: $(sort -u "$T/frames.txt" | head)"
    printf x >&8
    exec 8>&-
    wait "$APID" || fail "xmlleak exit code"
    stop_clean
}

# A mapping grown with mremap by a named function: one commit of the grown size, attributed to
# that function.
case_agent_app_mremap() {
    agent_setup
    agent_run amg --name amg -- "$LIVE_APPS/mapgrow"
    live_go "$APID"
    live_wait_line amg '"done":true'
    live_settle amg
    check_mremap_commit amg
    live_go "$APID"
    wait "$APID" || fail "mapgrow exit code"
    stop_clean
}

# A C++ function calling new at four places: --by frame gives one row with every block.
case_agent_app_cxx_function() {
    agent_setup
    agent_run afs --name afs -- "$LIVE_APPS/fnsites" 200
    live_go "$APID"
    live_wait_line afs '"done":true'
    live_settle afs
    check_parser_build_rows afs
    live_go "$APID"
    wait "$APID" || fail "fnsites exit code"
    stop_clean
}

# A stop while the program allocates and frees as fast as it can: whole pairs and at most one
# live block, no unknown free (the agent stops writing at the stop; nothing after it is applied).
case_agent_app_stop_pairs() {
    agent_setup
    local app
    app="$(dirname "$HT_DAEMON")/../tests/apps/pairloop"
    [ -x "$app" ] || fail "no pairloop at $app"
    # Paced (1000 counting iterations a pair): the agent's records outran the daemon's reader on
    # this 2-core VM (~30M records/s made, ~20M taken: ring_full), and a cut checked under
    # overflow is the overflow's (unknown frees, live blocks whose free was dropped).
    "$HT_CTL" run --name apl -- "$app" 50000000 1000 >"$T/apl.out" 2>"$T/apl.err" </dev/null &
    APID=$!
    LIVE_PIDS+=("$APID")
    live_wait_line apl ready
    kill -USR1 "$APID"
    check_stop_cut apl "$T/apl.out"
    kill "$APID" 2>/dev/null
    wait "$APID" 2>/dev/null
    stop_clean
}

# agent_redis_rows NAME RANGE: "count first-frames" of each stack of blocks allocated in RANGE and
# still live, into $T/rows.txt.
agent_redis_rows() {
    ctl --json stacks "$1" --type AIFO --range "$2" --top 10000 >"$T/rows.json" || fail "stacks $2"
    python3 -c '
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(r["count"], *(r["frames"] + ["", "", ""])[:3])
' "$T/rows.json" | sed 's/ *$//' >"$T/rows.txt"
}

# Debian's redis-server (jemalloc, no frame pointers) launched under the agent: N SETs of new
# keys with 100-byte values leave N blocks at each of the four places redis allocates them (the
# value's sds and its object while the command is parsed, the key's sds and the dict entry in
# dbAdd), each under redis' own functions; DBSIZE agrees.
case_agent_app_redis_keys() {
    agent_setup
    command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
        live_skip "no redis-server/redis-cli (redis-server, redis-tools)"
    local n=1000 v i
    "$HT_CTL" run --name ardb -- redis-server --port 0 --unixsocket "$T/redis.sock" --save "" \
        --appendonly no --dir "$T" >"$T/redis.log" 2>&1 </dev/null &
    APID=$!
    LIVE_PIDS+=("$APID")
    for _ in $(seq 100); do
        redis-cli -s "$T/redis.sock" ping 2>/dev/null | grep -q PONG && break
        sleep 0.05
    done
    redis-cli -s "$T/redis.sock" ping | grep -q PONG || fail "redis-server did not answer: $(cat "$T/redis.log")"
    ctl mark ardb before >/dev/null || fail mark
    v=$(printf 'v%.0s' $(seq 100))
    for ((i = 0; i < n; i++)); do echo "SET key:$i $v"; done | redis-cli -s "$T/redis.sock" >/dev/null
    eq "$(redis-cli -s "$T/redis.sock" dbsize)" "$n" "DBSIZE"
    # redis' timers allocate all the time: no quiet moment to settle on. The rows are polled
    # until the four sites have their N blocks (the window is open-ended: only those rows count).
    local tries=$((100 * ${HT_TIME_FACTOR:-1}))
    for ((i = 0; i < tries; i++)); do
        agent_redis_rows ardb before:now
        [ "$(grep -c "^$n redis-server!" "$T/rows.txt")" -ge 4 ] && break
        sleep 0.2
    done
    cat "$T/rows.txt"
    grep -q "^$n redis-server!zmalloc_usable redis-server!_sdsnewlen redis-server!createStringObject$" "$T/rows.txt" ||
        fail "no $n values (createStringObject)"
    grep -q "^$n redis-server!zmalloc redis-server!createObject " "$T/rows.txt" || fail "no $n objects (createObject)"
    grep -q "^$n redis-server!zmalloc redis-server!dictAddRaw redis-server!dbAdd$" "$T/rows.txt" ||
        fail "no $n dict entries (dictAddRaw)"
    grep -q "^$n redis-server!zmalloc_usable redis-server!_sdsnewlen redis-server!dbAdd$" "$T/rows.txt" ||
        fail "no $n keys (_sdsnewlen under dbAdd)"
    eq "$(ctl --json status ardb | live_lost)" 0 "lost events"
    redis-cli -s "$T/redis.sock" shutdown nosave >/dev/null 2>&1
    wait "$APID"
    agent_ended ardb
    stop_clean
}

# python3 (Debian's, no frame pointers) against its own tracemalloc: 300 bytearrays of distinct
# sizes above pymalloc's small-object limit are each one malloc of size + 1 that tracemalloc
# traces too; the session's live blocks in that size range are tracemalloc's, count and bytes,
# and their stacks go through PyByteArray_Resize.
agent_python_tracemalloc() {
    local wrap=("$@")
    agent_setup
    [ -x /usr/bin/python3 ] || live_skip "no /usr/bin/python3 (Debian's python3)"
    cat >"$T/tm.py" <<'PY'
import json, sys, tracemalloc
tracemalloc.start()
keep = [bytearray(100000 + 7 * i) for i in range(300)]
traces = [t.size for t in tracemalloc.take_snapshot().traces if 100001 <= t.size < 102200]
print(json.dumps({"done": True, "count": len(traces), "bytes": sum(traces)}, separators=(",", ":")), flush=True)
sys.stdin.readline()
PY
    mkfifo "$T/pin"
    "$HT_CTL" run --name apy -- "${wrap[@]}" /usr/bin/python3 "$T/tm.py" <"$T/pin" >"$T/apy.out" 2>"$T/apy.err" &
    APID=$!
    LIVE_PIDS+=("$APID")
    exec 8>"$T/pin"
    live_wait_line apy '"done"'
    live_settle apy
    local truth
    truth=$(live_truth apy)
    eq "$(echo "$truth" | jget count)" 300 "tracemalloc's count"
    ctl --json stacks apy --type AIFO --size 100001:102200 >"$T/j" || fail stacks
    eq "$(jget total.count <"$T/j")" 300 "live blocks of the bytearrays' sizes"
    eq "$(jget total.size <"$T/j")" "$(echo "$truth" | jget bytes)" "bytes (tracemalloc's)"
    ctl --json stacks apy --type AIFO --size 100001:102200 --require PyByteArray_Resize >"$T/k" || fail stacks
    eq "$(jget total.count <"$T/k")" 300 "blocks under PyByteArray_Resize"
    eq "$(ctl --json status apy | live_lost)" 0 "lost events"
    if [ ${#wrap[@]} -gt 0 ]; then
        eq "$(ctl --json status apy | jget source_status.execs)" 1 "execs"
        eq "$(ctl --json status apy | jget process.name)" python3 "the process's program"
    fi
    echo >&8
    exec 8>&-
    wait "$APID" || fail "python3 exit code"
    stop_clean
}
case_agent_app_python_tracemalloc() { agent_python_tracemalloc; }

# The same through a wrapper that execs python3 (as pyenv's shims and service scripts do): the
# session follows the process into the program it execs.
case_agent_app_python_via_wrapper() {
    agent_python_tracemalloc /bin/sh -c 'exec "$@"' wrapper
}

# A program that lives a moment (ls): its frames are named, though it is gone before the
# session's symbolizer would have read its modules on its own (the agent flushes at exit and
# waits for the daemon to take its records and read its modules).
case_agent_app_short_lived() {
    agent_setup
    "$HT_CTL" run --name als -- /bin/ls -l / >"$T/als.out" 2>"$T/als.err" </dev/null || fail "ls: $(cat "$T/als.err")"
    agent_ended als
    ctl --json status als >"$T/s"
    [ "$(jget source_status.flushes <"$T/s")" -ge 1 ] || fail "no flush at exit"
    eq "$(jget source_status.flushes_late <"$T/s")" 0 "late flushes"
    [ "$(jget quality.events <"$T/s")" -gt 100 ] || fail "only $(jget quality.events <"$T/s") events"
    stacks_frames als
    eq "$(stacks_bare_frames)" 0 "frames outside every module: $(grep '^0x' "$T/frames.txt" | head -3)"
    grep -q '^libc.so.6!' "$T/frames.txt" || fail "no libc frame: $(sort -u "$T/frames.txt" | head)"
    stop_clean
}
