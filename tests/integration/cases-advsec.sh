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
    out=$(as_member 65534 "$HT_CTL" start --source bpf --pid "$rp" --name nsroot 2>&1)
    sec_refused "$out" $? "root's process in a user namespace root made"
    # The member's own process, in a user namespace the member made: traced.
    if setpriv --reuid=65534 --regid="$SEC_GID" --clear-groups unshare --user --map-root-user true \
        2>/dev/null; then
        setpriv --reuid=65534 --regid="$SEC_GID" --clear-groups unshare --user --map-root-user -- \
            "$LIVE_APPS/mtalloc" 2 10 >"$T/own.out" 2>"$T/own.err" </dev/null &
        local own=$!
        LIVE_PIDS+=("$own")
        live_wait_line own '"ready":true'
        as_member 65534 "$HT_CTL" start --source bpf --pid "$own" --name nsown >"$T/start.out" 2>&1 ||
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
    # The attack lasts 3 s under every build (a sanitizer's time factor made it 30 s and the
    # client's bound 50 s, which a loaded ASan run in CI overran: rc 124).
    local root_pid=$APID fds0 secs=3
    fds0=$(ls "/proc/$DPID/fd" | wc -l)
    # A uid of its own: its SIGSTOP to every process it may signal reaches no one else's.
    timeout $((secs + 60)) setpriv --reuid=64992 --regid="$SEC_GID" --clear-groups \
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
    if n % 100 == 0:
        print("progress", n, round(end - time.time(), 2), flush=True)
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
        ps -o pid= --ppid "$DPID" | xargs -r kill -KILL 2>/dev/null
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

# adv_dbg_build DIR [CFLAGS]: the member's program DIR/app, linked with DIR/libx.so (no build
# id, no symbol table, DIR/link.bin as its .gnu_debuglink section), and the same library with
# its symbols, DIR/full.so. Skips without a C compiler and binutils.
adv_dbg_build() {
    local d=$1 cflags=${2:-}
    command -v cc >/dev/null && command -v objcopy >/dev/null && command -v strip >/dev/null &&
        command -v nm >/dev/null ||
        live_skip "needs cc and binutils"
    cat >"$d/lib.c" <<'EOF'
#include <stdlib.h>
__attribute__((noinline)) static void *root_only_name_zz(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::"r"(p) : "memory");
    return p;
}
void *entry(size_t n) { return root_only_name_zz(n); }
EOF
    cat >"$d/main.c" <<'EOF'
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
void *entry(size_t n);
static volatile sig_atomic_t go;
static void on(int s) { (void)s; go = 1; }
int main(void)
{
    signal(SIGUSR1, on);
    printf("{\"pid\":%d,\"ready\":true}\n", getpid());
    fflush(stdout);
    while (!go)
        pause();
    for (int i = 0; i < 20; i++)
        entry(1000 + i);
    printf("{\"done\":true}\n");
    fflush(stdout);
    for (;;)
        pause();
}
EOF
    # shellcheck disable=SC2086
    cc -O1 -g -fno-omit-frame-pointer $cflags -fPIC -shared -Wl,--build-id=none -o "$d/full.so" "$d/lib.c" &&
        cp "$d/full.so" "$d/libx.so" && strip --strip-all "$d/libx.so" &&
        objcopy --add-section .gnu_debuglink="$d/link.bin" "$d/libx.so" &&
        cc -O1 -fno-omit-frame-pointer -o "$d/app" "$d/main.c" -L"$d" -lx -Wl,-rpath,"$d" ||
        fail "cannot build the member's program in $d"
}

# adv_debuglink FILE LINK: a .gnu_debuglink section's bytes for LINK, CRC 0 (not checked).
adv_debuglink() {
    "$SEC_PY" -c 'import sys
n = sys.argv[2].encode() + b"\0"
n += b"\0" * (-len(n) % 4)
open(sys.argv[1], "wb").write(n + b"\0\0\0\0")' "$1" "$2"
}

# adv_dbg_fail MESSAGE: fail, once any FIFO of the case has a writer (a daemon blocked opening
# one would otherwise hold the cleanup's shutdown).
adv_dbg_fail() {
    local f
    for f in "$T"/*/fifo; do
        [ -p "$f" ] && timeout 1 sh -c 'exec 3>"$1"; sleep 0.2' sh "$f" 2>/dev/null
    done
    fail "$@"
}

# adv_dbg_run TAG DIR [start options]: run DIR/app as uid 64993, trace it, let it allocate;
# its stacks in $T/TAG.stacks. Every request is bounded: a daemon blocked is a failure.
adv_dbg_run() {
    local tag=$1 d=$2 p
    shift 2
    setpriv --reuid=64993 --regid="$SEC_GID" --clear-groups "$d/app" >"$T/$tag.out" 2>"$T/$tag.err" </dev/null &
    p=$!
    LIVE_PIDS+=("$p")
    live_wait_line "$tag" '"ready":true'
    timeout 20 setpriv --reuid=64993 --regid="$SEC_GID" --clear-groups "$HT_CTL" start --source bpf --pid "$p" \
        --name "$tag" "$@" >"$T/$tag.start" 2>&1 ||
        adv_dbg_fail "$tag: start failed or blocked: $(cat "$T/$tag.start")"
    live_go "$p"
    live_wait_line "$tag" '"done":true'
    sleep 0.5
    timeout 20 setpriv --reuid=64993 --regid="$SEC_GID" --clear-groups "$HT_CTL" stacks "$tag" \
        >"$T/$tag.stacks" 2>&1 || adv_dbg_fail "$tag: stacks failed or blocked: $(cat "$T/$tag.stacks")"
    cat "$T/$tag.stacks"
    grep -q 'libx.so' "$T/$tag.stacks" || adv_dbg_fail "$tag: no frame in libx.so"
    timeout 10 "$HT_CTL" ping >/dev/null || adv_dbg_fail "$tag: the daemon does not answer root"
}

# The "../" links of case_advsec_debuglink (they climb out of /usr/lib/debug).
adv_debuglink_climb() {
    # A library only root may read, its symbols the secret.
    adv_debuglink "$T/m/link.bin" "../../..$T/sec/secret.so"
    adv_dbg_build "$T/m"
    cp "$T/m/full.so" "$T/sec/secret.so" && chmod 600 "$T/sec/secret.so"
    nm "$T/sec/secret.so" | grep -q root_only_name_zz || fail "the secret has no such symbol"
    setpriv --reuid=64993 --regid="$SEC_GID" --clear-groups cat "$T/sec/secret.so" >/dev/null 2>&1 &&
        fail "the member can read the secret"
    adv_dbg_run sec "$T/m"
    grep -q root_only_name_zz "$T/sec.stacks" &&
        adv_dbg_fail "a symbol of a file only root may read was shown"
    # A FIFO of the member's, reached with ../
    mkfifo "$T/f/fifo" && chown 64993 "$T/f/fifo" || fail "mkfifo"
    adv_debuglink "$T/f/link.bin" "../../..$T/f/fifo"
    adv_dbg_build "$T/f"
    adv_dbg_run fifo "$T/f"
}

# A member's library names its separate debug file (.gnu_debuglink) with "../": libdwfl appends
# the link to /usr/lib/debug/..., so the root daemon opened any file the member chose: a file
# only root may read (its function names came out in the member's stacks), or a FIFO (the open
# blocked the daemon for good, every client with it). A link into the member's own directory
# (libdwfl's default search path, kept by the DWARF unwinder) did the same with --stacks dwarf,
# for a library without .eh_frame.
case_advsec_debuglink() {
    sec_live
    SEC_PY=/usr/bin/python3
    [ -x "$SEC_PY" ] || live_skip "$SEC_PY missing"
    chmod 711 "$T"
    mkdir -m 700 "$T/sec" && mkdir "$T/m" "$T/f" "$T/w" && chown 64993 "$T/m" "$T/f" "$T/w" ||
        fail "directories"
    if [ -d /usr/lib/debug ]; then
        adv_debuglink_climb
    else
        echo "no /usr/lib/debug: no path for a debuglink to climb out of; only the unwinder's case"
    fi
    # A FIFO under the link's plain name, in the library's own directory, for the DWARF unwinder
    # (it looks for a separate debug file when the library has no .eh_frame).
    mkfifo "$T/w/fifo" && chown 64993 "$T/w/fifo" || fail "mkfifo"
    adv_debuglink "$T/w/link.bin" fifo
    adv_dbg_build "$T/w" "-fno-asynchronous-unwind-tables -fno-unwind-tables"
    adv_dbg_run dw "$T/w" --stacks dwarf
    # Nothing of it was opened: a writer finds no reader.
    local fifo
    for fifo in "$T/f/fifo" "$T/w/fifo"; do
        [ -p "$fifo" ] || continue
        timeout 1 sh -c 'exec 3>"$1"' sh "$fifo" 2>/dev/null && fail "the daemon holds $fifo open"
    done
    stop_clean
}

# A member in more than 256 supplementary groups (the kernel allows 65536, NGROUPS_MAX) traces
# its own process: it was refused ("cannot read the client's groups (SO_PEERGROUPS): Numerical
# result out of range (more than 256)"), although its groups change nothing in the ptrace rule.
# Root's process stays refused to it.
case_advsec_many_groups() {
    sec_live
    local groups i
    groups=$SEC_GID
    for ((i = 0; i < 300; i++)); do
        groups+=",$((70000 + i))"
    done
    setpriv --reuid=64994 --regid="$SEC_GID" --groups="$groups" "$LIVE_APPS/mtalloc" 2 10 \
        >"$T/own.out" 2>&1 </dev/null &
    local own=$!
    LIVE_PIDS+=("$own")
    live_wait_line own '"ready":true'
    eq "$(awk '/^Groups:/ {print NF - 1}' "/proc/$own/status")" 301 "the member's groups"
    setpriv --reuid=64994 --regid="$SEC_GID" --groups="$groups" "$HT_CTL" start --source bpf --pid "$own" \
        --name many >"$T/start.out" 2>&1 ||
        fail "a member in 301 groups cannot trace its own process: $(cat "$T/start.out")"
    eq "$(ctl --json status many | jget process.pid)" "$own" "attached pid"
    ctl drop many >/dev/null || fail "drop"
    live_app root mtalloc 2 10
    out=$(setpriv --reuid=64994 --regid="$SEC_GID" --groups="$groups" "$HT_CTL" start \
        --pid "$APID" --name r 2>&1)
    sec_refused "$out" $? "root's process, to a member in 301 groups"
    live_go "$APID"
    live_go "$own"
    stop_clean
}

# A session name the daemon reads as an id ("+1", " 1": strtoul takes them) named another
# session: a member named its session "+1", and root's 'drop +1', meant for it, dropped root's
# own session 1. Such names are refused like numbers.
case_advsec_name_as_id() {
    sec_group
    sec_daemon
    cp "$DEMO" "$T/demo.htev" && chmod 644 "$T/demo.htev"
    ctl load "$DEMO" --name rootses >/dev/null 2>&1 || fail "root's load"
    eq "$(ctl --json ls | jget sessions.0.id)" 1 "root's session id"
    local name out
    for name in "+1" " 1" "-0" "1"; do
        out=$(as_member 65534 "$HT_CTL" load "$T/demo.htev" --name "$name" 2>&1)
        echo "$out"
        echo "$out" | grep -q "EBADARG.*not a number" || fail "the name '$name' was taken: $out"
    done
    eq "$(ctl --json ls | jget sessions.#)" 1 "sessions"
    ctl status rootses >/dev/null || fail "root's session is gone"
    stop_clean
}

# A user of group heaptrace (in /etc/group) who is in more than 256 groups is admitted: the
# daemon read at most 256 of the user's groups, and refused it ("not root or in group
# heaptrace") as soon as it had more. The user and its groups are made here, and removed.
ADV_GROUPS_MADE=()
ADV_USER_MADE=

adv_groups_cleanup() {
    local g
    [ -n "$ADV_USER_MADE" ] && userdel "$ADV_USER_MADE" 2>/dev/null
    for g in "${ADV_GROUPS_MADE[@]}"; do
        groupdel "$g" 2>/dev/null
    done
    sec_cleanup
}

case_advsec_many_db_groups() {
    sec_group
    command -v useradd >/dev/null && command -v usermod >/dev/null || live_skip "no useradd"
    local user=htadv$$ i g list=heaptrace
    ! getent passwd "$user" >/dev/null || live_skip "user $user exists"
    trap adv_groups_cleanup EXIT
    useradd -M -N -g nogroup -s /usr/sbin/nologin "$user" || fail "useradd"
    ADV_USER_MADE=$user
    for ((i = 0; i < 260; i++)); do
        g=htadv$$g$i
        groupadd "$g" || fail "groupadd $g"
        ADV_GROUPS_MADE+=("$g")
        list+=",$g"
    done
    usermod -a -G "$list" "$user" || fail "usermod"
    eq "$(id -G "$user" | wc -w)" 262 "the user's groups"
    local uid ngid
    uid=$(id -u "$user")
    ngid=$(getent group nogroup | cut -d: -f3)
    sec_daemon
    # As after a login: group nogroup, and the user's groups as supplementary groups (heaptrace
    # reaches the socket); the daemon finds heaptrace among the user's groups.
    out=$(setpriv --reuid="$uid" --regid="$ngid" --init-groups "$HT_CTL" ping 2>&1) ||
        fail "a member in 262 groups was refused: $out"
    stop_clean
}
