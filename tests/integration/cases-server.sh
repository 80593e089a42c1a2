# Clients, the loop and what a stop or a grouping keeps (issue 21 items 6, 7, 9).
# Sourced by run.sh.

SRV_FACTOR=${HT_TIME_FACTOR:-1}

# A client that writes its requests before it reads any reply: 20,000
# pings (800 KB) in one write. The daemon reads on while the replies it
# holds stay under half the client's output cap (16 MiB), so the write
# completes and every reply arrives, in order. It used to stop reading at
# 512 KiB of unread replies: the client blocked in its write, the daemon
# waited for it to read, forever.
case_pipelined_pings() {
    start_daemon
    "$HT_TOOL" pipeline "$HEAPTRACE_PIPE" 20000 $((20 * SRV_FACTOR)) >"$T/p" 2>&1 ||
        fail "pipelined pings: $(cat "$T/p")"
    cat "$T/p"
    grep -q "20000 replies in order" "$T/p" || fail "$(cat "$T/p")"
    ctl ping >/dev/null || fail "daemon stopped serving"
    eq "$(ctl --json version | jget clients.closed_stalled)" 0 "closed_stalled"
    stop_clean
}

# A client that writes forever and never reads: read until its replies
# reach half its cap (256 KiB here), then no longer read; it makes no
# progress either way, so after the idle timeout (1 s) it is closed and
# counted, with the reply bytes it never got. It used to hold its slot
# forever (the idle timeout spared clients with output waiting).
case_neverread_closed_stalled() {
    printf '{"client_idle_timeout": "1s", "client_output_cap": "256KiB"}\n' >"$T/cfg.json"
    start_daemon --config "$T/cfg.json"
    "$HT_TOOL" neverread "$HEAPTRACE_PIPE" $((10 * SRV_FACTOR)) >"$T/n" 2>&1 ||
        fail "a client that never reads kept its slot: $(cat "$T/n")"
    cat "$T/n"
    ctl --json version >"$T/v" || fail version
    eq "$(jget clients.closed_stalled <"$T/v")" 1 "closed_stalled"
    eq "$(jget clients.connected <"$T/v")" 1 "connected (the version request itself)"
    local unread
    unread=$(jget clients.stalled_unread_bytes <"$T/v")
    [ "$unread" -ge $((128 * 1024)) ] && [ "$unread" -le $((256 * 1024)) ] ||
        fail "stalled_unread_bytes $unread: expected half the cap at least, the cap at most"
    grep -q "closed as stalled" "$T/daemon.log" || fail "the close is not logged"
    # The requests read while its replies waited were never answered: counted.
    [ "$(jget clients.stalled_requests_unanswered <"$T/v")" -gt 0 ] ||
        fail "stalled_requests_unanswered: $(jget clients.stalled_requests_unanswered <"$T/v")"
    eq "$(jget clients.dropped_slow <"$T/v")" 0 "dropped_slow (the cap was never reached)"
    stop_clean
}

# --every: a value that jumps several steps at once takes one snapshot that
# names every step it crossed, and the trigger counts them all. It used to
# take one snapshot saying only the condition, the steps in between unsaid.
case_every_names_steps_crossed() {
    {
        echo '{"ev":"process","pid":5,"name":"jump"}'
        # One live block, so a snapshot's export has a row (an empty export exits 1).
        echo '{"t":1,"ev":"alloc","tid":1,"heap":"0x0","addr":"0x1000","size":64,"stack":["jump!main"]}'
        for b in 1048576 2097153 7340033 7864320 8388609; do
            printf '{"t":%d,"ev":"private_bytes","bytes":%d}\n' "$b" "$b"
        done
    } >"$T/jump.htev"
    start_daemon
    ctl load "$T/jump.htev" --name jump --snapshot-when 'private-bytes>2MiB' --every 1MiB \
        >/dev/null 2>&1 || fail "load"
    ctl --json status jump >"$T/s" || fail status
    eq "$(jget triggers.0.fired <"$T/s")" 3 "snapshots taken"
    eq "$(jget triggers.0.steps <"$T/s")" 7 "steps crossed"
    eq "$(jget snapshots.0.reason <"$T/s")" "snapshot-when private-bytes>2MiB (step 1)" "first"
    eq "$(jget snapshots.1.reason <"$T/s")" "snapshot-when private-bytes>2MiB (steps 2-6)" "the jump"
    eq "$(jget snapshots.2.reason <"$T/s")" "snapshot-when private-bytes>2MiB (step 7)" "last"
    ctl --json export jump --format json --snapshot 2 >"$T/x" || fail "export --snapshot 2"
    eq "$("$HT_TOOL" get step_first step_last <"$T/x" | tr '\n' ' ')" "2 6 " "the jump's steps in its data"
    stop_clean
}

# A stop trigger that trips while the target allocates as fast as it can:
# the probes detach, and every allocation already taken (in the kernel ring,
# the event ring, the batch being applied) is applied before the session
# ends: nothing is lost, undelivered or cut, and what the session holds is
# exactly the program's first K blocks (block i: 256 + (i mod 64) * 16
# bytes), K at least the trigger point. 40,000 blocks take less time than the
# loop's lag behind them, so most are in flight when it trips. It used to stop applying at the
# triggering event and count the rest as lost (undelivered + cut_at_stop).
stop_applies_taken_run() {
    local how=$1
    start_daemon
    bpf_need
    local app apid n=40000 st= i
    app="$(dirname "$HT_DAEMON")/../tests/apps/stopgrow"
    [ -x "$app" ] || fail "no stopgrow at $app"
    "$app" "$n" >"$T/app.out" </dev/null &
    apid=$!
    for _ in $(seq 200); do grep -q ready "$T/app.out" && break; sleep 0.05; done
    local trig=()
    [ "$how" = trigger ] && trig=(--stop-when 'outstanding>4MiB')
    # Frame-pointer stacks: a record is ~100 bytes, so the kernel ring holds the whole burst and
    # the prefix can be checked. The default on Debian (dwarf copies, ~8 KiB a record) fills it
    # in ~2,000 records and loses the rest, counted: that is the ring's size, not the stop's.
    ctl start --source bpf --pid "$apid" --name sg --stacks fp "${trig[@]}" >"$T/start.out" 2>&1 ||
        fail "start --pid: $(cat "$T/start.out")"
    kill -USR1 "$apid"
    if [ "$how" = command ]; then
        for _ in $(seq 400); do
            [ "$(ctl --json status sg | jget quality.events)" -gt 1000 ] && break
            sleep 0.01
        done
        ctl stop sg >/dev/null || fail "stop"
    fi
    for i in $(seq 400); do
        ctl --json status sg >"$T/s" || fail status
        st=$(jget state <"$T/s")
        [ "$st" != running ] && ! grep -q '"draining"' "$T/s" && break
        sleep 0.05
    done
    eq "$st" stopped "state after the stop"
    grep -q '"draining"' "$T/s" && fail "still draining after 20 s"
    [ "$how" = command ] || eq "$(jget stop_reason <"$T/s")" "stop-when outstanding>4MiB" "stop reason"
    local lost undelivered cut qlost
    lost=$(jget source_status.lost <"$T/s")
    undelivered=$(jget source_status.undelivered <"$T/s")
    cut=$(jget source_status.cut_at_stop <"$T/s")
    qlost=$(jget quality.lost <"$T/s")
    ctl --json stacks sg --require grow >"$T/j" || fail stacks
    local k bytes want
    k=$(jget total.count <"$T/j")
    bytes=$(jget total.size <"$T/j")
    want=$(awk -v k="$k" 'BEGIN { s = 0; for (i = 0; i < k; i++) s += 256 + (i % 64) * 16; printf "%d", s }')
    echo "applied $k blocks, $bytes bytes (the first $k blocks: $want); kernel drops $lost," \
        "undelivered $undelivered, cut_at_stop $cut, quality.lost $qlost"
    kill -USR1 "$apid"
    wait "$apid"
    eq "$lost" 0 "kernel drops (the test needs none to check a prefix)"
    eq "$undelivered" 0 "undelivered"
    eq "$cut" 0 "cut_at_stop"
    eq "$qlost" 0 "quality.lost"
    if [ "$how" = trigger ]; then
        # The trigger point: the first block that takes the sum past 4 MiB.
        local ktrip
        ktrip=$(awk 'BEGIN { s = 0; for (i = 0; s <= 4194304; i++) s += 256 + (i % 64) * 16; print i }')
        echo "the trigger point is block $ktrip; $((k - ktrip)) blocks taken after it were applied too"
        [ "$k" -ge "$ktrip" ] || fail "$k blocks applied: not up to the trigger point ($ktrip)"
    fi
    eq "$bytes" "$want" "bytes of the $k blocks applied against the program's first $k"
    stop_clean
}
case_stop_when_applies_taken() { stop_applies_taken_run trigger; }
# The same with `heaptracectl stop` once 1,000 events were applied.
case_stop_command_applies_taken() { stop_applies_taken_run command; }

# --by frame groups by function (module + symbol), as WPA does: frames that
# name one function at different return addresses ("app!parse+0x10",
# "app!parse+0x24") are one row named app!parse; frames without a symbol
# stay apart by address. It used to make a row per return address: one
# function showed as several rows of the same name.
case_by_frame_groups_functions() {
    {
        echo '{"ev":"process","pid":3,"name":"app"}'
        local i=0 f
        for f in 'app!parse+0x10' 'app!parse+0x24' 'app!parse+0x24' 'app!parse' \
            'libxml2.so.2!xmlDictCreate+0x5' 'libxml2.so.2!xmlDictCreate+0x9' \
            'app!+0x100' 'app!+0x200' '0x7f0000001000' '0x7f0000002000' 'app!parse_more+0x3'; do
            i=$((i + 1))
            printf '{"t":%d,"ev":"alloc","tid":1,"heap":"0x0","addr":"0x%x","size":%d,"stack":["%s","app!main"]}\n' \
                "$i" $((4096 * i)) $((100 * i)) "$f"
        done
    } >"$T/fn.htev"
    start_daemon
    ctl load "$T/fn.htev" --name fn >/dev/null 2>&1 || fail load
    ctl --json stacks fn --by frame --no-default-cull --sort stc >"$T/j" || fail stacks
    local rows
    rows=$(for i in $(seq 0 $(($(jget rows.# <"$T/j") - 1))); do
        "$HT_TOOL" get "rows.$i.frame" "rows.$i.count" "rows.$i.size" <"$T/j" | tr '\n' ' '
        echo
    done | sort)
    echo "$rows"
    eq "$rows" "0x7f0000001000 1 900 
0x7f0000002000 1 1000 
app!+0x100 1 700 
app!+0x200 1 800 
app!parse 4 1000 
app!parse_more 1 1100 
libxml2.so.2!xmlDictCreate 2 1100 " "rows by function"
    # By stack, the stacks stay as they are (10: two are the same).
    eq "$(ctl --json stacks fn --by stack --no-default-cull | jget rows.#)" 10 "rows by stack"
    stop_clean
}

# check_parser_build_rows NAME: fnsites' Parser::build is one row of --by frame with every block
# and byte the program counted (its ground truth line in $T/NAME.out).
check_parser_build_rows() {
    local truth n i f rows=0 count=0 bytes=0
    truth=$(live_truth "$1")
    ctl --json stacks "$1" --type AIFO --by frame >"$T/j" || fail "stacks --by frame"
    n=$(jget rows.# <"$T/j")
    for ((i = 0; i < n; i++)); do
        f=$(jget "rows.$i.frame" <"$T/j")
        echo "row $i: $f $(jget "rows.$i.count" <"$T/j") blocks"
        case "$f" in
        *'!Parser::build'*)
            rows=$((rows + 1))
            count=$((count + $(jget "rows.$i.count" <"$T/j")))
            bytes=$((bytes + $(jget "rows.$i.size" <"$T/j"))) ;;
        esac
    done
    eq "$rows" 1 "rows for Parser::build"
    eq "$count" "$(echo "$truth" | jget count)" "Parser::build blocks"
    eq "$bytes" "$(echo "$truth" | jget bytes)" "Parser::build bytes"
}

# Live, a C++ function that calls new at four places: --by frame shows it as
# one row (its four return addresses are one function), with every block.
# It used to show four rows named fnsites!Parser::build.
case_live_by_frame_cxx_function() {
    live_setup
    live_app fs fnsites 200
    local pid=$APID
    live_attach fs "$pid"
    live_go "$pid"
    live_wait_line fs '"done":true'
    live_settle fs
    check_parser_build_rows fs
    live_go "$pid"
    wait "$pid" || fail "fnsites exit code"
    stop_clean
}
