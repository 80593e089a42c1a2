# heaptracectl load FILE.etl (issue 25): a Windows trace converted on the ctl's side
# (ctl/load-etl.c) into the .htevb stream ht-convert writes for the same file.
# Sourced by run.sh.

ETL_SEED=$HERE/../fuzz/corpus/etl/heap-two-processes

# The file (tests/fuzz/make-etl-seeds.py heap_two_processes): processes 8 and 99, a WOW64
# alloc, a compressed buffer, EventsLost 2. ht-convert takes the first process with a heap event
# (8) into session etl.8 (one session per process, cases-etlsess.sh) the same as
# ht-convert's .htevb of the same file gives; the header's lost events are in its data quality.
case_etl_load_same_as_convert() {
    start_daemon
    cp "$ETL_SEED" "$T/h.etl"
    "$HT_CONVERT" --plain "$T/h.etl" "$T/h.htevb" 2>"$T/conv.err" || fail "ht-convert: $(cat "$T/conv.err")"
    ctl load "$T/h.etl" --name etl >"$T/load.out" 2>&1 || fail "load .etl: $(cat "$T/load.out")"
    grep -q "process 8" "$T/load.out" || fail "load did not take process 8: $(cat "$T/load.out")"
    ctl load "$T/h.htevb" --name bin >/dev/null 2>&1 || fail "load .htevb"
    eq "$(ctl --json status etl.8 | jget process.pid)" 8 "the process followed"
    eq "$(ctl --json status etl.8 | jget quality.lost)" 2 "the header's EventsLost"
    eq "$(ctl --json status etl.8 | jget heap.outstanding_count)" 2 "blocks live (one WOW64)"
    local k
    for k in process.pid quality.events quality.lost quality.no_stack heap.outstanding \
        heap.outstanding_count heap.peak commits.committed; do
        eq "$(ctl --json status etl.8 | jget "$k")" "$(ctl --json status bin | jget "$k")" "status $k"
    done
    ctl --json stacks etl.8 --top 10 | "$HT_TOOL" norm >"$T/s1" || fail "stacks etl"
    ctl --json stacks bin --top 10 | "$HT_TOOL" norm >"$T/s2" || fail "stacks bin"
    sed -i "/\"session\"/d" "$T/s1" "$T/s2"
    cmp -s "$T/s1" "$T/s2" || fail "stacks differ: $(diff "$T/s1" "$T/s2" | head -5)"
    stop_clean
}
