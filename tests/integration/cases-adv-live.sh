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
        [ "$(readlink "/proc/$pid/exe")" = "$(command -v sleep)" ] && break
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
