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

# xmlleak_run DOCS [start options]: xmlleak traced from its start to its
# report (session "xml"); sets XPID.
xmlleak_run() {
    local docs=$1
    shift
    [ -x "$(xmlleak_bin)" ] || fail "no xmlleak at $(xmlleak_bin) (libxml2-dev: scripts/install-deps.sh)"
    mkfifo "$T/xin"
    "$(xmlleak_bin)" "$docs" <"$T/xin" >"$T/xml.out" &
    XPID=$!
    exec 8>"$T/xin"
    stacks_wait_line ready "$T/xml.out"
    ctl start --pid "$XPID" --name xml "$@" >"$T/start.out" 2>&1 || fail "start --pid: $(cat "$T/start.out")"
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

# Every frame of session $1 (`stacks --by frame`) into $T/frames.json.
stacks_frames() {
    ctl --json stacks "$1" --by frame --top 10000 >"$T/frames.json" || fail "stacks --by frame"
}

# Frames of $T/frames.json that are bare addresses (in no module: nothing
# executable is there).
stacks_bare_frames() {
    local n i f c=0
    n=$(jget rows.# <"$T/frames.json")
    for i in $(seq 0 $((n - 1))); do
        f=$(jget "rows.$i.frame" <"$T/frames.json")
        case "$f" in 0x*) c=$((c + 1)) ;; esac
    done
    echo "$c"
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
