# The DWARF unwinder's fast path (cached CFI rules) against libdwfl on live
# Debian programs without frame pointers: the same program traced twice,
# once with every stack through libdwfl (HEAPTRACED_TEST_UNWIND_LIBDWFL=1),
# gives the same stacks, frame by frame, with the same counts. Sourced by run.sh.

# Rows of a stacks reply (stdin) as "count size frames...", sorted.
unwind_rows() {
    awk '/"frames":/ { f = $0; sub(/^[^[]*\[/, "", f); sub(/\],?$/, "", f); next }
         f != "" && /"count":/ { c = $2; next }
         f != "" && /"size":/ { print c, $2, f; f = "" }' | tr -d ',' | sort
}

# unwind_status FILE fast|libdwfl: the status says which path unwound the stacks.
unwind_status_check() {
    local fast fb
    fast=$(jget source_status.unwind_fast <"$1")
    fb=$(jget source_status.unwind_fallbacks <"$1")
    echo "$2: unwind_fast $fast, unwind_fallbacks $fb, rules $(jget source_status.unwind_rules <"$1")," \
        "evicted $(jget source_status.unwind_rules_evicted <"$1")"
    eq "$(jget source_status.stacks <"$1")" dwarf "stacks"
    eq "$(jget source_status.unwind_failures <"$1")" 0 "unwind failures"
    eq "$(jget quality.lost <"$1")" 0 "lost events"
    if [ "$2" = fast ]; then
        [ "$fast" -gt 1000 ] || fail "only $fast stacks by the fast path"
        # libxml2 and libc here have no frame the rules do not cover
        [ "$fb" -le $((fast / 100)) ] || fail "$fb stacks through libdwfl against $fast fast"
    else
        eq "$fast" 0 "fast stacks with the knob set"
    fi
}

# A kernel ring that holds the whole run (128 MiB: ~16,000 DWARF records): the
# libdwfl pass is the slow one on purpose, and under ASan it fell behind the
# 16 MiB default and lost events (counted), which the comparison cannot have.
unwind_config() {
    printf '{"bpf_ring_bytes": 134217728}\n' >"$T/unwind.json"
    echo "$T/unwind.json"
}

# xmlleak (Debian's libxml2, -O2 without frame pointers, 150 documents):
# every stack of the whole run, nothing culled.
unwind_xml_once() {
    local how=$1
    if [ "$how" = libdwfl ]; then
        HEAPTRACED_TEST_UNWIND_LIBDWFL=1 start_daemon --config "$(unwind_config)"
    else
        start_daemon --config "$(unwind_config)"
    fi
    stacks_need_bpf
    rm -f "$T/xin"
    xmlleak_run 150,3
    stacks_settle xml
    ctl --json stacks xml --top 10000 --no-default-cull >"$T/xml-$how.json" || fail "stacks"
    ctl --json status xml >"$T/status-$how.json" || fail "status"
    unwind_status_check "$T/status-$how.json" "$how"
    unwind_rows <"$T/xml-$how.json" >"$T/rows-$how.txt"
    xmlleak_end
    stop_clean
}

case_unwind_libxml2_same_as_libdwfl() {
    unwind_xml_once libdwfl
    unwind_xml_once fast
    local n
    n=$(wc -l <"$T/rows-fast.txt")
    [ "$n" -gt 20 ] || fail "only $n stacks"
    diff "$T/rows-libdwfl.txt" "$T/rows-fast.txt" >"$T/diff.txt" ||
        fail "stacks differ (< libdwfl, > fast): $(head -20 "$T/diff.txt")"
    echo "$n stacks, the same both ways"
}

# redis-server (Debian's, jemalloc): the stacks of 200 rounds of commands of
# five types (under processCommand, less the reply buffers), deterministic,
# unlike the server's own timers.
unwind_redis_once() {
    local how=$1
    if [ "$how" = libdwfl ]; then
        HEAPTRACED_TEST_UNWIND_LIBDWFL=1 start_daemon --config "$(unwind_config)"
    else
        start_daemon --config "$(unwind_config)"
    fi
    stacks_need_bpf
    stacks_need_redis
    redis_start
    ctl start --source bpf --pid "$RPID" --name redis >"$T/start.out" 2>&1 || fail "start --pid: $(cat "$T/start.out")"
    local i
    for i in $(seq 200); do
        echo "SET k$((i * 1010)) $((i * 7))0123456789"
        echo "LPUSH l$((i % 7)) $i$i$i"
        echo "HSET h$((i % 5)) f$i $i"
        echo "SADD s $((i * 31))"
        echo "ZADD z $i m$i"
    done | redis-cli -s "$T/redis.sock" >/dev/null || fail "redis-cli"
    # redis' own timers keep allocating, so records never stay put for long; a slow pass
    # (libdwfl under ThreadSanitizer) settled before the zset's conversion came in: a pause
    # scaled by the sanitizers' time factor, then settle again.
    stacks_settle redis
    sleep "${HT_TIME_FACTOR:-1}"
    stacks_settle redis
    ctl --json stacks redis --require processCommand --top 10000 --no-default-cull \
        >"$T/redis-$how.json" || fail "stacks --require processCommand"
    ctl --json status redis >"$T/status-$how.json" || fail "status"
    eq "$(jget source_status.stacks <"$T/status-$how.json")" dwarf "stacks"
    eq "$(jget source_status.unwind_failures <"$T/status-$how.json")" 0 "unwind failures"
    eq "$(jget quality.lost <"$T/status-$how.json")" 0 "lost events"
    echo "$how: unwind_fast $(jget source_status.unwind_fast <"$T/status-$how.json")," \
        "unwind_fallbacks $(jget source_status.unwind_fallbacks <"$T/status-$how.json")"
    # Reply buffers (addReply*) are sized by the server's cron from recent
    # use: where a new one is taken depends on timing, not on the unwinder;
    # sizes too (a sorted set's skiplist levels are random): counts and frames.
    unwind_rows <"$T/redis-$how.json" | grep -v 'addReply' | awk '{ $2 = ""; print }' >"$T/rows-$how.txt"
    redis_stop
    stop_clean
}

case_unwind_redis_same_as_libdwfl() {
    unwind_redis_once libdwfl
    unwind_redis_once fast
    local n
    n=$(wc -l <"$T/rows-fast.txt")
    [ "$n" -gt 10 ] || fail "only $n stacks under processCommand"
    [ "$(jget source_status.unwind_fast <"$T/status-fast.json")" -gt 1000 ] || fail "few fast stacks"
    eq "$(jget source_status.unwind_fast <"$T/status-libdwfl.json")" 0 "fast stacks with the knob set"
    diff "$T/rows-libdwfl.txt" "$T/rows-fast.txt" >"$T/diff.txt" ||
        fail "stacks differ (< libdwfl, > fast): $(head -20 "$T/diff.txt")"
    echo "$n stacks under processCommand, the same both ways"
}
