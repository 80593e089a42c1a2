# Issue 22: the in-process agent, `heaptracectl run` (source "agent"). The ctl asks for a session
# and execs the program itself with libheaptrace-agent.so preloaded: the traced pid is the ctl's,
# the program runs as whoever ran the ctl. Every answer is checked against the ground truth the
# test app prints (tests/apps: mtalloc, agentcase). Sourced by run.sh; the live helpers
# (live_wait_line, live_truth, live_check_mtalloc, live_settle, ...) come from cases-live.sh, the
# member helpers from cases-sec.sh. Event counts stay small.

# Start the daemon; skip unless a source serves launch and the apps are built.
agent_setup() {
    [ -n "$LIVE_APPS" ] && [ -x "$LIVE_APPS/agentcase" ] || live_skip "test apps not built"
    trap live_cleanup EXIT
    start_daemon "$@"
    ctl --json version >"$T/version.json" || fail "version"
    # Linux builds have it (sources.def): its absence is a failure, not a skip.
    grep -q '"agent"' "$T/version.json" || fail "no agent source in version: $(cat "$T/version.json")"
}

# agent_run TAG [run options] -- CMD ARGS...: heaptracectl run in the background, the program's
# stdout in $T/TAG.out, the ctl's and the program's stderr in $T/TAG.err; waits for the ready
# line. APID: the ctl's pid, which the program keeps.
agent_run() {
    local tag=$1
    shift
    "$HT_CTL" run "$@" >"$T/$tag.out" 2>"$T/$tag.err" </dev/null &
    APID=$!
    LIVE_PIDS+=("$APID")
    live_wait_line "$tag" '"ready":true'
    eq "$(grep '"ready"' "$T/$tag.out" | jget pid)" "$APID" "the program's pid is the ctl's"
}

# agent_sites NAME TRUTH [SKIP]: every site's live count and bytes (AIFO) as the ground truth
# says, but the site named SKIP.
agent_sites() {
    local name=$1 truth=$2 skip=${3:-} n i site
    n=$(echo "$truth" | jget sites.#)
    for ((i = 0; i < n; i++)); do
        site=$(echo "$truth" | jget "sites.$i.site")
        [ "$site" = "$skip" ] && continue
        ctl --json stacks "$name" --type AIFO --require "$site" >"$T/j" || fail "stacks --require $site"
        eq "$(jget total.count <"$T/j")" "$(echo "$truth" | jget "sites.$i.live_count")" "$name $site live count"
        eq "$(jget total.size <"$T/j")" "$(echo "$truth" | jget "sites.$i.live_bytes")" "$name $site live bytes"
    done
}

# agent_ended NAME: wait until the session stopped taking input (the program is gone).
agent_ended() {
    local i st
    for ((i = 0; i < LIVE_WAIT * 10; i++)); do
        st=$(ctl --json status "$1" | jget state)
        [ "$st" != running ] && return 0
        sleep 0.1
    done
    fail "session $1 still $st after the program ended"
}

# agent_mtalloc_run PROG NAME [run options]: mtalloc (3 threads, 40 rounds) under run, every site
# checked while it waits, nothing lost; the session ends when it exits and keeps its data.
agent_mtalloc_run() {
    local prog=$1 name=$2
    shift 2
    agent_setup
    [ -x "$LIVE_APPS/$prog" ] || live_skip "$prog not built"
    agent_run "$name" --name "$name" "$@" -- "$LIVE_APPS/$prog" 3 40
    local pid=$APID
    eq "$(ctl --json status "$name" | jget process.pid)" "$pid" "session pid"
    eq "$(ctl --json status "$name" | jget source)" agent "source"
    live_go "$pid"
    live_wait_line "$name" '"done":true'
    live_settle "$name"
    live_check_mtalloc "$name" "$(live_truth "$name")"
    eq "$(ctl --json status "$name" | live_lost)" 0 "lost events"
    eq "$(ctl --json status "$name" | jget source_status.malformed)" 0 "malformed records"
    live_go "$pid"
    wait "$pid" || fail "$prog exit code"
    agent_ended "$name"
    ctl --json status "$name" | jget stop_reason | grep -qi exit || fail "stop reason"
    live_check_mtalloc "$name" "$(live_truth "$name")"
    stop_clean
}

case_agent_mtalloc() { agent_mtalloc_run mtalloc agmt; }
case_agent_mtalloc_jemalloc() { agent_mtalloc_run mtalloc-jemalloc agmtj; }
case_agent_mtalloc_tcmalloc() { agent_mtalloc_run mtalloc-tcmalloc agmtt; }

# --stacks fp: the frame-pointer walk, right where every frame keeps one (mtalloc is built with
# them; Debian's libc is not, so strdup's caller is skipped over: that site is left out).
case_agent_mtalloc_fp() {
    agent_setup
    agent_run agfp --name agfp --stacks fp -- "$LIVE_APPS/mtalloc" 3 10
    live_go "$APID"
    live_wait_line agfp '"done":true'
    live_settle agfp
    eq "$(ctl --json status agfp | jget source_status.stacks)" fp "stack mode"
    agent_sites agfp "$(live_truth agfp)" leak_strdup
    live_go "$APID"
    wait "$APID" || fail "mtalloc exit code"
    stop_clean
}

# agent_case TAG MODE: agentcase MODE under run, let it go, its ground truth checked once the
# session took everything; the program exits 0.
agent_case() {
    local tag=$1 mode=$2
    shift 2
    agent_setup
    agent_run "$tag" --name "$tag" "$@" -- "$LIVE_APPS/agentcase" "$mode" "$LIVE_APPS"
    live_go "$APID"
    if [ "$mode" = dlopen ]; then
        live_wait_line "$tag" '"at":"loaded"'
        live_settle "$tag"
        live_go "$APID"
    fi
    live_wait_line "$tag" '"done":true'
    live_settle "$tag"
    agent_sites "$tag" "$(live_truth "$tag")"
    eq "$(ctl --json status "$tag" | live_lost)" 0 "$tag lost events"
}

# fork without --follow: the child runs untraced, never writes into the parent's ring; the
# parent is traced on after the fork.
case_agent_fork() {
    agent_case agfork fork
    eq "$(live_truth agfork | jget child_status)" 0 "child exit status"
    eq "$(ctl --json status agfork | jget source_status.malformed)" 0 "malformed records"
    eq "$(ctl --json ls | jget sessions.#)" 1 "sessions (no child session without --follow)"
    live_go "$APID"
    wait "$APID" || fail "agentcase exit code"
    stop_clean
}

# fork with --follow: the child is a session of its own, NAME.PID, with the child's allocations;
# the parent's session has none of them.
case_agent_fork_follow() {
    agent_case agff fork --follow
    local child
    child=$(live_truth agff | jget child_pid)
    eq "$(live_truth agff | jget child_status)" 0 "child exit status"
    ctl --json status "agff.$child" >"$T/s" || fail "no session agff.$child: $(ctl ls)"
    eq "$(jget process.pid <"$T/s")" "$child" "the child session's pid"
    ctl --json stacks "agff.$child" --type AIFO --require child_leak >"$T/j"
    eq "$(jget total.count <"$T/j")" 40 "the child's blocks"
    eq "$(jget total.size <"$T/j")" 8000 "the child's bytes"
    eq "$(ctl --json stacks "agff.$child" --type AIFO --require after_fork | jget total.count)" 0 \
        "the parent's later blocks in the child's session"
    eq "$(ctl --json status agff | jget source_status.spawned)" 1 "sessions spawned"
    live_go "$APID"
    wait "$APID" || fail "agentcase exit code"
    stop_clean
}

# exec: the process stays traced in the program it execs (the same pid, the same session); the
# old program's blocks end at the exec (freed with its address space), the new program's
# environment has neither the agent in LD_PRELOAD nor its variables (taken out again at load), and
# the session ends when the process exits.
case_agent_exec() {
    agent_case agexec exec
    live_go "$APID"
    wait "$APID" || fail "exit code after the exec"
    live_wait_line agexec child_env
    eq "$(grep child_env "$T/agexec.out" | jget child_env)" "||" "the exec'd program's environment"
    agent_ended agexec
    ctl --json status agexec >"$T/s"
    eq "$(jget source_status.execs <"$T/s")" 1 "execs"
    eq "$(jget stop_reason <"$T/s")" "target exited" "stop reason"
    eq "$(jget process.name <"$T/s")" sh "the process's program after the exec"
    eq "$(jget quality.decommit_unknown <"$T/s")" 0 "unknown decommits"
    ctl --json stacks agexec --require before_exec >"$T/j"
    eq "$(jget total.count <"$T/j")" 25 "the old program's blocks"
    eq "$(jget total.outstanding_count <"$T/j")" 0 "the old program's blocks live after the exec"
    # The new program (Debian's /bin/sh, named as it was started) allocated under its own frames,
    # named though it lived a moment: it flushed before its _exit.
    # (dash is named by its file or by the name it was started by, sh.)
    ctl --json stacks agexec --require 'sh!' >"$T/k"
    ctl --json stacks agexec --require 'dash!' >"$T/k2"
    [ "$(($(jget total.count <"$T/k") + $(jget total.count <"$T/k2")))" -gt 0 ] || fail "no block of the exec'd sh: $(ctl stacks agexec --top 5 --no-default-cull)"
    stop_clean
}

# dlopen/dlclose: a library's frames keep their names after it is unloaded (taken while it
# was mapped: the app waits before its dlclose).
case_agent_dlopen() {
    agent_case agdl dlopen
    ctl --json stacks agdl --type AIFO --require plug_alloc >"$T/j"
    jget rows.0.frames <"$T/j" | grep -q 'libagentplug.so!plug_alloc' || fail "frames: $(jget rows.0.frames <"$T/j")"
    live_go "$APID"
    wait "$APID" || fail "agentcase exit code"
    stop_clean
}

# A signal handler that allocates: traced, attributed to the handler (the unwinder crosses the
# signal frame).
case_agent_signal() {
    agent_case agsig signal
    eq "$(live_truth agsig | jget sites.0.live_count)" 15 "signals handled"
    live_go "$APID"
    wait "$APID" || fail "agentcase exit code"
    stop_clean
}

# A non-root member of group heaptrace runs a program: the program runs as the member, the
# session is the member's.
case_agent_member() {
    sec_group
    [ -x "$LIVE_APPS/agentcase" ] || live_skip "test apps not built"
    trap sec_cleanup EXIT
    chmod 711 "$T"
    agent_setup
    trap sec_cleanup EXIT
    setpriv --reuid=65534 --regid="$SEC_GID" --clear-groups "$HT_CTL" run --name agm -- \
        "$LIVE_APPS/agentcase" fork "$LIVE_APPS" >"$T/agm.out" 2>"$T/agm.err" </dev/null &
    APID=$!
    LIVE_PIDS+=("$APID")
    live_wait_line agm '"ready":true'
    eq "$(stat -c %u /proc/"$APID")" 65534 "the program's uid"
    eq "$(grep '"ready"' "$T/agm.out" | jget pid)" "$APID" "the program's pid is the ctl's"
    live_go "$APID"
    live_wait_line agm '"done":true'
    live_settle agm
    agent_sites agm "$(live_truth agm)"
    ctl --json ls >"$T/j"
    eq "$(jget sessions.0.pid <"$T/j")" "$APID" "session pid"
    live_go "$APID"
    wait "$APID" || fail "agentcase exit code"
    stop_clean
}

# The daemon killed (-9) under a running program: the program finishes normally.
case_agent_daemon_killed() {
    agent_setup
    agent_run agk --name agk -- "$LIVE_APPS/agentcase" spin 1500
    live_go "$APID"
    sleep 0.3
    kill -KILL "$DPID"
    wait "$DPID" 2>/dev/null
    DPID=
    live_wait_line agk '"done":true'
    live_go "$APID"
    wait "$APID" || fail "agentcase exit code after the daemon died"
    [ "$(live_truth agk | jget pairs)" -gt 0 ] || fail "no work done"
}

# A hostile agent (tests/apps/agenthostile: a wrong token, an unsealed memfd, then garbage in the
# shared memory, then a second agent): the daemon refuses and counts, takes what holds, never
# crashes or stalls, and keeps serving.
case_agent_hostile() {
    agent_setup
    [ -x "$LIVE_APPS/agenthostile" ] || live_skip "agenthostile not built"
    "$HT_CTL" run --name hostile -- "$LIVE_APPS/agenthostile" >"$T/h.out" 2>"$T/h.err" </dev/null &
    local hp=$! t0 t1
    LIVE_PIDS+=("$hp")
    live_wait_line h '"quiet":true'
    # The daemon serves while a connection of the program's keeps quiet.
    t0=$(date +%s%N)
    ctl ping >/dev/null || fail "ping while the agent keeps quiet"
    t1=$(date +%s%N)
    [ $(((t1 - t0) / 1000000)) -lt 1000 ] || fail "ping took $(((t1 - t0) / 1000000)) ms"
    wait "$hp"
    eq "$?" 0 "agenthostile exit code ($(cat "$T/h.err"))"
    agent_ended hostile
    ctl --json status hostile >"$T/s" || fail "status"
    echo "hostile: $(jget source_status <"$T/s")"
    eq "$(jget source_status.refused.token <"$T/s")" 1 "refused for the token"
    eq "$(jget source_status.refused.memfd <"$T/s")" 1 "refused for the memfd"
    eq "$(jget source_status.refused.extra <"$T/s")" 1 "refused as a second agent"
    eq "$(jget source_status.refused.slow <"$T/s")" 1 "refused for no hello"
    [ "$(jget source_status.malformed <"$T/s")" -gt 1000 ] || fail "malformed records not counted"
    [ "$(jget source_status.bad_stacks <"$T/s")" -gt 100 ] || fail "bad stacks not counted"
    [ "$(jget source_status.stuck <"$T/s")" -gt 0 ] || fail "stuck records not counted"
    ctl --json stacks hostile >/dev/null || fail "stacks on the hostile session"
    ctl --json commits hostile >/dev/null || fail "commits on the hostile session"
    ctl ping >/dev/null || fail "the daemon stopped serving"
    stop_clean
}

# MemoryTestApp (seed 000) under run: the commits (mmap) and the heap as the app says, with the
# marks the lab zooms on (the same checks as the eBPF case, on the agent's records).
case_agent_memorytestapp() {
    agent_setup
    [ -x "$LIVE_APPS/memorytestapp" ] || live_skip "memorytestapp not built"
    agent_run mta --name agmta -- "$LIVE_APPS/memorytestapp"
    local at truth
    live_go "$APID"
    for at in mid_before mid_after spikes_before; do
        live_wait_line mta "\"at\":\"$at\""
        live_settle agmta
        ctl mark agmta "$at" >/dev/null || fail "mark $at"
        live_go "$APID"
    done
    live_wait_line mta '"done":true'
    live_settle agmta
    ctl mark agmta done >/dev/null || fail "mark done"
    truth=$(live_truth mta)
    ctl --json commits agmta --range mid_before:mid_after --sort impact >"$T/j" || fail "commits mid"
    eq "$(jget total.impacting <"$T/j")" "$(echo "$truth" | jget mid_window.impacting)" "halfway impacting"
    ctl --json commits agmta --range spikes_before:done --type AIFI >"$T/j" || fail "commits spikes"
    eq "$(jget total.count <"$T/j")" "$(echo "$truth" | jget last_four_spikes.count)" "spikes count"
    eq "$(jget total.size <"$T/j")" "$(echo "$truth" | jget last_four_spikes.size)" "spikes size"
    ctl --json commits agmta >"$T/j"
    eq "$(jget total.count <"$T/j")" 12 "commits in the run"
    eq "$(jget total.size <"$T/j")" 125829120 "whole-run commit size"
    ctl --json commits agmta --type AIFO >"$T/j"
    eq "$(jget total.size <"$T/j")" "$(echo "$truth" | jget commits.0.live_bytes)" "main's commits outstanding"
    ctl --json stacks agmta --type AIFO --require InnerLoopOperation >"$T/j"
    eq "$(jget total.count <"$T/j")" "$(echo "$truth" | jget heap.0.live_count)" "InnerLoopOperation blocks"
    eq "$(jget total.size <"$T/j")" "$(echo "$truth" | jget heap.0.live_bytes)" "InnerLoopOperation bytes"
    ctl --json stacks agmta --type AIFI --require Initialize >"$T/j"
    eq "$(jget total.count <"$T/j")" "$(echo "$truth" | jget heap.1.count)" "Initialize blocks freed"
    live_go "$APID"
    wait "$APID" || fail "memorytestapp exit code"
    stop_clean
}

# --follow across fork+exec (posix_spawn, as Python's subprocess does): the program the child
# execs loads the agent (the environment is kept) and is a session of its own, NAME.PID.
case_agent_follow_exec() {
    agent_setup
    [ -x /usr/bin/python3 ] || live_skip "python3 missing"
    "$HT_CTL" run --follow --name agfe -- /usr/bin/python3 -c \
        "import subprocess; p = subprocess.Popen(['/usr/bin/python3', '-c', 'import time; x = [bytearray(5000) for i in range(300)]; time.sleep(0.5)']); print(p.pid, flush=True); p.wait()" \
        >"$T/fe.out" 2>"$T/fe.err" </dev/null || fail "run: $(cat "$T/fe.err")"
    local child
    child=$(head -n 1 "$T/fe.out")
    agent_ended agfe
    ctl --json status "agfe.$child" >"$T/s" || fail "no session agfe.$child: $(ctl ls)"
    eq "$(jget process.name <"$T/s")" python3 "the exec'd child's process"
    [ "$(jget heap.peak <"$T/s")" -ge 1500000 ] || fail "the child's heap peak: $(jget heap.peak <"$T/s")"
    eq "$(ctl --json status agfe | jget source_status.spawned)" 1 "sessions spawned"
    stop_clean
}

# stop under a running program: the agent stops writing (the daemon closes its socket and sets
# the ring's stop flag), the program finishes normally, the session keeps what it took.
case_agent_stop() {
    agent_setup
    agent_run ags --name ags -- "$LIVE_APPS/agentcase" spin 1200
    live_go "$APID"
    sleep 0.3
    ctl stop ags >/dev/null || fail "stop"
    local a b
    a=$(ctl --json status ags | jget ingest.events)
    live_wait_line ags '"done":true'
    b=$(ctl --json status ags | jget ingest.events)
    eq "$b" "$a" "events after the stop"
    [ "$a" -gt 1000 ] || fail "events before the stop: $a"
    eq "$(ctl --json status ags | jget state)" stopped "state"
    live_go "$APID"
    wait "$APID" || fail "agentcase exit code after the stop"
    stop_clean
}
