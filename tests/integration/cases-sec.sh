# Who may trace what, and whose sessions are whose (the daemon runs as root, members of group
# heaptrace talk to it). Sourced by run.sh; the live helpers (live_setup, live_app, ...) come from
# cases-live.sh. Members are played with setpriv; the group is created when the host has none, and
# removed after.

SEC_GROUP_MADE=

sec_cleanup() {
    live_cleanup
    [ -n "$SEC_GROUP_MADE" ] && groupdel heaptrace
}

# sec_group: make sure group heaptrace exists; its gid in SEC_GID.
sec_group() {
    [ "$(id -u)" -eq 0 ] || live_skip "needs root to switch users"
    command -v setpriv >/dev/null || live_skip "setpriv missing"
    if ! getent group heaptrace >/dev/null; then
        command -v groupadd >/dev/null || live_skip "groupadd missing"
        groupadd --system heaptrace || live_skip "cannot create group heaptrace"
        SEC_GROUP_MADE=1
    fi
    SEC_GID=$(getent group heaptrace | cut -d: -f3)
    trap sec_cleanup EXIT
}

# as_member UID CMD...: run CMD as uid UID, in group heaptrace only (a function: not for a
# background job whose $! must be the program's).
as_member() {
    local uid=$1
    shift
    setpriv --reuid="$uid" --regid="$SEC_GID" --clear-groups "$@"
}

# A fresh daemon whose socket carries group heaptrace, reachable through $T.
sec_daemon() {
    chmod 711 "$T"
    start_daemon "$@"
}

# sec_live: live tracing set up (skips without it), a daemon that members reach.
sec_live() {
    sec_group
    live_setup
    trap sec_cleanup EXIT
    ctl shutdown >/dev/null
    wait "$DPID"
    sec_daemon
}

# sec_refused OUT RC WHAT: the start must have been refused with EPERM, nothing left behind.
sec_refused() {
    echo "$1"
    [ "$2" -ne 0 ] || fail "$3 was traced"
    echo "$1" | grep -q 'EPERM.*may not trace' || fail "$3: not refused as a permission: $1"
    eq "$(ctl --json ls | jget sessions.#)" 0 "sessions after the refused start ($3)"
    # The programs go back on the consumer's thread, off the loop (0.5-0.9 s).
    local n
    for _ in $(seq $((100 * ${HT_TIME_FACTOR:-1}))); do
        n=$(live_bpf_held prog)
        [ "$n" = 0 ] && break
        sleep 0.05
    done
    eq "$n" 0 "programs held after the refused start ($3)"
}

# A member traces its own process, not root's, and not its own process running a setgid program
# (the kernel makes it non-dumpable; ptrace refuses it although every uid is the member's: a uid
# comparison let it through).
case_sec_member_setgid() {
    sec_live
    live_app root mtalloc 2 10
    local root_pid=$APID
    out=$(as_member 65534 "$HT_CTL" start --source bpf --pid "$root_pid" --name r 2>&1)
    sec_refused "$out" $? "root's process"
    # The member's own plain process: traced.
    setpriv --reuid=65534 --regid="$SEC_GID" --clear-groups "$LIVE_APPS/mtalloc" 2 10 >"$T/own.out" 2>&1 </dev/null &
    local own=$!
    LIVE_PIDS+=("$own")
    live_wait_line own '"ready":true'
    as_member 65534 "$HT_CTL" start --source bpf --pid "$own" --name own >"$T/start.out" 2>&1 ||
        fail "uid 65534 cannot trace its own process: $(cat "$T/start.out")"
    ctl drop own >/dev/null || fail "drop own"
    # The same program made setgid to group adm, run by the member.
    local grp
    grp=$(getent group adm | cut -d: -f3)
    [ -n "$grp" ] || grp=4
    cp "$LIVE_APPS/mtalloc" "$T/sgid-app"
    chgrp "$grp" "$T/sgid-app" && chmod 2755 "$T/sgid-app" || fail "cannot make a setgid copy"
    setpriv --reuid=65534 --regid="$SEC_GID" --clear-groups "$T/sgid-app" 2 10 >"$T/sg.out" 2>&1 </dev/null &
    local sg=$!
    LIVE_PIDS+=("$sg")
    live_wait_line sg '"ready":true'
    grep -q "^Uid:[[:space:]]*65534[[:space:]]*65534[[:space:]]*65534[[:space:]]*65534" \
        "/proc/$sg/status" || fail "the setgid copy does not run as uid 65534: $(grep Uid "/proc/$sg/status")"
    grep -q "^Gid:.*[[:space:]]$grp[[:space:]]" "/proc/$sg/status" ||
        fail "the copy is not setgid: $(grep Gid "/proc/$sg/status")"
    out=$(as_member 65534 "$HT_CTL" start --source bpf --pid "$sg" --name sg 2>&1)
    sec_refused "$out" $? "the member's setgid process"
    live_go "$root_pid"
    live_go "$own"
    live_go "$sg"
    stop_clean
}

# A root process whose /proc entry the daemon cannot read (hidden by a mount in the daemon's mount
# namespace): the access is decided on the process itself, not on /proc/PID/status (an unreadable
# status file let the start through).
case_sec_proc_unreadable() {
    sec_group
    live_setup
    trap sec_cleanup EXIT
    command -v unshare >/dev/null || live_skip "unshare missing"
    unshare -m --propagation private sh -c 'mount -t tmpfs -o size=4k none "/proc/$$"' 2>/dev/null ||
        live_skip "cannot mount over /proc/PID in a new mount namespace here"
    ctl shutdown >/dev/null
    wait "$DPID"
    live_app root mtalloc 2 10
    local root_pid=$APID
    chmod 711 "$T"
    # The daemon runs in a mount namespace of its own where /proc/PID is an empty tmpfs.
    unshare -m --propagation private sh -c \
        'mount -t tmpfs -o size=4k none "/proc/$0" && exec "$@"' "$root_pid" \
        "$HT_DAEMON" --foreground --log-level debug >>"$T/daemon.log" 2>&1 &
    DPID=$!
    local i
    for ((i = 0; i < 100; i++)); do
        ctl ping >/dev/null 2>&1 && break
        kill -0 "$DPID" 2>/dev/null || fail "daemon exited at start"
        sleep 0.05
    done
    [ -r "/proc/$DPID/root/proc/$root_pid/status" ] &&
        fail "/proc/$root_pid/status is readable in the daemon's namespace"
    out=$(as_member 65534 "$HT_CTL" start --source bpf --pid "$root_pid" --name r 2>&1)
    sec_refused "$out" $? "root's process with an unreadable /proc entry"
    live_go "$root_pid"
    stop_clean
}

# The PID race: root forks short-lived children as fast as it can while a member asks to trace
# the next PIDs, predicted from ns_last_pid, over one connection, for a few seconds. The check is
# made on the process a pidfd names, so not one of root's processes may be attached (a check by
# PID, then an attach by PID, attached 16 sessions in 26k tries). The member's own client may be
# (the PIDs wrap where pid_max is 32768): that one is its own.
case_sec_pid_race() {
    sec_live
    # The system python: an interpreter under root's home is out of the member's reach.
    SEC_PY=/usr/bin/python3
    [ -x "$SEC_PY" ] || live_skip "$SEC_PY missing"
    local secs=$((4 * ${HT_TIME_FACTOR:-1}))
    "$SEC_PY" - "$secs" >"$T/forker.out" 2>&1 <<'EOF' &
import os, sys, time
end = time.time() + float(sys.argv[1]) + 1
n = 0
while time.time() < end:
    pid = os.fork()
    if pid == 0:
        time.sleep(1.5)
        os._exit(0)
    n += 1
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
print("forked", n)
EOF
    local forker=$!
    LIVE_PIDS+=("$forker")
    sleep 0.5
    # A uid of its own, with no process but its client: any attach is one of root's processes
    # (uid 65534 may have processes of other tests on a shared host).
    as_member 64991 "$SEC_PY" - "$HEAPTRACE_PIPE" "$secs" >"$T/race.out" 2>&1 <<'EOF'
import json, os, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rwb")
end = time.time() + float(sys.argv[2])
tries = attached = rid = 0
while time.time() < end:
    last = int(open("/proc/sys/kernel/ns_last_pid").read())
    n = 0
    for k in range(1, 4):
        rid += 1
        f.write(json.dumps({"v": 1, "id": rid, "cmd": "start",
                            "args": {"pid": last + k, "name": "race%d" % rid}}).encode() + b"\n")
        n += 1
    f.flush()
    got = [json.loads(f.readline()) for _ in range(n)]
    tries += n
    for r in got:
        if r.get("ok"):
            pid = r["data"]["pid"]
            # pid_max may be small (32768): the PIDs wrap and a predicted one can be this
            # client's own, which the member may trace. Not one of root's.
            attached += pid != os.getpid()
            try:
                who = [l.strip() for l in open("/proc/%d/status" % pid) if l.startswith(("Name", "Uid"))]
            except OSError as e:
                who = [str(e)]
            print("ATTACHED", json.dumps(r.get("data")), who)
            rid += 1
            f.write(json.dumps({"v": 1, "id": rid, "cmd": "drop",
                                "args": {"session": r["data"]["session"]}}).encode() + b"\n")
            f.flush()
            f.readline()
print("tries", tries, "attached", attached)
EOF
    local rc=$?
    wait "$forker"
    cat "$T/forker.out" "$T/race.out" | grep -v ATTACHED
    [ "$rc" -eq 0 ] || fail "the member's client failed: $(tail -n 5 "$T/race.out")"
    grep -q '^tries' "$T/race.out" || fail "no summary: $(tail -n 5 "$T/race.out")"
    local tries attached
    tries=$(awk '/^tries/ {print $2}' "$T/race.out")
    attached=$(awk '/^tries/ {print $4}' "$T/race.out")
    [ "$tries" -ge 100 ] || fail "only $tries tries in ${secs}s"
    eq "$attached" 0 "root's processes attached by a member in $tries tries: $(grep ATTACHED "$T/race.out" | head -n 3)"
    stop_clean
}

# A thread id given as --pid is named for what it is: thread T of process P (it said "No such
# file or directory").
case_sec_thread_id() {
    live_setup
    live_app th mtalloc 2 10
    local pid=$APID tid=
    local t
    for t in /proc/"$pid"/task/*; do
        [ "${t##*/}" != "$pid" ] && tid=${t##*/} && break
    done
    [ -n "$tid" ] || fail "mtalloc has no second thread: $(ls "/proc/$pid/task")"
    out=$(ctl start --source bpf --pid "$tid" --name th 2>&1)
    rc=$?
    echo "$out"
    [ "$rc" -ne 0 ] || fail "a thread id was attached as a process"
    echo "$out" | grep -q "$tid is thread $tid of process $pid" || fail "unclear error: $out"
    eq "$(ctl --json ls | jget sessions.#)" 0 "sessions after the refused start"
    live_go "$pid"
    stop_clean
}

# A session belongs to the uid that made it: another member does not see it in ls and gets EPERM
# on every command naming it; root sees and acts on all; the owner keeps full use. (Any member
# could read, stop and drop root's sessions and other users'.)
case_sec_session_owner() {
    sec_group
    printf '{"max_sessions": 2}\n' >"$T/cfg.json"
    sec_daemon --config "$T/cfg.json"
    cp "$DEMO" "$T/demo.htev" && chmod 644 "$T/demo.htev"
    as_member 65534 "$HT_CTL" load "$T/demo.htev" --name a >/dev/null 2>&1 || fail "A's load"
    ctl load "$DEMO" --name rootses >/dev/null 2>&1 || fail "root's load"
    # B (uid 65533) sees neither.
    eq "$(as_member 65533 "$HT_CTL" --json ls | jget sessions.#)" 0 "sessions B sees"
    eq "$(as_member 65534 "$HT_CTL" --json ls | jget sessions.#)" 1 "sessions A sees"
    eq "$(as_member 65534 "$HT_CTL" --json ls | jget sessions.0.name)" a "A's session"
    eq "$(ctl --json ls | jget sessions.#)" 2 "sessions root sees"
    # Every slot taken: the refusal names only the client's own sessions.
    out=$(as_member 65533 "$HT_CTL" load "$T/demo.htev" --name b 2>&1)
    echo "$out"
    echo "$out" | grep -q 'EFULL.*Sessions: 2 of other users$' || fail "B's EFULL: $out"
    out=$(as_member 65534 "$HT_CTL" load "$T/demo.htev" --name b 2>&1)
    echo "$out"
    echo "$out" | grep -q 'EFULL.*Sessions: 1 "a" .*, and 1 of other users$' || fail "A's EFULL: $out"
    out=$(ctl load "$DEMO" --name b 2>&1)
    echo "$out" | grep 'EFULL' | grep '"a"' | grep -q '"rootses"' || fail "root's EFULL: $out"
    local cmd out
    for sess in a rootses; do
        for cmd in "status S" "stacks S" "commits S" "timeline S" "mark S m1" "top S --count 1" \
            "export S --format json" "record S -o -" "stop S" "drop S"; do
            # shellcheck disable=SC2086
            out=$(as_member 65533 "$HT_CTL" ${cmd/S/$sess} 2>&1 </dev/null)
            [ $? -ne 0 ] || fail "B ran '$cmd' on session $sess: $out"
            echo "$out" | grep -q "EPERM.*belongs to another user" ||
                fail "B's '$cmd' on $sess: not EPERM: $out"
        done
    done
    # By id too, and without naming: B has no session of its own.
    local id
    id=$(ctl --json ls | jget sessions.0.id)
    as_member 65533 "$HT_CTL" status "$id" 2>&1 | grep -q "EPERM" || fail "B's status by id"
    as_member 65533 "$HT_CTL" status 2>&1 | grep -q "ENOSESSION" || fail "B's status unnamed"
    # A names its only session implicitly although root has one too.
    as_member 65534 "$HT_CTL" --json status | jget name | grep -qx a || fail "A's unnamed status"
    as_member 65534 "$HT_CTL" status rootses 2>&1 | grep -q "EPERM" || fail "A reached root's session"
    # B may not shut the daemon down while others have sessions.
    out=$(as_member 65533 "$HT_CTL" shutdown 2>&1)
    echo "$out" | grep -q "EPERM" || fail "B shut the daemon down: $out"
    eq "$(ctl --json ls | jget sessions.#)" 2 "sessions after B's attempts"
    # The owner and root act.
    as_member 65534 "$HT_CTL" stacks a >/dev/null 2>&1 || fail "A's stacks"
    as_member 65534 "$HT_CTL" drop a >/dev/null 2>&1 || fail "A's drop"
    ctl status rootses >/dev/null || fail "root's status"
    as_member 65534 "$HT_CTL" load "$T/demo.htev" --name a2 >/dev/null 2>&1 || fail "A's load"
    ctl drop a2 >/dev/null || fail "root's drop of A's session"
    stop_clean
}

# Real Debian programs run by a member: ssh-agent (setgid _ssh, so not dumpable: its own user
# cannot read its memory, and a uid comparison let a member trace it) is refused; redis-server
# (jemalloc) is the member's to trace.
case_sec_member_debian() {
    sec_live
    local agent=/usr/bin/ssh-agent redis=/usr/bin/redis-server
    [ -x "$agent" ] && [ -g "$agent" ] || live_skip "no setgid $agent (openssh-client)"
    [ -x "$redis" ] || live_skip "no $redis (redis-server)"
    mkdir "$T/m" && chown 65534 "$T/m" || fail "member directory"
    setpriv --reuid=65534 --regid="$SEC_GID" --clear-groups "$agent" -D -a "$T/m/agent.sock" \
        >"$T/agent.out" 2>&1 </dev/null &
    local ap=$!
    LIVE_PIDS+=("$ap")
    local i
    for ((i = 0; i < 100; i++)); do
        [ -S "$T/m/agent.sock" ] && break
        sleep 0.05
    done
    [ -S "$T/m/agent.sock" ] || fail "ssh-agent did not start: $(cat "$T/agent.out")"
    grep -q "^Uid:[[:space:]]*65534[[:space:]]*65534[[:space:]]*65534[[:space:]]*65534" \
        "/proc/$ap/status" || fail "ssh-agent does not run as uid 65534"
    out=$(as_member 65534 "$HT_CTL" start --source bpf --pid "$ap" --name agent 2>&1)
    sec_refused "$out" $? "the member's ssh-agent (setgid _ssh)"
    setpriv --reuid=65534 --regid="$SEC_GID" --clear-groups "$redis" --port 0 --save "" \
        --unixsocket "$T/m/redis.sock" --dir "$T/m" >"$T/redis.out" 2>&1 </dev/null &
    local rp=$!
    LIVE_PIDS+=("$rp")
    for ((i = 0; i < 100; i++)); do
        [ -S "$T/m/redis.sock" ] && break
        sleep 0.05
    done
    [ -S "$T/m/redis.sock" ] || fail "redis-server did not start: $(cat "$T/redis.out")"
    as_member 65534 "$HT_CTL" start --source bpf --pid "$rp" --name redis >"$T/start.out" 2>&1 ||
        fail "uid 65534 cannot trace its own redis-server: $(cat "$T/start.out")"
    eq "$(as_member 65534 "$HT_CTL" --json ls | jget sessions.0.process)" redis-server "process"
    as_member 65534 "$HT_CTL" drop redis >/dev/null || fail "drop"
    stop_clean
}

# The member's own process passes the check, then executes a setgid program (ssh-agent) while
# the daemon loads and attaches: whenever the exec comes, the start is refused or the trace ends
# at the exec; the setgid program is never traced. The exec is placed at delays spread over the
# time a start takes.
case_sec_exec_setgid() {
    sec_live
    local agent=/usr/bin/ssh-agent
    [ -x "$agent" ] && [ -g "$agent" ] || live_skip "no setgid $agent (openssh-client)"
    mkdir "$T/m" && chown 65534 "$T/m" || fail "member directory"
    local d i p out refused=0 ended=0
    for d in 0.02 0.04 0.06 0.08 0.10 0.12 0.15 0.18 0.22 0.26 0.30 0.35; do
        i=${d#0.}
        setpriv --reuid=65534 --regid="$SEC_GID" --clear-groups /bin/sh -c \
            'sleep "$1"; exec "$2" -D -a "$3"' sh "$d" "$agent" "$T/m/a$i.sock" \
            >"$T/a$i.out" 2>&1 </dev/null &
        p=$!
        LIVE_PIDS+=("$p")
        out=$(as_member 65534 "$HT_CTL" start --source bpf --pid "$p" --name "x$i" 2>&1)
        if [ $? -ne 0 ]; then
            echo "delay $d: refused: $out"
            refused=$((refused + 1))
        else
            adv_wait_state "x$i" >"$T/s$i"
            jget stop_reason <"$T/s$i" | grep -qi exec ||
                fail "delay $d: the session on $p is $(jget state <"$T/s$i"): $(jget stop_reason <"$T/s$i")"
            echo "delay $d: traced until the exec"
            ended=$((ended + 1))
            as_member 65534 "$HT_CTL" drop "x$i" >/dev/null || fail "drop x$i"
        fi
        for ((k = 0; k < 100; k++)); do
            [ -S "$T/m/a$i.sock" ] && break
            sleep 0.05
        done
        kill "$p" 2>/dev/null
    done
    echo "refused $refused, ended at the exec $ended"
    eq "$(live_bpf_held prog)" 0 "programs held at the end"
    stop_clean
}
