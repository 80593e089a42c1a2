# Raw ETW record streams (etw-raw.h) through load and the ctl.

# Seed 000's MemoryTestApp as the ETW sessions would deliver it (heap and
# VirtualAlloc records, StackWalk records, another process mixed in) gives
# the figures of case_seed000; the decoder's counters are in status.
case_etw_raw_seed000() {
    start_daemon
    "$HT_ETW_SYNTH" "$DEMO" >"$T/raw.etwraw" || fail "ht-etw-synth"
    ctl load "$T/raw.etwraw" --name etw >"$T/load.out" 2>&1 || fail "load: $(cat "$T/load.out")"
    ctl --json commits --range 14s:16s >"$T/j"
    eq "$(jget total.impacting <"$T/j")" 10485760 "halfway total impacting"
    ctl --json commits --range 19s:29s --type AIFI >"$T/j"
    eq "$(jget total.count <"$T/j")" 4 "spikes count"
    eq "$(jget total.size <"$T/j")" 41943040 "spikes size"
    ctl --json stacks --type AIFO >"$T/j"
    eq "$(jget rows.0.count <"$T/j")" 1200 "leak count"
    eq "$(jget rows.0.size <"$T/j")" 48000 "leak bytes"
    eq "$(ctl --json commits | jget total.size)" 125829120 "whole-run commit size"
    ctl --json status >"$T/s"
    eq "$(jget source_status.format <"$T/s")" etw_raw "format"
    eq "$(jget source_status.etw.stacks_matched <"$T/s")" 1262 "stacks matched"
    eq "$(jget source_status.etw.events_no_stack <"$T/s")" 0 "events without a stack"
    eq "$(jget source_status.etw.other_process <"$T/s")" 1263 "other process records"
    eq "$(jget process.name <"$T/s")" MemoryTestApp.exe "process name"
    eq "$(jget source_status.etw.modules_loaded <"$T/s")" 2 "image rundown of the traced process"
    eq "$(jget source_status.etw.process_exits <"$T/s")" 1 "process end"
    # Frames named by the image rundown (no symbolizer in a replay): RVAs.
    ctl --json stacks --type AIFO >"$T/j"
    eq "$(jget rows.0.frames.0 <"$T/j")" "MemoryTestApp.exe!+0x1000" "frame in the image"
    grep -q "other.exe" "$T/j" && fail "the other process's image named a frame"
    grep -q '"exit_code":[[:space:]]*0' "$T/s" || fail "exit code from Process End: $(cat "$T/s")"
    stop_clean
}

# A raw stream with broken records: each is counted malformed with its
# reason, the good ones are kept.
case_etw_raw_malformed() {
    start_daemon
    "$HT_ETW_SYNTH" "$DEMO" | head -n 200 >"$T/raw.etwraw"
    {
        echo '{"provider":"222962ab-6180-4b88-a825-346b75f2a24a","opcode":33,"version":0,"flags":64,"pid":4242,"tid":1,"cpu":0,"ts":200000000,"payload":"00"}'
        echo '{"provider":"nope","opcode":33}'
        echo 'not json'
    } >>"$T/raw.etwraw"
    ctl load "$T/raw.etwraw" --name etw >"$T/load.out" 2>&1
    ctl --json status >"$T/s"
    eq "$(jget ingest.malformed <"$T/s")" 3 "malformed"
    eq "$(jget source_status.etw.malformed <"$T/s")" 1 "decoder malformed (short payload)"
    grep -q "shorter than its layout" "$T/s" || fail "no reason given: $(cat "$T/s")"
    stop_clean
}
