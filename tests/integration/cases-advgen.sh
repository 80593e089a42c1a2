# Adversarial review of issue 21's fixes (stop, clients, exports, --by frame):
# what broke under hostile or careless use. Sourced by run.sh (bpf_need from
# cases-bpf.sh).

ADVGEN_FACTOR=${HT_TIME_FACTOR:-1}

# check_stop_cut NAME OUT: session NAME traces pairloop (its output in OUT) running; once it took
# 20,000 events, a stop: the trace holds whole pairs, at most one live block, no unknown free.
check_stop_cut() {
    local name=$1 out=$2 st= i
    for _ in $(seq 400); do
        [ "$(ctl --json status "$name" | jget quality.events)" -gt 20000 ] && break
        sleep 0.01
    done
    ctl stop "$name" >/dev/null || fail stop
    for i in $(seq $((400 * ADVGEN_FACTOR))); do
        ctl --json status "$name" >"$T/s" || fail status
        st=$(jget state <"$T/s")
        [ "$st" != running ] && ! grep -q '"draining"' "$T/s" && break
        sleep 0.05
    done
    eq "$st" stopped "state after the stop"
    grep -q '"done"' "$out" && fail "pairloop ended before the stop: no cut to check"
    ctl --json stacks "$name" --require pairs --by type >"$T/j" || fail stacks
    echo "pairs seen $(jget total.count <"$T/j"), live $(jget total.outstanding_count <"$T/j")," \
        "unknown frees $(jget quality.unknown_frees <"$T/s"), lost $(jget quality.lost <"$T/s")"
    [ "$(jget total.count <"$T/j")" -gt 10000 ] || fail "too few pairs traced"
    eq "$(jget quality.unknown_frees <"$T/s")" 0 "unknown frees after the stop"
    [ "$(jget total.outstanding_count <"$T/j")" -le 1 ] ||
        fail "$(jget total.outstanding_count <"$T/j") blocks live: a malloc kept without its free"
}

# A stop while the target allocates and frees as fast as it can: the trace
# ends at one instant. pairloop frees each block at once, so a trace cut
# anywhere holds whole pairs and at most one live block. The probes used to
# be removed one by one (~0.5 s for the ~25 links) while the target ran and
# the programs still took events: the frees of blocks whose malloc probe was
# already gone were applied (the stop applies what was taken) as unknown
# frees, ~20,000 of them per stop, a loss that was the tracer's doing.
case_advgen_stop_cut_at_one_instant() {
    start_daemon
    bpf_need
    local app apid
    app="$(dirname "$HT_DAEMON")/../tests/apps/pairloop"
    [ -x "$app" ] || fail "no pairloop at $app"
    "$app" 50000000 >"$T/app.out" </dev/null &
    apid=$!
    trap 'kill -KILL "$apid" 2>/dev/null; cleanup' EXIT
    for _ in $(seq 200); do grep -q ready "$T/app.out" && break; sleep 0.05; done
    ctl start --source bpf --pid "$apid" --name pl >"$T/start.out" 2>&1 || fail "start --pid: $(cat "$T/start.out")"
    kill -USR1 "$apid"
    check_stop_cut pl "$T/app.out"
    kill "$apid" 2>/dev/null
    wait "$apid" 2>/dev/null
    stop_clean
}
