# Adversary cases for start --exe's exec gate (issue 23): what a careful user, or a hostile one,
# does to the image while the gate watches it.

# An exec of the image that fails after the gate's open (E2BIG: the arguments are copied after
# the file is opened, fs/exec.c) leaves the old program running. Three in a row, then an exec of
# another program (sleep): before, the daemon waited a second for an exec end that never came
# (its loop held, ping 1.8 s), let go of the process without stopping it first, so its next
# failed exec left it stopped for ever under a tracer that no longer waited (state t), and an
# exec of any program within that second was taken as one of the image (a session img.PID for
# sleep, the agent loaded into it). Now: each failure counted as missed at once, the process
# runs on, no session but for the image.
case_adv23_exe_gate_failed_exec() {
    attach_setup
    local app="$T/adv23-img" ms
    cp "$LIVE_APPS/attachee" "$app"
    ctl start --exe "$app" --source agent --name img >"$T/start.out" 2>&1 ||
        fail "start --exe: $(cat "$T/start.out")"
    timeout -s KILL $((20 * ${HT_TIME_FACTOR:-1})) python3 - "$app" >"$T/py.out" 2>&1 <<'PY' &
import os, sys, time
app = sys.argv[1]
for i in range(3):
    t = time.monotonic()
    try:
        os.execv(app, [app] + ["a" * 100000] * 40)  # over the argument limit: E2BIG
    except OSError as e:
        print("failed", e.errno, "%d" % ((time.monotonic() - t) * 1000), flush=True)
os.execv("/bin/sleep", ["sleep", "0.5"])
PY
    local py=$!
    LIVE_PIDS+=("$py")
    # The daemon answers while the execs fail (it held its loop a second for each).
    sleep 0.2
    ms=$( { /usr/bin/time -f %e "$HT_CTL" ping >/dev/null; } 2>&1)
    echo "ping during the failed execs: ${ms}s"
    wait "$py"
    eq "$?" 0 "the program after its failed execs (137: left stopped, killed by the timeout)"
    eq "$(grep -c '^failed 7 ' "$T/py.out")" 3 "failed execs ($(cat "$T/py.out"))"
    ctl --json status img >"$T/s"
    eq "$(jget source_status.exec_gate.missed <"$T/s")" 3 "failed execs counted as missed"
    eq "$(jget source_status.exec_gate.taken <"$T/s")" 0 "processes taken"
    eq "$(jget source_status.spawned <"$T/s")" 0 "sessions of the image's processes"
    ctl ls >"$T/ls"
    grep -q "img\.$py" "$T/ls" && fail "sleep traced as a process of the image: $(cat "$T/ls")"
    awk -v m="$ms" -v f="${HT_TIME_FACTOR:-1}" 'BEGIN { exit !(m < 0.5 * f) }' || fail "ping took ${ms}s during the failed execs"
    # The gate still takes the image itself.
    echo | "$app" >/dev/null 2>&1 || fail "the image"
    eq "$(ctl --json status img | jget source_status.exec_gate.taken)" 1 "the image taken after"
}

# KNOWN DEFECT, not fixed (skipped unless HT_ADV23_KNOWN=1): the daemon killed -9 while a process
# of the image runs from the gate to its entry point (here a preloaded library's constructor
# sleeps 0.3 s in the loader) leaves the int3 (0xcc) the daemon wrote at the entry point: the
# process, no longer traced, dies of SIGTRAP (exit 133) instead of running on unharmed. A fix
# needs a stop at the entry point that does no harm without its tracer (or a helper process
# that outlives the daemon and puts the byte back), too big for this pass.
case_adv23_exe_gate_daemon_killed_at_entry() {
    [ "${HT_ADV23_KNOWN:-0}" = 1 ] || live_skip "known defect: the entry point's int3 outlives a killed daemon"
    attach_setup
    command -v cc >/dev/null || live_skip "no C compiler"
    local app="$T/adv23-img" rc
    cp "$LIVE_APPS/attachee" "$app"
    printf '#include <unistd.h>\n__attribute__((constructor)) static void slow(void) { usleep(300000); }\n' >"$T/slow.c"
    cc -shared -fPIC -o "$T/libslow.so" "$T/slow.c" || fail "cc"
    ctl start --exe "$app" --source agent --name img >"$T/start.out" 2>&1 ||
        fail "start --exe: $(cat "$T/start.out")"
    echo | LD_PRELOAD=$T/libslow.so "$app" >"$T/app.out" 2>&1 &
    local p=$!
    sleep 0.15
    kill -KILL "$DPID"
    wait "$DPID" 2>/dev/null
    DPID=
    wait "$p"
    rc=$?
    eq "$rc" 0 "the image's exit after the daemon's kill -9 (133: SIGTRAP, the entry point's int3)"
}

# Short runs of the image from parallel loops (an exec storm): the gate holds the next process
# while the previous one runs on and exits, often before the loop accepts its agent's hello.
# Before, the answer to that hello failed (EPIPE) and the connection was dropped uncounted: the
# session stayed "running", unconnected, for CONNECT_MS (30 s), its slot taken and every event
# of its process lost (11 of 12 in a 4x3 storm). Now each program's ring is taken and each
# session ends within seconds, its process's blocks counted; none left stopped, none killed.
case_adv23_exe_gate_parallel_short_runs() {
    attach_setup
    local app="$T/adv23-short" l i k n=0 loops=()
    cp "$LIVE_APPS/attachee" "$app"
    ctl start --exe "$app" --source agent --name img >"$T/start.out" 2>&1 ||
        fail "start --exe: $(cat "$T/start.out")"
    for l in 1 2 3; do
        (for i in 1 2 3; do echo | timeout -s KILL 20 "$app" >/dev/null 2>&1; echo "$?"; done >"$T/rc.$l") &
        loops+=($!)
    done
    wait "${loops[@]}"
    eq "$(cat "$T"/rc.* | sort | uniq -c | tr -s ' ')" " 9 0" "exit codes of the 9 runs"
    ctl --json status img >"$T/s"
    eq "$(jget source_status.exec_gate.taken <"$T/s")" 9 "processes held at the gate"
    eq "$(jget source_status.spawned <"$T/s")" 9 "their sessions"
    for ((i = 0; i < 50 * ${HT_TIME_FACTOR:-1}; i++)); do
        ctl ls | awk '$2 ~ /^img\./ && $3 != "ended"' | grep -q . || break
        sleep 0.1
    done
    for k in $(ctl ls | awk '$2 ~ /^img\./ {print $2}'); do
        ctl --json status "$k" >"$T/k"
        eq "$(jget state <"$T/k")" ended "$k's state (5 s after its process's end)"
        eq "$(jget source_status.connected <"$T/k")" true "$k's agent connected"
        n=$((n + 1))
    done
    eq "$n" 9 "sessions of the runs"
}
