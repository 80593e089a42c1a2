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

# A member stops the checking helper (its real uid is the member's, so the member may signal
# it) while asking to trace root's process, over and over for a few seconds. A helper stopped
# after its answer but before its exit held the daemon in waitpid for as long as the member
# liked: every client hung, root's too (a ping waited 624 s, until the helper was killed by
# hand). One stopped before its answer held the loop for the whole 500 ms timeout. Now the
# daemon answers, the member is refused at once when its helper stops, and no helper, zombie or
# descriptor is left behind.
case_advsec_helper_stop() {
    sec_live
    SEC_PY=/usr/bin/python3
    [ -x "$SEC_PY" ] || live_skip "$SEC_PY missing"
    live_app root mtalloc 2 10
    local root_pid=$APID fds0 secs=$((3 * ${HT_TIME_FACTOR:-1}))
    fds0=$(ls "/proc/$DPID/fd" | wc -l)
    # A uid of its own: its SIGSTOP to every process it may signal reaches no one else's.
    timeout $((secs + 20)) setpriv --reuid=64992 --regid="$SEC_GID" --clear-groups \
        "$SEC_PY" - "$HEAPTRACE_PIPE" "$secs" "$root_pid" >"$T/stop.out" 2>&1 <<'EOF'
import json, os, signal, socket, sys, time
pipe, secs, target = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
own = os.fork()
if own == 0:
    time.sleep(secs + 30)
    os._exit(0)
me = os.getpid()
stopper = os.fork()
if stopper == 0:
    end = time.time() + secs + 1
    while time.time() < end:
        try:
            os.kill(-1, signal.SIGSTOP)  # every process of this uid but itself: the helper too
        except OSError:
            pass
        os.kill(me, signal.SIGCONT)
        os.kill(own, signal.SIGCONT)
        time.sleep(0.0002)
    os._exit(0)
s = socket.socket(socket.AF_UNIX)
s.connect(pipe)
f = s.makefile("rwb")
end = time.time() + secs
n = traced = refused = refused_stop = other = 0
while time.time() < end and n < 3000:
    n += 1
    f.write(json.dumps({"v": 1, "id": n, "cmd": "start",
                        "args": {"pid": target, "name": "st%d" % n}}).encode() + b"\n")
    f.flush()
    r = json.loads(f.readline())
    if r.get("ok"):
        traced += 1
        print("TRACED", json.dumps(r))
    elif "may not trace" in json.dumps(r):
        refused += 1
    elif "stopped or killed before it answered" in json.dumps(r):
        refused_stop += 1
    else:
        other += 1
        print("REFUSED", json.dumps(r))
os.kill(stopper, signal.SIGKILL)
os.waitpid(stopper, 0)
os.kill(own, signal.SIGKILL)
os.waitpid(own, 0)
print("starts", n, "traced", traced, "refused", refused, "refused_stopped", refused_stop,
      "other", other)
EOF
    local rc=$?
    cat "$T/stop.out"
    timeout 10 "$HT_CTL" ping >/dev/null || {
        ps -o pid,stat,user,wchan:20,comm --ppid "$DPID"
        kill -KILL $(ps -o pid= --ppid "$DPID") 2>/dev/null
        fail "the daemon does not answer root after the member's stopped helpers"
    }
    [ "$rc" -eq 0 ] || fail "the member's client failed or hung (rc $rc): $(tail -n 3 "$T/stop.out")"
    local starts stopped other
    starts=$(awk '/^starts/ {print $2}' "$T/stop.out")
    stopped=$(awk '/^starts/ {print $8}' "$T/stop.out")
    other=$(awk '/^starts/ {print $10}' "$T/stop.out")
    [ "$starts" -ge 10 ] || fail "only $starts starts in ${secs}s"
    eq "$(awk '/^starts/ {print $4}' "$T/stop.out")" 0 "root's process traced by the member"
    [ "$stopped" -ge 1 ] || fail "no helper was stopped before its answer in $starts starts"
    eq "$other" 0 "starts refused for another reason"
    eq "$(ps -o pid= --ppid "$DPID" | wc -l)" 0 "children of the daemon left"
    eq "$(ls "/proc/$DPID/fd" | wc -l)" "$fds0" "descriptors of the daemon"
    eq "$(ctl --json ls | jget sessions.#)" 0 "sessions left"
    live_go "$root_pid"
    stop_clean
}
