# Queries off the loop (issue 10): a query runs on a worker over an engine
# view while the loop answers others and keeps ingesting; what happens to a
# query whose session is dropped, whose client leaves or whose daemon stops
# meanwhile; a full queue answers EFULL. Sourced by run.sh.
#
# The queries are made slow with the test knob HEAPTRACED_TEST_QUERY_DELAY_MS
# (built into every build but Release: each query takes at least that long on
# its worker); a daemon without it skips these cases.

QA_FACTOR=${HT_TIME_FACTOR:-1}

# The daemon with every query taking $1 ms on its worker, times the sanitizers'
# factor (more args: start_daemon's).
qa_start() {
    local ms=$(($1 * QA_FACTOR))
    shift
    HEAPTRACED_TEST_QUERY_DELAY_MS=$ms start_daemon "$@"
}

# Skip (77) when the daemon has no test knob: seen in its log at its first query.
qa_need_knob() {
    grep -q "test knob HEAPTRACED_TEST_QUERY_DELAY_MS" "$T/daemon.log" && return 0
    echo "SKIP: heaptraced built without test knobs (a Release build)"
    exit 77
}

qa_status() { ctl --json status "$1" | jget "$2"; }

# Wait until session $1 has a query on a worker.
qa_wait_in_flight() {
    for _ in $(seq 200); do
        [ "$(qa_status "$1" queries.in_flight)" = 1 ] && return 0
        sleep 0.02
    done
    fail "no query of $1 in flight"
}

# .htev on stdout until the file $1 exists (or its reader is gone), a batch
# of 200 allocations every 20 ms, each on one of 50 stacks: a load that keeps
# ingesting.
qa_producer() {
    echo '{"ev":"process","pid":11,"name":"live"}'
    local t=1000 i=0
    while [ ! -e "$1" ]; do
        for _ in $(seq 200); do
            printf '{"t":%d,"ev":"alloc","tid":1,"heap":"0x10","addr":"0x%x","size":32,"stack":["app!f%d","app!main"]}\n' \
                "$t" $((65536 + i * 64)) $((i % 50)) || return 0
            t=$((t + 1000))
            i=$((i + 1))
        done
        sleep 0.02
    done
}

case_query_async_loop_free() {
    qa_start 2000
    qa_producer "$T/end" | ctl load - --name live >"$T/live.out" 2>&1 &
    local lpid=$!
    local e0=0
    for _ in $(seq 200); do
        e0=$(qa_status live ingest.events 2>/dev/null)
        [ "${e0:-0}" -gt 1000 ] && break
        sleep 0.05
    done
    [ "${e0:-0}" -gt 1000 ] || fail "the live load does not ingest ($e0 events)"
    ctl --json stacks live >"$T/q.json" 2>&1 &
    local qpid=$!
    qa_wait_in_flight live
    qa_need_knob
    e0=$(qa_status live ingest.events)
    # Pings from another client are answered at once while the query runs
    # (before, the loop was held for the whole query)...
    "$HT_TOOL" pingwatch "$HEAPTRACE_PIPE" "$T/stop" $((50 * QA_FACTOR)) >"$T/ping.out" 2>&1 &
    local wpid=$!
    sleep 1
    touch "$T/stop"
    wait "$wpid" || fail "pings stalled while a query ran: $(cat "$T/ping.out")"
    # ... and the session keeps ingesting.
    local e1
    e1=$(qa_status live ingest.events)
    eq "$(qa_status live queries.in_flight)" 1 "the query still runs"
    [ "$e1" -gt "$e0" ] || fail "no event ingested while the query ran ($e0 then $e1)"
    wait "$qpid" || fail "stacks failed: $(cat "$T/q.json")"
    [ "$(jget rows.# <"$T/q.json")" -gt 0 ] || fail "no rows: $(head -c 300 "$T/q.json")"
    eq "$(qa_status live queries.run)" 1 "queries run"
    local w h
    w=$(qa_status live queries.longest_worker_ms)
    h=$(qa_status live queries.longest_loop_hold_ms)
    awk -v w="$w" -v f="$QA_FACTOR" 'BEGIN { exit !(w >= 2000 * f) }' ||
        fail "worker time $w ms, under the knob's $((2000 * QA_FACTOR)) ms"
    awk -v h="$h" -v f="$QA_FACTOR" 'BEGIN { exit !(h < 50 * f) }' || fail "the loop was held $h ms"
    grep -q "session 1: stacks query (1) answered: waited" "$T/daemon.log" || fail "no debug log line per query"
    touch "$T/end"
    wait "$lpid" || fail "the live load failed: $(cat "$T/live.out")"
    stop_clean
}

# A client's requests are answered in order: a ping sent after a slow query
# is answered after it; a half-closed client gets its answer, then is closed.
case_query_async_client_order() {
    # Not scaled: raw waits 1.5 s at most for the next line.
    HEAPTRACED_TEST_QUERY_DELAY_MS=500 start_daemon
    load_demo
    printf '{"v":1,"id":1,"cmd":"stacks","args":{"top":3}}\n{"v":1,"id":2,"cmd":"ping"}\n' |
        "$HT_TOOL" raw "$HEAPTRACE_PIPE" >"$T/r"
    qa_need_knob
    eq "$(grep -o '"id":[0-9]*' "$T/r" | tr '\n' ' ')" '"id":1 "id":2 ' "reply order"
    "$HT_TOOL" halfclose "$HEAPTRACE_PIPE" 0 '{"v":1,"id":3,"cmd":"stacks","args":{"top":3}}' \
        >"$T/h" || fail "half-closed client: $(cat "$T/h")"
    grep -q "frames [1-9]" "$T/h" || fail "half-closed client's answer: $(cat "$T/h")"
    grep -q "more lines" "$T/h" && fail "half-closed client not closed after its answer"
    stop_clean
}

# Dropped mid-query: the query's client hears ENOSESSION, the session is
# freed once its query returned (ASan: nothing freed under the worker, no leak).
case_query_async_drop_mid_query() {
    qa_start 1500
    load_demo
    ctl --json stacks demo >"$T/q.json" 2>"$T/q.err" &
    local qpid=$!
    qa_wait_in_flight demo
    qa_need_knob
    # A query waiting behind it is answered at once.
    ctl --json commits demo >"$T/q2.json" 2>"$T/q2.err" &
    local q2pid=$!
    for _ in $(seq 100); do
        [ "$(qa_status demo queries.waiting)" = 1 ] && break
        sleep 0.02
    done
    eq "$(qa_status demo queries.waiting)" 1 "a second query waits"
    ctl drop demo >/dev/null || fail "drop refused"
    wait "$q2pid" && fail "the waiting query of a dropped session succeeded"
    grep -q ENOSESSION "$T/q2.err" || fail "waiting query: $(cat "$T/q2.err")"
    ctl ping >/dev/null || fail "ping after the drop"
    ctl ls | grep -q demo && fail "demo still listed after its drop"
    wait "$qpid" && fail "a query of a dropped session succeeded"
    grep -q ENOSESSION "$T/q.err" || fail "running query: $(cat "$T/q.err")"
    grep -q "session 1 dropped (freed once its running query returns)" "$T/daemon.log" ||
        fail "the session was not kept for its query"
    grep -q "session 1 dropped$" "$T/daemon.log" || fail "the session was never freed"
    # The name is free again, and a new session answers.
    load_demo
    ctl --json stacks --top 1 | jget rows.# | grep -qx 1 || fail "query on the new session"
    stop_clean
}

# A drop held behind the client's own query (both in one write): it runs
# from inside the query's answer, when the reply is written and the held
# requests are released; the session must outlive the job's bookkeeping
# (was a heap use-after-free in job_finished, seen under ASan; in a release
# build a write into freed memory).
case_query_async_drop_held_behind_query() {
    # Not scaled: raw waits 1.5 s at most for the next line.
    HEAPTRACED_TEST_QUERY_DELAY_MS=100 start_daemon
    load_demo
    printf '{"v":1,"id":1,"cmd":"stacks","args":{"top":3,"session":"demo"}}\n{"v":1,"id":2,"cmd":"drop","args":{"session":"demo"}}\n{"v":1,"id":3,"cmd":"ping"}\n' |
        "$HT_TOOL" raw "$HEAPTRACE_PIPE" >"$T/r"
    eq "$(grep -o '"id":[0-9]*,"ok":true' "$T/r" | tr '\n' ' ')" \
        '"id":1,"ok":true "id":2,"ok":true "id":3,"ok":true ' "answers: $(head -c 300 "$T/r")"
    ctl ping >/dev/null || fail "the daemon died after the held drop"
    ctl ls | grep -q demo && fail "demo still listed after its drop"
    grep -q "session 1 dropped$" "$T/daemon.log" || fail "the session was never freed"
    # The same with a shutdown held behind a query: every handle closed, exit 0.
    load_demo
    printf '{"v":1,"id":1,"cmd":"stacks","args":{"top":3}}\n{"v":1,"id":2,"cmd":"shutdown"}\n' |
        "$HT_TOOL" raw "$HEAPTRACE_PIPE" >"$T/r2"
    wait "$DPID"
    local rc=$?
    DPID=
    [ "$rc" -eq 0 ] || fail "daemon exit code $rc after a held shutdown"
    grep -q "stopped cleanly" "$T/daemon.log" || fail "daemon did not close every handle"
}

# The client leaves mid-query: the daemon sees a half-closed client (EOF)
# and writes the answer when it comes, the write fails and the client is
# closed; the daemon goes on. (A client closed while its query runs, as at
# shutdown, loses its answer: query_async_shutdown_mid_query, under ASan.)
case_query_async_client_gone() {
    qa_start 1000
    load_demo
    timeout 0.5 "$HT_CTL" stacks >/dev/null 2>&1
    qa_need_knob
    ctl ping >/dev/null || fail "ping after the client left"
    # The query takes 1000 ms x QA_FACTOR on its worker: wait past that (a
    # fixed 5 s failed under TSan's factor of 10).
    for _ in $(seq $((40 * QA_FACTOR + 100))); do
        [ "$(qa_status demo queries.run)" = 1 ] && break
        sleep 0.05
    done
    eq "$(qa_status demo queries.run)" 1 "the query ran to its end"
    eq "$(qa_status demo queries.in_flight)" 0 "nothing in flight"
    ctl --json stacks --top 2 | jget rows.# | grep -qx 2 || fail "the next query"
    stop_clean
}

# Shut down mid-query: the workers are joined at once (the knob's wait is
# cut short), every handle closed, exit 0.
case_query_async_shutdown_mid_query() {
    qa_start 20000
    load_demo
    ctl stacks >/dev/null 2>&1 &
    qa_wait_in_flight demo
    qa_need_knob
    local t0 t1
    t0=$(date +%s%N)
    stop_clean
    t1=$(date +%s%N)
    [ $(((t1 - t0) / 1000000)) -lt $((3000 * QA_FACTOR)) ] ||
        fail "shutdown took $(((t1 - t0) / 1000000)) ms with a query running"
}

# Past max_queued_queries waiting queries, one more is refused with EFULL (counted).
case_query_async_queue_full() {
    cat >"$T/cfg.json" <<EOF
{"max_queued_queries": 2}
EOF
    qa_start 1500 --config "$T/cfg.json"
    load_demo
    ctl --json stacks >"$T/q0" 2>&1 &
    local p0=$!
    qa_wait_in_flight demo
    qa_need_knob
    ctl --json stacks >"$T/q1" 2>&1 &
    local p1=$!
    ctl --json commits >"$T/q2" 2>&1 &
    local p2=$!
    for _ in $(seq 100); do
        [ "$(qa_status demo queries.waiting)" = 2 ] && break
        sleep 0.02
    done
    eq "$(qa_status demo queries.waiting)" 2 "two queries wait"
    ctl --json stacks >"$T/q3" 2>&1 && fail "a third waiting query was taken"
    grep -q EFULL "$T/q3" || fail "refusal: $(cat "$T/q3")"
    grep -q "max_queued_queries" "$T/q3" || fail "refusal says not why: $(cat "$T/q3")"
    eq "$(qa_status demo queries.rejected_busy)" 1 "rejections counted"
    wait "$p0" || fail "first query: $(cat "$T/q0")"
    wait "$p1" || fail "second query: $(cat "$T/q1")"
    wait "$p2" || fail "third query: $(cat "$T/q2")"
    eq "$(qa_status demo queries.run)" 3 "queries run"
    stop_clean
}

# Top refreshes and snapshots go through the workers too: frames keep coming,
# a load's summary waits for its snapshots, which hold their stacks.
case_query_async_top_and_snapshots() {
    qa_start 300
    ctl load "$DEMO" --name demo --snapshot-when 'outstanding>10KiB' --every 10KiB >/dev/null 2>&1 ||
        fail "load failed"
    qa_need_knob
    ctl --json status demo >"$T/s"
    [ "$(jget snapshots.# <"$T/s")" -ge 2 ] || fail "snapshots: $(jget snapshots <"$T/s")"
    eq "$(jget queries.in_flight <"$T/s")" 0 "the load answered before its snapshots were taken"
    ctl export --format csv --snapshot 1 | grep -q "MemoryTestApp.exe!Initialize" ||
        fail "snapshot 1 has no stacks"
    timeout $((20 * QA_FACTOR)) "$HT_CTL" --json top --interval 100ms --count 2 >"$T/top" 2>&1 ||
        fail "top: $(head -c 300 "$T/top")"
    grep -q '"seq":2' "$T/top" || fail "top frames: $(head -c 300 "$T/top")"
    stop_clean
}

# Live eBPF (root): while a query runs, the session keeps taking the target's
# events from the kernel ring, and none is lost for it (before, the loop was
# held for the query and the ring filled). Skips without root, eBPF or apps.
case_query_async_live_bpf() {
    HEAPTRACED_TEST_QUERY_DELAY_MS=$((1500 * QA_FACTOR)) live_setup
    local pairs=300000
    live_app lo allocbench "$pairs" 1
    local pid=$APID
    # Frame-pointer stacks (allocbench keeps them): this is about the loop during a query; the
    # default's DWARF copies (~8 KiB a record) fill the kernel ring under ASan whatever the loop does.
    live_attach lo "$pid" --stacks fp
    live_go "$pid"
    local e0=0
    for _ in $(seq 200); do
        e0=$(qa_status lo ingest.events)
        [ "${e0:-0}" -gt 10000 ] && break
        sleep 0.02
    done
    [ "${e0:-0}" -gt 10000 ] || fail "the live session takes no events ($e0)"
    ctl --json stacks lo --top 5 >"$T/q.json" 2>&1 &
    local qpid=$!
    qa_wait_in_flight lo
    qa_need_knob
    e0=$(qa_status lo ingest.events)
    sleep 0.5
    local e1
    e1=$(qa_status lo ingest.events)
    eq "$(qa_status lo queries.in_flight)" 1 "the query still runs"
    # Unless the daemon had taken all of them already (a fast host: the
    # target's 2 x pairs events were in before the query; seen in CI).
    [ "$e1" -gt "$e0" ] || [ "$e0" -ge $((2 * pairs)) ] ||
        fail "no event taken while the query ran ($e0 then $e1)"
    wait "$qpid" || fail "stacks failed: $(cat "$T/q.json")"
    grep -q "allocbench" "$T/q.json" || fail "frames not symbolized: $(head -c 400 "$T/q.json")"
    live_wait_line lo '"ns_per_pair"'
    wait "$pid" || fail "allocbench exit code"
    adv_wait_state lo >"$T/s"
    eq "$(jget quality.lost <"$T/s")" 0 "events lost"
    stop_clean
}

# Live eBPF (root): a query worker that holds the symbolizer for long (a
# module's first symbol table load; HEAPTRACED_TEST_SYMBOLIZE_DELAY_MS makes
# the first frame it resolves take that long) does not hold the loop: the
# session keeps taking the target's events and pings are answered meanwhile,
# and a module the target loads meanwhile waits in the source's queue, then
# reaches the symbol cache once the worker lets go. Before, every drain of a
# symbolizing source waited for the symbolizer lock (and status for its
# counters): the loop stood still behind the worker.
case_query_async_symbolizer_busy() {
    local hold=$((3000 * QA_FACTOR))
    HEAPTRACED_TEST_SYMBOLIZE_DELAY_MS=$hold live_setup
    grep -q "test knob HEAPTRACED_TEST_SYMBOLIZE_DELAY_MS" "$T/daemon.log" ||
        { echo "SKIP: heaptraced built without test knobs (a Release build)"; exit 77; }
    live_app lo allocbench --dlopen libm.so.6 400000 1
    local pid=$APID
    live_attach lo "$pid"
    live_go "$pid"
    local m0
    m0=$(ctl --json status lo | jget source_status.symbols.modules)
    local e0=0
    for _ in $(seq 200); do
        e0=$(qa_status lo ingest.events)
        [ "${e0:-0}" -gt 10000 ] && break
        sleep 0.02
    done
    [ "${e0:-0}" -gt 10000 ] || fail "the live session takes no events ($e0)"
    # A require pattern is matched on the worker: its first frame holds the symbolizer.
    ctl --json stacks lo --top 5 --require 'allocbench!*' >"$T/q.json" 2>&1 &
    local qpid=$!
    local t0
    t0=$(date +%s%N)
    qa_wait_in_flight lo
    # Pings every 10 ms for 1 s (a third of the hold); each answered within
    # 500 ms (the loop waited for the whole hold before: seconds).
    "$HT_TOOL" pingwatch "$HEAPTRACE_PIPE" "$T/stop" $((500 * QA_FACTOR)) >"$T/ping.out" 2>&1 &
    local wpid=$!
    e0=$(qa_status lo ingest.events)
    # The target maps a new module: the drain queues it (the lock is held).
    local q0 q=0
    q0=$(ctl --json status lo | jget source_status.symbols.queued)
    live_go "$pid"
    live_wait_line lo '"dlopened"'
    for _ in $(seq $((100 * QA_FACTOR))); do
        ctl --json status lo >"$T/sq"
        q=$(jget source_status.symbols.queued <"$T/sq")
        [ "${q:-0}" -gt "$q0" ] && break
        sleep 0.01
    done
    [ "${q:-0}" -gt "$q0" ] || fail "no module event drained: $(jget source_status.symbols <"$T/sq")"
    [ "$(jget source_status.symbols.queue_waiting <"$T/sq")" -ge 1 ] ||
        fail "the module load did not wait in the queue: $(jget source_status.symbols <"$T/sq")"
    sleep $((QA_FACTOR))
    local e1
    e1=$(qa_status lo ingest.events)
    touch "$T/stop"
    wait "$wpid" || fail "pings stalled while a worker held the symbolizer: $(cat "$T/ping.out")"
    cat "$T/ping.out"
    local ms=$((($(date +%s%N) - t0) / 1000000))
    [ "$ms" -lt "$hold" ] || fail "the checks took ${ms} ms, the worker's hold ${hold} ms: not inside it"
    eq "$(qa_status lo queries.in_flight)" 1 "the query still runs"
    [ "$e1" -gt "$e0" ] || fail "no event taken while the worker held the symbolizer ($e0 then $e1)"
    echo "events while the symbolizer was held: $e0 -> $e1 in ${ms} ms"
    wait "$qpid" || fail "stacks failed: $(cat "$T/q.json")"
    grep -q "allocbench" "$T/q.json" || fail "frames not symbolized: $(head -c 400 "$T/q.json")"
    # The worker applied the queue before its next frame: the new module's
    # table is loaded (modules counts images), the target still there to
    # open it (a module that waited in the queue while its process exited
    # keeps "module!+0xOFF" frames: its table could not be loaded early).
    ctl --json status lo >"$T/s"
    jget source_status.symbols <"$T/s"
    eq "$(jget source_status.symbols.queue_waiting <"$T/s")" 0 "module events still queued"
    eq "$(jget source_status.symbols.queue_drops <"$T/s")" 0 "module events dropped from the queue"
    [ "$(jget source_status.symbols.modules <"$T/s")" -gt "$m0" ] ||
        fail "the dlopened module's table was not loaded ($m0 images before)"
    live_go "$pid"
    live_wait_line lo '"ns_per_pair"'
    wait "$pid" || fail "allocbench exit code"
    stop_clean
}

# The same with a recorder on the session (root): it names the frames of
# every event it is handed, so the drain needs the symbolizer; while the
# worker holds it the drain is put off until the query returns
# (queries.drains_put_off), rather than the loop waiting for the lock (3 s
# without an answer before). The recording keeps its named frames.
case_query_async_symbolizer_busy_recorder() {
    local hold=$((3000 * QA_FACTOR))
    HEAPTRACED_TEST_SYMBOLIZE_DELAY_MS=$hold live_setup
    grep -q "test knob HEAPTRACED_TEST_SYMBOLIZE_DELAY_MS" "$T/daemon.log" ||
        { echo "SKIP: heaptraced built without test knobs (a Release build)"; exit 77; }
    live_app lo allocbench 400000 1
    local pid=$APID
    live_attach lo "$pid" --stacks fp
    ctl record lo -o "$T/rec.htev" >"$T/rec.out" 2>&1 &
    local rpid=$!
    for _ in $(seq 100); do
        [ -s "$T/rec.htev" ] && break
        sleep 0.02
    done
    live_go "$pid"
    local e0=0
    for _ in $(seq 200); do
        e0=$(qa_status lo ingest.events)
        [ "${e0:-0}" -gt 10000 ] && break
        sleep 0.02
    done
    [ "${e0:-0}" -gt 10000 ] || fail "the live session takes no events ($e0)"
    local t0
    t0=$(date +%s%N)
    ctl --json stacks lo --top 5 --require 'allocbench!*' >"$T/q.json" 2>&1 &
    local qpid=$!
    qa_wait_in_flight lo
    "$HT_TOOL" pingwatch "$HEAPTRACE_PIPE" "$T/stop" $((500 * QA_FACTOR)) >"$T/ping.out" 2>&1 &
    local wpid=$!
    sleep $((QA_FACTOR))
    touch "$T/stop"
    wait "$wpid" || fail "pings stalled while a worker held the symbolizer: $(cat "$T/ping.out")"
    cat "$T/ping.out"
    local ms=$((($(date +%s%N) - t0) / 1000000))
    [ "$ms" -lt "$hold" ] || fail "the checks took ${ms} ms, the worker's hold ${hold} ms: not inside it"
    wait "$qpid" || fail "stacks failed: $(cat "$T/q.json")"
    [ "$(qa_status lo queries.drains_put_off)" -ge 1 ] || fail "no drain was put off"
    live_wait_line lo '"ns_per_pair"'
    wait "$pid" || fail "allocbench exit code"
    adv_wait_state lo >"$T/s"
    # Gaps are allowed: allocbench makes events faster than a recorder
    # writes them, and the events that waited meanwhile come at once.
    local rrc=0
    wait "$rpid" || rrc=$?
    [ "$rrc" = 0 ] || grep -q "the recording has gaps" "$T/rec.out" ||
        fail "record exited $rrc: $(cat "$T/rec.out")"
    grep -q '"stack":\["[^"]*allocbench!' "$T/rec.htev" ||
        fail "recorded frames not named: $(grep -m 3 '"stack"' "$T/rec.htev")"
    echo "recorded $(grep -c '"ev":"alloc"' "$T/rec.htev") allocs, $(qa_status lo queries.drains_put_off) drains put off"
    stop_clean
}
