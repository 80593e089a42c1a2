# Attacks on who may trace what, by a hostile member of group heaptrace and by a careful user.
# Sourced by run.sh; the helpers (sec_live, as_member, sec_refused, ...) come from cases-sec.sh
# and cases-live.sh.

# A root process in a user namespace root made (a container, a service with PrivateUsers=) is
# refused to a member: the owner of a user namespace holds every capability in it, and the
# checking helper had effective uid 0, so the kernel let it through (the member traced it). The
# member's own process in a namespace of its own stays the member's to trace.
case_advsec_userns_root() {
    sec_live
    command -v unshare >/dev/null || live_skip "unshare missing"
    unshare --user --map-root-user true 2>/dev/null || live_skip "no user namespaces here"
    unshare --user --map-root-user -- "$LIVE_APPS/mtalloc" 2 10 >"$T/ns.out" 2>"$T/ns.err" </dev/null &
    local rp=$!
    LIVE_PIDS+=("$rp")
    live_wait_line ns '"ready":true'
    grep -q "^Uid:[[:space:]]*0[[:space:]]*0[[:space:]]*0[[:space:]]*0" "/proc/$rp/status" ||
        fail "the namespaced app does not run as root: $(grep Uid "/proc/$rp/status")"
    [ "$(readlink "/proc/$rp/ns/user")" != "$(readlink /proc/self/ns/user)" ] ||
        fail "the app is not in a user namespace of its own"
    out=$(as_member 65534 "$HT_CTL" start --pid "$rp" --name nsroot 2>&1)
    sec_refused "$out" $? "root's process in a user namespace root made"
    # The member's own process, in a user namespace the member made: traced.
    if setpriv --reuid=65534 --regid="$SEC_GID" --clear-groups unshare --user --map-root-user true \
        2>/dev/null; then
        setpriv --reuid=65534 --regid="$SEC_GID" --clear-groups unshare --user --map-root-user -- \
            "$LIVE_APPS/mtalloc" 2 10 >"$T/own.out" 2>"$T/own.err" </dev/null &
        local own=$!
        LIVE_PIDS+=("$own")
        live_wait_line own '"ready":true'
        as_member 65534 "$HT_CTL" start --pid "$own" --name nsown >"$T/start.out" 2>&1 ||
            fail "uid 65534 cannot trace its own process in its own namespace: $(cat "$T/start.out")"
        as_member 65534 "$HT_CTL" drop nsown >/dev/null || fail "drop nsown"
        live_go "$own"
    else
        echo "members cannot make user namespaces here: their own namespace not tried"
    fi
    live_go "$rp"
    stop_clean
}
