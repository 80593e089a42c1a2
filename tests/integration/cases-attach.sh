# Issue 23: `start --pid N --source agent` loads the agent into a running process (ptrace, dlopen,
# GOT slots). tests/apps/attachee checks for itself that the attach left no trace (errno, an
# EINTR, a lost byte, a stray signal) while it waits in epoll_wait (the borrowed thread) and read,
# with SIGALRM every 2 ms. redis-server (Debian's, jemalloc) attached mid-run. Each refusal names
# its reason and leaves the target as it was. Sourced by run.sh; live_* from cases-live.sh,
# redis_start from cases-stacks.sh.

attach_setup() {
    [ "$(id -u)" -eq 0 ] || live_skip "attaching needs root"
    [ -n "$LIVE_APPS" ] && [ -x "$LIVE_APPS/attachee" ] || live_skip "test apps not built"
    trap live_cleanup EXIT
    start_daemon "$@"
}

# attachee_start TAG: the app reading commands from the fifo $T/TAG.in (kept open on fd 7).
attachee_start() {
    local tag=$1
    mkfifo "$T/$tag.in"
    local app="$LIVE_APPS/${2:-attachee}"
    [[ ${2:-} == /* ]] && app=$2
    "$app" ${3:-} <"$T/$tag.in" >"$T/$tag.out" 2>"$T/$tag.err" &
    APID=$!
    LIVE_PIDS+=("$APID")
    exec 7>"$T/$tag.in"
    live_wait_line "$tag" '"ready":true'
}

# attachee_cmd TAG COMMAND PATTERN: a command, and wait for its answer.
attachee_cmd() {
    local before
    before=$(grep -c "$3" "$T/$1.out")
    echo "$2" >&7
    for ((i = 0; i < LIVE_WAIT * 20; i++)); do
        [ "$(grep -c "$3" "$T/$1.out")" -gt "$before" ] && return 0
        sleep 0.05
    done
    fail "$1: no answer to $2"
}

attachee_ok() {
    attachee_cmd "$1" check '"ok"'
    grep '"ok"' "$T/$1.out" | tail -n 1 | grep -q '"ok":true' ||
        fail "the target saw the attach: $(grep '"ok"' "$T/$1.out" | tail -n 1)"
}

# attach_wait NAME FIELD VALUE: wait until status NAME's FIELD reads VALUE.
attach_wait() {
    local v
    for ((i = 0; i < LIVE_WAIT * 10; i++)); do
        v=$(ctl --json status "$1" | jget "$2")
        [ "$v" = "$3" ] && return 0
        sleep 0.1
    done
    fail "status $1 $2: got '$v', expected '$3'"
}

# Blocks allocated before the attach and freed after: unknown frees, never negative totals;
# those allocated after are counted exactly; the target sees nothing.
case_attach_agent_counts() {
    attach_setup
    attachee_start a
    attachee_cmd a "alloc 50" '"kept":50'
    ctl start --pid "$APID" --source agent --name a >"$T/start.out" 2>&1 ||
        fail "start --pid --source agent: $(cat "$T/start.out")"
    ctl --json status a >"$T/s"
    eq "$(jget source <"$T/s")" agent "source"
    attach_wait a source_status.connected true
    attachee_cmd a "alloc 30" '"kept":80'
    attachee_cmd a "free" '"freed":80'
    attachee_cmd a "alloc 20" '"kept":20'
    attach_wait a heap.outstanding_count 20
    ctl --json status a >"$T/s"
    eq "$(jget heap.outstanding <"$T/s")" 2000 "outstanding bytes"
    eq "$(jget quality.unknown_frees <"$T/s")" 50 "frees of blocks from before the attach"
    attachee_ok a
}

# stop turns the hooks into pass-throughs and ends the agent's thread; a second attach works.
case_attach_agent_detach_reattach() {
    attach_setup
    attachee_start a
    local threads
    threads=$(ls "/proc/$APID/task" | wc -l)
    ctl start --pid "$APID" --source agent --name a1 >"$T/start.out" 2>&1 || fail "start: $(cat "$T/start.out")"
    attach_wait a1 source_status.connected true
    eq "$(ls "/proc/$APID/task" | wc -l)" $((threads + 1)) "the agent's thread"
    attachee_cmd a "alloc 10" '"kept":10'
    attach_wait a1 heap.outstanding_count 10
    ctl stop a1 >/dev/null || fail "stop"
    for ((i = 0; i < 50; i++)); do
        [ "$(ls "/proc/$APID/task" | wc -l)" = "$threads" ] && break
        sleep 0.1
    done
    eq "$(ls "/proc/$APID/task" | wc -l)" "$threads" "threads after stop"
    attachee_cmd a "alloc 5" '"kept":15'
    ctl start --pid "$APID" --source agent --name a2 >"$T/start.out" 2>&1 ||
        fail "second attach: $(cat "$T/start.out")"
    attach_wait a2 source_status.connected true
    attachee_cmd a "alloc 7" '"kept":22'
    attach_wait a2 heap.outstanding_count 7
    eq "$(ctl --json status a1 | jget heap.outstanding_count)" 10 "the stopped session kept its data"
    # A third attach: still one ring in the process, reused.
    ctl stop a2 >/dev/null || fail "stop a2"
    ctl start --pid "$APID" --source agent --name a3 >"$T/start.out" 2>&1 ||
        fail "third attach: $(cat "$T/start.out")"
    attach_wait a3 source_status.connected true
    attachee_cmd a "alloc 2" '"kept":24'
    attach_wait a3 heap.outstanding_count 2
    eq "$(grep -c 'memfd:heaptrace-agent' "/proc/$APID/maps")" 1 "the agent's rings mapped in the process"
    attachee_ok a
}

attach_redis_sets() {
    local from=$1 n=$2 i
    for ((i = from; i < from + n; i++)); do
        echo "SET key:$i $(printf 'v%099d' "$i")"
    done | redis-cli -s "$T/redis.sock" >/dev/null || fail "redis-cli"
}

# redis-server attached mid-run: N keys SET after the attach are 4 blocks each (value, object,
# dict entry, key: values over 44 bytes are not embedded); 200 keys before it size the keyspace's
# table (256 buckets) so no rehash happens meanwhile. stop leaves redis answering with every key.
case_attach_agent_redis() {
    attach_setup
    stacks_need_redis
    redis_start
    attach_redis_sets 0 200
    ctl start --pid "$RPID" --source agent --name r >"$T/start.out" 2>&1 ||
        fail "start --pid redis: $(cat "$T/start.out")"
    attach_wait r source_status.connected true
    # What redis holds besides the keys (a client's buffers kept across connections) is
    # there after a first connection: counted from then on.
    attach_redis_sets 0 1
    sleep 0.3
    local c0
    c0=$(ctl --json status r | jget heap.outstanding_count)
    attach_redis_sets 200 40
    attach_wait r heap.outstanding_count $((c0 + 160))
    eq "$(redis-cli -s "$T/redis.sock" dbsize)" 240 "dbsize"
    ctl stop r >/dev/null || fail "stop"
    local c1
    c1=$(ctl --json status r | jget heap.outstanding_count)
    attach_redis_sets 240 10
    eq "$(redis-cli -s "$T/redis.sock" ping)" PONG "ping after stop"
    eq "$(redis-cli -s "$T/redis.sock" dbsize)" 250 "every key after stop"
    eq "$(redis-cli -s "$T/redis.sock" get key:7)" "$(printf 'v%099d' 7)" "a key's value"
    eq "$(ctl --json status r | jget heap.outstanding_count)" "$c1" "no record after stop"
}

# kill -9 of the daemon under an attached redis: redis keeps serving.
case_attach_agent_daemon_killed() {
    attach_setup
    stacks_need_redis
    redis_start
    ctl start --pid "$RPID" --source agent --name r >"$T/start.out" 2>&1 || fail "start: $(cat "$T/start.out")"
    attach_wait r source_status.connected true
    kill -KILL "$DPID"
    wait "$DPID" 2>/dev/null
    DPID=
    attach_redis_sets 0 100
    eq "$(redis-cli -s "$T/redis.sock" dbsize)" 100 "redis serves after the daemon died"
    eq "$(redis-cli -s "$T/redis.sock" ping)" PONG "ping"
}

# attach_refused PID PATTERN: start --pid --source agent fails naming the reason; nothing of the
# agent is in the process.
attach_refused() {
    ctl start --pid "$1" --source agent --name x >"$T/start.out" 2>&1 &&
        fail "attach to $1 accepted: $(cat "$T/start.out")"
    grep -q "$2" "$T/start.out" || fail "refusal without its reason ($2): $(cat "$T/start.out")"
    grep -q libheaptrace-agent "/proc/$1/maps" && fail "the agent is loaded in $1 after a refusal"
    ctl --json ls | grep -q '"x"' && fail "a session was left behind"
    return 0
}

case_attach_agent_refuse_tracer() {
    attach_setup
    command -v strace >/dev/null || live_skip "no strace"
    attachee_start a
    strace -p "$APID" -o /dev/null &
    local spid=$!
    for ((i = 0; i < 100; i++)); do
        grep -q "TracerPid:[[:space:]]*$spid" "/proc/$APID/status" && break
        sleep 0.05
    done
    attach_refused "$APID" "already traced by process $spid"
    kill "$spid"
    wait "$spid" 2>/dev/null
    # (strace's own stops make the app's epoll_wait fail with EINTR: not checked here.)
    kill -0 "$APID" || fail "the target is gone"
}

case_attach_agent_refuse_static() {
    attach_setup
    attachee_start s attachstatic
    attach_refused "$APID" "statically linked"
    attachee_ok s
}

# A program defining malloc itself (its allocator linked in), one under a seccomp filter, one
# 32-bit, one with no glibc (no libc.so.6 mapped): each refused with its reason.
attach_build() {
    local out=$1
    shift
    cc "$@" -o "$T/$out" 2>"$T/cc.err" || return 1
}

case_attach_agent_refuse_own_malloc() {
    attach_setup
    cat >"$T/own.c" <<'EOF'
#include <stddef.h>
#include <unistd.h>
static char pool[1 << 20];
static size_t used;
void *malloc(size_t n) { void *p = pool + used; used += (n + 15) & ~(size_t)15; return p; }
void free(void *p) { (void)p; }
void *calloc(size_t n, size_t m) { return malloc(n * m); }
void *realloc(void *p, size_t n) { (void)p; return malloc(n); }
int main(void) { for (;;) pause(); }
EOF
    attach_build own "$T/own.c" -rdynamic || fail "cc: $(cat "$T/cc.err")"
    "$T/own" &
    LIVE_PIDS+=($!)
    sleep 0.2
    attach_refused "$!" "linked statically into its executable"
}

# attach_seccomp_app MODE: a program under a seccomp filter (MODE allow: allows everything;
# kill-socket: kills the process on socket(2); args-mmap: decides mmap on its arguments), with
# the usual arch check first; APID.
attach_seccomp_app() {
    cat >"$T/sc.c" <<'EOF'
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#define NR offsetof(struct seccomp_data, nr)
#define ARCH offsetof(struct seccomp_data, arch)
#define ARG2 offsetof(struct seccomp_data, args[2])
int main(int argc, char **argv) {
    const char *m = argc > 1 ? argv[1] : "allow";
    long nr = !strcmp(m, "kill-socket") ? SYS_socket : !strcmp(m, "args-mmap") ? SYS_mmap : -1;
    int args = !strcmp(m, "args-mmap");
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARCH),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, NR),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG2), /* mmap's prot */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    if (!args) /* no look at the arguments: straight to the verdict */
        f[5] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    struct sock_fprog p = {sizeof(f) / sizeof(f[0]), f};
    puts("ready");
    fflush(stdout);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &p))
        return 1;
    for (;;)
        pause();
}
EOF
    [ -x "$T/sc" ] || attach_build sc "$T/sc.c" || fail "cc: $(cat "$T/cc.err")"
    "$T/sc" "$1" >"$T/sc-$1.out" &
    APID=$!
    LIVE_PIDS+=("$APID")
    live_wait_line "sc-$1" ready
    for ((i = 0; i < 100; i++)); do
        grep -q "^Seccomp:[[:space:]]*2" "/proc/$APID/status" && return 0
        sleep 0.02
    done
    fail "no seccomp filter on $APID"
}

# seccomp: the filters are read and run on each call loading the agent makes: one allowing
# them all is attached to; one that would kill on socket(2), or look at mmap's arguments, is
# refused with the call named, and the process lives on.
case_attach_agent_seccomp() {
    attach_setup
    attach_seccomp_app allow
    ctl start --pid "$APID" --source agent --name ok >"$T/start.out" 2>&1 ||
        fail "attach under an allow-all filter: $(cat "$T/start.out")"
    attach_wait ok source_status.connected true
    attach_seccomp_app kill-socket
    attach_refused "$APID" "seccomp filter by which socket would be killed"
    kill -0 "$APID" || fail "the process was killed"
    attach_seccomp_app args-mmap
    attach_refused "$APID" "mmap would be decided on its arguments"
    kill -0 "$APID" || fail "the process was killed"
}

case_attach_agent_refuse_32bit() {
    attach_setup
    printf 'int main(void){for(;;)__builtin_ia32_pause();}\n' >"$T/m32.c"
    # gcc-multilib (scripts/install-deps.sh).
    attach_build m32 -m32 -O0 "$T/m32.c" || live_skip "no 32-bit toolchain: $(cat "$T/cc.err")"
    "$T/m32" &
    LIVE_PIDS+=($!)
    sleep 0.2
    attach_refused "$!" "32-bit program"
}

case_attach_agent_refuse_no_glibc() {
    attach_setup
    # Dynamically linked (the loader maps it) but with no libc: nothing has dlopen.
    printf 'void _start(void){for(;;)__asm__ volatile("pause");}\n' >"$T/nolibc.c"
    attach_build nolibc -nostdlib -fPIE -pie -O1 -Wl,-e,_start "$T/nolibc.c" || fail "cc: $(cat "$T/cc.err")"
    "$T/nolibc" &
    LIVE_PIDS+=($!)
    sleep 0.2
    attach_refused "$!" "maps no glibc libc.so.6"
}

# A main thread that blocks SIGSEGV is not borrowed (the calls return through a fault the kernel
# would force through the block, unblocking it for good): another thread is, and the app sees
# nothing. With every thread blocking it: refused.
case_attach_agent_other_thread() {
    attach_setup
    attachee_start a attachee segv-main
    attachee_cmd a "alloc 3" '"kept":3'
    ctl start --pid "$APID" --source agent --name a >"$T/start.out" 2>&1 ||
        fail "start: $(cat "$T/start.out")"
    attach_wait a source_status.connected true
    attachee_cmd a "alloc 4" '"kept":7'
    attach_wait a heap.outstanding_count 4
    grep -q "SigBlk:.*" "/proc/$APID/status" || fail "no status"
    # The main thread's mask is as it was.
    [ $((0x$(awk '/^SigBlk/ {print $2}' "/proc/$APID/status") & (1 << 10))) -ne 0 ] ||
        fail "the main thread's SIGSEGV block was lost"
    attachee_ok a
}

case_attach_agent_refuse_segv_blocked() {
    attach_setup
    attachee_start a attachee segv-all
    attach_refused "$APID" "SIGSEGV"
    attachee_ok a
}

# --source auto: the agent where it can attach, eBPF otherwise, said in the reply (and the
# session's source in status).
# attach_source_pick [--source auto]: the choice with auto, asked for or by default.
attach_source_pick() {
    attach_setup
    attachee_start a
    ctl --json start --pid "$APID" "$@" --name a >"$T/start.json" 2>&1 ||
        fail "start $*: $(cat "$T/start.json")"
    eq "$(jget source <"$T/start.json")" agent "auto on a program the agent can attach to"
    jget source_choice <"$T/start.json" | grep -q '^agent: it can attach' ||
        fail "no choice: $(cat "$T/start.json")"
    eq "$(ctl --json status a | jget source)" agent "status source"
    attach_wait a source_status.connected true
    attachee_ok a
    ctl --json version | grep -q '"bpf"' || live_skip "no eBPF source in this build"
    attachee_start s attachstatic
    ctl start --pid "$APID" "$@" --name s >"$T/start.out" 2>&1 ||
        fail "start $* (static): $(cat "$T/start.out")"
    grep -q "(bpf)" "$T/start.out" || fail "auto on a static program: $(cat "$T/start.out")"
    grep -q "source: bpf: the agent cannot attach (.*statically linked" "$T/start.out" ||
        fail "no reason for the choice: $(cat "$T/start.out")"
    eq "$(ctl --json status s | jget source)" bpf "status source"
}
case_attach_agent_source_auto() { attach_source_pick --source auto; }
# start --pid without --source: the same choice (issue 23 item 4).
case_attach_agent_source_default() { attach_source_pick; }

# A library dlopen'ed after the attach: its slots are redirected as it loads (the wrapper in
# dlopen's slots), so its allocations count.
case_attach_agent_dlopen_later() {
    attach_setup
    [ -f "$LIVE_APPS/libagentplug.so" ] || live_skip "agentplug not built"
    attachee_start a
    ctl start --pid "$APID" --source agent --name a >"$T/start.out" 2>&1 || fail "start: $(cat "$T/start.out")"
    attach_wait a source_status.connected true
    grep -q libagentplug "/proc/$APID/maps" && fail "the library is loaded already"
    attachee_cmd a "dlopen $LIVE_APPS/libagentplug.so" '"plugged"'
    grep '"plugged"' "$T/a.out" | grep -q '"plugged":true' || fail "dlopen: $(cat "$T/a.out")"
    attach_wait a heap.outstanding_count 6
    attachee_ok a
}

# A library the loader maps other than through the program's dlopen (glibc's own loads of NSS and
# iconv modules; here dlmopen into the base namespace): the agent's watcher sees the loader's count
# of loads move within a tick (100 ms) and rewrites its slots then, counted as agent.modules_late.
# Its allocations from then on count.
case_attach_agent_dlmopen_late() {
    attach_setup
    [ -f "$LIVE_APPS/libagentplug.so" ] || live_skip "agentplug not built"
    attachee_start a
    ctl start --pid "$APID" --source agent --name a >"$T/start.out" 2>&1 || fail "start: $(cat "$T/start.out")"
    attach_wait a source_status.connected true
    attachee_cmd a "dlmopen $LIVE_APPS/libagentplug.so" '"mloaded"'
    grep -q '"mloaded":true' "$T/a.out" || fail "dlmopen: $(cat "$T/a.out")"
    attach_wait a source_status.agent.modules_late 1
    attachee_cmd a "plug 6" '"plugged"'
    grep '"plugged"' "$T/a.out" | grep -q '"plugged":true' || fail "plug: $(cat "$T/a.out")"
    attach_wait a heap.outstanding_count 6
    attachee_ok a
}

# Yama named in a refusal (the kernel check applies it; this kernel has no Yama, so the scope
# comes from a file the test daemon reads instead of /proc/sys/kernel/yama/ptrace_scope): a
# member's attach to root's process says what the scope allows. (sec_: runs alone, it makes the
# heaptrace group.)
case_sec_attach_yama_named() {
    sec_group
    attach_setup
    ctl shutdown >/dev/null
    wait "$DPID"
    trap sec_cleanup EXIT
    echo 2 >"$T/yama"
    HEAPTRACED_TEST_YAMA_SCOPE_FILE=$T/yama sec_daemon
    sleep 300 &
    LIVE_PIDS+=($!)
    as_member 65534 "$HT_CTL" start --pid "$!" --source agent >"$T/start.out" 2>&1 &&
        fail "uid 65534 attached to root's process"
    grep -q "may not trace.*Yama: kernel.yama.ptrace_scope is 2, only CAP_SYS_PTRACE may trace it" \
        "$T/start.out" || fail "Yama not named: $(cat "$T/start.out")"
}

# start --exe NAME (Linux, the agent): a process of that image started after the command is a
# session NAME.PID. Stopped as soon as its exec is seen (the process events connector) and, when
# still in the loader then, run to its entry point and attached before main: then no free of a
# block it did not see (0 unknown frees). The event comes while the process runs on, so a busy
# machine may see it in main already: attached there ("running"), its earlier blocks unknown.
# The app sees nothing either way; stop ends the process's session with the image's.
case_attach_agent_exe() {
    attach_setup
    # A copy of its own: start --exe takes every process of the image on the machine, and other
    # cases run attachee at the same time.
    cp "$LIVE_APPS/attachee" "$T/attachee-exe"
    ctl start --exe attachee-exe --source agent --name img >"$T/start.out" 2>&1 ||
        fail "start --exe: $(cat "$T/start.out")"
    attachee_start a "$T/attachee-exe"
    local kid=img.$APID at
    attach_wait "$kid" source_status.connected true
    at=$(ctl --json status "$kid" | jget source_status.attached_at)
    echo "attached at: $at"
    attachee_cmd a "alloc 10" '"kept":10'
    attachee_cmd a "free" '"freed":10'
    attachee_cmd a "alloc 4" '"kept":4'
    # From the entry point, stdout's buffer (its first printf, in main) is one more block.
    if [ "$at" = "entry point" ]; then
        attach_wait "$kid" heap.outstanding_count 5
        eq "$(ctl --json status "$kid" | jget quality.unknown_frees)" 0 "frees of blocks not seen"
    else
        attach_wait "$kid" quality.unknown_frees 0
        local c
        c=$(ctl --json status "$kid" | jget heap.outstanding_count)
        [ "$c" = 4 ] || [ "$c" = 5 ] || fail "outstanding after the attach in main: $c"
    fi
    attachee_ok a
    ctl stop img >/dev/null || fail "stop img"
    attach_wait "$kid" state ended
    attachee_cmd a "alloc 3" '"kept":7'
    attachee_ok a
}

# start --exe PATH: the exec gate (fanotify FAN_OPEN_EXEC_PERM on the file) holds each exec of the
# image until the daemon has seized the process, which then stops at the exec's end, before its
# first instruction: every process started after the command is attached at its entry point, so
# every block of main is seen (stdout's buffer + 4 kept: 5, 0 unknown frees), five in a row, none
# caught late. Its parent, waiting with WUNTRACED|WCONTINUED as an interactive shell does, sees
# only the exit: the hold is a ptrace stop, never a job-control one.
case_attach_agent_exe_gate() {
    attach_setup
    local app="$T/attachee-gate" kid r
    cp "$LIVE_APPS/attachee" "$app" # its own file: other cases run attachee meanwhile
    ctl start --exe "$app" --source agent --name img >"$T/start.out" 2>&1 ||
        fail "start --exe: $(cat "$T/start.out")"
    ctl --json status img >"$T/s"
    eq "$(jget source_status.exec_gate.watched.0 <"$T/s")" "$app" "the file watched"
    for r in 1 2 3 4 5; do
        attachee_start "a$r" "$app"
        kid=img.$APID
        attach_wait "$kid" source_status.connected true
        eq "$(ctl --json status "$kid" | jget source_status.attached_at)" "entry point" \
            "process $r attached at"
        attachee_cmd "a$r" "alloc 10" '"kept":10'
        attachee_cmd "a$r" "free" '"freed":10'
        attachee_cmd "a$r" "alloc 4" '"kept":4'
        attach_wait "$kid" heap.outstanding_count 5
        eq "$(ctl --json status "$kid" | jget quality.unknown_frees)" 0 "process $r: frees of blocks not seen"
        attachee_ok "a$r"
        exec 7>&-
    done
    python3 - "$app" >"$T/parent.out" 2>&1 <<'PY' || fail "parent: $(cat "$T/parent.out")"
import os, sys
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.dup2(r, 0)
    os.close(w)
    os.execv(sys.argv[1], [sys.argv[1]])
os.close(r)
os.close(w)  # end of its input: it exits
_, st = os.waitpid(pid, os.WUNTRACED | os.WCONTINUED)
print("stopped" if os.WIFSTOPPED(st) else "continued" if os.WIFCONTINUED(st) else "exited")
PY
    eq "$(tail -n 1 "$T/parent.out")" exited "what the parent saw first"
    ctl --json status img >"$T/s"
    eq "$(jget source_status.exec_gate.taken <"$T/s")" 6 "processes held at the gate"
    eq "$(jget source_status.exec_gate.missed <"$T/s")" 0 "processes the gate let go"
    ctl stop img >/dev/null || fail "stop img"
    # The gate is gone with the session: the image runs untouched.
    echo | "$app" >/dev/null 2>&1 || fail "the image after stop"
}

# An image run again and again (a cron job, a crashing service): with every session slot taken, the
# oldest ended session of the image is dropped for the new process (counted in the image session's
# status, spawned.ended_dropped), so its latest runs are traced instead of every run past
# max_sessions being refused.
case_attach_agent_exe_slots_reused() {
    [ "$(id -u)" -eq 0 ] || live_skip "attaching needs root"
    [ -n "$LIVE_APPS" ] && [ -x "$LIVE_APPS/attachee" ] || live_skip "test apps not built"
    trap live_cleanup EXIT
    echo '{"max_sessions": 3}' >"$T/cfg.json"
    start_daemon --config "$T/cfg.json"
    local app="$T/attachee-slots" r pid
    cp "$LIVE_APPS/attachee" "$app"
    ctl start --exe "$app" --source agent --name img >"$T/start.out" 2>&1 ||
        fail "start --exe: $(cat "$T/start.out")"
    for r in 1 2 3 4 5 6; do
        echo | "$app" >"$T/run$r.out" 2>&1 || fail "run $r: $(cat "$T/run$r.out")"
        pid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$T/run$r.out" | head -n 1)
        [ -n "$pid" ] || fail "run $r printed no pid: $(cat "$T/run$r.out")"
        attach_wait "img.$pid" state ended
    done
    ctl --json status img >"$T/s"
    eq "$(jget spawned.sessions <"$T/s")" 6 "sessions made for the image's runs"
    eq "$(jget spawned.failed <"$T/s")" 0 "runs refused a session"
    eq "$(jget spawned.ended_dropped <"$T/s")" 4 "ended sessions dropped for newer runs"
    ctl --json status "img.$pid" >/dev/null || fail "the last run's session is gone"
}

# start --exe is root's (it traces every user's processes of the image). (sec_: runs alone.)
case_sec_attach_exe_root_only() {
    sec_group
    attach_setup
    ctl shutdown >/dev/null
    wait "$DPID"
    trap sec_cleanup EXIT
    sec_daemon
    as_member 65534 "$HT_CTL" start --exe attachee --source agent >"$T/start.out" 2>&1 &&
        fail "uid 65534 watches an image"
    grep -q "EPERM.*root only" "$T/start.out" || fail "not refused as root's: $(cat "$T/start.out")"
}

# The daemon's exit (shutdown) detaches too: the agent's thread ends, the app runs on untouched.
case_attach_agent_daemon_exit() {
    attach_setup
    attachee_start a
    local threads
    threads=$(ls "/proc/$APID/task" | wc -l)
    ctl start --pid "$APID" --source agent --name a >"$T/start.out" 2>&1 || fail "start: $(cat "$T/start.out")"
    attach_wait a source_status.connected true
    attachee_cmd a "alloc 5" '"kept":5'
    stop_clean
    for ((i = 0; i < 50; i++)); do
        [ "$(ls "/proc/$APID/task" | wc -l)" = "$threads" ] && break
        sleep 0.1
    done
    eq "$(ls "/proc/$APID/task" | wc -l)" "$threads" "threads after the daemon's exit"
    attachee_cmd a "free" '"freed":5'
    attachee_cmd a "alloc 5" '"kept":5'
    attachee_ok a
}

# A process in another mount namespace where the agent's path is not the same file (a container
# with its own root): refused with the reason, left as it was.
case_attach_agent_refuse_other_mount_ns() {
    attach_setup
    command -v unshare >/dev/null || live_skip "no unshare"
    local libdir
    libdir=$(dirname "$HT_DAEMON")
    [ -f "$libdir/libheaptrace-agent.so" ] || live_skip "the agent is not next to the daemon"
    mkfifo "$T/ns.in"
    unshare -m --propagation private sh -c "mount -t tmpfs none '$libdir' && exec '$LIVE_APPS/attachee'" \
        <"$T/ns.in" >"$T/ns.out" 2>"$T/ns.err" &
    APID=$!
    LIVE_PIDS+=("$APID")
    exec 7>"$T/ns.in"
    live_wait_line ns '"ready":true'
    attach_refused "$APID" "is not the same file in process $APID's mount namespace"
    attachee_ok ns
}

# A program heaptracectl run started, its session stopped: the agent is preloaded already (its
# malloc is the program's); an attach opens a new session on it, without a GOT rewrite.
case_attach_agent_after_run() {
    attach_setup
    mkfifo "$T/a.in"
    "$HT_CTL" run --name r -- "$LIVE_APPS/attachee" <"$T/a.in" >"$T/a.out" 2>"$T/a.err" &
    APID=$!
    LIVE_PIDS+=("$APID")
    exec 7>"$T/a.in"
    live_wait_line a '"ready":true'
    attach_wait r source_status.connected true
    sleep 0.2
    local c0
    c0=$(ctl --json status r | jget heap.outstanding_count)
    attachee_cmd a "alloc 3" '"kept":3'
    attach_wait r heap.outstanding_count $((c0 + 3))
    ctl stop r >/dev/null || fail "stop r"
    ctl start --pid "$APID" --source agent --name a >"$T/start.out" 2>&1 ||
        fail "attach after run: $(cat "$T/start.out")"
    attach_wait a source_status.connected true
    attachee_cmd a "alloc 4" '"kept":7'
    attach_wait a heap.outstanding_count 4
    eq "$(ctl --json status r | jget heap.outstanding_count)" $((c0 + 3)) "the run session after its stop"
    attachee_ok a
}

# An attached process that execs: its next program has no agent, the session ends (it does not
# wait for one to join, as a run's does), the program runs.
case_attach_agent_exec_ends() {
    attach_setup
    mkfifo "$T/x.in"
    python3 -c 'import os, sys
print("ready", flush=True)
sys.stdin.readline()
os.execv("/bin/sleep", ["sleep", "100"])' <"$T/x.in" >"$T/x.out" 2>&1 &
    APID=$!
    LIVE_PIDS+=("$APID")
    exec 7>"$T/x.in"
    live_wait_line x ready
    ctl start --pid "$APID" --source agent --name x >"$T/start.out" 2>&1 || fail "start: $(cat "$T/start.out")"
    attach_wait x source_status.connected true
    echo go >&7
    # Well within the 10 s a run's session gives a next program to join (EXEC_JOIN_MS).
    local st
    for ((i = 0; i < 30 * ${HT_TIME_FACTOR:-1}; i++)); do
        st=$(ctl --json status x | jget state)
        [ "$st" = ended ] && break
        sleep 0.1
    done
    eq "$st" ended "the session after the exec"
    [ "$(cat "/proc/$APID/comm")" = sleep ] || fail "the program after the exec: $(cat "/proc/$APID/comm")"
}

# Under load: a thread makes malloc/free pairs all along while the slots are rewritten. Nothing
# breaks, the pairs go on, and what the main thread keeps after the attach is counted (plus at
# most the one pair in flight; a pair straddling the attach is at most one unknown free).
case_attach_agent_under_load() {
    attach_setup
    attachee_start a attachee churn
    ctl start --pid "$APID" --source agent --name a >"$T/start.out" 2>&1 || fail "start: $(cat "$T/start.out")"
    attach_wait a source_status.connected true
    attachee_cmd a "alloc 20" '"kept":20'
    sleep 0.3
    local c u
    c=$(ctl --json status a | jget heap.outstanding_count)
    u=$(ctl --json status a | jget quality.unknown_frees)
    [ "$c" -ge 20 ] && [ "$c" -le 21 ] || fail "outstanding under load: $c (20 kept, at most 1 in flight)"
    [ "$u" -le 1 ] || fail "unknown frees under load: $u"
    local n0 n1
    attachee_ok a
    n0=$(grep '"ok"' "$T/a.out" | tail -n 1 | jget churned)
    sleep 0.3
    attachee_ok a
    n1=$(grep '"ok"' "$T/a.out" | tail -n 1 | jget churned)
    [ "$n1" -gt "$n0" ] || fail "the pairs stopped: $n0 then $n1"
    ctl stop a >/dev/null
    attachee_ok a
}
