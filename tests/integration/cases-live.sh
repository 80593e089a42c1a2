# Issue 9: live tracing end to end. The real daemon attaches to the test apps of tests/apps
# (`heaptracectl start --pid`) and every answer is checked against the ground truth the app
# prints itself. Sourced by run.sh.
#
# Every case skips (exit 77) unless the daemon lists a source serving "pid" in `version`, it
# runs as root, and the apps are built. Event counts stay small: a probe hit costs 5-18 us on
# these hosts. No case asserts a time.
#
# The apps (tests/apps/app-sync.h) print {"pid":N,"ready":true} and wait for SIGUSR1; they
# print {"at":NAME} and wait again where a test places a mark; they print {"done":true,...}
# with the ground truth and wait once more before exiting (unless run with --no-pause).

LIVE_APPS=${HT_APPS:-$(cd "$(dirname "$HT_CTL")/../tests/apps" 2>/dev/null && pwd)}
LIVE_PIDS=()
# Seconds to wait for a line, a drain or a state, multiplied under sanitizers.
LIVE_WAIT=$((20 * ${HT_TIME_FACTOR:-1}))

live_skip() {
    echo "SKIP: $*"
    exit 77
}

live_cleanup() {
    local p
    for p in "${LIVE_PIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    cleanup
}

# Does the version reply on stdin list a source serving "pid"? Sources are names today
# ("bpf" serves pid: sources.def) or objects with their modes; one marked unavailable does
# not count.
live_serves_pid() {
    local v n i s
    v=$(cat)
    n=$(echo "$v" | jget sources.#) || return 1
    for ((i = 0; i < n; i++)); do
        s=$(echo "$v" | jget "sources.$i")
        case "$s" in
        bpf) return 0 ;;
        \{*) echo "$s" | grep -q '"available":false' && continue
            echo "$s" | grep -q '"pid"' && return 0 ;;
        esac
    done
    return 1
}

# Start the daemon; skip unless live tracing can run here.
live_setup() {
    [ "$(id -u)" -eq 0 ] || live_skip "live tracing needs root (CAP_BPF)"
    [ -n "$LIVE_APPS" ] && [ -x "$LIVE_APPS/mtalloc" ] || live_skip "test apps not built (HT_APPS=$LIVE_APPS)"
    trap live_cleanup EXIT
    start_daemon
    ctl --json version >"$T/version.json" || fail "version"
    live_serves_pid <"$T/version.json" ||
        live_skip "no source serves pid: sources $(jget sources <"$T/version.json")"
}

# live_app TAG PROGRAM ARGS...: start a test app, its stdout in $T/TAG.out; wait for its ready
# line. Sets APID.
live_app() {
    local tag=$1 prog=$2
    shift 2
    [ -x "$LIVE_APPS/$prog" ] || live_skip "$prog not built"
    "$LIVE_APPS/$prog" "$@" >"$T/$tag.out" 2>"$T/$tag.err" </dev/null &
    APID=$!
    LIVE_PIDS+=("$APID")
    live_wait_line "$tag" '"ready":true'
}

# live_wait_line TAG PATTERN: wait until the app's output has a line matching PATTERN.
live_wait_line() {
    local i
    for ((i = 0; i < LIVE_WAIT * 20; i++)); do
        grep -q "$2" "$T/$1.out" && return 0
        sleep 0.05
    done
    fail "$1 printed no line matching $2 in ${LIVE_WAIT}s: $(cat "$T/$1.out" "$T/$1.err")"
}

# The ground truth line ({"done":true,...}) of an app.
live_truth() { grep '"done":true' "$T/$1.out" | tail -n 1; }

live_go() { kill -USR1 "$1" || fail "the app $1 is gone"; }

# live_attach NAME PID [start options]: attach and check the session is there.
live_attach() {
    local name=$1 pid=$2
    shift 2
    ctl start --source bpf --pid "$pid" --name "$name" "$@" >"$T/start.out" 2>&1 ||
        fail "start --pid $pid $*: $(cat "$T/start.out")"
    ctl --json status "$name" >"$T/s" || fail "no session $name after start"
    eq "$(jget process.pid <"$T/s")" "$pid" "attached pid"
}

# Wait until the session has taken every event: the count stays the same for 0.3 s.
live_settle() {
    local name=$1 a b i
    a=$(ctl --json status "$name" | jget ingest.events)
    for ((i = 0; i < LIVE_WAIT * 3; i++)); do
        sleep 0.3
        b=$(ctl --json status "$name" | jget ingest.events)
        [ "$a" = "$b" ] && return 0
        a=$b
    done
    fail "session $name still taking events after ${LIVE_WAIT}s"
}

# Events the source says it lost, from a reply's data quality (0 when none is reported).
live_lost() {
    local j v k
    j=$(cat)
    for k in quality.lost quality.lost_events ingest.lost; do
        v=$(echo "$j" | jget "$k" 2>/dev/null)
        case "$v" in '' | '(missing)') ;; *) echo "$v"; return ;; esac
    done
    echo 0
}

# The first frame of a stack (rows.R.frames of the reply in FILE) that lies in the app's own
# module: what the allocation is attributed to once libc/libstdc++ frames are passed over.
live_first_app_frame() {
    local file=$1 row=$2 module=$3 n i f
    n=$(jget "rows.$row.frames.#" <"$file")
    for ((i = 0; i < n; i++)); do
        f=$(jget "rows.$row.frames.$i" <"$file")
        case "$f" in *"$module"*'!'*) echo "$f"; return 0 ;; esac
    done
    echo "(none of $n frames in $module)"
}

# Check every site of an mtalloc ground truth against the session: blocks still live per
# leaking site (AIFO, count and bytes), none live for a transient site, and what a transient
# site allocated and freed (AIFI) where that is one block per call (a moving realloc is
# free + alloc in the engine, so churn_realloc's AIFI count depends on the allocator).
live_check_mtalloc() {
    local name=$1 truth=$2 n i site kind
    n=$(echo "$truth" | jget sites.#)
    [ "$n" -ge 15 ] || fail "ground truth has $n sites: $truth"
    ctl --json status "$name" >"$T/s"
    echo "$name: events $(jget ingest.events <"$T/s"), lost $(live_lost <"$T/s")"
    for ((i = 0; i < n; i++)); do
        site=$(echo "$truth" | jget "sites.$i.site")
        kind=$(echo "$truth" | jget "sites.$i.kind")
        ctl --json stacks "$name" --type AIFO --require "$site" >"$T/j" || fail "stacks --require $site"
        eq "$(jget total.count <"$T/j")" "$(echo "$truth" | jget "sites.$i.live_count")" "$name $site live count"
        eq "$(jget total.size <"$T/j")" "$(echo "$truth" | jget "sites.$i.live_bytes")" "$name $site live bytes"
        if [ "$kind" = transient ] && [ "$site" != churn_realloc ]; then
            ctl --json stacks "$name" --type AIFI --require "$site" >"$T/j" || fail "stacks --require $site"
            eq "$(jget total.count <"$T/j")" "$(echo "$truth" | jget "sites.$i.count")" "$name $site freed count"
            eq "$(jget total.size <"$T/j")" "$(echo "$truth" | jget "sites.$i.bytes")" "$name $site freed bytes"
        fi
    done
}

# live_mtalloc_run PROGRAM NAME [start options]: attach to PROGRAM (3 threads, 40 rounds), let
# it run, check every site while it is still alive, then let it exit.
live_mtalloc_run() {
    local prog=$1 name=$2
    shift 2
    live_setup
    live_app "$name" "$prog" 3 40
    local pid=$APID
    live_attach "$name" "$pid" "$@"
    live_go "$pid"
    live_wait_line "$name" '"done":true'
    live_settle "$name"
    live_check_mtalloc "$name" "$(live_truth "$name")"
    eq "$(ctl --json status "$name" | jget state)" running "state while the target lives"
    live_go "$pid"
    wait "$pid" || fail "$prog exit code"
    ctl stop "$name" >/dev/null 2>&1
    stop_clean
}

case_live_mtalloc() { live_mtalloc_run mtalloc mt; }
case_live_mtalloc_dwarf() { live_mtalloc_run mtalloc mtd --stacks dwarf; }
case_live_mtalloc_jemalloc() { live_mtalloc_run mtalloc-jemalloc mtj; }
case_live_mtalloc_tcmalloc() { live_mtalloc_run mtalloc-tcmalloc mtt; }

# Seed 000 on the Linux port of MemoryTestApp, live: marks around the halfway commit and the
# last four spikes, placed while the app waits, after the session took every event.
live_memorytestapp_run() {
    local name=$1 at
    shift
    live_setup
    live_app mta memorytestapp
    local pid=$APID
    live_attach "$name" "$pid" "$@"
    live_go "$pid"
    for at in mid_before mid_after spikes_before; do
        live_wait_line mta "\"at\":\"$at\""
        live_settle "$name"
        ctl mark "$name" "$at" >/dev/null || fail "mark $at"
        live_go "$pid"
    done
    live_wait_line mta '"done":true'
    live_settle "$name"
    ctl mark "$name" done >/dev/null || fail "mark done"
    local truth
    truth=$(live_truth mta)
    ctl --json status "$name" >"$T/s"
    echo "$name: events $(jget ingest.events <"$T/s"), lost $(live_lost <"$T/s")"

    # Halfway: +10 MiB of steady commit, attributed to main (it calls mmap itself).
    ctl --json commits "$name" --range mid_before:mid_after --sort impact >"$T/j" || fail "commits mid"
    eq "$(jget total.impacting <"$T/j")" "$(echo "$truth" | jget mid_window.impacting)" "halfway impacting"
    eq "$(jget total.count <"$T/j")" 1 "halfway commits"
    eq "$(jget rows.0.impacting <"$T/j")" 10485760 "halfway top row impacting"
    case "$(live_first_app_frame "$T/j" 0 memorytestapp)" in
    *'!main') ;;
    *) fail "halfway commit attributed to $(live_first_app_frame "$T/j" 0 memorytestapp), not main" ;;
    esac

    # The last four spikes: 4 transient commits of 10 MiB by ManipulateTemporaryBuffer, impacting 0.
    ctl --json commits "$name" --range spikes_before:done --type AIFI >"$T/j" || fail "commits spikes"
    eq "$(jget total.count <"$T/j")" "$(echo "$truth" | jget last_four_spikes.count)" "spikes count"
    eq "$(jget total.size <"$T/j")" "$(echo "$truth" | jget last_four_spikes.size)" "spikes size"
    eq "$(jget total.impacting <"$T/j")" 0 "spikes impacting"
    case "$(live_first_app_frame "$T/j" 0 memorytestapp)" in
    *'!ManipulateTemporaryBuffer') ;;
    *) fail "spikes attributed to $(live_first_app_frame "$T/j" 0 memorytestapp)" ;;
    esac
    ctl --json commits "$name" --range spikes_before:done --require ManipulateTemporaryBuffer >"$T/j"
    eq "$(jget total.count <"$T/j")" 4 "ManipulateTemporaryBuffer commits in the last four spikes"
    eq "$(jget total.impacting <"$T/j")" 0 "ManipulateTemporaryBuffer impacting"
    ctl --json commits "$name" --range spikes_before:done --type AIFO,AOFI >"$T/j"
    eq "$(jget total.count <"$T/j")" 0 "commits made or released in the spikes window other than the spikes"

    # The whole run: every commit (2 x main, 10 spikes), main's 20 MiB still committed.
    ctl --json commits "$name" >"$T/j"
    eq "$(jget total.count <"$T/j")" 12 "commits in the run"
    eq "$(jget total.size <"$T/j")" 125829120 "whole-run commit size"
    ctl --json commits "$name" --require ManipulateTemporaryBuffer >"$T/j"
    eq "$(jget total.count <"$T/j")" "$(echo "$truth" | jget commits.1.count)" "spikes in the run"
    eq "$(jget total.size <"$T/j")" "$(echo "$truth" | jget commits.1.bytes)" "spike bytes in the run"
    eq "$(jget total.outstanding <"$T/j")" 0 "spikes outstanding"
    ctl --json commits "$name" --type AIFO >"$T/j"
    eq "$(jget total.size <"$T/j")" "$(echo "$truth" | jget commits.0.live_bytes)" "main's commits outstanding"

    # Heap: InnerLoopOperation's 1200 blocks of 40 bytes outstanding, Initialize's 50 x 1 KiB freed.
    ctl --json stacks "$name" --type AIFO --require InnerLoopOperation >"$T/j" || fail "stacks"
    eq "$(jget total.count <"$T/j")" "$(echo "$truth" | jget heap.0.live_count)" "InnerLoopOperation blocks"
    eq "$(jget total.size <"$T/j")" "$(echo "$truth" | jget heap.0.live_bytes)" "InnerLoopOperation bytes"
    ctl --json stacks "$name" --type AIFO --by frame >"$T/j"
    case "$(jget rows.0.frame <"$T/j")" in
    *'!InnerLoopOperation') ;;
    *) fail "top AIFO frame is $(jget rows.0.frame <"$T/j"), not InnerLoopOperation (cull list?)" ;;
    esac
    ctl --json stacks "$name" --type AIFI --require Initialize >"$T/j"
    eq "$(jget total.count <"$T/j")" "$(echo "$truth" | jget heap.1.count)" "Initialize blocks freed"
    eq "$(jget total.size <"$T/j")" "$(echo "$truth" | jget heap.1.bytes)" "Initialize bytes freed"
    eq "$(ctl --json stacks "$name" --type AIFO --require Initialize | jget total.count)" 0 "Initialize live"

    live_go "$pid"
    wait "$pid" || fail "memorytestapp exit code"
    stop_clean
}

case_live_memorytestapp() { live_memorytestapp_run mta; }
case_live_memorytestapp_dwarf() { live_memorytestapp_run mtad --stacks dwarf; }

# The target exits during the trace: the session stops by itself and keeps its data.
case_live_target_exits() {
    live_setup
    live_app mtx mtalloc --no-pause 2 10
    local pid=$APID i st
    live_attach mtx "$pid"
    live_go "$pid"
    wait "$pid" || fail "mtalloc exit code"
    for ((i = 0; i < LIVE_WAIT * 10; i++)); do
        st=$(ctl --json status mtx | jget state)
        [ "$st" != running ] && break
        sleep 0.1
    done
    ctl --json status mtx >"$T/s" || fail "the session is gone after the target exited"
    case "$(jget state <"$T/s")" in stopped | ended) ;; *) fail "state $(jget state <"$T/s") after exit" ;; esac
    jget stop_reason <"$T/s" | grep -qi exit || fail "stop reason: $(jget stop_reason <"$T/s")"
    live_check_mtalloc mtx "$(live_truth mtx)"
    ctl --json commits mtx >/dev/null || fail "commits on the stopped session"
    stop_clean
}

# A PID that does not exist: a clear error, no session, the daemon keeps serving.
case_live_dead_pid() {
    live_setup
    /bin/true &
    local dead=$!
    wait "$dead"
    kill -0 "$dead" 2>/dev/null && live_skip "pid $dead was reused"
    out=$(ctl start --source bpf --pid "$dead" --name dead 2>&1)
    rc=$?
    echo "$out"
    [ "$rc" -ne 0 ] || fail "start --pid on a dead pid succeeded"
    echo "$out" | grep -q "$dead" || fail "the error does not name the pid: $out"
    echo "$out" | grep -qi 'ESRCH\|no such process\|not found\|ENOENT' || fail "unclear error: $out"
    eq "$(ctl --json ls | jget sessions.#)" 0 "sessions after a refused start"
    ctl ping >/dev/null || fail "daemon stopped serving"
    stop_clean
}

# Attaching twice to one PID is refused; the first session goes on undisturbed.
case_live_attach_twice() {
    live_setup
    live_app tw mtalloc 2 10
    local pid=$APID
    live_attach tw "$pid"
    out=$(ctl start --source bpf --pid "$pid" --name tw2 2>&1)
    rc=$?
    echo "$out"
    [ "$rc" -ne 0 ] || fail "a second attach to $pid succeeded"
    echo "$out" | grep -qi 'already\|EEXIST\|EBUSY' || fail "unclear error: $out"
    eq "$(ctl --json ls | jget sessions.#)" 1 "sessions after the refused second attach"
    live_go "$pid"
    live_wait_line tw '"done":true'
    live_settle tw
    live_check_mtalloc tw "$(live_truth tw)"
    live_go "$pid"
    wait "$pid"
    stop_clean
}

# BPF programs and links held by the daemon: its descriptors, what bpftool lists as its own.
# (bpftool's "pids" need a bpftool built with BPF skeletons; Debian 12's 7.1 prints none.)
live_bpf_held() {
    local want n=0 f
    case "$1" in
    prog) want='anon_inode:bpf-prog' ;;
    link) want='anon_inode:bpf-link|anon_inode:\[perf_event\]' ;;
    esac
    for f in /proc/"$DPID"/fd/*; do
        readlink "$f" 2>/dev/null | grep -Eqx "$want" && n=$((n + 1))
    done
    echo "$n"
}

# stop detaches everything: no BPF program or link held by the daemon, no uprobe left on the
# target's files; the session keeps its data.
case_live_stop_detaches() {
    live_setup
    command -v bpftool >/dev/null || live_skip "bpftool missing"
    eq "$(live_bpf_held prog)" 0 "programs held before attach"
    eq "$(live_bpf_held link)" 0 "links held before attach"
    local up=/sys/kernel/tracing/uprobe_events
    local up_before=
    [ -r "$up" ] && up_before=$(grep -c "$LIVE_APPS\|libc.so" "$up")
    live_app sd mtalloc 2 10
    local pid=$APID
    live_attach sd "$pid"
    [ "$(live_bpf_held prog)" -gt 0 ] || fail "no BPF program held while attached: the check cannot see them"
    live_go "$pid"
    live_wait_line sd '"done":true'
    live_settle sd
    # Pings from another client are answered while the stop removes the probes (each link's
    # removal waits for the kernel: ~0.5 s for a jemalloc target, held on the loop before).
    "$HT_TOOL" pingwatch "$HEAPTRACE_PIPE" "$T/stopped" $((150 * ${HT_TIME_FACTOR:-1})) "$DPID" $((100 * ${HT_TIME_FACTOR:-1})) >"$T/ping.out" 2>&1 &
    local wpid=$!
    sleep 0.2
    ctl stop sd >/dev/null || fail "stop"
    eq "$(ctl --json status sd | jget state)" stopped "state after stop"
    wait_drained sd
    touch "$T/stopped"
    wait "$wpid" || fail "pings stalled while the stop detached: $(cat "$T/ping.out")"
    eq "$(live_bpf_held prog)" 0 "programs held after stop"
    eq "$(live_bpf_held link)" 0 "links held after stop"
    # Probes made through perf_event_open never show in uprobe_events; ones made through tracefs
    # must be gone (tracefs may have been mounted by the daemon meanwhile: then none were there).
    [ -r "$up" ] && eq "$(grep -c "$LIVE_APPS\|libc.so" "$up")" "${up_before:-0}" "uprobe_events entries after stop"
    # The target runs on, untraced, and the data stays.
    kill -0 "$pid" || fail "the target died"
    live_check_mtalloc sd "$(live_truth sd)"
    live_go "$pid"
    wait "$pid" || fail "the target's exit code after detach"
    stop_clean
}
