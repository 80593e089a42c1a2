# Integration cases for the endpoint (issue 8 items 6, 7, 8, 10): who the daemon
# trusts, who the ctl trusts, connection limits, and recordings with gaps.
# Sourced by run.sh: start_daemon, stop_clean, ctl, fail, eq, jget, $T, $HT_* come from there.

need_root_setpriv() {
    command -v setpriv >/dev/null || { echo "SKIP: setpriv missing"; exit 77; }
    [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root to switch users"; exit 77; }
}
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

# The daemon on $1 must refuse to start with a message matching $2.
refuses_dir() {
    "$HT_DAEMON" --foreground --pipe "$1" >"$T/refused.log" 2>&1 &
    local pid=$!
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        wait "$pid"
        fail "the daemon started on $1"
    fi
    wait "$pid"
    [ $? -ne 0 ] || fail "exit code 0 when refusing $1"
    grep -q "$2" "$T/refused.log" || fail "no clear message for $1: $(cat "$T/refused.log")"
}

# The socket's directory: a symlink, another user's, or one others may write
# into is refused; a missing one is created 0750; a sticky one (like /tmp) is fine.
case_endpoint_dir_policy() {
    need_root_setpriv
    mkdir -m 0700 "$T/real"
    ln -s "$T/real" "$T/link"
    refuses_dir "$T/link/ht.sock" "endpoint directory $T/link is a symlink or not a directory: refusing it"
    [ -z "$(ls -A "$T/real")" ] || fail "something was created through the symlink"
    mkdir -m 0700 "$T/theirs"
    chown 65534:65534 "$T/theirs"
    refuses_dir "$T/theirs/ht.sock" "endpoint directory $T/theirs is owned by uid 65534, not root"
    mkdir -m 0777 "$T/ww"
    chmod 0777 "$T/ww" # past the umask
    refuses_dir "$T/ww/ht.sock" "endpoint directory $T/ww is writable by everyone (mode 0777)"
    mkdir "$T/gw"
    chmod 0770 "$T/gw"
    refuses_dir "$T/gw/ht.sock" "endpoint directory $T/gw is writable by its group (mode 0770)"
    mkdir "$T/sticky"
    chmod 1777 "$T/sticky"
    export HEAPTRACE_PIPE=$T/sticky/ht.sock
    start_daemon
    eq "$(stat -c %a "$T/sticky/ht.sock")" 660 "socket mode in a sticky directory"
    stop_clean
    export HEAPTRACE_PIPE=$T/new/ht.sock
    start_daemon
    eq "$(stat -c '%a %u' "$T/new")" "750 0" "created directory"
    eq "$(stat -c %a "$T/new/ht.sock")" 660 "socket mode"
    stop_clean
}

# An attacker renames a symlink to a root-only file over the socket the
# moment it appears: the daemon must never change that file's mode.
case_endpoint_symlink_swap() {
    mkdir -m 0700 "$T/d"
    echo secret >"$T/secret"
    chmod 0600 "$T/secret"
    for i in $(seq 25); do
        "$HT_TOOL" swap "$T/d" ht.sock "$T/secret" 1 >"$T/swap.out" &
        local spid=$!
        for _ in $(seq 100); do grep -q ready "$T/swap.out" && break; sleep 0.01; done
        "$HT_DAEMON" --foreground --pipe "$T/d/ht.sock" >>"$T/daemon.log" 2>&1 &
        local dpid=$!
        wait "$spid" || fail "swapper failed"
        # The daemon listens on a socket that lost its name: stop it by signal.
        for _ in $(seq 100); do grep -q "listening on $T/d/ht.sock" "$T/daemon.log" && break; sleep 0.02; done
        kill "$dpid"
        wait "$dpid"
        : >"$T/daemon.log"
        eq "$(stat -c '%a %u %g' "$T/secret")" "600 0 0" "the target's mode after try $i"
        rm -f "$T/d/ht.sock" # the swapped-in symlink (unlink never follows it)
    done
}

# A local user squats the endpoint with its own listener: the ctl refuses to
# talk to it and sends it nothing, for the environment's endpoint and --pipe.
case_ctl_refuses_squatter() {
    need_root_setpriv
    chmod 0711 "$T"
    mkdir -m 0700 "$T/sq"
    chown 65534:65534 "$T/sq"
    for how in env pipe; do
        as_nobody "$HT_TOOL" fakeserver "$T/sq/ht.sock" >"$T/fake.out" &
        local fpid=$!
        for _ in $(seq 100); do grep -q ready "$T/fake.out" && break; sleep 0.05; done
        if [ "$how" = env ]; then
            out=$(HEAPTRACE_PIPE=$T/sq/ht.sock "$HT_CTL" ping 2>&1)
        else
            out=$("$HT_CTL" --pipe "$T/sq/ht.sock" ping 2>&1)
        fi
        rc=$?
        wait "$fpid"
        echo "$out"
        eq "$rc" 3 "exit code facing a squatter ($how)"
        echo "$out" | grep -q "refusing to talk to the server at $T/sq/ht.sock: it runs as uid 65534 (pid [0-9]*), not root or you (uid 0)" ||
            fail "no clear message ($how)"
        eq "$(cat "$T/fake.out")" "ready
received 0" "bytes the squatter got ($how)"
    done
    # The genuine daemon, root's, is still talked to.
    start_daemon
    ctl ping | grep -q answers || fail "root's daemon refused"
    stop_clean
}

# The daemon as nobody (so nobody's connections are admitted: its own user)
# on $T/nb/ht.sock with config $1; nobody opens 300 idle connections while
# root asks for a ping. Leaves the hold summary in $T/hold.out and the
# version reply in $T/v, and stops the daemon.
nobody_flood() {
    chmod 0711 "$T"
    mkdir -p -m 0700 "$T/nb"
    chown 65534:65534 "$T/nb"
    local sock=$T/nb/ht.sock
    printf '%s\n' "$1" >"$T/cfg.json"
    setpriv --reuid=65534 --regid=65534 --clear-groups "$HT_DAEMON" --foreground --log-level debug --config "$T/cfg.json" --pipe "$sock" >>"$T/daemon.log" 2>&1 &
    DPID=$!
    for _ in $(seq 100); do "$HT_TOOL" req "$sock" '{"v":1,"id":1,"cmd":"ping"}' >/dev/null 2>&1 && break; sleep 0.05; done
    as_nobody "$HT_TOOL" hold "$sock" 300 30000 >"$T/hold.out" &
    local hpid=$!
    for _ in $(seq 200); do grep -q connected "$T/hold.out" && break; sleep 0.05; done
    grep -q connected "$T/hold.out" || fail "300 connections not made"
    # Root is served while nobody holds every slot it may take.
    "$HT_TOOL" req "$sock" '{"v":1,"id":7,"cmd":"ping"}' | grep -q '"id":7,"ok":true' || fail "root locked out"
    wait "$hpid"
    cat "$T/hold.out"
    grep -q "open=0 silent=0 " "$T/hold.out" || fail "connections left open or closed without a word"
    local first
    first=$(sed -n 's/.*first_timeout_ms=\([0-9-]*\).*/\1/p' "$T/hold.out")
    # (1 ms of slack: the daemon's clock and ours round differently.)
    [ "$first" -ge 2999 ] || fail "idle clients closed after ${first} ms, before the 3 s timeout"
    "$HT_TOOL" req "$sock" '{"v":1,"id":2,"cmd":"version"}' >"$T/v"
    "$HT_TOOL" req "$sock" '{"v":1,"id":3,"cmd":"shutdown"}' >/dev/null
    wait "$DPID"
    eq $? 0 "daemon exit code"
    DPID=
}

# 300 idle connections of one user leave root served (per-uid limit); idle
# ones are closed after the timeout with a line saying so.
case_idle_and_per_uid_limit() {
    need_root_setpriv
    nobody_flood '{"client_idle_timeout": "3s", "max_clients_per_uid": 20, "root_clients": 8}'
    grep -q " EFULL=280 ETIMEDOUT=20 " "$T/hold.out" || fail "expected 280 EFULL and 20 idle closes"
    eq "$(jget data.clients.refused_uid_limit <"$T/v")" 280 "refused_uid_limit"
    eq "$(jget data.clients.idle_closed <"$T/v")" 20 "idle_closed"
    eq "$(jget data.clients.refused_full <"$T/v")" 0 "refused_full"
    grep -q "too many clients: uid 65534 holds 20 connections already" "$T/daemon.log" || fail "refusal not logged"
}

# Without a per-uid limit in the way, the slots kept for root still keep
# root served: non-root users get max_clients - root_clients.
case_root_slots() {
    need_root_setpriv
    nobody_flood '{"client_idle_timeout": "3s", "max_clients": 40, "root_clients": 8, "max_clients_per_uid": 1000}'
    grep -q " EFULL=268 ETIMEDOUT=32 " "$T/hold.out" || fail "expected 268 EFULL and 32 idle closes"
    eq "$(jget data.clients.refused_full <"$T/v")" 268 "refused_full"
    eq "$(jget data.clients.refused_uid_limit <"$T/v")" 0 "refused_uid_limit"
    grep -q "too many clients: the 32 slots open to non-root users are taken" "$T/daemon.log" || fail "refusal not logged"
    "$HT_DAEMON" --foreground --config <(echo '{"max_clients": 8, "root_clients": 8}') >"$T/bad.log" 2>&1
    [ $? -ne 0 ] || fail "root_clients = max_clients accepted"
    grep -q "root_clients must be below max_clients" "$T/bad.log" || fail "no clear message: $(cat "$T/bad.log")"
}

# Out of descriptors: new clients are told (EMFILE) and counted, and the
# daemon serves again once descriptors are free.
case_accept_emfile() {
    command -v prlimit >/dev/null || { echo "SKIP: prlimit missing"; exit 77; }
    start_daemon
    local base
    base=$(ls /proc/"$DPID"/fd | wc -l)
    prlimit --pid "$DPID" --nofile=$((base + 5)):$((base + 5)) || fail prlimit
    "$HT_TOOL" hold "$HEAPTRACE_PIPE" 20 1500 >"$T/hold.out"
    cat "$T/hold.out"
    grep -q " silent=0 " "$T/hold.out" || fail "clients dropped without a word"
    local open emfile
    open=$(sed -n 's/.*open=\([0-9]*\).*/\1/p' "$T/hold.out")
    emfile=$(sed -n 's/.* EMFILE=\([0-9]*\).*/\1/p' "$T/hold.out")
    eq "$((open + emfile))" 20 "every client either served or told"
    [ "$emfile" -ge 10 ] || fail "only $emfile clients refused at a limit of 5 spare descriptors"
    ctl ping | grep -q answers || fail "no service once descriptors are free"
    ctl --json version >"$T/v"
    eq "$(jget clients.refused_no_fd <"$T/v")" "$emfile" "refused_no_fd"
    eq "$(jget clients.accept_errors <"$T/v")" 0 "accept_errors"
    grep -q "refused: too many open files" "$T/daemon.log" || fail "not logged"
    stop_clean
}

# A recorder that falls behind gets a "lost" gap in its stream instead of
# being cut off; the recording goes on, and the ctl reports the gap.
case_record_gaps() {
    printf '{"client_output_cap": "256KiB", "recorder_output_cap": "16KiB"}\n' >"$T/cfg.json"
    start_daemon --config "$T/cfg.json"
    mkfifo "$T/fifo"
    ctl load "$T/fifo" --name live >"$T/load.out" 2>&1 &
    local lpid=$!
    exec 3>"$T/fifo"
    for _ in $(seq 100); do ctl ls --json | grep -q '"live"' && break; sleep 0.05; done
    # The reader does not read until told: the recorder falls behind.
    { ( ctl record live -o - 2>"$T/rec.err"; echo $? >"$T/rec.rc" ) |
        { for _ in $(seq 1200); do [ -e "$T/go" ] && break; sleep 0.05; done; cat >"$T/rec.htev"; }; } 3>&- &
    local rpid=$!
    for _ in $(seq 200); do grep -q "record (" "$T/daemon.log" && break; sleep 0.05; done
    for _ in $(seq 20); do cat "$DEMO"; done >&3
    local copies=20 i
    # (The ctl reads the fifo in 64 KiB blocks: the session's count lags; poll the gap instead.)
    for _ in $(seq 400); do [ "$(ctl --json status live | jget recorder_lost)" -gt 0 ] && break; sleep 0.05; done
    [ "$(ctl --json status live | jget recorder_lost)" -gt 0 ] || fail "the recorder did not fall behind"
    touch "$T/go"
    # Once it reads again, the gap is written and events follow it.
    for i in $(seq 30); do
        cat "$DEMO" >&3
        copies=$((copies + 1))
        for _ in $(seq 20); do
            awk '/"ev":"lost"/ {f = 1; next} f && /"ev"/ {found = 1} END {exit !found}' "$T/rec.htev" 2>/dev/null && break 2
            sleep 0.05
        done
    done
    local want=$((copies * 1383))
    exec 3>&-
    wait "$lpid" || fail "load"
    wait "$rpid"
    cat "$T/rec.err"
    eq "$(cat "$T/rec.rc")" 1 "ctl exit code with gaps"
    awk '/"ev":"lost"/ {f = 1; next} f && /"ev"/ {found = 1} END {exit !found}' "$T/rec.htev" ||
        fail "no events after the gap: the recording did not go on"
    local lost recorded total
    lost=$(grep '"ev":"lost"' "$T/rec.htev" | sed 's/.*"count":\([0-9]*\).*/\1/' | awk '{s += $1} END {print s + 0}')
    recorded=$(grep -vc '"ev":"lost"' "$T/rec.htev")
    total=$(ctl --json status live | jget ingest.events)
    eq "$total" $want "events the session received"
    eq "$((recorded + lost))" "$total" "recorded events + lost"
    eq "$(ctl --json status live | jget recorder_lost)" "$lost" "status recorder_lost"
    grep -q "the recording has gaps: $lost events lost" "$T/rec.err" || fail "ctl did not report the gap"
    grep -q "unread, over the" "$T/daemon.log" && fail "the recorder was cut off"
    stop_clean
}

# No memory for a new client: the connection is still taken off the listener
# and told ENOMEM (libuv stops watching a listener whose waiting connection is
# never accepted: the daemon went deaf), counted, and the next clients are
# served. The test knob makes the first 6 clients find no memory; 10 connect
# at once, so refusals also meet the spare handle still closing.
case_accept_nomem() {
    HEAPTRACED_TEST_FAIL_CLIENTS=6 "$HT_DAEMON" --foreground --log-level debug >>"$T/daemon.log" 2>&1 &
    DPID=$!
    for _ in $(seq 100); do [ -S "$HEAPTRACE_PIPE" ] && break; sleep 0.05; done
    [ -S "$HEAPTRACE_PIPE" ] || fail "daemon did not listen"
    timeout 20 "$HT_TOOL" hold "$HEAPTRACE_PIPE" 10 1500 >"$T/hold.out" || fail "hold: $(cat "$T/hold.out")"
    cat "$T/hold.out"
    grep -q "open=4 silent=0 " "$T/hold.out" || fail "expected 4 clients served, none closed without a word"
    grep -q " ENOMEM=6 " "$T/hold.out" || fail "expected 6 clients told ENOMEM"
    timeout 10 "$HT_CTL" ping | grep -q answers || fail "no service after the refusals"
    ctl --json version >"$T/v"
    eq "$(jget clients.refused_no_memory <"$T/v")" 6 "refused_no_memory"
    grep -q "out of memory accepting a client: connection closed (6 so far)" "$T/daemon.log" || fail "not logged"
    stop_clean
}

# symbol_path is DbgHelp's search path: a Linux daemon refuses one at start,
# saying why, and starts with it empty.
case_symbol_path_config() {
    "$HT_DAEMON" --foreground --config <(echo '{"symbol_path": "srv*/tmp/sym"}') >"$T/bad.log" 2>&1
    [ $? -eq 1 ] || fail "a symbol_path was accepted on Linux"
    grep -q 'symbol_path "srv\*/tmp/sym" refused: .*on Linux it must stay empty' "$T/bad.log" ||
        fail "no clear message: $(cat "$T/bad.log")"
    printf '{"symbol_path": ""}\n' >"$T/ok.json"
    start_daemon --config "$T/ok.json"
    stop_clean
}
