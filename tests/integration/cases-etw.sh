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

# record --raw of a raw ETW stream while it loads: the header, then the
# records exactly as they came; the recording replays to the same figures,
# and a session whose source has no raw records refuses --raw.
case_etw_record_raw() {
    start_daemon
    "$HT_ETW_SYNTH" "$DEMO" >"$T/raw.etwraw" || fail "ht-etw-synth"
    mkfifo "$T/in"
    ctl load "$T/in" --name etw >"$T/load.out" 2>&1 &
    local lp=$!
    exec 3>"$T/in"
    head -n 1 "$T/raw.etwraw" >&3
    local fmt=""
    for _ in $(seq 100); do
        fmt=$(ctl --json status etw 2>/dev/null | jget source_status.format 2>/dev/null)
        [ "$fmt" = etw_raw ] && break
        sleep 0.05
    done
    eq "$fmt" etw_raw "the stream is known as raw ETW"
    ctl record etw --raw -o "$T/rec.etwraw" 2>"$T/rec.err" 3>&- &
    local rp=$!
    # Subscribed once the daemon logged the request (the file itself is
    # written under a temporary name until the recording ends).
    for _ in $(seq 100); do
        grep -q ": record (" "$T/daemon.log" && break
        sleep 0.05
    done
    grep -q ": record (" "$T/daemon.log" || fail "record --raw not taken: $(cat "$T/rec.err")"
    tail -n +2 "$T/raw.etwraw" >&3
    exec 3>&-
    wait "$lp" || fail "load: $(cat "$T/load.out")"
    wait "$rp" || fail "record --raw: $(cat "$T/rec.err")"
    grep -q "recorded $(($(wc -l <"$T/raw.etwraw") - 1)) raw records" "$T/rec.err" ||
        fail "record's count: $(cat "$T/rec.err")"
    cmp <(tail -n +2 "$T/raw.etwraw") <(tail -n +2 "$T/rec.etwraw") ||
        fail "the records are not the stream's"
    head -n 1 "$T/rec.etwraw" >"$T/h"
    grep -q '"qpc_freq":10000000' "$T/h" && grep -q '"start_qpc":123456789' "$T/h" &&
        grep -q '"pid":4242' "$T/h" && grep -q '"name":"MemoryTestApp.exe"' "$T/h" ||
        fail "header: $(cat "$T/h")"
    ctl load "$T/rec.etwraw" --name again >/dev/null 2>&1 || fail "the recording does not load"
    ctl --json stacks again --type AIFO >"$T/j"
    eq "$(jget rows.0.count <"$T/j")" 1200 "leak count from the recording"
    eq "$(jget rows.0.frames.0 <"$T/j")" "MemoryTestApp.exe!+0x1000" "frame from the recording"
    # A .htev session has no raw records; .htevb is refused by the ctl.
    mkfifo "$T/in2"
    ctl load "$T/in2" --name text >/dev/null 2>&1 &
    lp=$!
    exec 3>"$T/in2"
    head -n 3 "$DEMO" >&3
    for _ in $(seq 100); do
        [ "$(ctl --json status text 2>/dev/null | jget ingest.lines 2>/dev/null)" = 3 ] && break
        sleep 0.05
    done
    ctl record text --raw -o "$T/no.etwraw" >"$T/o" 2>&1 3>&- && fail "record --raw of a .htev stream"
    grep -q "not a raw ETW stream" "$T/o" || fail "refusal not told: $(cat "$T/o")"
    ctl record text --raw -o "$T/x.htevb" >"$T/o" 2>&1 3>&- && fail "record --raw to .htevb"
    grep -q "not .htevb" "$T/o" || fail ".htevb refusal: $(cat "$T/o")"
    exec 3>&-
    wait "$lp"
    # A gap line replays as lost records.
    { head -n 1 "$T/raw.etwraw"; echo '{"etw_raw_lost":7}'; } >"$T/gap.etwraw"
    ctl load "$T/gap.etwraw" --name gap >/dev/null 2>&1 || fail "gap stream"
    ctl --json status gap >"$T/s"
    eq "$(jget source_status.etw.lost_records <"$T/s")" 7 "lost records"
    eq "$(jget quality.lost <"$T/s")" 7 "lost in the data quality"
    stop_clean
}

# Several raw recorders of one stream, the second subscribing while the
# first records: each recording opens with the stream's header (else it is
# no raw ETW stream and does not load), then the records from its start.
case_etw_record_raw_many() {
    start_daemon
    "$HT_ETW_SYNTH" "$DEMO" >"$T/raw.etwraw" || fail "ht-etw-synth"
    local total=$(($(wc -l <"$T/raw.etwraw") - 1))
    mkfifo "$T/in"
    ctl load "$T/in" --name etw >"$T/load.out" 2>&1 &
    local lp=$!
    exec 3>"$T/in"
    head -n 1 "$T/raw.etwraw" >&3
    for _ in $(seq 100); do
        [ "$(ctl --json status etw 2>/dev/null | jget source_status.format 2>/dev/null)" = etw_raw ] && break
        sleep 0.05
    done
    ctl record etw --raw -o "$T/r1.etwraw" 2>"$T/r1.err" 3>&- &
    local r1=$!
    for _ in $(seq 100); do
        [ "$(grep -c ": record (" "$T/daemon.log")" = 1 ] && break
        sleep 0.05
    done
    sed -n 2,101p "$T/raw.etwraw" >&3
    # The first 100 records are in before the second recorder comes.
    for _ in $(seq 100); do
        [ "$(ctl --json status etw 2>/dev/null | jget ingest.lines 2>/dev/null)" = 101 ] && break
        sleep 0.05
    done
    ctl record etw --raw -o "$T/r2.etwraw" 2>"$T/r2.err" 3>&- &
    local r2=$!
    for _ in $(seq 100); do
        [ "$(grep -c ": record (" "$T/daemon.log")" = 2 ] && break
        sleep 0.05
    done
    tail -n +102 "$T/raw.etwraw" >&3
    exec 3>&-
    wait "$lp" || fail "load: $(cat "$T/load.out")"
    wait "$r1" || fail "record 1: $(cat "$T/r1.err")"
    wait "$r2" || fail "record 2: $(cat "$T/r2.err")"
    cmp <(tail -n +2 "$T/raw.etwraw") <(tail -n +2 "$T/r1.etwraw") || fail "recording 1 differs"
    cmp <(head -n 1 "$T/raw.etwraw") <(head -n 1 "$T/r2.etwraw") ||
        fail "recording 2 has no header: $(head -c 200 "$T/r2.etwraw")"
    cmp <(tail -n +2 "$T/r2.etwraw") <(tail -n +$((2 + 100)) "$T/raw.etwraw") ||
        fail "recording 2 is not the records from its start"
    grep -q "recorded $((total - 100)) raw records" "$T/r2.err" || fail "count 2: $(cat "$T/r2.err")"
    ctl load "$T/r2.etwraw" --name again >"$T/o" 2>&1 || fail "recording 2 does not load: $(cat "$T/o")"
    eq "$(ctl --json status again | jget ingest.malformed)" 0 "recording 2 malformed lines"
    eq "$(ctl --json status again | jget source_status.format)" etw_raw "recording 2's format"
    stop_clean
}

# Windows logs an Image Unload for each module of a process as it exits:
# a trace recorded to the end has every image unloaded before the Process
# End. The replay still names the frames recorded while they were loaded
# (the names are looked up when a query asks, after the unloads), and a
# later image loaded over an unloaded one takes its range.
case_etw_raw_unloaded_names() {
    start_daemon
    "$HT_ETW_SYNTH" "$DEMO" >"$T/raw.etwraw" || fail "ht-etw-synth"
    local img=2cb15d1d-5fc1-11d2-abe1-00a0c911f518
    grep "\"provider\":\"$img\"" "$T/raw.etwraw" | grep -q '"pid":4242' || fail "no image rundown"
    {
        sed '$d' "$T/raw.etwraw"
        # The traced process's images, unloaded (opcode 2) before its End.
        grep "\"provider\":\"$img\"" "$T/raw.etwraw" | grep '"pid":4242' |
            sed -e 's/"opcode":[0-9]*/"opcode":2/'
        tail -n 1 "$T/raw.etwraw"
    } >"$T/unl.etwraw"
    ctl load "$T/unl.etwraw" --name unl >"$T/o" 2>&1 || fail "load: $(cat "$T/o")"
    ctl --json status unl >"$T/s"
    eq "$(jget source_status.etw.modules_unloaded <"$T/s")" 2 "images unloaded"
    eq "$(jget modules.count <"$T/s")" 0 "modules loaded at the end"
    ctl --json stacks unl --type AIFO >"$T/j"
    eq "$(jget rows.0.frames.0 <"$T/j")" "MemoryTestApp.exe!+0x1000" "frame of an unloaded image"
    # .htev: old.so unloaded and another module loaded elsewhere: old.so's
    # frames keep its name; gone.so unloaded and new.so loaded over it: the
    # range is new.so's.
    {
        echo '{"ev":"process","pid":1,"name":"x"}'
        echo '{"t":1,"ev":"module_load","base":"0x10000","size":32768,"bias":"0x10000","path":"/lib/old.so"}'
        echo '{"t":1,"ev":"module_load","base":"0x50000","size":32768,"bias":"0x50000","path":"/lib/gone.so"}'
        echo '{"t":2,"ev":"alloc","tid":1,"heap":"0x1","addr":"0x100","size":10,"stack":["0x10010","0x54000"]}'
        echo '{"t":3,"ev":"module_unload","base":"0x10000"}'
        echo '{"t":3,"ev":"module_unload","base":"0x50000"}'
        echo '{"t":4,"ev":"module_load","base":"0x30000","size":4096,"bias":"0x30000","path":"/lib/other.so"}'
        echo '{"t":4,"ev":"module_load","base":"0x52000","size":65536,"bias":"0x52000","path":"/lib/new.so"}'
        echo '{"t":5,"ev":"alloc","tid":1,"heap":"0x1","addr":"0x200","size":10,"stack":["0x54000"]}'
    } >"$T/m.htev"
    ctl load "$T/m.htev" --name m >"$T/o" 2>&1 || fail "load: $(cat "$T/o")"
    ctl --json stacks m --by frame >"$T/j"
    grep -q '"old.so!+0x10"' "$T/j" || fail "unloaded module not named: $(cat "$T/j")"
    grep -q '"new.so!+0x2000"' "$T/j" || fail "the later module does not hold its range: $(cat "$T/j")"
    grep -q 'gone.so' "$T/j" && fail "a module loaded over named by the unloaded one: $(cat "$T/j")"
    stop_clean
}

# A raw stream that is itself a recording with a gap ({"etw_raw_lost":N}):
# recorded again with --raw, the gap line is in the new recording where it
# was (the records as received), so the copy replays with the same loss.
case_etw_record_raw_gap() {
    start_daemon
    "$HT_ETW_SYNTH" "$DEMO" >"$T/raw.etwraw" || fail "ht-etw-synth"
    { sed -n 1,200p "$T/raw.etwraw"; echo '{"etw_raw_lost":9}'; tail -n +201 "$T/raw.etwraw"; } >"$T/gap.etwraw"
    mkfifo "$T/in"
    ctl load "$T/in" --name etw >"$T/load.out" 2>&1 &
    local lp=$!
    exec 3>"$T/in"
    head -n 1 "$T/gap.etwraw" >&3
    for _ in $(seq 100); do
        [ "$(ctl --json status etw 2>/dev/null | jget source_status.format 2>/dev/null)" = etw_raw ] && break
        sleep 0.05
    done
    ctl record etw --raw -o "$T/rec.etwraw" 2>"$T/rec.err" 3>&- &
    local rp=$!
    for _ in $(seq 100); do
        grep -q ": record (" "$T/daemon.log" && break
        sleep 0.05
    done
    tail -n +2 "$T/gap.etwraw" >&3
    exec 3>&-
    wait "$lp" || fail "load: $(cat "$T/load.out")"
    wait "$rp" || fail "record --raw: $(cat "$T/rec.err")"
    eq "$(ctl --json status etw | jget source_status.etw.lost_records)" 9 "the stream's gap"
    cmp "$T/gap.etwraw" "$T/rec.etwraw" || fail "the recording is not the stream: $(diff "$T/gap.etwraw" "$T/rec.etwraw" | head -5)"
    ctl load "$T/rec.etwraw" --name again >/dev/null 2>&1 || fail "the recording does not load"
    eq "$(ctl --json status again | jget source_status.etw.lost_records)" 9 "the recording's gap"
    stop_clean
}

# A raw recorder that does not read: its lines become counted gaps
# ({"etw_raw_lost":N} where they were), the load is not held up, every
# record is either in the recording or in a gap, the ctl says how many
# records (not "events") and exits 1, and the recording replays with the
# gaps as lost records.
case_etw_record_raw_slow() {
    printf '{"client_output_cap": "256KiB", "recorder_output_cap": "16KiB"}\n' >"$T/cfg.json"
    start_daemon --config "$T/cfg.json"
    "$HT_ETW_SYNTH" "$DEMO" >"$T/one.etwraw" || fail "ht-etw-synth"
    # 20 times the records (about 24 MB): more than the kernel's socket and
    # pipe buffers and the 8 MiB raw tap can hold, so the recorder that
    # does not read falls behind whatever the timing (1 MB fitted in them in
    # some runs: no gap, and the test failed).
    head -n 1 "$T/one.etwraw" >"$T/raw.etwraw"
    for _ in $(seq 20); do tail -n +2 "$T/one.etwraw"; done >>"$T/raw.etwraw"
    local total=$(($(wc -l <"$T/raw.etwraw") - 1))
    mkfifo "$T/in"
    ctl load "$T/in" --name etw >"$T/load.out" 2>&1 &
    local lp=$!
    exec 3>"$T/in"
    head -n 1 "$T/raw.etwraw" >&3
    for _ in $(seq 100); do
        [ "$(ctl --json status etw 2>/dev/null | jget source_status.format 2>/dev/null)" = etw_raw ] && break
        sleep 0.05
    done
    { ( ctl record etw --raw -o - 2>"$T/rec.err"; echo $? >"$T/rec.rc" ) |
        { for _ in $(seq 1200); do [ -e "$T/go" ] && break; sleep 0.05; done; cat >"$T/rec.etwraw"; }; } 3>&- &
    local rp=$!
    for _ in $(seq 200); do grep -q ": record (" "$T/daemon.log" && break; sleep 0.05; done
    tail -n +2 "$T/raw.etwraw" >&3
    exec 3>&-
    wait "$lp" || fail "load: $(cat "$T/load.out")"
    [ "$(ctl --json status etw | jget recorder_lost)" -gt 0 ] ||
        fail "the recorder did not fall behind: $(cat "$T/rec.err")"
    touch "$T/go"
    wait "$rp"
    eq "$(cat "$T/rec.rc")" 1 "ctl exit code with gaps"
    local lost recorded
    lost=$(grep '^{"etw_raw_lost":' "$T/rec.etwraw" | sed 's/.*:\([0-9]*\)}/\1/' | awk '{s += $1} END {print s + 0}')
    recorded=$(tail -n +2 "$T/rec.etwraw" | grep -vc '^{"etw_raw_lost":')
    [ "$lost" -gt 0 ] || fail "no gap line"
    eq "$((lost + recorded))" "$total" "records recorded + lost"
    eq "$(ctl --json status etw | jget recorder_lost)" "$lost" "recorder_lost"
    grep -q "the recording has gaps: $lost records lost" "$T/rec.err" || fail "gap not told: $(cat "$T/rec.err")"
    ctl load "$T/rec.etwraw" --name again >"$T/o" 2>&1 || fail "the recording does not load: $(cat "$T/o")"
    eq "$(ctl --json status again | jget source_status.etw.lost_records)" "$lost" "gaps replayed"
    eq "$(ctl --json status again | jget ingest.malformed)" 0 "malformed lines in the recording"
    stop_clean
}

# A second Process End of the traced PID (a new process that reused it,
# Windows reuses PIDs): the first exit and its status hold, the repeat is
# counted under its own name.
case_etw_raw_end_twice() {
    start_daemon
    "$HT_ETW_SYNTH" "$DEMO" >"$T/raw.etwraw" || fail "ht-etw-synth"
    local end
    end=$(tail -n 1 "$T/raw.etwraw")
    case "$end" in *'"opcode":2,'*'"pid":4242,'*) ;; *) fail "the last record is not the Process End: $end" ;; esac
    {
        cat "$T/raw.etwraw"
        # ExitStatus (payload offset 20) 5, 10 s later (ts 4xxxxxxxx -> 5xxxxxxxx).
        echo "$end" | sed -E -e 's/("payload":"[0-9a-f]{40})[0-9a-f]{8}/\105000000/' -e 's/"ts":4/"ts":5/'
    } >"$T/end2.etwraw"
    grep -cE '"payload":"[0-9a-f]{40}05000000' "$T/end2.etwraw" | grep -qx 1 || fail "the second End was not made"
    ctl load "$T/end2.etwraw" --name e2 >"$T/o" 2>&1 || fail "load: $(cat "$T/o")"
    ctl --json status e2 >"$T/s"
    grep -q '"exit_code":[[:space:]]*0' "$T/s" || fail "the first exit's status does not hold: $(grep -o '"exit_code":[^,]*' "$T/s")"
    eq "$(jget source_status.etw.process_exits <"$T/s")" 1 "process exits"
    eq "$(jget source_status.etw.process_ends_repeated <"$T/s")" 1 "repeated Ends counted"
    stop_clean
}
