# Issue 26: the HTTP listener (metrics_listen, off by default) and GET /metrics, checked with
# the real clients: promtool, a Prometheus server scraping a daemon tracing a tests/apps
# program, hostile clients (http-hostile.py) while the control socket stays fast. Sourced by
# run.sh; live_* from cases-live.sh, attachee_* from cases-attach.sh.

http_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# http_daemon [OPTIONS]: a private daemon with the listener on a free loopback port (HPORT).
http_daemon() {
    HPORT=$(http_port)
    printf '{"metrics_listen": "127.0.0.1:%s"}\n' "$HPORT" >"$T/http.json"
    start_daemon --config "$T/http.json" "$@"
}

http_get() { curl -sS --max-time 10 "http://127.0.0.1:$HPORT$1"; }

# A sample's value in an exposition on stdin: metric $1 of session $2.
metric_of() {
    grep "^$1{session=\"$2\"" | head -n 1 | awk '{print $NF}'
}

case_http_off_by_default() {
    start_daemon
    # No TCP socket is listening in the daemon without metrics_listen.
    local inodes n=0 f
    inodes=$(awk 'NR > 1 && $4 == "0A" {print $10}' /proc/net/tcp /proc/net/tcp6)
    for f in /proc/"$DPID"/fd/*; do
        case "$(readlink "$f")" in
        socket:*) echo "$inodes" | grep -qx "$(readlink "$f" | tr -dc 0-9)" && n=$((n + 1)) ;;
        esac
    done
    eq "$n" 0 "TCP listeners without metrics_listen"
    printf '{"metrics_listen": "localhost:x"}\n' >"$T/bad.json"
    HEAPTRACE_PIPE=$T/bad.sock "$HT_DAEMON" --foreground --config "$T/bad.json" >"$T/bad.log" 2>&1 &&
        fail "bad address taken"
    grep -q "metrics_listen" "$T/bad.log" || fail "no reason given: $(cat "$T/bad.log")"
}

# The exposition passes promtool, has what status says, escapes label values, and the ctl's
# `metrics` is the same text.
case_http_metrics() {
    command -v promtool >/dev/null || fail "promtool missing (scripts/install-deps.sh)"
    http_daemon
    ctl load "$DEMO" --name 'de"mo\x' >/dev/null || fail "load failed"
    http_get /metrics >"$T/m.txt" || fail "GET /metrics"
    promtool check metrics <"$T/m.txt" || fail "promtool check metrics"
    ctl metrics >"$T/ctl.txt" || fail "heaptracectl metrics"
    promtool check metrics <"$T/ctl.txt" || fail "promtool check metrics (ctl)"
    local want got
    want=$(ctl --json status 'de"mo\x' | jget heap.outstanding)
    got=$(metric_of heaptrace_session_heap_outstanding 'de\\"mo\\\\x' <"$T/m.txt")
    eq "$got" "$want" "heap outstanding over HTTP"
    got=$(metric_of heaptrace_session_heap_outstanding 'de\\"mo\\\\x' <"$T/ctl.txt")
    eq "$got" "$want" "heap outstanding from heaptracectl metrics"
    want=$(ctl --json status 'de"mo\x' | jget commits.committed)
    got=$(metric_of heaptrace_session_commits_committed 'de\\"mo\\\\x' <"$T/m.txt")
    eq "$got" "$want" "committed bytes"
    # Daemon-wide: the sessions, and this request counted.
    grep -qx 'heaptrace_sessions 1' "$T/m.txt" || fail "sessions"
    # Past the 100 ms an exposition is reused (routes.c): a new one, this request counted.
    sleep 0.15
    grep -qx 'heaptrace_http_requests_total 2' <(http_get /metrics) || fail "http requests counted"
    # HEAD: the headers alone; other methods 405, other paths 404, both counted.
    curl -sS -I "http://127.0.0.1:$HPORT/metrics" | grep -q "^HTTP/1.1 200" || fail HEAD
    eq "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$HPORT/metrics")" 405 POST
    eq "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HPORT/nothing")" 404 "unknown path"
    sleep 0.15
    http_get /metrics >"$T/m2.txt"
    grep -qx 'heaptrace_http_bad_method_total 1' "$T/m2.txt" || fail "405 not counted"
    grep -qx 'heaptrace_http_not_found_total 1' "$T/m2.txt" || fail "404 not counted"
    # Within 100 ms the same text again (two requests from one curl), counted as reused.
    curl -sS "http://127.0.0.1:$HPORT/metrics" "http://127.0.0.1:$HPORT/metrics" >"$T/m3.txt"
    sleep 0.15
    http_get /metrics | grep -q '^heaptrace_http_metrics_reused_total [1-9]' || fail "reuse not counted"
    stop_clean
}

# A real Prometheus server scrapes the daemon tracing tests/apps/attachee (eBPF source); its
# /api/v1/query for the session's outstanding bytes returns what status says.
case_http_prometheus() {
    command -v prometheus >/dev/null || fail "prometheus missing (scripts/install-deps.sh)"
    [ "$(id -u)" -eq 0 ] || live_skip "tracing needs root"
    [ -n "$LIVE_APPS" ] && [ -x "$LIVE_APPS/attachee" ] || live_skip "test apps not built"
    trap live_cleanup EXIT
    http_daemon
    ctl --json version | tr -d ' \t\n' | grep -q '"name":"bpf"' || live_skip "no eBPF source"
    attachee_start a
    ctl start --pid "$APID" --source bpf --name app >/dev/null || fail "start failed"
    attachee_cmd a "alloc 40" '"kept":40'
    local pport
    pport=$(http_port)
    cat >"$T/prom.yml" <<EOT
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: heaptrace
    static_configs:
      - targets: ["127.0.0.1:$HPORT"]
EOT
    prometheus --config.file="$T/prom.yml" --storage.tsdb.path="$T/tsdb" \
        --web.listen-address="127.0.0.1:$pport" >"$T/prom.log" 2>&1 &
    LIVE_PIDS+=("$!")
    local want got q='heaptrace_session_heap_outstanding{session="app"}'
    for ((i = 0; i < LIVE_WAIT * 10; i++)); do
        want=$(ctl --json status app | jget heap.outstanding)
        got=$(curl -s --max-time 5 "http://127.0.0.1:$pport/api/v1/query" --data-urlencode \
            "query=$q" | jget data.result.0.value.1 2>/dev/null)
        [ -n "$want" ] && [ "$got" = "$want" ] && [ "$want" -ge 4000 ] && break
        sleep 0.2
    done
    echo "prometheus: $q = $got, status: heap.outstanding = $want"
    [ "$got" = "$want" ] || fail "prometheus says '$got', status says '$want' ($(tail -n 3 "$T/prom.log"))"
    got=$(curl -s "http://127.0.0.1:$pport/api/v1/query" --data-urlencode 'query=up{job="heaptrace"}' |
        jget data.result.0.value.1)
    eq "$got" 1 "the scrape target is up"
}

# The worst `heaptracectl ping` (ms) in the background while $@ runs; prints it. Each call has
# files of its own (two run at once in case_http_hostile).
ping_while() {
    local f="$T/ping.$BASHPID.$RANDOM"
    echo 0 >"$f.worst"
    (
        worst=0
        while [ ! -e "$f.stop" ]; do
            t0=$(date +%s%N)
            "$HT_CTL" ping >/dev/null || echo "ping failed" >>"$f.fail"
            ms=$((($(date +%s%N) - t0) / 1000000))
            [ "$ms" -gt "$worst" ] && worst=$ms
            echo "$worst" >"$f.worst"
            sleep 0.05
        done
    ) &
    local pp=$!
    "$@"
    local rc=$?
    touch "$f.stop"
    wait "$pp"
    echo "worst ping during ${*:4}: $(cat "$f.worst") ms"
    [ ! -e "$f.fail" ] || fail "a ping failed during ${*:4}"
    [ "$(cat "$f.worst")" -lt 1000 ] || fail "ping took $(cat "$f.worst") ms during ${*:4}"
    return $rc
}

# Garbage, a 100 KB header, 2000 idle connections, slowloris, a pipelined burst: each gets an
# answer or a close (counted), the control socket stays fast, and /metrics answers after.
case_http_hostile() {
    http_daemon
    load_demo
    local h="$HERE/http-hostile.py"
    ping_while python3 "$h" "$HPORT" garbage || fail garbage
    ping_while python3 "$h" "$HPORT" bigheader || fail "100 KB header"
    ping_while python3 "$h" "$HPORT" pipeline || fail "pipelined burst"
    ulimit -n 8192
    ping_while python3 "$h" "$HPORT" idle 2000 &
    local ip=$!
    ping_while python3 "$h" "$HPORT" slowloris || fail slowloris
    wait "$ip" || fail "2000 idle connections"
    http_get /metrics >"$T/m.txt" || fail "no answer after the hostile clients"
    promtool check metrics <"$T/m.txt" || fail "promtool after the hostile clients"
    grep -E '^heaptrace_http_(bad_requests|too_large|refused_full|idle_closed)_total' "$T/m.txt"
    grep -qx 'heaptrace_http_bad_requests_total 1' "$T/m.txt" || fail "garbage not counted"
    grep -qx 'heaptrace_http_too_large_total 1' "$T/m.txt" || fail "big header not counted"
    grep -q '^heaptrace_http_refused_full_total [1-9]' "$T/m.txt" || fail "refusals not counted"
    grep -q '^heaptrace_http_idle_closed_total [1-9]' "$T/m.txt" || fail "idle closes not counted"
    grep -qx 'heaptrace_http_connections 1' "$T/m.txt" || fail "connections left open"
    stop_clean
}
