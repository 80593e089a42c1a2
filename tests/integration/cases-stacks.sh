# Stacks on Debian programs built without frame pointers, in the default
# stack mode (issue 21 items 8 and 10): tests/apps/xmlleak (libxml2, -O2
# -fomit-frame-pointer) knows how many blocks it leaked; redis-server (Debian's,
# with jemalloc) must show its own functions. Sourced by run.sh.

# HT_XMLLEAK: another build of tests/apps/xmlleak.c.
xmlleak_bin() {
    echo "${HT_XMLLEAK:-$(dirname "$HT_DAEMON")/../tests/apps/xmlleak}"
}

# Skips (77) where live tracing cannot run: call after start_daemon.
stacks_need_bpf() {
    if [ "$(id -u)" != 0 ]; then
        echo "skip: live tracing with eBPF needs root"
        exit 77
    fi
    ctl --json version | tr -d ' \t\n' | grep -q '"name":"bpf"' || {
        echo "skip: this build has no eBPF source"
        exit 77
    }
}

# xmlleak_run DOCS[,DEPTH] [start options]: xmlleak traced from its start to
# its report (session "xml"); sets XPID.
xmlleak_run() {
    local docs=${1%,*} depth=0
    case "$1" in *,*) depth=${1#*,} ;; esac
    shift
    [ -x "$(xmlleak_bin)" ] || fail "no xmlleak at $(xmlleak_bin) (libxml2-dev: scripts/install-deps.sh)"
    mkfifo "$T/xin"
    "$(xmlleak_bin)" "$docs" "$depth" <"$T/xin" >"$T/xml.out" &
    XPID=$!
    exec 8>"$T/xin"
    stacks_wait_line ready "$T/xml.out"
    ctl start --source bpf --pid "$XPID" --name xml "$@" >"$T/start.out" 2>&1 || fail "start --pid: $(cat "$T/start.out")"
    printf g >&8 # one byte per go-signal (app-sync.h)
    stacks_wait_line done "$T/xml.out"
}

xmlleak_end() {
    printf x >&8
    exec 8>&-
    wait "$XPID"
}

stacks_wait_line() {
    for _ in $(seq 200); do
        grep -q "$1" "$2" 2>/dev/null && return 0
        sleep 0.05
    done
    fail "no line $1 in $2: $(cat "$2")"
}

# The session's records taken and converted: status' records stop moving.
stacks_settle() {
    local prev=-1 cur
    for _ in $(seq 100); do
        cur=$(ctl --json status "$1" | jget source_status.records)
        [ "$cur" = "$prev" ] && [ "$cur" != 0 ] && return 0
        prev=$cur
        sleep 0.1
    done
}

# Every frame of every stack of session $1, one a line, into $T/frames.txt
# (by stack, nothing culled).
stacks_frames() {
    ctl --json stacks "$1" --top 10000 --no-default-cull >"$T/stacks.json" || fail "stacks"
    grep -o '"frames":[^]]*]' "$T/stacks.json" | sed 's/^"frames":[[:space:]]*\[//; s/\]$//' |
        sed 's/", "/"\n"/g' | sed 's/^"//; s/"$//' >"$T/frames.txt"
    [ -s "$T/frames.txt" ] || fail "no frames in the stacks of $1"
}

# Frames of $T/frames.txt that are bare addresses (in no module: nothing
# executable is there).
stacks_bare_frames() {
    grep -c '^0x' "$T/frames.txt"
}

# Default mode on a libxml2 program without frame pointers: every block
# leak_xml_docs leaked (counted by the program) is found under that frame
# (the frame-pointer walk found 0: its stacks ended in libxml2's data).
case_stacks_default_libxml2() {
    start_daemon
    stacks_need_bpf
    xmlleak_run 100
    local leaked
    leaked=$(grep done "$T/xml.out" | "$HT_TOOL" get leaked_blocks)
    [ "$leaked" -gt 1000 ] || fail "xmlleak leaked only $leaked blocks"
    stacks_settle xml
    # Lost events first: a count short by them says nothing of the stacks.
    ctl --json status xml >"$T/status.json"
    eq "$(jget quality.lost <"$T/status.json")" 0 "lost events"
    ctl --json stacks xml --require leak_xml_docs >"$T/req.json" || fail "stacks --require"
    [ "$(jget total.outstanding_count <"$T/req.json")" = "$leaked" ] ||
        ctl stacks xml --type AIFO --top 100 --tree | grep -v "^ *$" | tail -60
    eq "$(jget total.outstanding_count <"$T/req.json")" "$leaked" \
        "blocks outstanding under leak_xml_docs (the program counted $leaked)"
    stacks_frames xml
    eq "$(stacks_bare_frames)" 0 "frames outside every module"
    ctl --json status xml >"$T/status.json"
    eq "$(jget source_status.stacks_requested <"$T/status.json")" auto "stacks requested"
    eq "$(jget source_status.stacks <"$T/status.json")" dwarf "stacks chosen for libxml2 without frame pointers"
    jget source_status.stacks_why <"$T/status.json" | grep -q "libxml2.so" ||
        fail "stacks_why does not name libxml2: $(jget source_status.stacks_why <"$T/status.json")"
    eq "$(jget quality.lost <"$T/status.json")" 0 "lost events"
    eq "$(jget source_status.unwind_failures <"$T/status.json")" 0 "unwind failures"
    xmlleak_end
    stop_clean
}

# --stacks fp on the same program: the walk stops at the first frame outside
# an executable mapping (libxml2 keeps data in rbp), counted as truncated;
# no frame is garbage.
case_stacks_fp_truncated() {
    start_daemon
    stacks_need_bpf
    xmlleak_run 30 --stacks fp
    stacks_settle xml
    ctl --json status xml >"$T/status.json"
    eq "$(jget source_status.stacks <"$T/status.json")" fp "stacks"
    local cut trunc
    cut=$(jget source_status.stacks_outside_exec <"$T/status.json")
    trunc=$(jget quality.truncated_stacks <"$T/status.json")
    [ "$cut" -gt 0 ] || fail "no stack cut outside the executable mappings (stacks_outside_exec $cut)"
    [ "$trunc" -ge "$cut" ] || fail "quality.truncated_stacks $trunc below stacks_outside_exec $cut"
    stacks_frames xml
    eq "$(stacks_bare_frames)" 0 "frames outside every module"
    xmlleak_end
    stop_clean
}

# A stack deeper than the 8 KiB DWARF copy (leak_xml_docs under 12 frames of
# 1 KiB) is cut where the copy ends: counted as stacks_copy_short and truncated.
case_stacks_dwarf_copy_short() {
    start_daemon
    stacks_need_bpf
    xmlleak_run 5,12 --stacks dwarf
    stacks_settle xml
    ctl --json status xml >"$T/status.json"
    local cut trunc
    cut=$(jget source_status.stacks_copy_short <"$T/status.json")
    trunc=$(jget quality.truncated_stacks <"$T/status.json")
    [ "$cut" -gt 0 ] || fail "no stack cut at the end of the copy (stacks_copy_short $cut)"
    [ "$trunc" -ge "$cut" ] || fail "quality.truncated_stacks $trunc below stacks_copy_short $cut"
    ctl --json stacks xml --require main >"$T/main.json" || fail "stacks --require main"
    eq "$(jget total.count <"$T/main.json")" 0 "stacks reaching main past the copy"
    xmlleak_end
    stop_clean
}

# Skips (77) without Debian's redis (scripts/install-deps.sh installs it).
stacks_need_redis() {
    command -v redis-server >/dev/null && command -v redis-cli >/dev/null || {
        echo "skip: no redis-server/redis-cli (redis-server, redis-tools)"
        exit 77
    }
}

# redis_start: Debian's redis-server (jemalloc, no frame pointers, started
# through its /usr/bin/redis-server symlink) on a private unix socket; sets RPID.
redis_start() {
    redis-server --port 0 --unixsocket "$T/redis.sock" --save "" --appendonly no \
        --dir "$T" >"$T/redis.log" 2>&1 &
    RPID=$!
    # Gone with the test, whatever ends it.
    (while kill -0 $$ 2>/dev/null; do sleep 0.5; done; kill "$RPID" 2>/dev/null) &
    for _ in $(seq 100); do
        redis-cli -s "$T/redis.sock" ping 2>/dev/null | grep -q PONG && return 0
        sleep 0.05
    done
    fail "redis-server did not answer: $(cat "$T/redis.log")"
}

redis_stop() {
    kill "$RPID"
    wait "$RPID" 2>/dev/null
}

# Default mode on redis-server: SETs of digit keys (whose bytes a frame-pointer
# walk took for return addresses: 0x3130) show redis's own functions, the
# executable named redis-server (the link it was started by, not the file
# redis-check-rdb), and no frame outside a module.
case_stacks_default_redis() {
    start_daemon
    stacks_need_bpf
    stacks_need_redis
    redis_start
    ctl start --source bpf --pid "$RPID" --name redis >"$T/start.out" 2>&1 || fail "start --pid: $(cat "$T/start.out")"
    local i
    for i in $(seq 100); do
        echo "SET $((i * 1010)) $((i * 7))0123456789"
    done | redis-cli -s "$T/redis.sock" >/dev/null || fail "redis-cli"
    stacks_settle redis
    stacks_frames redis
    eq "$(stacks_bare_frames)" 0 "frames outside every module"
    grep -q '^redis-check-rdb!' "$T/frames.txt" &&
        fail "frames named by the file: $(grep '^redis-check-rdb!' "$T/frames.txt" | sort -u | head -3)"
    grep -q '^redis-server!zmalloc$' "$T/frames.txt" ||
        fail "no redis-server!zmalloc frame: $(sort -u "$T/frames.txt" | head -20)"
    # A SET's allocations: the command's own path in redis.
    ctl --json stacks redis --require setKey >"$T/set.json" || fail "stacks --require setKey"
    [ "$(jget total.count <"$T/set.json")" -ge 100 ] ||
        fail "allocations under setKey: $(jget total.count <"$T/set.json"), expected at least 100"
    ctl --json stacks redis --require processCommand >"$T/cmd.json" || fail "stacks --require processCommand"
    [ "$(jget total.count <"$T/cmd.json")" -ge 100 ] ||
        fail "allocations under processCommand: $(jget total.count <"$T/cmd.json")"
    ctl --json status redis >"$T/status.json"
    eq "$(jget source_status.stacks <"$T/status.json")" dwarf "stacks chosen for redis"
    eq "$(jget quality.lost <"$T/status.json")" 0 "lost events"
    redis_stop
    stop_clean
}

# Names (issue 21 item 10), in --stacks dwarf so that only the names are
# under test: redis-server is started through /usr/bin/redis-server, a link
# to redis-check-rdb; its frames are named redis-server!, its libraries by
# their files. Frames without a symbol are counted, with the package that has
# the symbols (dpkg's lists: /usr/bin/redis-check-rdb is redis-tools').
case_stacks_redis_names() {
    DEBUGINFOD_URLS=http://127.0.0.1:9 start_daemon
    stacks_need_bpf
    stacks_need_redis
    redis_start
    ctl start --source bpf --pid "$RPID" --name redis --stacks dwarf >"$T/start.out" 2>&1 ||
        fail "start --pid: $(cat "$T/start.out")"
    local i
    for i in $(seq 50); do
        echo "SET k$i $i"
    done | redis-cli -s "$T/redis.sock" >/dev/null || fail "redis-cli"
    stacks_settle redis
    stacks_frames redis
    grep -q '^redis-check-rdb!' "$T/frames.txt" &&
        fail "frames named by the file: $(grep '^redis-check-rdb!' "$T/frames.txt" | sort -u | head -3)"
    grep -q '^redis-server!setKey$' "$T/frames.txt" ||
        fail "no redis-server!setKey frame: $(sort -u "$T/frames.txt" | head -20)"
    grep -q '^libjemalloc.so.2!' "$T/frames.txt" || grep -q '^libc.so.6!' "$T/frames.txt" ||
        fail "no library frame named by its file: $(sort -u "$T/frames.txt" | head -20)"
    local unsym
    unsym=$(grep -c '^redis-server!+0x' "$T/frames.txt")
    ctl --json status redis >"$T/status.json"
    [ "$unsym" -eq 0 ] || [ "$(jget source_status.symbols.unsymbolized <"$T/status.json")" -gt 0 ] ||
        fail "$unsym frames without a symbol, status.symbols.unsymbolized $(jget source_status.symbols.unsymbolized <"$T/status.json")"
    if [ "$unsym" -gt 0 ] && dpkg -S "$(readlink -f "$(command -v redis-server)")" >/dev/null 2>&1; then
        local pkg
        pkg=$(dpkg -S "$(readlink -f "$(command -v redis-server)")" | cut -d: -f1)
        jget source_status.symbols.unsymbolized_hint <"$T/status.json" | grep -q "$pkg-dbgsym" ||
            fail "hint: $(jget source_status.symbols.unsymbolized_hint <"$T/status.json"), expected $pkg-dbgsym"
        # Off by default, whatever the daemon's environment said.
        jget source_status.symbols.unsymbolized_hint <"$T/status.json" |
            grep -q "turn debuginfod on in the configuration" ||
            fail "hint: $(jget source_status.symbols.unsymbolized_hint <"$T/status.json"), expected debuginfod off"
    fi
    ctl status redis | grep -q "frame lookups found no symbol" || [ "$unsym" -eq 0 ] ||
        fail "status text: $(ctl status redis)"
    redis_stop
    stop_clean
}

# debuginfod is off by default: a daemon started with DEBUGINFOD_URLS in its
# environment (Debian's debuginfod package sets it for login shells) drops it
# (logged), so libdw's client never asks a server; "debuginfod": true (a new
# configuration key) keeps it.
# (/proc/PID/environ shows the environment as started: the log and the
# unsymbolized hint of integration.stacks_redis_names show what the daemon kept.)
case_stacks_debuginfod_off() {
    DEBUGINFOD_URLS=http://127.0.0.1:9 start_daemon
    grep -q "DEBUGINFOD_URLS ignored" "$T/daemon.log" || fail "DEBUGINFOD_URLS kept with debuginfod off"
    stop_clean
    echo '{"debuginfod": true}' >"$T/cfg.json"
    : >"$T/daemon.log"
    DEBUGINFOD_URLS=http://127.0.0.1:9 start_daemon --config "$T/cfg.json"
    grep -q "debuginfod on: missing debug files are fetched from http://127.0.0.1:9" "$T/daemon.log" ||
        fail "DEBUGINFOD_URLS not kept with debuginfod on"
    stop_clean
    echo '{"debuginfod": "yes"}' >"$T/bad.json"
    "$HT_DAEMON" --foreground --config "$T/bad.json" >"$T/bad.log" 2>&1 && fail "debuginfod \"yes\" accepted"
    grep -q "debuginfod" "$T/bad.log" || fail "bad debuginfod value: $(cat "$T/bad.log")"
}
