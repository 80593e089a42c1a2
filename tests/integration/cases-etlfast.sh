# heaptracectl load FILE.etl with stack keys whose definitions come late (issue 25's
# synthetic variant "stack keys with late definitions", through the ctl's one-pass reader:
# daemon/source/etl/etl-keys.c). The files: bench/etl/make-etl.py, the same allocations and
# stacks inline (0x1820) and by key (0x1826 references, 0x1823 definitions when a key leaves
# a cache of 256, 0x1824 at the end), over 4 processors, XPRESS buffers for the keys.
# Sourced by run.sh.

# The two sessions answer the same: events, live blocks, no stack lost, the top AIFO and
# AIFI stacks; load says every reference resolved and none dropped.
case_etlfast_keys_late() {
    start_daemon
    local mk=$HERE/../../bench/etl/make-etl.py
    python3 "$mk" "$T/i.etl" 3000 || fail "make-etl.py inline"
    python3 "$mk" "$T/k.etl" 3000 --keys --xpress || fail "make-etl.py keys"
    ctl load "$T/i.etl" --name inl >"$T/i.out" 2>&1 || fail "load inline: $(cat "$T/i.out")"
    ctl load "$T/k.etl" --name key >"$T/k.out" 2>&1 || fail "load keys: $(cat "$T/k.out")"
    grep -q "0 stack-key references unresolved, 0 dropped" "$T/k.out" ||
        fail "keys not all resolved: $(cat "$T/k.out")"
    local k t
    for k in quality.events quality.no_stack quality.lost heap.outstanding \
        heap.outstanding_count heap.peak memory.distinct_stacks; do
        eq "$(ctl --json status key.4242 | jget "$k")" "$(ctl --json status inl.4242 | jget "$k")" \
            "status $k"
    done
    eq "$(ctl --json status key.4242 | jget quality.no_stack)" 0 "every alloc has its stack"
    for t in AIFO AIFI; do
        ctl --json stacks key.4242 --type $t --top 50 | "$HT_TOOL" norm | grep -v '"session"' >"$T/k.$t"
        ctl --json stacks inl.4242 --type $t --top 50 | "$HT_TOOL" norm | grep -v '"session"' >"$T/i.$t"
        cmp -s "$T/k.$t" "$T/i.$t" || fail "$t top 50 differ: $(diff "$T/k.$t" "$T/i.$t" | head -5)"
    done
    stop_clean
}
