# Issue 21 items 11 and 12: exports and the rough edges a user of heaptracectl hits. The real
# daemon on a private endpoint and the real ctl; terminal behaviour runs the ctl under
# script(1), which gives it a pty. Sourced by run.sh.
#
# The cases marked live attach to a real Debian program (sleep: a few allocations in all) and
# skip unless the daemon runs as root with a source serving "pid".

# ctl_tty COLUMNS CMD...: run the ctl on a terminal COLUMNS wide; its output on stdout (CR LF
# line ends turned into LF).
ctl_tty() {
    local cols=$1 cmd="" a
    shift
    for a in "$HT_CTL" "$@"; do cmd+=" $(printf '%q' "$a")"; done
    script -qec "stty cols $cols rows 50; $cmd" /dev/null </dev/null | tr -d '\r'
}

# Live cases: the daemon, and a target (sleep) whose pid is in CTL_TARGET.
ctl_live_setup() {
    [ "$(id -u)" -eq 0 ] || { echo "SKIP: live tracing needs root"; exit 77; }
    start_daemon
    ctl --json version | grep -q '"pid"' || { echo "SKIP: no source serves pid here"; exit 77; }
    sleep 60 </dev/null >/dev/null 2>&1 &
    CTL_TARGET=$!
    trap 'kill "$CTL_TARGET" 2>/dev/null; wait "$CTL_TARGET" 2>/dev/null; cleanup' EXIT
    # Until it sleeps (clock_nanosleep, x86-64 syscall 230), the child is still the
    # forked shell or the loader, and its private bytes change under a test's feet.
    local i
    for i in $(seq 100); do
        [ "$(cut -d' ' -f1 "/proc/$CTL_TARGET/syscall" 2>/dev/null)" = 230 ] && return 0
        sleep 0.05
    done
    fail "the target sleep($CTL_TARGET) never went to sleep"
}

# VmData + VmStk of a process in bytes (the daemon's definition of private bytes, procmem.h),
# read here from /proc as the independent truth.
ctl_vm_private() {
    awk '/^VmData:|^VmStk:/ { kb += $2 } END { print kb * 1024 }' "/proc/$1/status"
}

case_ctl_help_repeatable() {
    ctl help start >"$T/h" || fail "help start"
    grep -q "(repeatable) (repeatable)" "$T/h" && fail "help start says (repeatable) twice: $(grep repeatable "$T/h")"
    grep -q -- "--stop-when COND .*stop when COND holds (repeatable)$" "$T/h" || fail "--stop-when: $(grep stop-when "$T/h")"
    grep -q -- "--snapshot-when COND .*(repeatable)$" "$T/h" || fail "--snapshot-when"
    ctl help load | grep -q "(repeatable) (repeatable)" && fail "help load"
    return 0
}

# --stack-depth: the range the daemon and the ctl enforce (1-256) is what help and the README
# say; 127 is named only as the eBPF walk's own limit.
case_ctl_stack_depth_range() {
    ctl help start >"$T/h" || fail "help start"
    grep -q -- "--stack-depth N .*1-256" "$T/h" || fail "help start does not give the range: $(grep stack-depth "$T/h")"
    grep -q "at most 127)" "$T/h" && fail "help still says --stack-depth is at most 127"
    grep -q "eBPF walk .*127" "$T/h" || fail "help does not say where 127 comes from"
    grep -q -- '`--stack-depth` 1–256' "$HERE/../../README.md" || fail "README range"
    ctl start --source bpf --pid 1 --stack-depth 257 2>/dev/null; eq $? 2 "--stack-depth 257"
    ctl start --source bpf --pid 1 --stack-depth 0 2>/dev/null; eq $? 2 "--stack-depth 0"
}

# A usage error: the error and one hint, not the command's whole help.
case_ctl_usage_hint() {
    ctl start --bogus >"$T/o" 2>"$T/e"; eq $? 2 "unknown option"
    eq "$(wc -l <"$T/e")" 2 "lines for an unknown option"
    grep -qx "heaptracectl: unknown option --bogus" "$T/e" || fail "message: $(cat "$T/e")"
    grep -qx "Run 'heaptracectl help start' for its options." "$T/e" || fail "hint: $(cat "$T/e")"
    [ -s "$T/o" ] && fail "usage error wrote to stdout"
    ctl stacks --top 2>"$T/e"; eq $? 2 "missing value"
    eq "$(wc -l <"$T/e")" 2 "lines for a missing value"
    ctl stacks --top 0 2>"$T/e"; eq $? 2 "out of range"
    eq "$(wc -l <"$T/e")" 2 "lines for a range error"
    ctl frobnicate 2>"$T/e"; eq $? 2 "unknown command"
    eq "$(cat "$T/e")" "heaptracectl: unknown command frobnicate
Run 'heaptracectl help' for the commands." "unknown command"
    ctl --frob ping 2>"$T/e"; eq $? 2 "unknown global option"
    eq "$(wc -l <"$T/e")" 2 "lines for an unknown global option"
    ctl help frobnicate >"$T/o" 2>"$T/e"; eq $? 2 "help of an unknown command"
    eq "$(cat "$T/e")" "heaptracectl: no command named frobnicate
Run 'heaptracectl help' for the commands." "help of an unknown command"
    [ -s "$T/o" ] && fail "help of an unknown command printed the usage"
    # What the user typed reaches the terminal escaped.
    ctl stacks $'--\e[31mx' 2>&1 | head -1 | grep -qxF 'heaptracectl: unknown option --\x1b[31mx' || fail "escape"
    # Asking for help still gets all of it.
    [ "$(ctl help start | wc -l)" -gt 20 ] || fail "help start is short"
}

# version on a terminal (and piped) is text for people; --json stays the reply.
case_ctl_version_text() {
    start_daemon
    ctl_tty 100 version >"$T/v"
    head -c 1 "$T/v" | grep -q '{' && fail "version prints JSON on a terminal: $(head -3 "$T/v")"
    grep -q "^heaptraced .*, protocol 1, " "$T/v" || fail "version line: $(head -1 "$T/v")"
    grep -q "^  replay .*stream" "$T/v" || fail "sources: $(cat "$T/v")"
    ctl version | grep -q "^clients: 1 connected" || fail "piped version"
    ctl --json version | jget protocol | grep -qx 1 || fail "--json version"
    stop_clean
}

# Stacks whole when piped; cut to the terminal's width on a terminal, never at ~80 columns.
case_ctl_table_width() {
    start_daemon
    load_demo
    local full="MemoryTestApp.exe!InnerLoopOperation <- MemoryTestApp.exe!main <- kernel32.dll!BaseThreadInitThunk <- ntdll.dll!RtlUserThreadStart"
    ctl stacks --type AIFO >"$T/p" || fail stacks
    grep -qF -- "$full" "$T/p" || fail "piped stacks cut: $(grep AIFO "$T/p")"
    ctl top --count 1 | grep -qF -- "$full" || fail "piped top cut"
    ctl stacks --tree --type AIFO | grep -q "^      MemoryTestApp.exe!InnerLoopOperation  " || fail "piped tree"
    # On a terminal 100 columns wide every row fits in it, cut with "...".
    ctl_tty 100 stacks --type AIFO >"$T/t"
    grep "Impacting (AIFO)" "$T/t" >"$T/rows" || fail "no rows on the terminal: $(cat "$T/t")"
    awk 'length > 100 { exit 1 }' "$T/rows" || fail "rows wider than the terminal: $(cat "$T/rows")"
    grep -q "MemoryTestApp.exe!In\.\.\.$" "$T/rows" || fail "row not cut to the width: $(cat "$T/rows")"
    # A wide terminal shows the whole stack.
    ctl_tty 240 stacks --type AIFO | grep -qF -- "$full" || fail "240 columns cut the stack"
    stop_clean
}

# load of a binary stream says events, not "from 0 lines".
case_ctl_load_binary() {
    start_daemon
    "$HT_CONVERT" "$DEMO" "$T/demo.htevb" 2>/dev/null || fail "ht-convert"
    ctl load "$T/demo.htevb" --name bin >"$T/o" 2>/dev/null || fail "load .htevb"
    grep -q "0 lines" "$T/o" && fail "binary load: $(cat "$T/o")"
    local n
    n=$(grep -c '"ev":' "$DEMO") # every line of the text twin is one event
    grep -q "^session 1 \"bin\": $n events (" "$T/o" || fail "binary load summary: $(cat "$T/o") (expected $n events)"
    ctl status bin | grep -q "^  ingest       $n events$" || fail "status ingest: $(ctl status bin | grep ingest)"
    # A text stream keeps its lines.
    ctl load "$DEMO" --name text 2>/dev/null | grep -q "$n events from $n lines" || fail "text load"
    stop_clean
}

case_ctl_top_header() {
    start_daemon
    load_demo
    ctl top --count 1 >"$T/t" || fail top
    sed -n 2p "$T/t" | grep -q "^Process  *Impacting Type  *Count  *Impacting Size  *Size  *Stack" ||
        fail "top has no column header: $(head -3 "$T/t")"
    stop_clean
}

# Every counter of a real status reply's data quality is explained in `help status`.
case_ctl_help_quality() {
    start_daemon
    load_demo
    ctl help status >"$T/h" || fail "help status"
    local names=() k
    ctl --json status demo | "$HT_TOOL" get quality >"$T/q"
    mapfile -t names < <(grep -o '"[a-z_0-9]*":' "$T/q" | tr -d '":')
    [ "${#names[@]}" -ge 20 ] || fail "quality has only ${#names[@]} counters"
    # A live session's reply too, where this host can make one.
    if [ "$(id -u)" -eq 0 ] && ctl --json version | grep -q '"pid"'; then
        sleep 30 </dev/null >/dev/null 2>&1 &
        local sp=$!
        if ctl start --source bpf --pid "$sp" --name live >/dev/null 2>&1; then
            mapfile -t -O "${#names[@]}" names < <(ctl --json status live | "$HT_TOOL" get quality | grep -o '"[a-z_0-9]*":' | tr -d '":')
        fi
        kill "$sp"
        wait "$sp" 2>/dev/null
    fi
    for k in "${names[@]}"; do
        grep -q "^  $k  " "$T/h" || fail "help status does not explain quality.$k"
    done
    grep -A3 "^  time_backwards " "$T/h" | grep -q "latest time" || fail "time_backwards explanation"
    # status points there when a counter besides events is not zero (a malformed line here).
    { head -n 3 "$DEMO"; echo "not json"; } >"$T/bad.htev"
    ctl load "$T/bad.htev" --name bad >/dev/null 2>&1
    ctl status bad | grep -q "^  quality .*malformed_lines=1  ('heaptracectl help status' explains each)$" ||
        fail "status quality line: $(ctl status bad | grep quality)"
    ctl status demo | grep -q "^  quality      events=[0-9]*$" || fail "clean quality line: $(ctl status demo | grep quality)"
    stop_clean
}

# export --type: the value each type measures. The truth is counted in the stream itself:
# Initialize makes 50 blocks of 1,024 bytes and frees them (AIFI); InnerLoopOperation leaves
# 1,200 of 40 bytes (AIFO).
case_ctl_export_type_value() {
    start_daemon
    load_demo
    local aifi aifo
    aifi=$(grep '"ev":"alloc"' "$DEMO" | grep 'Initialize"' | grep -o '"size":[0-9]*' | cut -d: -f2 | awk '{ s += $1 } END { print s }')
    aifo=$(grep '"ev":"alloc"' "$DEMO" | grep 'InnerLoopOperation"' | grep -o '"size":[0-9]*' | cut -d: -f2 | awk '{ s += $1 } END { print s }')
    eq "$aifi" 51200 "AIFI truth from the stream"
    ctl export --format collapsed --type AIFI -o "$T/aifi.folded" || fail "export --type AIFI"
    eq "$(cat "$T/aifi.folded")" "ntdll.dll!RtlUserThreadStart;kernel32.dll!BaseThreadInitThunk;MemoryTestApp.exe!main;MemoryTestApp.exe!Initialize $aifi" "AIFI collapsed"
    ctl export --format collapsed --type AIFO | grep -q "MemoryTestApp.exe!InnerLoopOperation $aifo$" || fail "AIFO collapsed"
    ctl export --format collapsed --type AIFI,AIFO >"$T/both" || fail "two types"
    eq "$(wc -l <"$T/both")" 2 "AIFI,AIFO lines"
    # --top keeps the largest by that value (51,200 transient bytes beat 48,000 leaked ones;
    # sorted by outstanding the leak would come first).
    ctl export --format collapsed --type AIFI,AIFO --top 1 | grep -q "Initialize $aifi$" || fail "--top by the types' size"
    # AOFO at the end of a window from 29s: what is still live from before it.
    eq "$(ctl export --format collapsed --type AOFO --range 29s: | awk '{ print $NF }')" \
        "$(ctl --json stacks --type AOFO --range 29s: | jget total.outstanding)" "AOFO value"
    # --sort still chooses the value when given.
    ctl export --format collapsed --sort st | grep -q "Initialize $aifi$" || fail "--sort st"
    stop_clean
}

# An export with nothing in it says so, exits 1 and writes no file.
case_ctl_export_empty() {
    start_daemon
    load_demo
    ctl export --format collapsed --type AIFI --sort so -o "$T/e.folded" 2>"$T/e"
    eq $? 1 "collapsed with no nonzero value"
    [ -e "$T/e.folded" ] && fail "an empty export wrote a file"
    grep -q "nothing to export: none of the 1 group found has a nonzero outstanding" "$T/e" || fail "message: $(cat "$T/e")"
    ctl export --format collapsed --type AOFI -o "$T/e.folded" 2>"$T/e"; eq $? 1 "AOFI over the session"
    grep -q "nothing to export" "$T/e" || fail "AOFI message: $(cat "$T/e")"
    ctl export --format csv --type AOFO -o "$T/e.csv" 2>/dev/null; eq $? 1 "csv with only its header"
    [ -e "$T/e.csv" ] && fail "csv header-only file written"
    ctl export --format json --type AOFO -o "$T/e.json" 2>/dev/null; eq $? 1 "json with no rows"
    # Exports with something in them still succeed.
    ctl export --format csv -o "$T/ok.csv" || fail "csv"
    ctl export --format json --what timeline -o "$T/ok.json" || fail "timeline json"
    stop_clean
}

# live: private bytes are read at the start: status, top and the first timeline sample show
# them at once, not 0 B.
case_ctl_private_at_start() {
    ctl_live_setup
    local truth
    truth=$(ctl_vm_private "$CTL_TARGET")
    [ "$truth" -gt 0 ] || fail "VmData+VmStk of sleep read $truth"
    ctl start --source bpf --pid "$CTL_TARGET" --name p >/dev/null || fail start
    eq "$(ctl --json status p | jget private_bytes.now)" "$truth" "status private bytes right after start"
    eq "$(ctl --json timeline p | jget samples.0.private_bytes)" "$truth" "first timeline sample"
    ctl --json top p --count 1 | jget private_bytes | grep -qx "$truth" || fail "top private bytes"
    ctl stop p >/dev/null
    stop_clean
}

# live: a start that fails does not use up a session id.
case_ctl_failed_start_id() {
    ctl_live_setup
    ctl start --source bpf --pid 2 2>/dev/null && fail "start on a kernel thread succeeded"
    ctl start --source bpf --pid 2 --name k 2>/dev/null
    ctl --json start --source bpf --pid "$CTL_TARGET" --name ok >"$T/o" || fail "start"
    eq "$(jget session <"$T/o")" 1 "id after two failed starts"
    ctl --json load "$DEMO" --name demo 2>/dev/null | jget session | grep -qx 2 || fail "next id"
    ctl stop ok >/dev/null || fail stop
    # The start's reply for people: the session, its state and the process.
    ctl start --source bpf --pid "$CTL_TARGET" --name ok2 | grep -q "^session 3 \"ok2\": running (.*), pid $CTL_TARGET$" ||
        fail "start's reply is not text"
    ctl stop ok2 >/dev/null
    stop_clean
}

# live: EEXIST names the session that traces the process.
case_ctl_eexist_names_session() {
    ctl_live_setup
    ctl start --source bpf --pid "$CTL_TARGET" --name first >/dev/null || fail start
    ctl start --source bpf --pid "$CTL_TARGET" --name second 2>"$T/e"; eq $? 1 "second start"
    grep -q "EEXIST: process $CTL_TARGET is already traced by session 1 \"first\"" "$T/e" || fail "message: $(cat "$T/e")"
    ctl ls --json | jget sessions.# | grep -qx 1 || fail "the refused start left a session"
    # Once stopped, the process can be traced again.
    ctl stop first >/dev/null || fail stop
    ctl start --source bpf --pid "$CTL_TARGET" --name again >"$T/o" 2>&1 || fail "start after stop: $(cat "$T/o")"
    ctl stop again >/dev/null
    stop_clean
}
