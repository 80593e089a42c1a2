# Issue 26, the HTTP listener under many connections and few descriptors. Sourced by run.sh;
# http_daemon, http_get and ping_while come from cases-http.sh.

# utime + stime of a process in clock ticks (proc(5) fields 14 and 15).
proc_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }

# ping_while's worst ping (ms) from its output on stdin, checked against $1 ms.
worst_ping_under() {
    local out worst
    out=$(cat)
    echo "$out"
    worst=$(echo "$out" | sed -n 's/^worst ping during .*: \([0-9]*\) ms$/\1/p' | tail -n 1)
    [ -n "$worst" ] || fail "no ping figure"
    [ "$worst" -lt "$1" ] || fail "the worst ping took $worst ms (bound $1 ms)"
}

# 10,000 idle TCP connections: HTTP_CONNS_MAX (256) are held until the idle timeout (10 s),
# the rest closed at once and counted (refused_full); the control socket stays fast all along
# and a scrape gets its 200 after.
case_metrics_idle_10k() {
    ulimit -n 12000 || fail "cannot raise RLIMIT_NOFILE to 12000"
    http_daemon
    load_demo
    local c0
    c0=$(proc_ticks "$DPID")
    ping_while python3 "$HERE/http-hostile.py" "$HPORT" idle 10000 >"$T/idle.out" ||
        fail "10000 idle connections: $(cat "$T/idle.out")"
    worst_ping_under $((500 * ${HT_TIME_FACTOR:-1})) <"$T/idle.out"
    echo "daemon CPU over the 10000 connections: $(($(proc_ticks "$DPID") - c0)) ticks"
    grep -q '^idle: 10000 connections, 10000 closed by the daemon' "$T/idle.out" ||
        fail "not every connection was made and closed"
    http_get /metrics >"$T/m.txt" || fail "no scrape after the idle connections"
    grep -E '^heaptrace_http_(refused_full|idle_closed|refused_nofd)_total|connections ' "$T/m.txt"
    local full idle
    full=$(awk '$1 == "heaptrace_http_refused_full_total" {print $2}' "$T/m.txt")
    idle=$(awk '$1 == "heaptrace_http_idle_closed_total" {print $2}' "$T/m.txt")
    # Each of the 10000 was held to its idle timeout or refused at the cap.
    eq "$((full + idle))" 10000 "idle closes + refusals"
    [ "$idle" -ge 256 ] || fail "only $idle held to the idle timeout"
    grep -qx 'heaptrace_http_connections 1' "$T/m.txt" || fail "connections left open"
    stop_clean
}

# Under a descriptor limit lower than the connection cap (160 here), HTTP connections stop
# 64 descriptors short of it (counted: refused_nofd) so the control socket still accepts;
# the loop does not spin, and a scrape answers once the idle ones are closed.
case_metrics_http_nofd() {
    http_daemon
    load_demo
    prlimit --pid "$DPID" --nofile=160:160 || fail "prlimit"
    local c0 t0 ticks ms hz
    c0=$(proc_ticks "$DPID")
    t0=$(date +%s%N)
    ping_while python3 "$HERE/http-hostile.py" "$HPORT" idle 300 >"$T/idle.out" ||
        fail "300 idle connections: $(cat "$T/idle.out")"
    worst_ping_under $((500 * ${HT_TIME_FACTOR:-1})) <"$T/idle.out"
    ticks=$(($(proc_ticks "$DPID") - c0))
    ms=$((($(date +%s%N) - t0) / 1000000))
    hz=$(getconf CLK_TCK)
    echo "daemon CPU: $((ticks * 1000 / hz)) ms over $ms ms"
    # Idle until the timeout: far under a tenth of the time on a CPU (a spinning loop: all).
    [ $((ticks * 1000 / hz)) -lt $((ms / 10)) ] || fail "the daemon was busy while idle"
    http_get /metrics >"$T/m.txt" || fail "no scrape after the idle connections"
    grep -E '^heaptrace_http_(refused_full|idle_closed|refused_nofd)_total' "$T/m.txt"
    grep -q '^heaptrace_http_refused_nofd_total [1-9]' "$T/m.txt" || fail "refusals not counted"
    local idle
    idle=$(awk '$1 == "heaptrace_http_idle_closed_total" {print $2}' "$T/m.txt")
    [ "$idle" -le $((160 - 64)) ] || fail "$idle connections held past the reserve"
    grep -qx 'heaptrace_http_connections 1' "$T/m.txt" || fail "connections left open"
    stop_clean
}

# A profile's parameters: one given twice (other than type) is answered 400, not taken as the
# last; bad %-escapes and %00 are 400 too, a %-encoded name is decoded.
case_metrics_pprof_params() {
    http_daemon
    load_demo
    local u="http://127.0.0.1:$HPORT/debug/pprof/heap" code
    code() { curl -s -o "$T/body" -w '%{http_code}' "$u?$1"; }
    eq "$(code 'session=demo')" 200 "one session="
    eq "$(code 'session=%64emo')" 200 "a %-encoded name"
    eq "$(code 'session=nosuch&session=demo')" 400 "session= twice"
    grep -q 'session= given twice' "$T/body" || fail "the 400 does not say why: $(cat "$T/body")"
    eq "$(code 'session=demo&top=5&top=6')" 400 "top= twice"
    eq "$(code 'session=demo&range=0:&range=0:')" 400 "range= twice"
    eq "$(code 'session=demo&type=AIFO&type=AIFI')" 200 "type= repeated (a list)"
    eq "$(code 'session=de%6')" 400 "a cut %-escape"
    eq "$(code 'session=de%zzmo')" 400 "a bad %-escape"
    eq "$(code 'session=demo%00')" 400 "%00"
    stop_clean
}

# HEAD of a profile path answers what GET would (200, or the same 400/404) without running the
# query: no profile made, no Content-Length (RFC 9110 9.3.2 lets it be left out).
case_metrics_pprof_head() {
    http_daemon
    load_demo
    local u="http://127.0.0.1:$HPORT/debug/pprof/heap" q0 q1
    q0=$(ctl --json status demo | jget queries.run)
    [ -n "$q0" ] || fail "no queries.run in status"
    curl -sS -I "$u?session=demo" >"$T/h.txt" || fail "HEAD"
    cat "$T/h.txt"
    grep -q '^HTTP/1.1 200' "$T/h.txt" || fail "HEAD not 200"
    grep -qi '^Content-Type: application/octet-stream' "$T/h.txt" || fail "no content type"
    grep -qi '^Content-Length' "$T/h.txt" && fail "a Content-Length for a profile not made"
    q1=$(ctl --json status demo | jget queries.run)
    eq "$q1" "$q0" "queries run by HEAD"
    grep -q 'pprof over http query' "$T/daemon.log" && fail "HEAD ran the profile's query"
    eq "$(curl -s -o /dev/null -w '%{http_code}' -I "$u?session=nosuch")" 404 "HEAD, no such session"
    eq "$(curl -s -o /dev/null -w '%{http_code}' -I "$u?session=demo&type=NOPE")" 400 "HEAD, bad type"
    eq "$(curl -s -o /dev/null -w '%{http_code}' -I "$u?session=demo&range=x:y")" 400 "HEAD, bad range"
    # GET still makes it.
    curl -s -o "$T/p.pb.gz" -w '%{http_code}' "$u?session=demo" | grep -qx 200 || fail GET
    gzip -t "$T/p.pb.gz" || fail "GET's profile is no gzip"
    stop_clean
}

# Many sessions make a slow exposition: scrapes in a row must not keep the loop making them
# more than about a tenth of the time (routes.c: an exposition is reused for 10 times its
# making, at least 100 ms). 200 sessions, a scrape every ~50 ms for 3 s.
case_metrics_render_share() {
    local n=200 i
    HPORT=$(http_port)
    printf '{"metrics_listen": "127.0.0.1:%s", "metrics_top_sites": 0, "max_sessions": %s}\n' \
        "$HPORT" "$n" >"$T/http.json"
    start_daemon --config "$T/http.json"
    for ((i = 0; i < n; i++)); do
        ctl load "$DEMO" --name "s$i" >/dev/null 2>&1 || fail "load $i"
    done
    http_get /metrics >"$T/m0.txt" || fail "first scrape"
    local t0 ms
    t0=$(date +%s%N)
    while [ $((($(date +%s%N) - t0) / 1000000)) -lt 3000 ]; do
        curl -s -o /dev/null "http://127.0.0.1:$HPORT/metrics" || fail "scrape"
        sleep 0.05
    done
    ms=$((($(date +%s%N) - t0) / 1000000))
    http_get /metrics >"$T/m.txt"
    local req reused hold made
    req=$(awk '$1 == "heaptrace_http_requests_total" {print $2}' "$T/m.txt")
    reused=$(awk '$1 == "heaptrace_http_metrics_reused_total" {print $2}' "$T/m.txt")
    hold=$(awk '$1 == "heaptrace_http_longest_hold_seconds" {print $2}' "$T/m.txt")
    made=$((req - reused - 2)) # the two scrapes around the timed ones
    echo "$n sessions: $req scrapes, $made expositions made in $ms ms, each at most $hold s"
    # The loop's share making expositions, at their longest.
    awk -v m="$made" -v h="$hold" -v ms="$ms" 'BEGIN {s = m * h * 1000 / ms; print "share", s; exit !(s <= 0.25)}' ||
        fail "the loop spent over a quarter of the time making expositions"
    stop_clean
}

# Keep-alive (RFC 9112 9.3): an HTTP/1.1 client gets several answers on one connection until
# it sends "Connection: close"; HTTP/1.0 without keep-alive and a pipelined burst are answered
# once and closed; reuses counted (kept_alive).
case_metrics_keepalive() {
    http_daemon
    load_demo
    python3 - "$HPORT" <<'PY' || fail "keep-alive"
import socket, sys
port = int(sys.argv[1])

def answer(s, buf=b""):
    """One answer read by its Content-Length: (head, body, rest)."""
    while b"\r\n\r\n" not in buf:
        b = s.recv(65536)
        if not b:
            raise SystemExit("closed before an answer (%r)" % buf[:80])
        buf += b
    head, _, buf = buf.partition(b"\r\n\r\n")
    n = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0])
    while len(buf) < n:
        b = s.recv(65536)
        if not b:
            raise SystemExit("closed mid-body")
        buf += b
    return head, buf[:n], buf[n:]

def closed(s):
    s.settimeout(5)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True

s = socket.create_connection(("127.0.0.1", port))
for i in range(3):
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    head, body, rest = answer(s)
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"Connection: keep-alive" in head, head
    assert b"heaptrace_sessions 1" in body
s.sendall(b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")
head, body, rest = answer(s)
assert head.startswith(b"HTTP/1.1 404") and b"keep-alive" in head, head
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
head, body, rest = answer(s)
assert b"Connection: close" in head and closed(s), head
print("one connection: 5 answers, closed when asked")

s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
head, body, rest = answer(s)
assert b"Connection: close" in head and closed(s), head
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"GET /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
head, body, rest = answer(s)
assert b"Connection: keep-alive" in head, head
s.close()
print("HTTP/1.0: closed, kept with keep-alive")

s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
head, body, rest = answer(s)
assert b"Connection: close" in head and rest == b"" and closed(s), head
print("pipelined: the first answered, then closed")

s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
head, body, rest = answer(s)
assert head.startswith(b"HTTP/1.1 405") and closed(s), head
print("an error answer closes")
PY
    sleep 0.15
    http_get /metrics >"$T/m.txt"
    grep -E '^heaptrace_http_(kept_alive_total|connections) ' "$T/m.txt"
    # 4 reuses on the first connection, 1 for the HTTP/1.0 keep-alive.
    grep -qx 'heaptrace_http_kept_alive_total 5' "$T/m.txt" || fail "reuses not counted"
    grep -qx 'heaptrace_http_connections 1' "$T/m.txt" || fail "connections left open"
    stop_clean
}
