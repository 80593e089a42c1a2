# Live tracing with the eBPF source (issue 9): start --pid on a small target
# with known allocations (tests/unit/bpf/bpf-target.c), its counts through
# the real daemon and ctl, and nothing left in the kernel after stop.
# Sourced by run.sh.

# HT_BPF_TARGET: another build of bpf-target.c (bpf-target-je: linked with jemalloc).
bpf_target() {
    echo "${HT_BPF_TARGET:-$(dirname "$HT_DAEMON")/../tests/unit/bpf/bpf-target}"
}

# Skips (77) where live tracing cannot run: call after start_daemon.
bpf_need() {
    if [ "$(id -u)" != 0 ]; then
        echo "skip: live tracing with eBPF needs root"
        exit 77
    fi
    ctl --json version | tr -d ' \t\n' | grep -q '"name":"bpf"' || {
        echo "skip: this build has no eBPF source"
        exit 77
    }
    [ -x "$(bpf_target)" ] || fail "no bpf-target at $(bpf_target)"
}

# BPF objects the daemon holds: programs, links, maps and perf events open
# as descriptors (what bpftool lists as its own).
bpf_fds() {
    local n=0 f
    for f in /proc/"$DPID"/fd/*; do
        case "$(readlink "$f" 2>/dev/null)" in
        anon_inode:bpf-prog | anon_inode:bpf-link | anon_inode:bpf-map | anon_inode:*perf_event*)
            n=$((n + 1)) ;;
        esac
    done
    echo "$n"
}

# bpf_spawn: start the target reading its stdin from fd 7; sets BPF_TPID.
bpf_spawn() {
    mkfifo "$T/in"
    "$(bpf_target)" <"$T/in" >"$T/target.out" &
    BPF_TPID=$!
    exec 7>"$T/in"
    bpf_wait_line ready
}

bpf_wait_line() {
    for _ in $(seq 200); do
        grep -q "$1" "$T/target.out" 2>/dev/null && return 0
        sleep 0.05
    done
    fail "target did not print $1"
}

# The rows of `stacks --by frame` whose frame ends in $1, summed (each call
# site is its own frame: an address): "count outstanding_count outstanding".
bpf_frame_row() {
    local n i f c=0 oc=0 o=0
    n=$(jget rows.# <"$T/stacks.json")
    for i in $(seq 0 $((n - 1))); do
        f=$(jget "rows.$i.frame" <"$T/stacks.json")
        case "$f" in
        *"$1")
            c=$((c + $(jget "rows.$i.count" <"$T/stacks.json")))
            oc=$((oc + $(jget "rows.$i.outstanding_count" <"$T/stacks.json")))
            o=$((o + $(jget "rows.$i.outstanding" <"$T/stacks.json"))) ;;
        esac
    done
    echo "$c $oc $o"
}

case_bpf_attach_counts() {
    start_daemon
    bpf_need
    bpf_spawn
    local before
    before=$(bpf_fds)
    ctl start --source bpf --pid "$BPF_TPID" --name live >"$T/start.out" 2>&1 || fail "start --pid: $(cat "$T/start.out")"
    [ "$(bpf_fds)" -gt "$before" ] || fail "nothing attached"
    echo go >&7
    bpf_wait_line done
    # The consumer polls the kernel ring every 10 ms; give the session time to take it all.
    local row=
    for _ in $(seq 100); do
        ctl --json stacks live --by frame >"$T/stacks.json" || fail "stacks"
        row=$(bpf_frame_row '!leaf_alloc')
        case "$row" in "9 2 9825" | "10 2 9825") break ;; esac
        sleep 0.05
    done
    # 5 malloc(777), calloc, posix_memalign, aligned_alloc, malloc(3 MiB) made
    # in leaf_alloc, and the realloc, one more block when it moves (jemalloc
    # moves it, glibc grows it in place); the realloc'ed block (7777) and the
    # aligned one (2048) stay.
    case "$row" in
    "9 2 9825" | "10 2 9825") ;;
    *) fail "leaf_alloc: count, outstanding count, outstanding bytes: got '$row', expected '9|10 2 9825'" ;;
    esac
    eq "$(jget quality.lost <"$T/stacks.json")" 0 "lost events"
    # One 64 KiB commit outside the allocator, released; malloc's own 3 MiB mmap is no commit.
    ctl --json commits live --by frame >"$T/commits.json" || fail "commits"
    eq "$(jget total.count <"$T/commits.json")" 1 "commits"
    eq "$(jget total.size <"$T/commits.json")" 65536 "committed bytes"
    eq "$(jget total.outstanding <"$T/commits.json")" 0 "commits outstanding"
    # The target exits (code 7): the session stops by itself and keeps its data.
    echo x >&7
    exec 7>&-
    wait "$BPF_TPID"
    eq "$?" 7 "target exit code"
    local st=
    for _ in $(seq 100); do
        st=$(ctl --json status live | jget state)
        case "$st" in stopped | ended) break ;; esac
        sleep 0.05
    done
    case "$st" in
    stopped | ended) ;;
    *) fail "session state after the target exited: $st" ;;
    esac
    ctl --json stacks live --by frame >"$T/stacks.json" || fail "stacks after exit"
    eq "$(bpf_frame_row '!leaf_alloc')" "$row" "leaf_alloc after exit"
    eq "$(bpf_fds)" "$before" "BPF objects left in the daemon after the target exited"
    stop_clean
}

case_bpf_stop_detaches() {
    start_daemon
    bpf_need
    bpf_spawn
    local before
    before=$(bpf_fds)
    ctl start --source bpf --pid "$BPF_TPID" --name live --stacks dwarf >/dev/null 2>&1 || fail "start --pid"
    # A second session on the same process is refused: every event would count twice.
    ctl start --source bpf --pid "$BPF_TPID" --name again >"$T/again.out" 2>&1 && fail "second attach accepted"
    grep -q "already traced" "$T/again.out" || fail "second attach: $(cat "$T/again.out")"
    ctl stop live >/dev/null || fail "stop"
    wait_drained live
    eq "$(bpf_fds)" "$before" "BPF objects left after stop"
    # The process is fine and runs untraced.
    echo go >&7
    bpf_wait_line done
    echo x >&7
    exec 7>&-
    wait "$BPF_TPID"
    eq "$?" 7 "target exit code"
    # A PID that does not exist: a clear error, no session.
    ctl start --source bpf --pid "$BPF_TPID" --name gone >"$T/gone.out" 2>&1 && fail "attach to a dead PID accepted"
    grep -q "no process" "$T/gone.out" || fail "dead PID: $(cat "$T/gone.out")"
    stop_clean
}
