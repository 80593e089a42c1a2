# Issue 8 items 1, 18-21: triggers that cannot spin, argument ranges, strict input, escaped text,
# full session slots. Sourced by run.sh.

# A frozen daemon ignores SIGTERM: never leave one behind for cleanup to wait on.
trig_fail() {
    [ -n "$DPID" ] && kill -9 "$DPID" 2>/dev/null
    wait "$DPID" 2>/dev/null
    DPID=
    fail "$@"
}

# SIGTERM must end the daemon within 10 s (exit 0, every handle closed).
trig_term() {
    kill -TERM "$DPID"
    for _ in $(seq 200); do
        kill -0 "$DPID" 2>/dev/null || break
        sleep 0.05
    done
    kill -0 "$DPID" 2>/dev/null && trig_fail "SIGTERM ignored: the loop is frozen"
    wait "$DPID"
    local rc=$?
    DPID=
    eq "$rc" 0 "exit code after SIGTERM"
    grep -q "stopped cleanly" "$T/daemon.log" || fail "handles left open after SIGTERM"
}

ms_now() { echo $(($(date +%s%N) / 1000000)); }

case_trigger_saturated() {
    printf '{"t":1,"ev":"private_bytes","bytes":18446744073709551615}\n{"t":2,"ev":"private_bytes","bytes":18446744073709551615}\n' >"$T/pb.htev"
    start_daemon
    # A step of one byte would take a snapshot per event: refused, with the minimum.
    timeout 20 "$HT_CTL" load "$T/pb.htev" --name tiny --snapshot-when 'private-bytes>0' --every 1 2>"$T/e"
    rc=$?
    [ "$rc" -eq 124 ] && trig_fail "load with --every 1 did not finish"
    cat "$T/e"
    eq "$rc" 1 "exit code for a step under the minimum"
    grep -qF 'EBADARG: --every 1 is too small for private-bytes>0: at least 4.0 KiB' "$T/e" || fail "message"
    # The issue's reproduction with an allowed step: 2^64-1 from 1 in 1 MiB steps was 2^44 loop turns.
    timeout 20 "$HT_CTL" load "$T/pb.htev" --name pb --snapshot-when 'private-bytes>0' --every 1MiB >"$T/l" 2>&1 &
    local lpid=$!
    local t0=$(ms_now)
    timeout 5 "$HT_CTL" ping >/dev/null || trig_fail "ping not answered within 5 s"
    echo "ping answered after $(($(ms_now) - t0)) ms"
    wait "$lpid" || trig_fail "load: $(cat "$T/l")"
    ctl --json status pb >"$T/s" || fail status
    eq "$(jget triggers.0.fired <"$T/s")" 1 "snapshots: one, the value never grows again"
    eq "$(jget snapshots.0.t <"$T/s")" 1 "snapshot time"
    trig_term
}

# 'duration>1s' with a step of 1 (now 1 s: --every takes the metric's unit) on the 30 s demo:
# one snapshot per 1 s step that an event reaches, as the arithmetic says; the loop is not held.
case_trigger_duration_step() {
    start_daemon
    # Independent model: steps start at 1 s + 1 ns; an event at t fires the step it falls in.
    local want
    want=$(grep -o '"t":[0-9]*' "$DEMO" | cut -d: -f2 |
        awk '$1 >= 1000000001 { k[int(($1 - 1000000001) / 1000000000)] = 1 } END { print length(k) }')
    echo "expected snapshots: $want"
    [ "$want" -ge 20 ] || fail "model: $want"
    local t0=$(ms_now)
    timeout 60 "$HT_CTL" load "$DEMO" --name d --snapshot-when 'duration>1s' --every 1 >/dev/null 2>&1 ||
        trig_fail "load"
    local took=$(($(ms_now) - t0))
    echo "load took $took ms"
    [ "$took" -lt 5000 ] || fail "the load took $took ms"
    timeout 5 "$HT_CTL" ping >/dev/null || trig_fail "ping"
    ctl --json status d >"$T/s"
    eq "$(jget triggers.0.fired <"$T/s")" "$want" "snapshots"
    eq "$(jget triggers.0.every <"$T/s")" 1000000000 "step in ns"
    # A step in the wrong unit, and one under the minimum, are refused with what is expected.
    ctl load "$DEMO" --name e --snapshot-when 'duration>1s' --every 1MiB 2>&1 |
        grep -qF -- '--every 1MiB is not a duration, as duration>1s needs' || fail "wrong unit (duration)"
    ctl load "$DEMO" --name e --snapshot-when 'outstanding>1MiB' --every 10s 2>&1 |
        grep -qF -- '--every 10s is not a size, as outstanding>1MiB needs' || fail "wrong unit (size)"
    ctl load "$DEMO" --name e --snapshot-when 'duration>1s' --every 1ms 2>&1 |
        grep -qF -- '--every 1ms is too small for duration>1s: at least 1.000 s' || fail "minimum (duration)"
    ctl load "$DEMO" --name e --snapshot-when 'duration>0' --every 999us 2>&1 |
        grep -qF -- 'at least 0.001 s' || fail "floor (duration)"
    ctl ls --json | jget sessions.1 | grep -q missing || fail "a refused load left a session"
    trig_term
}

# Every numeric argument of the command table at 2^32, 2^53, -1 and 1e300: EBADARG from the
# daemon naming the argument, usage (exit 2) from the ctl.
case_numeric_ranges() {
    start_daemon
    "$HT_TOOL" uintargs >"$T/args"
    [ "$(wc -l <"$T/args")" -ge 9 ] || fail "uintargs: $(cat "$T/args")"
    local n=0 cmd arg v extra ctlextra
    # One connection for every request: request n asks for argument n's refusal.
    while read -r cmd arg; do
        case $cmd in
        export) extra=',"format":"json"' ;;
        run) extra=',"argv":["true"]' ;;
        *) extra='' ;;
        esac
        for v in 4294967296 9007199254740992 -1 1e300; do
            n=$((n + 1))
            printf '{"v":1,"id":%d,"cmd":"%s","args":{"%s":%s%s}}\n' "$n" "$cmd" "$arg" "$v" "$extra"
            echo "$n $cmd $arg $v" >>"$T/expect"
        done
    done <"$T/args" >"$T/reqs"
    "$HT_TOOL" raw "$HEAPTRACE_PIPE" <"$T/reqs" >"$T/r"
    eq "$(wc -l <"$T/r")" "$n" "replies"
    while read -r id cmd arg v; do
        grep -q "\"id\":$id,\"ok\":false,\"err\":\"EBADARG\",\"msg\":\"argument \\\\\"$arg\\\\\" must be" "$T/r" ||
            fail "daemon: $cmd $arg=$v: $(grep "\"id\":$id," "$T/r")"
        case $cmd in
        export) ctlextra='--format json' ;;
        *) ctlextra='' ;;
        esac
        if [ "$cmd" = run ]; then
            ctl run --"${arg//_/-}" "$v" -- true >/dev/null 2>"$T/e"
        else
            # shellcheck disable=SC2086
            ctl "$cmd" $ctlextra --"${arg//_/-}" "$v" >/dev/null 2>"$T/e"
        fi
        rc=$?
        [ "$rc" -eq 2 ] || fail "ctl $cmd --$arg $v: exit $rc: $(cat "$T/e")"
        # -1 and 1e300 are not numbers to the ctl; the others fail the declared range.
        case $v in -1 | 1e300) grep -qF "expected a non-negative number" "$T/e" ;;
        *) grep -qF "argument \"$arg\" must be an integer from" "$T/e" ;;
        esac || fail "ctl $cmd --$arg $v: $(cat "$T/e")"
    done <"$T/expect"
    echo "$n refusals checked"
    # 4294967301 ran top with 5 rows; the message says the real range.
    load_demo
    ctl top --top 4294967301 2>&1 | grep -qF 'argument "top" must be an integer from 1 to 1000' || fail "ctl top"
    printf '{"v":1,"id":2,"cmd":"top","args":{"top":4294967301}}\n{"v":1,"id":3,"cmd":"export","args":{"format":"json","snapshot":4294967297}}\n' |
        "$HT_TOOL" raw "$HEAPTRACE_PIPE" >"$T/r"
    grep -q '"id":2,"ok":false,"err":"EBADARG"' "$T/r" || fail "top 2^32+5: $(cat "$T/r")"
    grep -q '"id":3,"ok":false,"err":"EBADARG"' "$T/r" || fail "snapshot 2^32+1: $(cat "$T/r")"
    # In range still works, and --interval names its real limits.
    ctl top --top 1000 --count 1 --interval 10ms >/dev/null || fail "top at the maximum"
    ctl top --interval 9999999999d 2>&1 | grep -qF 'must be a duration from 10ms to 1d' || fail "interval message"
    ctl top --interval 5ms 2>&1 | grep -qF 'must be a duration from 10ms to 1d' || fail "interval minimum"
    stop_clean
}

case_chunk_headers() {
    start_daemon
    local i=0 h
    # A NUL inside, signs, spaces, leading zeros, hex, exponents, too many digits.
    for h in '+59' ' 59' '59\0zz' '-0' '059' '00' '0x3b' '1e2' '59 ' '99999999' '\t59'; do
        i=$((i + 1))
        printf "{\"v\":1,\"id\":1,\"cmd\":\"load\",\"args\":{\"name\":\"c$i\"}}\n$h\n" |
            "$HT_TOOL" raw "$HEAPTRACE_PIPE" >"$T/r"
        grep -q '"err":"EBADARG","msg":"load: bad chunk header' "$T/r" || fail "header '$h' accepted: $(cat "$T/r")"
        ctl --json status "c$i" | jget stop_reason | grep -qx "bad chunk framing from the client" ||
            fail "session c$i"
        ctl drop "c$i" >/dev/null || fail "drop c$i"
    done
    # Strict is not stricter than the protocol: these still load.
    printf '{"v":1,"id":1,"cmd":"load","args":{"name":"ok1"}}\n0\n' | "$HT_TOOL" raw "$HEAPTRACE_PIPE" >"$T/r"
    grep -q '"ok":true,"data":{"session":[0-9]*,"name":"ok1","state":"ended"' "$T/r" || fail "0: $(cat "$T/r")"
    printf '{"v":1,"id":1,"cmd":"load","args":{"name":"ok2"}}\n4\r\n{}\n\n0\n' | "$HT_TOOL" raw "$HEAPTRACE_PIPE" >"$T/r"
    grep -q '"name":"ok2","state":"ended"' "$T/r" || fail "CRLF: $(cat "$T/r")"
    stop_clean
}

case_request_garbage() {
    start_daemon
    printf '{"v":1,"id":5,"cmd":"ping"}garbage\n\0{"v":1,"id":6,"cmd":"ping"}\n{"v":1,"id":7,"cmd":"ping"}\0\n{"v":1,"id":8,"cmd":"ping"} {}\n{"v":1,"id":9,"cmd":"ping"}  \n' |
        "$HT_TOOL" raw "$HEAPTRACE_PIPE" >"$T/r"
    cat "$T/r"
    grep -q '"id":5,"ok":false,"err":"EBADJSON","msg":"request has bytes after its JSON object"' "$T/r" || fail "trailing garbage"
    eq "$(grep -c '"ok":false,"err":"EBADJSON","msg":"request contains a NUL byte"' "$T/r")" 2 "NUL bytes"
    grep -q '"id":8,"ok":false,"err":"EBADJSON"' "$T/r" || fail "two objects on a line"
    grep -q '"id":9,"ok":true' "$T/r" || fail "trailing blanks are fine"
    eq "$(grep -c '"ok":true' "$T/r")" 1 "answers"
    stop_clean
}

# Bytes that are not UTF-8 in a command or session name: every reply is UTF-8 JSON.
case_error_utf8() {
    start_daemon
    printf '{"v":1,"id":1,"cmd":"\xff\xfe\x1b[2J"}\n{"v":1,"id":2,"cmd":"stacks","args":{"session":"\xc0\xaf\x9b"}}\n{"v":1,"id":3,"cmd":"load","args":{"name":"\xff"}}\n{"v":1,"id":4,"cmd":"load","args":{"name":"12345"}}\n{"v":1,"id":5,"cmd":"load","args":{"name":"0123456789012345678901234567890123456789012345678901234567890123"}}\n' |
        "$HT_TOOL" raw "$HEAPTRACE_PIPE" >"$T/r"
    cat -v "$T/r"
    "$HT_TOOL" jsonlines <"$T/r" || fail "a reply is not UTF-8 JSON"
    eq "$(wc -l <"$T/r")" 5 "replies"
    grep -qF '"id":1,"ok":false,"err":"EUNKNOWNCMD","msg":"unknown command \"\\xff\\xfe\\x1b[2J\"' "$T/r" || fail "command name"
    grep -qF '"id":2,"ok":false,"err":"ENOSESSION","msg":"no session \"\\xc0\\xaf\\x9b\""' "$T/r" || fail "session"
    grep -qF '"id":3,"ok":false,"err":"EBADARG","msg":"session name must be 1-63 bytes of UTF-8 and not a number"' "$T/r" || fail "bad name"
    grep -q '"id":4,"ok":false,"err":"EBADARG"' "$T/r" || fail "numeric name"
    grep -q '"id":5,"ok":false,"err":"EBADARG"' "$T/r" || fail "long name"
    ctl ls --json | jget sessions.0 | grep -q missing || fail "a refused load left a session"
    stop_clean
}

# A newline or an escape in a session name does not forge a log line or reach a terminal.
case_log_forge() {
    start_daemon
    local evil=$'evil\n2026-01-01T00:00:00Z heaptraced info: forged line\e[31m'
    ctl load "$DEMO" --name "$evil" >/dev/null 2>&1 || fail "load"
    ctl stop "$evil" >/dev/null || fail "stop by the exact name"
    grep -c '^2026-01-01T00:00:00Z' "$T/daemon.log" | grep -qx 0 || fail "a forged log line"
    grep -q $'\e' "$T/daemon.log" && fail "a raw ESC in the log"
    grep -qF 'session 1 "evil\n2026-01-01T00:00:00Z heaptraced info: forged line\x1b[31m" created' "$T/daemon.log" ||
        fail "the escaped name is not in the log"
    ctl --json ls | jget sessions.0.name >"$T/name"
    eq "$(cat "$T/name")" "$evil" "exact name in --json"
    ctl ls >"$T/ls"
    cat "$T/ls"
    eq "$(wc -l <"$T/ls")" 2 "ls lines (header and one session)"
    grep -q $'\e' "$T/ls" && fail "a raw ESC from ls"
    grep -qF 'evil\n2026' "$T/ls" || fail "escaped name in ls"
    ctl drop "$evil" >/dev/null || fail "drop by the exact name"
    stop_clean
}

# Process and frame names from a stream: escaped in human output, exact in --json.
case_terminal_escapes() {
    cat >"$T/esc.htev" <<'EOF'
{"ev":"process","pid":77,"name":"\u001b]0;pwned\u0007app\r\nX"}
{"t":1000,"ev":"alloc","tid":1,"heap":"0x1","addr":"0x1000","size":64,"stack":["\u001b[31mred\u001b[0m","cr\rlf\nx","c1\u009b2J","del\u007f"]}
{"t":2000,"ev":"alloc","tid":1,"heap":"0x1","addr":"0x2000","size":32,"stack":["f1","f2","f3","f4","f5","f6","f7","f8","f9","f10","f11","f12","f13","f14","f15","f16","f17","f18","f19","f20"]}
EOF
    start_daemon
    ctl load "$T/esc.htev" --name esc >/dev/null || fail "load"
    local out
    for out in "ls" "stacks" "stacks --tree" "status esc" "stacks --by frame"; do
        # shellcheck disable=SC2086
        ctl $out >"$T/h" || fail "$out"
        cat "$T/h"
        LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$T/h" && fail "$out: a raw control byte"
        LC_ALL=C grep -q $'\xc2[\x80-\x9f]' "$T/h" && fail "$out: a raw C1 control"
    done
    ctl stacks >"$T/h"
    grep -qF '\x1b[31mred\x1b[0m <- cr\rlf\nx <- c1\u009b2J <- del\x7f' "$T/h" || fail "escaped frames"
    grep -qF '\x1b]0;pwned\x07app\r\nX' "$T/h" || fail "escaped process name"
    # Every row shows the process, cut between escapes to its 18 columns.
    eq "$(grep -c '^\\x1b\]0;pwned\.\.\. ' "$T/h")" 2 "rows with the process column"
    ctl stacks --tree | grep -q '^f20 ' || fail "tree order"
    ctl --json stacks >"$T/j"
    eq "$(jget rows.0.frames.0 <"$T/j")" $'\e[31mred\e[0m' "exact frame in --json"
    eq "$(jget rows.0.frames.1 <"$T/j")" $'cr\rlf\nx' "exact frame with CR/LF in --json"
    eq "$(jget process.name <"$T/j")" $'\e]0;pwned\aapp\r\nX' "exact process name in --json"
    stop_clean
}

# Every slot taken (a failed load keeps its slot): the error lists the sessions and says how to
# free one.
case_slots_full() {
    printf '{"max_sessions": 2}\n' >"$T/cfg.json"
    start_daemon --config "$T/cfg.json"
    load_demo
    "$HT_TOOL" halfload "$HEAPTRACE_PIPE" "$DEMO" >/dev/null
    for _ in $(seq 100); do
        ctl --json status half 2>/dev/null | jget state | grep -qx ended && break
        sleep 0.05
    done
    ctl load "$DEMO" --name third 2>"$T/e"
    eq $? 1 "exit code"
    cat "$T/e"
    grep -qF "EFULL: all 2 session slots are taken (max_sessions); free one with 'heaptracectl drop NAME'. Sessions: 2 \"half\" ended (client disconnected during load), 1 \"demo\" ended (end of stream)" "$T/e" ||
        fail "message"
    ctl drop half >/dev/null || fail drop
    ctl load "$DEMO" --name third >/dev/null 2>&1 || fail "load after the drop"
    stop_clean
}

# Names that are not UTF-8 in a stream (found by the adversary: they reached
# JSON replies as raw bytes): kept with U+FFFD, every reply valid UTF-8 JSON,
# counted once per distinct name in the data quality.
case_invalid_utf8_names() {
    start_daemon
    {
        head -n 1 "$DEMO"
        printf '{"t":1000,"ev":"alloc","tid":1,"heap":"0x1","addr":"0x10","size":8,"stack":["a\xff\xfeb","x\xc3"]}\n'
        printf '{"t":2000,"ev":"alloc","tid":1,"heap":"0x1","addr":"0x20","size":8,"stack":["a\xff\xfeb","x\xc3"]}\n'
    } >"$T/bad.htev"
    ctl load "$T/bad.htev" --name bad >"$T/o" 2>&1 || fail "load: $(cat "$T/o")"
    printf '{"v":1,"id":1,"cmd":"stacks","args":{"session":"bad"}}\n{"v":1,"id":2,"cmd":"stacks","args":{"session":"bad","by":"frame"}}\n' |
        "$HT_TOOL" raw "$HEAPTRACE_PIPE" >"$T/r"
    eq "$(wc -l <"$T/r")" 2 "replies"
    "$HT_TOOL" jsonlines <"$T/r" || fail "a reply is not UTF-8 JSON: $(cat -v "$T/r" | head -c 600)"
    grep -q "a$(printf '\xef\xbf\xbd\xef\xbf\xbd')b" "$T/r" || fail "the name is not kept with U+FFFD"
    eq "$(ctl --json status bad | jget quality.invalid_utf8_names)" 2 "distinct names repaired"
    stop_clean
}
