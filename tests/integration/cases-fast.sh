# The agent's fast path (default stacks): the thread's stack cache in front of the cached-rule
# unwinder. Helpers from cases-agent.sh and cases-live.sh.

# Two call paths reaching malloc at one stack pointer, interleaved: each path's blocks under its
# own stack (a cache hit is checked against the stack slots the walk read).
case_agent_stack_cache_same_sp() {
    agent_setup
    [ -x "$LIVE_APPS/samesp" ] || live_skip "samesp not built"
    agent_run samesp --name agsp -- "$LIVE_APPS/samesp"
    live_go "$APID"
    live_wait_line samesp '"done":true'
    live_settle agsp
    eq "$(ctl --json status agsp | jget source_status.stacks)" dwarf "stack mode"
    agent_sites agsp "$(live_truth samesp)"
    eq "$(ctl --json status agsp | live_lost)" 0 "agsp lost events"
    live_go "$APID"
    wait "$APID" || fail "samesp exit code"
    stop_clean
}

# A signal handler that allocates: its stacks pass a signal frame, which the fast unwinder leaves
# to libunwind; each such stack is counted (status: source_status.agent.unwind_slow), and the
# blocks are under the handler's site all the same.
case_agent_unwind_slow_counted() {
    agent_case agslow signal
    eq "$(live_truth agslow | jget sites.0.live_count)" 15 "signals handled"
    local slow
    slow=$(ctl --json status agslow | jget source_status.agent.unwind_slow)
    [ -n "$slow" ] && [ "$slow" -ge 15 ] || fail "unwind_slow: got '$slow', expected >= 15"
    eq "$(ctl --json status agslow | jget source_status.agent.modules_full)" 0 "modules_full"
    live_go "$APID"
    wait "$APID" || fail "agentcase exit code"
    stop_clean
}
