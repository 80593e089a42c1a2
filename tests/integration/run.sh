#!/usr/bin/env bash
# Integration tests: the real heaptraced on a private endpoint, the real heaptracectl.
# usage: run.sh CASE   (CTest runs one case per test; HT_UPDATE_GOLDEN=1 rewrites expected/)
set -u
: "${HT_DAEMON:?}" "${HT_CTL:?}" "${HT_TOOL:?}" "${HT_DATA:?}" "${HT_CONVERT:?}"
HERE=$(cd "$(dirname "$0")" && pwd)
EXPECTED=$HERE/expected
DEMO=$HT_DATA/memorytestapp.htev
T=$(mktemp -d)
export HEAPTRACE_PIPE=$T/ht.sock
DPID=

fail() {
    echo "FAIL: $*"
    echo "--- daemon log (tail)"
    tail -n 25 "$T/daemon.log" 2>/dev/null
    exit 1
}

start_daemon() {
    "$HT_DAEMON" --foreground --log-level debug "$@" >>"$T/daemon.log" 2>&1 &
    DPID=$!
    for _ in $(seq 100); do
        "$HT_CTL" ping >/dev/null 2>&1 && return 0
        kill -0 "$DPID" 2>/dev/null || fail "daemon exited at start"
        sleep 0.05
    done
    fail "daemon did not answer"
}

cleanup() {
    if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
        "$HT_CTL" shutdown >/dev/null 2>&1 || kill "$DPID"
        wait "$DPID" 2>/dev/null
    fi
    rm -rf "$T"
}
trap cleanup EXIT

# The daemon must stop cleanly: exit 0 and uv_loop_close() == 0 (it logs that).
stop_clean() {
    "$HT_CTL" shutdown >/dev/null || fail "shutdown refused"
    wait "$DPID"
    local rc=$?
    DPID=
    [ "$rc" -eq 0 ] || fail "daemon exit code $rc"
    grep -q "stopped cleanly" "$T/daemon.log" || fail "daemon did not close every handle"
}

eq() { [ "$1" = "$2" ] || fail "$3: got '$1', expected '$2'"; }
ctl() { "$HT_CTL" "$@"; }
jget() { "$HT_TOOL" get "$1"; }

# Golden JSON: reply data with wall-clock fields removed.
golden() {
    local name=$1
    shift
    ctl --json "$@" >"$T/out.json" || fail "$name: heaptracectl $* failed"
    "$HT_TOOL" norm <"$T/out.json" >"$T/$name.json" || fail "$name: bad JSON"
    if [ "${HT_UPDATE_GOLDEN:-0}" = 1 ]; then
        cp "$T/$name.json" "$EXPECTED/$name.json"
    fi
    diff -u "$EXPECTED/$name.json" "$T/$name.json" || fail "$name differs from expected/$name.json"
}

load_demo() { ctl load "$DEMO" --name demo "$@" >/dev/null 2>&1 || fail "load failed"; }

case_every_command() {
    start_daemon
    ctl ping | grep -q answers || fail ping
    ctl --json version | jget protocol | grep -qx 1 || fail version
    load_demo
    golden ls ls
    golden status status demo
    golden stacks_by_frame stacks --by frame
    golden stacks_aifo_tree stacks --type AIFO --top 5
    golden commits_halfway commits --range 14s:16s --sort impact
    golden commits_list commits --range 19s:29s --type AIFI --list
    golden timeline timeline --step 5s
    golden stacks_by_heap stacks --by heap
    golden stacks_by_type stacks --by type
    golden stacks_by_image stacks --by image --no-default-cull
    ctl stacks --tree --type AIFO | grep -q "      MemoryTestApp.exe!InnerLoopOperation" || fail "--tree"
    ctl mark before >/dev/null || fail mark
    ctl mark before 2>&1 | grep -q EEXIST || fail "duplicate mark"
    ctl stacks --range before:now --type AIFO --json | jget total.count | grep -qx 0 || fail "mark range"
    ctl top --count 2 --interval 50ms | grep -c "heaptrace top" | grep -qx 2 || fail top
    ctl export --format collapsed -o "$T/c.txt" || fail "export collapsed"
    grep -q "MemoryTestApp.exe!main;MemoryTestApp.exe!InnerLoopOperation 48000$" "$T/c.txt" || fail "collapsed content"
    ctl export --format csv --what commits -o "$T/c.csv" || fail "export csv"
    [ "$(wc -l <"$T/c.csv")" -eq 3 ] || fail "csv lines"
    ctl export --format json --what timeline | jget samples.30.committed | grep -qx 20971520 || fail "export timeline"
    # Sources: version lists each built source with its modes; the replay
    # source serves streams only, so naming it for start is refused, and so
    # is a source this build does not have or a bad --stacks.
    ctl --json version | jget sources.0.name | grep -qx replay || fail "version sources"
    ctl --json version | jget sources.0.modes | grep -qx '\["stream"\]' || fail "version modes"
    ctl --json version | jget sources.0.available | grep -qx true || fail "version available"
    ctl start --pid 1 --source replay 2>&1 | grep -q 'ENOTSUP.*does not serve' || fail "start --source replay"
    ctl start --pid 1 --source nosuch 2>&1 | grep -q 'ENOTSUP.*no source named' || fail "start --source nosuch"
    ctl start --source bpf --pid 1 --stacks bogus 2>&1 | grep -q EBADARG || fail "start --stacks"
    if ! ctl --json version | grep -q '"pid"'; then
        ctl start --source bpf --pid 1 2>&1 | grep -q ENOTSUP || fail "start ENOTSUP"
    fi
    if ! ctl --json version | grep -q '"launch"'; then
        ctl run -- /bin/true 2>&1 | grep -q ENOTSUP || fail "run ENOTSUP"
    fi
    ctl stop demo >/dev/null || fail stop
    ctl drop demo >/dev/null || fail drop
    ctl ls --json | jget sessions | grep -qx '\[\]' || fail "drop left a session"
    stop_clean
}

case_seed000() {
    start_daemon
    load_demo
    # Halfway jump: impacting 10 MiB attributed to main.
    ctl --json commits --range 14s:16s --by frame --sort impact >"$T/j"
    eq "$(jget rows.0.frame <"$T/j")" "MemoryTestApp.exe!main" "halfway frame"
    eq "$(jget rows.0.impacting <"$T/j")" 10485760 "halfway impacting"
    eq "$(jget total.impacting <"$T/j")" 10485760 "halfway total impacting"
    # Last four spikes: 4 transient commits, 40 MiB, impacting 0.
    ctl --json commits --range 19s:29s --type AIFI >"$T/j"
    eq "$(jget total.count <"$T/j")" 4 "spikes count"
    eq "$(jget total.size <"$T/j")" 41943040 "spikes size"
    eq "$(jget total.impacting <"$T/j")" 0 "spikes impacting"
    eq "$(jget rows.0.frames.0 <"$T/j")" "MemoryTestApp.exe!ManipulateTemporaryBuffer" "spike stack"
    # At the end: AIFO InnerLoopOperation 1200 x 40 B.
    ctl --json stacks --type AIFO --by frame >"$T/j"
    eq "$(jget rows.0.frame <"$T/j")" "MemoryTestApp.exe!InnerLoopOperation" "leak frame"
    eq "$(jget rows.0.count <"$T/j")" 1200 "leak count"
    eq "$(jget rows.0.size <"$T/j")" 48000 "leak bytes"
    # Whole run: the size of every commit.
    eq "$(ctl --json commits | jget total.size)" 125829120 "whole-run commit size"
    stop_clean
}

# A session "live" loading from the fifo $T/fifo, held open on fd 3 (no data
# yet); the load's pid in FIFO_LOAD_PID, its output in $T/load.out.
fifo_session() {
    mkfifo "$T/fifo"
    ctl load "$T/fifo" --name live >"$T/load.out" 2>&1 &
    FIFO_LOAD_PID=$!
    exec 3>"$T/fifo"
    for _ in $(seq 100); do ctl ls --json | grep -q '"live"' && break; sleep 0.05; done
}

case_record_roundtrip() {
    start_daemon
    fifo_session
    local lpid=$FIFO_LOAD_PID
    ctl record live -o "$T/rec.htev" 2>"$T/rec.err" 3>&- &
    local rpid=$!
    sleep 0.3
    cat "$DEMO" >&3
    exec 3>&-
    wait "$lpid" || fail "load through the fifo"
    wait "$rpid" || fail "record: $(cat "$T/rec.err")"
    [ "$(grep -c '"ev"' "$T/rec.htev")" -ge 1383 ] || fail "recording holds $(wc -l <"$T/rec.htev") lines"
    ctl load "$T/rec.htev" --name replayed >/dev/null 2>&1 || fail "reload the recording"
    for s in live replayed; do
        ctl --json stacks "$s" --by stack | "$HT_TOOL" norm | grep -v '"session"' >"$T/$s.json"
        ctl --json commits "$s" --range 14s:16s | "$HT_TOOL" norm | grep -v '"session"' >>"$T/$s.json"
    done
    diff -u "$T/live.json" "$T/replayed.json" || fail "the recording does not replay to the same answers"
    stop_clean
}

# The same recording written as compressed .htevb (-o FILE.htevb): a zstd
# frame, far smaller than the text, and it replays to the same answers.
case_record_htevb() {
    start_daemon
    fifo_session
    local lpid=$FIFO_LOAD_PID
    ctl record live -o "$T/rec.htevb" 2>"$T/rec.err" 3>&- &
    local rpid=$!
    sleep 0.3
    cat "$DEMO" >&3
    exec 3>&-
    wait "$lpid" || fail "load through the fifo"
    wait "$rpid" || fail "record: $(cat "$T/rec.err")"
    [ "$(head -c 4 "$T/rec.htevb" | od -An -tx1 | tr -d ' ')" = 28b52ffd ] || fail "not a zstd frame"
    [ "$(stat -c %s "$T/rec.htevb")" -lt "$(( $(stat -c %s "$DEMO") / 5 ))" ] ||
        fail "recording of $(stat -c %s "$T/rec.htevb") bytes"
    ctl --json load "$T/rec.htevb" --name replayed >"$T/j" 2>/dev/null || fail "reload the recording"
    eq "$(jget malformed <"$T/j")" 0 "recording clean"
    [ "$(jget events <"$T/j")" -ge 1383 ] || fail "recording holds $(jget events <"$T/j") events"
    for s in live replayed; do
        ctl --json stacks "$s" --by stack | "$HT_TOOL" norm | grep -v '"session"' >"$T/$s.json"
        ctl --json commits "$s" --range 14s:16s | "$HT_TOOL" norm | grep -v '"session"' >>"$T/$s.json"
    done
    diff -u "$T/live.json" "$T/replayed.json" || fail "the recording does not replay to the same answers"
    stop_clean
}

case_binary_load() {
    start_daemon
    "$HT_CONVERT" --plain "$DEMO" "$T/demo.htevb" 2>/dev/null || fail "ht-convert --plain"
    [ "$(head -c 6 "$T/demo.htevb")" = HTEVB2 ] || fail "not an HTEVB2 stream"
    "$HT_CONVERT" --plain --v1 "$DEMO" "$T/demo.htevb1" 2>/dev/null || fail "ht-convert --v1"
    [ "$(head -c 6 "$T/demo.htevb1")" = HTEVB1 ] || fail "not an HTEVB1 stream"
    # Compressed (the default): zstd frames of 1 KiB of stream (the HTEVB2 demo is 10 KiB:
    # half the file must hold whole frames), zstd's magic first.
    "$HT_CONVERT" --frame-kib 1 "$DEMO" "$T/demo.htevbz" 2>/dev/null || fail "ht-convert"
    [ "$(head -c 4 "$T/demo.htevbz" | od -An -tx1 | tr -d ' ')" = 28b52ffd ] ||
        fail "not a zstd frame"
    [ "$(stat -c %s "$T/demo.htevbz")" -lt "$(( $(stat -c %s "$T/demo.htevb") / 2 ))" ] ||
        fail "compressed not smaller"
    ctl load "$DEMO" --name text >/dev/null 2>&1 || fail "load text"
    ctl load "$T/demo.htevb" --name binary >/dev/null 2>&1 || fail "load binary"
    ctl load "$T/demo.htevb1" --name binary1 >/dev/null 2>&1 || fail "load HTEVB1"
    ctl --json load "$T/demo.htevbz" --name zstd >"$T/j" 2>/dev/null || fail "load compressed"
    eq "$(jget malformed <"$T/j")" 0 "compressed stream clean"
    for s in text binary binary1 zstd; do
        { ctl --json stacks "$s" --by frame; ctl --json commits "$s" --range 14s:16s;
          ctl --json timeline "$s" --step 5s; } | grep -v '"session"\|"wall_start"' >"$T/$s.json"
    done
    diff -u "$T/text.json" "$T/binary.json" || fail "binary and text streams answer differently"
    diff -u "$T/text.json" "$T/binary1.json" || fail "HTEVB1 and text streams answer differently"
    diff -u "$T/text.json" "$T/zstd.json" || fail "compressed and text streams answer differently"
    eq "$(ctl --json status binary | jget process.name)" MemoryTestApp.exe "process name"
    eq "$(ctl --json status zstd | jget process.name)" MemoryTestApp.exe "process name (zstd)"
    # A truncated binary stream: what came is kept, the cut is reported.
    # Compressed, the frames before the cut are kept.
    for f in demo.htevb demo.htevbz; do
        head -c "$(( $(stat -c %s "$T/$f") / 2 ))" "$T/$f" >"$T/cut-$f"
        ctl --json load "$T/cut-$f" --name "cut-${f#*.}" >"$T/j" 2>/dev/null || fail "load cut $f"
        eq "$(jget malformed <"$T/j")" 1 "cut stream reported ($f)"
        [ "$(jget events <"$T/j")" -gt 100 ] || fail "events before the cut kept ($f)"
    done
    stop_clean
}

# Module events: loaded and unloaded modules reach the engine's table (status),
# a recording carries them, and the recording loads back to the same table.
case_module_events() {
    start_daemon
    cat >"$T/mods.htev" <<'EOS'
{"ev":"process","pid":77,"name":"modapp"}
{"t":1,"ev":"module_load","base":"0x400000","size":8192,"bias":"0x0","path":"/app/modapp","build_id":"00ff"}
{"t":2,"ev":"module_load","base":"0x7f0000000000","size":65536,"bias":"0x7f0000000000","path":"/lib/libc.so.6"}
{"t":3,"ev":"alloc","addr":"0x10","size":8,"stack":["0x400123","0x7f0000000100"]}
{"t":4,"ev":"module_unload","base":"0x400000"}
{"t":5,"ev":"module_unload","base":"0x999000"}
{"t":6,"ev":"module_load","base":"0x1000","size":1}
EOS
    ctl --json load "$T/mods.htev" --name mods >"$T/j" 2>/dev/null || fail "load"
    eq "$(jget malformed <"$T/j")" 1 "module_load without a path is malformed"
    ctl --json status mods >"$T/st" || fail status
    eq "$(jget modules.count <"$T/st")" 1 "modules left"
    eq "$(jget modules.loads <"$T/st")" 2 "module loads"
    eq "$(jget modules.unloads <"$T/st")" 2 "module unloads"
    eq "$(jget modules.unknown_unloads <"$T/st")" 1 "unknown unloads"
    [ "$(jget memory.by_structure.modules <"$T/st")" -gt 0 ] || fail "module table not charged"
    stop_clean
}

case_triggers() {
    start_daemon
    load_demo --stop-when 'private-bytes>30MiB' --snapshot-when 'outstanding>10KiB' --every 10KiB
    ctl --json status demo >"$T/s"
    eq "$(jget state <"$T/s")" stopped "state after stop-when"
    eq "$(jget stop_reason <"$T/s")" "stop-when private-bytes>30MiB" "stop reason"
    # Private bytes pass 30 MiB with the first spike after the halfway commit (16.5 s).
    eq "$(jget now <"$T/s")" 16500000000 "stopped at"
    # Initialize's 50 x 1 KiB at startup pass 10, 20, 30, 40 and 50 KiB (the 11th block, at
    # 11 ms, passes 10 KiB); after they are freed, InnerLoopOperation stays under 51 KiB.
    eq "$(jget triggers.1.fired <"$T/s")" 5 "snapshots taken by 16.5 s"
    eq "$(jget snapshots.0.t <"$T/s")" 11000000 "first snapshot time"
    ctl --json export --format json --snapshot 2 | jget reason | grep -q "outstanding>10KiB" || fail "snapshot export"
    ctl export --format csv --snapshot 1 | grep -q "MemoryTestApp.exe!Initialize" || fail "snapshot csv (at 11 ms only Initialize has blocks)"
    ctl export --format json --snapshot 9 2>&1 | grep -q "no snapshot 9" || fail "missing snapshot"
    ctl load "$DEMO" --stop-when 'bogus>1' 2>&1 | grep -q EBADARG || fail "bad condition"
    ctl ls --json | jget sessions.1 | grep -q missing || fail "a refused load left a session"
    stop_clean
}

case_bad_requests() {
    start_daemon
    load_demo
    printf 'not json\n{"v":1,"id":3}\n{"v":1,"id":4,"cmd":"frobnicate"}\n{"v":1,"id":5,"cmd":"stacks","args":{"session":"nope"}}\n{"v":1,"id":6,"cmd":"stacks","args":{"top":"ten"}}\n{"v":1,"id":7,"cmd":"stacks","args":{"range":"-5s:-10s"}}\n{"v":1,"id":8,"cmd":"stacks","args":{"range":"20s:10s"}}\n{"v":1,"id":9,"cmd":"stacks","args":{"wat":1}}\n{"v":2,"id":10,"cmd":"ping"}\n{"v":1,"id":11,"cmd":"stacks","args":{"size":"9:1"}}\n{"v":1,"id":12,"cmd":"stacks","args":{"range":"nomark:now"}}\n[1,2]\n{"v":1,"id":13,"cmd":"ping"}\n' |
        "$HT_TOOL" raw "$HEAPTRACE_PIPE" >"$T/r"
    cat "$T/r"
    eq "$(grep -c '"EBADJSON"' "$T/r")" 3 "EBADJSON replies"
    grep -q '"id":4,"ok":false,"err":"EUNKNOWNCMD"' "$T/r" || fail EUNKNOWNCMD
    grep -q '"id":5,"ok":false,"err":"ENOSESSION"' "$T/r" || fail ENOSESSION
    grep -q '"id":6,"ok":false,"err":"EBADARG","msg":"argument \\"top\\" must be a non-negative integer"' "$T/r" || fail "wrong type"
    grep -q '"id":7,"ok":false,"err":"EBADARG","msg":"range \\"-5s:-10s\\" is reversed' "$T/r" || fail "negative range"
    grep -q '"id":8,"ok":false,"err":"EBADARG"' "$T/r" || fail "reversed range"
    grep -q '"id":9,"ok":false,"err":"EBADARG","msg":"stacks: unknown argument' "$T/r" || fail "unknown argument"
    grep -q '"id":10,"ok":false,"err":"EVERSION","msg":"protocol version 2 is not supported; this daemon speaks 1"' "$T/r" || fail EVERSION
    grep -q '"id":11,"ok":false,"err":"EBADARG"' "$T/r" || fail "reversed size"
    grep -q '"id":12,"ok":false,"err":"ENOMARK"' "$T/r" || fail "unknown mark"
    grep -q '"id":13,"ok":true' "$T/r" || fail "the connection did not survive"
    # Over-long line, then a ping on the same connection.
    "$HT_TOOL" bigline "$HEAPTRACE_PIPE" 1048576 >"$T/b"
    grep -q ETOOBIG "$T/b" || fail "1 MiB line not refused"
    grep -q '"id":2,"ok":true' "$T/b" || fail "no answer after the long line"
    # Half a line, then gone.
    "$HT_TOOL" partial "$HEAPTRACE_PIPE"
    ctl --json status demo | jget ingest.events | grep -qx 1383 || fail "session data lost"
    stop_clean
}

case_disconnect_mid_stream() {
    start_daemon
    "$HT_TOOL" halfload "$HEAPTRACE_PIPE" "$DEMO" >/dev/null
    sleep 0.3
    ctl --json status half >"$T/s" || fail "the half-loaded session is gone"
    eq "$(jget state <"$T/s")" ended "state"
    eq "$(jget stop_reason <"$T/s")" "client disconnected during load" "reason"
    [ "$(jget ingest.events <"$T/s")" -gt 500 ] || fail "kept $(jget ingest.events <"$T/s") events"
    ctl stacks half >/dev/null || fail "queries on the partial session"
    stop_clean
}

# A session stopped, then one dropped, while their loader is still sending.
# Wait until the first half of a paused load is applied (no sleep as synchronisation).
wait_half() {
    for _ in $(seq 400); do
        n=$(ctl --json status "$1" 2>/dev/null | jget ingest.events 2>/dev/null)
        [ "${n:-0}" -gt 100 ] && return 0
        sleep 0.05
    done
    fail "the first half of $1 was not applied"
}

case_stop_drop_mid_load() {
    start_daemon
    "$HT_TOOL" pausedload "$HEAPTRACE_PIPE" "$DEMO" p1 "$T/go1" >"$T/p1" &
    loader=$!
    wait_half p1
    ctl stop p1 >/dev/null || fail "stop during load"
    touch "$T/go1"
    wait $loader
    grep -q '"state":"stopped"' "$T/p1" || fail "the loader's summary: $(cat "$T/p1")"
    ctl --json status p1 >"$T/s" || fail "the stopped session is gone"
    eq "$(jget stop_reason <"$T/s")" "stopped by request" "reason"
    n=$(jget ingest.events <"$T/s")
    [ "$n" -gt 100 ] && [ "$n" -lt 1383 ] || fail "kept $n events of the first half"
    "$HT_TOOL" pausedload "$HEAPTRACE_PIPE" "$DEMO" p2 "$T/go2" >"$T/p2" &
    loader=$!
    wait_half p2
    ctl drop p2 >/dev/null || fail "drop during load"
    touch "$T/go2"
    wait $loader
    grep -q ENOSESSION "$T/p2" || fail "the loader was not told: $(cat "$T/p2")"
    ctl ls | grep -q p2 && fail "the dropped session is listed"
    ctl stacks p1 >/dev/null || fail "queries after the drop"
    stop_clean
}

case_slow_reader() {
    printf '{"client_output_cap": "1MiB"}\n' >"$T/cfg.json"
    start_daemon --config "$T/cfg.json"
    load_demo
    "$HT_TOOL" noread "$HEAPTRACE_PIPE" || fail "a client that never reads was not cut off"
    grep -q "unread, over the" "$T/daemon.log" || fail "no log of the slow client"
    ctl ping >/dev/null || fail "daemon stopped serving"
    stop_clean
}

case_concurrent_clients() {
    start_daemon
    # A long stream ingests while 200 clients query it.
    mkfifo "$T/fifo"
    ctl load "$T/fifo" --name big >/dev/null 2>&1 &
    local lpid=$!
    exec 3>"$T/fifo"
    for _ in $(seq 100); do ctl ls --json | grep -q '"big"' && break; sleep 0.05; done
    ( for _ in $(seq 20); do cat "$DEMO"; done >&3 ) &
    local wpid=$!
    exec 3>&-
    "$HT_TOOL" concurrent "$HEAPTRACE_PIPE" 200 5 || fail "concurrent clients"
    wait "$wpid"
    wait "$lpid" || fail "load during the queries"
    eq "$(ctl --json status big | jget ingest.events)" 27660 "events ingested"
    stop_clean
}

case_permission() {
    command -v setpriv >/dev/null || { echo "SKIP: setpriv missing"; exit 77; }
    [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root to switch users"; exit 77; }
    start_daemon
    chmod 0777 "$T"
    chmod 0666 "$HEAPTRACE_PIPE" # let the socket be reached: the daemon itself must refuse
    out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$HT_CTL" ping 2>&1)
    rc=$?
    echo "$out"
    eq "$rc" 1 "exit code for a refused peer"
    echo "$out" | grep -q "EPERM: uid 65534" || fail "no EPERM"
    grep -q "refused a client: uid 65534" "$T/daemon.log" || fail "not logged"
    ctl ping >/dev/null || fail "root refused"
    stop_clean
}

case_single_instance() {
    start_daemon
    "$HT_DAEMON" --foreground >"$T/second.log" 2>&1
    rc=$?
    [ "$rc" -ne 0 ] || fail "a second daemon started"
    grep -q "already running" "$T/second.log" || fail "no clear message: $(cat "$T/second.log")"
    ctl ping >/dev/null || fail "the first daemon was disturbed"
    stop_clean
    # A stale socket (daemon killed) does not block the next start.
    start_daemon
    kill -9 "$DPID"
    wait "$DPID" 2>/dev/null
    DPID=
    [ -S "$HEAPTRACE_PIPE" ] || fail "expected a stale socket"
    start_daemon
    stop_clean
}

case_signals() {
    start_daemon
    load_demo
    ctl top --interval 50ms >/dev/null 2>&1 &
    sleep 0.2
    kill -TERM "$DPID"
    wait "$DPID"
    rc=$?
    DPID=
    eq "$rc" 0 "exit code after SIGTERM"
    grep -q "stopped cleanly" "$T/daemon.log" || fail "handles left open after SIGTERM"
    [ ! -e "$HEAPTRACE_PIPE" ] || fail "socket left behind"
}

case_ctl_usage() {
    ctl 2>/dev/null; eq $? 2 "no command"
    ctl frobnicate 2>/dev/null; eq $? 2 "unknown command"
    ctl stacks --nope 2>/dev/null; eq $? 2 "unknown option"
    ctl top --top 2>/dev/null; eq $? 2 "missing value"
    ctl ping; eq $? 3 "no daemon"
    ctl help stacks | grep -q -- "--cull-list FILE" || fail "help from the command table"
}

# A stopped session applies what its source had taken while the source lets go of the target
# (eBPF: the probes' removal, ~0.5 s; status says "draining" until then): wait for that.
wait_drained() {
    local i
    for ((i = 0; i < 200 * ${HT_TIME_FACTOR:-1}; i++)); do
        ctl --json status "$1" | grep -q '"draining"' || return 0
        sleep 0.1
    done
    fail "session $1 still draining after $((20 * ${HT_TIME_FACTOR:-1}))s"
}

# More cases, one file per area (cases-*.sh); CMake registers every case_NAME it finds.
for f in "$HERE"/cases-*.sh; do
    [ -e "$f" ] && . "$f"
done
declare -F "case_$1" >/dev/null || { echo "no such case: $1"; exit 2; }
"case_$1"
