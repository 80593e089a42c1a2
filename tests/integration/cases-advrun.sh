# Adversarial cases for `heaptracectl run` across exec (the session follows its process into the
# programs it execs), found by attacking it: each failed on the code before its fix. Sourced by
# run.sh; the agent helpers (agent_setup, agent_run, agent_ended, ...) come from cases-agent.sh.

# advrun_named NAME PATTERN...: the live (AIFO) blocks whose stack names any PATTERN.
advrun_named() {
    local name=$1 p n=0
    shift
    for p in "$@"; do
        n=$((n + $(ctl --json stacks "$name" --type AIFO --require "$p" | jget total.count)))
    done
    echo "$n"
}

# Without address randomization (setarch -R, as under gdb) every PIE program's executable is
# mapped at the same address: the program exec'd (dash) maps over where agentcase was. Its frames
# must be named by its own file, not by the kept modules of the program before the exec (they were
# named agentcase!..., the kept module winning over the running program's mapping).
case_advrun_exec_same_address() {
    agent_setup
    command -v setarch >/dev/null || live_skip "no setarch"
    setarch -R true 2>/dev/null || live_skip "setarch -R not permitted here"
    setarch -R "$HT_CTL" run --name asame -- "$LIVE_APPS/agentcase" exec "$LIVE_APPS" \
        >"$T/asame.out" 2>"$T/asame.err" </dev/null &
    APID=$!
    LIVE_PIDS+=("$APID")
    live_wait_line asame '"ready":true'
    live_go "$APID"
    live_wait_line asame '"done":true'
    live_settle asame
    live_go "$APID"
    wait "$APID" || fail "exit code after the exec"
    agent_ended asame
    eq "$(ctl --json status asame | jget source_status.execs)" 1 "execs"
    [ "$(advrun_named asame 'sh!' 'dash!')" -gt 0 ] ||
        fail "the exec'd sh's live blocks are not named by sh: $(ctl stacks asame --type AIFO --top 3 --no-default-cull)"
    eq "$(advrun_named asame 'agentcase!')" 0 "live blocks (all the exec'd sh's) named by agentcase"
    [ "$(ctl --json status asame | jget source_status.symbols.kept_replaced)" -gt 0 ] ||
        fail "kept modules replaced not counted"
    stop_clean
}

# 1,000 execs in a row (dash exec'ing itself): the modules of every earlier program were kept
# until the symbolizer's module list was full (4096), and from then on the running program's
# mappings were not added: the last program's frames stayed bare addresses. The oldest kept ones
# make room now (counted).
case_advrun_exec_loop() {
    agent_setup
    printf '%s\n' 'i=$1' '[ "$i" -gt 0 ] && exec /bin/sh "$0" $((i - 1))' 'echo "{\"last\":true}"' \
        >"$T/loop.sh"
    local t0 t1
    t0=$(date +%s)
    timeout 120 "$HT_CTL" run --name aloop -- /bin/sh "$T/loop.sh" 1000 >"$T/aloop.out" \
        2>"$T/aloop.err" </dev/null || fail "the exec loop failed: $(tail -3 "$T/aloop.err")"
    t1=$(date +%s)
    grep -q '"last":true' "$T/aloop.out" || fail "the loop did not end"
    agent_ended aloop
    ctl --json status aloop >"$T/s"
    echo "1000 execs: $((t1 - t0)) s; $(jget source_status.symbols <"$T/s")"
    eq "$(jget source_status.execs <"$T/s")" 1000 "execs"
    eq "$(jget stop_reason <"$T/s")" "target exited" "stop reason"
    eq "$(jget source_status.flushes_late <"$T/s")" 0 "late flushes"
    [ "$(advrun_named aloop 'sh!' 'dash!')" -gt 0 ] ||
        fail "the last program's live blocks are not named: $(ctl stacks aloop --type AIFO --top 3 --no-default-cull)"
    [ "$(jget source_status.symbols.kept_dropped <"$T/s")" -gt 0 ] || fail "kept modules dropped not counted"
    stop_clean
}

# A hostile program (tests/apps/agenthostile: garbage in its ring) that then execs a real program:
# the session follows the process, and what was counted of the first program's ring (malformed
# records, bad stacks, stuck ones, the agent's counters) must stay counted. The decoder's counts
# and the agent's were the new program's only (reset at the exec): status said 0 malformed.
case_advrun_exec_counts_kept() {
    agent_setup
    [ -x "$LIVE_APPS/agenthostile" ] || live_skip "agenthostile not built"
    "$HT_CTL" run --name ahx -- "$LIVE_APPS/agenthostile" /bin/sh -c 'echo "{\"execd\":true}"' \
        >"$T/ahx.out" 2>"$T/ahx.err" </dev/null &
    local hp=$!
    LIVE_PIDS+=("$hp")
    wait "$hp"
    eq "$?" 0 "exit code after the exec ($(cat "$T/ahx.err"))"
    grep -q '"execd":true' "$T/ahx.out" || fail "the exec'd program did not run"
    agent_ended ahx
    ctl --json status ahx >"$T/s" || fail "status"
    echo "hostile then exec: $(jget source_status <"$T/s")"
    eq "$(jget source_status.execs <"$T/s")" 1 "execs"
    [ "$(jget source_status.malformed <"$T/s")" -gt 1000 ] || fail "malformed records forgotten at the exec"
    [ "$(jget source_status.bad_stacks <"$T/s")" -gt 100 ] || fail "bad stacks forgotten at the exec"
    [ "$(jget source_status.stuck <"$T/s")" -gt 0 ] || fail "stuck records forgotten at the exec"
    [ "$(jget source_status.records <"$T/s")" -gt 1000 ] || fail "records forgotten at the exec"
    [ "$(jget source_status.agent.ring_full <"$T/s")" != 0 ] || fail "the first ring's ring_full forgotten"
    ctl ping >/dev/null || fail "the daemon stopped serving"
    stop_clean
}

# A member's program execs a setuid-root program (the kernel runs it as root; the loader ignores
# LD_PRELOAD there, so it is never traced). The session's symbolizer went on naming the session's
# frames from /proc/PID of the process, now root's: a member's forged frame (agentforge) at an
# address of the setuid program was named by its symbols, from a file only root may read (and
# the same leaks where the libraries of a root process are mapped: its address layout). Once the
# process is not the member's the symbolizer reads nothing more of it (counted).
case_advrun_exec_setuid() {
    sec_group
    [ -x "$LIVE_APPS/agentforge" ] || live_skip "agentforge not built"
    command -v cc >/dev/null || live_skip "no C compiler"
    chmod 711 "$T"
    agent_setup
    trap sec_cleanup EXIT
    mkdir -p "$T/sec" && chmod 711 "$T/sec"
    printf '%s\n' '#include <unistd.h>' \
        '__attribute__((noinline)) void root_only_name_zz(void) { __asm__ volatile("nop"); }' \
        'int main(void) { root_only_name_zz(); sleep(4); return 0; }' >"$T/sec/suid.c"
    cc -O1 -no-pie -o "$T/sec/suid" "$T/sec/suid.c" || fail "cc"
    chmod 4711 "$T/sec/suid"
    as_member 65534 cat "$T/sec/suid" >/dev/null 2>&1 && fail "the member can read the setuid program"
    local a
    a=$(nm "$T/sec/suid" | awk '/ root_only_name_zz$/ {print $1}')
    [ -n "$a" ] || fail "no symbol in the setuid program"
    a=$(printf '%x' $((0x$a + 1)))
    setpriv --reuid=65534 --regid="$SEC_GID" --clear-groups "$HT_CTL" run --name asu -- \
        "$LIVE_APPS/agentforge" "$a" -- "$T/sec/suid" >"$T/asu.out" 2>"$T/asu.err" </dev/null &
    APID=$!
    LIVE_PIDS+=("$APID")
    local i
    for ((i = 0; i < 100; i++)); do
        [ "$(readlink "/proc/$APID/exe")" = "$T/sec/suid" ] && break
        sleep 0.1
    done
    eq "$(readlink "/proc/$APID/exe")" "$T/sec/suid" "the program exec'd ($(cat "$T/asu.err"))"
    eq "$(stat -c %u "/proc/$APID")" 0 "the setuid program runs as root"
    sleep 0.5
    timeout 20 setpriv --reuid=65534 --regid="$SEC_GID" --clear-groups "$HT_CTL" stacks asu \
        --no-default-cull >"$T/asu.stacks" 2>&1 || fail "stacks: $(cat "$T/asu.stacks")"
    cat "$T/asu.stacks"
    grep -q 4242 "$T/asu.stacks" || grep -q '4.1 KiB' "$T/asu.stacks" || fail "the forged block is not in the session"
    grep -q root_only_name_zz "$T/asu.stacks" && fail "a symbol of a root process's file only root may read was shown"
    wait "$APID"
    agent_ended asu
    [ "$(ctl --json status asu | jget source_status.symbols.not_owner)" -gt 0 ] ||
        fail "the symbolizer's refusal is not counted"
    stop_clean
}

# The daemon stopped (SIGSTOP: a stalled daemon) while a --follow shell starts 8 children at once:
# each child's agent connects to the session's socket, whose backlog (4) fills, and the next
# connect blocked with no bound: the shell never finished. Joining is bounded now (2 s a step);
# the children run untraced; the program exits.
case_advrun_follow_daemon_stopped() {
    agent_setup
    "$HT_CTL" run --follow --name afs -- /bin/sh -c \
        'while [ ! -e "$1" ]; do sleep 0.05; done; for i in 1 2 3 4 5 6 7 8; do /bin/true & done; wait; echo "{\"done\":true}"' \
        sh "$T/go" >"$T/afs.out" 2>"$T/afs.err" </dev/null &
    APID=$!
    LIVE_PIDS+=("$APID")
    local i t0 t1 rc
    for ((i = 0; i < 100; i++)); do
        [ "$(ctl --json status afs 2>/dev/null | jget source_status.connected)" = true ] && break
        sleep 0.1
    done
    kill -STOP "$DPID"
    t0=$(date +%s)
    touch "$T/go"
    for ((i = 0; i < 300; i++)); do
        kill -0 "$APID" 2>/dev/null || break
        sleep 0.1
    done
    t1=$(date +%s)
    kill -CONT "$DPID"
    kill -0 "$APID" 2>/dev/null && fail "the program still runs $((t1 - t0)) s after the daemon stopped"
    wait "$APID"
    rc=$?
    eq "$rc" 0 "exit code ($(cat "$T/afs.err"))"
    grep -q '"done":true' "$T/afs.out" || fail "the shell did not finish"
    echo "8 children with the daemon stopped: $((t1 - t0)) s"
    [ $((t1 - t0)) -le 15 ] || fail "took $((t1 - t0)) s"
    ctl ping >/dev/null || fail "the daemon does not answer after SIGCONT"
    stop_clean
}

# A program that closes every descriptor past stderr (close_range, as daemons do) and opens its
# own under the same numbers (tests/apps/closeall): the agent took the number for its connection
# still: its fork handler closed the program's descriptor in the child, and its flush at exit
# wrote an 'F' into the program's socket. The agent now checks the number is still its socket.
case_advrun_close_all_fds() {
    agent_setup
    [ -x "$LIVE_APPS/closeall" ] || live_skip "closeall not built"
    timeout 30 "$HT_CTL" run --name aca -- "$LIVE_APPS/closeall" >"$T/aca.out" 2>"$T/aca.err" </dev/null ||
        fail "closeall failed: $(cat "$T/aca.err")"
    local i
    for ((i = 0; i < 50; i++)); do
        grep -q child_closed "$T/aca.out" && break
        sleep 0.1
    done
    grep child_closed "$T/aca.out" >"$T/j" || fail "the child said nothing"
    eq "$(jget child_closed <"$T/j")" 0 "the program's descriptors closed in its fork child"
    eq "$(jget stray_bytes <"$T/j")" 0 "bytes written into the program's sockets"
    agent_ended aca
    ctl --json stacks aca --type AIFO >"$T/k" || fail "stacks"
    [ "$(jget total.count <"$T/k")" -gt 0 ] || fail "the program's blocks before the close are not there"
    stop_clean
}

# The traced process execs a 32-bit program (the agent is 64-bit: its loader cannot take it). The
# agent was put in its LD_PRELOAD all the same, and the 32-bit loader said so on the program's
# stderr ("ERROR: ld.so: object ... wrong ELF class: ELFCLASS64"). An exec of a program of another
# ELF class goes on with the program's own environment now.
case_advrun_exec_32bit() {
    agent_setup
    printf 'int main(void) { return 0; }\n' >"$T/t32.c"
    cc -m32 -o "$T/t32" "$T/t32.c" 2>/dev/null && "$T/t32" || live_skip "no 32-bit toolchain or loader"
    timeout 30 "$HT_CTL" run --name a32 -- /bin/sh -c 'exec "$1"' sh "$T/t32" >"$T/a32.out" \
        2>"$T/a32.err" </dev/null || fail "exit code ($(cat "$T/a32.err"))"
    grep -q 'ELF class\|ld.so' "$T/a32.err" && fail "the loader's complaint on the program's stderr: $(cat "$T/a32.err")"
    agent_ended a32
    stop_clean
}

# The same under --follow, where the environment (LD_PRELOAD with the agent) is kept for every
# exec: an exec of a 32-bit program goes on without the agent in LD_PRELOAD (what else the user
# preloads stays), so its loader has nothing to complain about.
case_advrun_exec_32bit_follow() {
    agent_setup
    printf '#include <stdio.h>\n#include <stdlib.h>\nint main(void) { const char *p = getenv("LD_PRELOAD"); printf("preload=%%s\\n", p ? p : "(none)"); return 0; }\n' >"$T/t32.c"
    cc -m32 -o "$T/t32" "$T/t32.c" 2>/dev/null && "$T/t32" >/dev/null || live_skip "no 32-bit toolchain or loader"
    timeout 30 "$HT_CTL" run --follow --name f32 -- /bin/sh -c 'exec "$1"' sh "$T/t32" >"$T/f32.out" \
        2>"$T/f32.err" </dev/null || fail "exit code ($(cat "$T/f32.err"))"
    grep -q 'ELF class\|ld.so' "$T/f32.err" && fail "the loader's complaint on the program's stderr: $(cat "$T/f32.err")"
    grep -q 'preload=(none)' "$T/f32.out" || fail "the 32-bit program's LD_PRELOAD: $(cat "$T/f32.out")"
    stop_clean
}
