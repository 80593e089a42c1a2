# Adversarial cases for live tracing (start --pid): what a hostile user or an unusual target does
# to the eBPF source. Sourced by run.sh; the helpers (live_setup, live_app, ...) come from
# cases-live.sh. Event counts stay small; no case asserts a time.

# adv_wait_state NAME: wait until the session is no longer running; prints its status JSON.
adv_wait_state() {
    local i st
    for ((i = 0; i < LIVE_WAIT * 10; i++)); do
        st=$(ctl --json status "$1" | jget state)
        [ "$st" != running ] && break
        sleep 0.1
    done
    ctl --json status "$1"
}

# The target executes a new program: its heap is gone (the blocks it held are not leaks of the
# new program) and the probes may not cover the new program's allocator. The session ends there,
# saying why, with the data taken until then; the new program runs on untraced.
case_adv_live_exec() {
    live_setup
    mkfifo "$T/exec.in" || fail "mkfifo"
    # bash allocates as it reads the script; 'exec' replaces it with sleep.
    bash -c 'read -r line <"$1"; exec sleep 30' adv-exec "$T/exec.in" &
    local pid=$!
    LIVE_PIDS+=("$pid")
    sleep 0.2
    live_attach ex "$pid"
    echo go >"$T/exec.in"
    local i
    for ((i = 0; i < LIVE_WAIT * 10; i++)); do
        case "$(readlink "/proc/$pid/exe")" in */sleep) break ;; esac
        sleep 0.1
    done
    adv_wait_state ex >"$T/s"
    eq "$(jget state <"$T/s")" ended "state after the target's exec"
    jget stop_reason <"$T/s" | grep -qi exec || fail "stop reason: $(jget stop_reason <"$T/s")"
    kill -0 "$pid" || fail "the target died"
    eq "$(live_bpf_held link)" 0 "links held after the exec ended the trace"
    ctl --json stacks ex >/dev/null || fail "stacks on the ended session"
    stop_clean
}

# The kernel ring overflows while the daemon is held (SIGSTOP stands for a loop kept busy): the
# records it had no room for are counted once in the data quality, never silently and never
# twice (they arrive as lost events and were also added from the source's counters): what the
# session took plus what it says it lost cannot exceed what the target did.
case_adv_live_lost_once() {
    live_setup
    local pairs=100000
    live_app lo allocbench "$pairs" 1
    local pid=$APID
    live_attach lo "$pid"
    ctl --json status lo >"$T/s0"
    local ev0
    ev0=$(jget quality.events <"$T/s0")
    kill -STOP "$DPID"
    live_go "$pid"
    live_wait_line lo '"ns_per_pair"'
    kill -CONT "$DPID"
    wait "$pid" || fail "allocbench exit code"
    adv_wait_state lo >"$T/s"
    local ev lost
    ev=$(jget quality.events <"$T/s")
    lost=$(jget quality.lost <"$T/s")
    echo "events $ev (before go $ev0), lost $lost, target's calls $((2 * pairs))"
    [ "$lost" -gt 0 ] || fail "no lost events reported although the daemon was held (events $ev)"
    # Besides malloc/free: the lost and private-bytes events, the exit, stdio's buffer.
    [ $((ev - ev0 + lost)) -le $((2 * pairs + 1000)) ] ||
        fail "taken $((ev - ev0)) + lost $lost > the target's $((2 * pairs)) calls: lost counted twice"
    stop_clean
}

# The kernel's 16 MiB ring of each live session is real memory mapped into the daemon: the
# session's memory accounting shows it (source_buffers) and a budget that cannot hold it refuses
# the start with a clear error, nothing attached (16 idle sessions held ~550 MB RSS while the
# status said ~100 MB used).
case_adv_live_ring_budget() {
    live_setup
    live_app rb mtalloc 2 10
    local pid=$APID
    live_attach rb "$pid"
    ctl --json status rb >"$T/s"
    local sb
    sb=$(jget memory.by_structure.source_buffers <"$T/s")
    [ "$sb" -ge 16777216 ] || fail "source_buffers $sb: the kernel ring is not accounted"
    ctl drop rb >/dev/null || fail "drop"
    stop_clean
    echo '{"session_memory_budget": 12582912}' >"$T/cfg.json"
    start_daemon --config "$T/cfg.json"
    out=$(ctl start --source bpf --pid "$pid" --name rb2 2>&1)
    rc=$?
    echo "$out"
    [ "$rc" -ne 0 ] || fail "a live session started within a 12 MiB budget"
    echo "$out" | grep -qi 'budget' || fail "unclear error: $out"
    eq "$(ctl --json ls | jget sessions.#)" 0 "sessions after the refused start"
    eq "$(live_bpf_held prog)" 0 "programs held after the refused start"
    live_go "$pid"
    stop_clean
}

# A client admitted without being root (group heaptrace) must not make the root daemon probe
# another user's process: it traces only its own (all of the target's uids its own, as ptrace
# asks). The group is created for the case when the host has none, and removed after.
case_adv_live_other_user() {
    command -v setpriv >/dev/null || live_skip "setpriv missing"
    command -v groupadd >/dev/null || live_skip "groupadd missing"
    live_setup
    ADV_GROUP_MADE=
    if ! getent group heaptrace >/dev/null; then
        groupadd --system heaptrace || live_skip "cannot create group heaptrace"
        ADV_GROUP_MADE=1
        trap 'live_cleanup; [ -n "$ADV_GROUP_MADE" ] && groupdel heaptrace' EXIT
    fi
    local gid
    gid=$(getent group heaptrace | cut -d: -f3)
    # A fresh daemon: its socket is bound with the group, the directory open to pass through.
    ctl shutdown >/dev/null
    wait "$DPID"
    chmod 711 "$T"
    start_daemon
    local as_user=(setpriv --reuid=65534 --regid="$gid" --clear-groups)
    "${as_user[@]}" "$HT_CTL" ping >/dev/null || fail "uid 65534 in group heaptrace is not admitted"
    live_app ou mtalloc 2 10 # root's
    local root_pid=$APID
    out=$("${as_user[@]}" "$HT_CTL" start --source bpf --pid "$root_pid" --name ou 2>&1)
    rc=$?
    echo "$out"
    [ "$rc" -ne 0 ] || fail "uid 65534 attached to root's process $root_pid"
    echo "$out" | grep -q 'EPERM' || fail "unclear error: $out"
    eq "$(ctl --json ls | jget sessions.#)" 0 "sessions after the refused start"
    # Its own process: allowed.
    "${as_user[@]}" "$LIVE_APPS/mtalloc" 2 10 >"$T/own.out" 2>&1 </dev/null &
    local own=$!
    LIVE_PIDS+=("$own")
    live_wait_line own '"ready":true'
    "${as_user[@]}" "$HT_CTL" start --source bpf --pid "$own" --name own >"$T/start.out" 2>&1 ||
        fail "uid 65534 cannot trace its own process: $(cat "$T/start.out")"
    ctl drop own >/dev/null
    live_go "$root_pid"
    live_go "$own"
    stop_clean
}

# check_mremap_commit NAME: mapgrow's mapping grown to 192 KiB is one commit, grow_mapping's.
check_mremap_commit() {
    ctl --json commits "$1" --size 196608:196609 >"$T/j" || fail "commits"
    eq "$(jget total.count <"$T/j")" 1 "commits of the grown size"
    case "$(live_first_app_frame "$T/j" 0 mapgrow)" in
    *'!grow_mapping') ;;
    *) fail "the mremap commit is attributed to $(live_first_app_frame "$T/j" 0 mapgrow): $(jget rows.0.frames <"$T/j")" ;;
    esac
}

# A mapping grown with mremap by a named function: the commit of the grown range is that
# function's (glibc's mremap has a frame but no frame pointer, so the walk from the syscall
# started at its caller's caller).
case_adv_live_mremap_caller() {
    live_setup
    live_app mg mapgrow
    local pid=$APID
    live_attach mg "$pid"
    live_go "$pid"
    live_wait_line mg '"done":true'
    live_settle mg
    check_mremap_commit mg
    live_go "$pid"
    wait "$pid" || fail "mapgrow exit code"
    stop_clean
}
