# Issue 26's adversary: what landed (the HTTP listener and /metrics, pprof export, .etl load,
# the configuration) attacked as a hostile or careless user would. Sourced by run.sh;
# http_daemon and http_get from cases-http.sh.

# A loaded trace's process name of 400 bytes of UTF-8 (two-byte characters): the image
# label was copied into 128 bytes, cut inside a character, and promtool (as Prometheus's
# scrape) refused the whole exposition: "invalid label value". Now cut at a character.
case_adv26_metrics_long_utf8_image() {
    command -v promtool >/dev/null || fail "promtool missing (scripts/install-deps.sh)"
    http_daemon
    local name
    name=$(python3 -c 'print("\u00e9" * 200)')
    { printf '{"ev":"process","pid":4242,"name":"%s","wall":"2026-11-22T10:00:00Z"}\n' "$name"
      tail -n +2 "$DEMO"; } >"$T/long.htev"
    ctl load "$T/long.htev" --name long >/dev/null || fail "load failed"
    http_get /metrics >"$T/m.txt" || fail "GET /metrics"
    promtool check metrics <"$T/m.txt" || fail "promtool refused the exposition"
    ctl metrics | promtool check metrics || fail "promtool refused heaptracectl metrics"
    # Cut to at most 200 bytes, whole characters.
    local img
    img=$(grep -a '^heaptrace_session_heap_outstanding{session="long"' "$T/m.txt" |
        sed 's/.*image="\([^"]*\)".*/\1/')
    eq "${#img}" 100 "characters of the image label"
    # Each sample of the session has its image cut, each cut counted.
    local n
    n=$(grep -ac '^heaptrace_session_.*session="long"' "$T/m.txt")
    grep -qx "heaptrace_metrics_labels_cut $n" "$T/m.txt" || fail "cuts not counted ($n samples)"
    stop_clean
}

# adv26_http_status REQUEST...: the status line of each raw request (python bytes literals)
# sent to the listener, one a line.
adv26_http_status() {
    python3 - "$HPORT" "$@" <<'PY'
import ast, socket, sys
for lit in sys.argv[2:]:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
    s.sendall(ast.literal_eval(lit))
    out = b""
    # To the close, or to the end of one answer (a 200 keeps the connection).
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
        head, sep, body = out.partition(b"\r\n\r\n")
        cl = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
        if sep and cl and len(body) >= int(cl[0].split(b":")[1]):
            break
    print(out.split(b"\r\n", 1)[0].decode())
PY
}

# RFC 9112's musts: an HTTP/1.1 request without Host, or any with two, is answered 400
# (3.2), and one whose Host value is not a host[:port]; the absolute-form target is
# accepted (3.2.2); a NUL or a bare CR in a field
# value is rejected (RFC 9110 5.5, RFC 9112 2.2); an empty line before the request line
# is ignored (2.2). On main: 200, 200, 400, 200, 200, 400.
case_adv26_http_rfc9112() {
    http_daemon
    local got
    got=$(adv26_http_status \
        "b'GET /metrics HTTP/1.1\r\n\r\n'" \
        "b'GET /metrics HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n'" \
        "b'GET http://127.0.0.1/metrics?x HTTP/1.1\r\nHost: a\r\n\r\n'" \
        "b'GET /metrics HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n'" \
        "b'GET /metrics HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n'" \
        "b'\r\nGET /metrics HTTP/1.1\r\nHost: a\r\n\r\n'" \
        "b'GET /metrics HTTP/1.0\r\n\r\n'" \
        "b'GET HTTP://h HTTP/1.1\r\nHost: a\r\n\r\n'" \
        "b'GET http:///metrics HTTP/1.1\r\nHost: a\r\n\r\n'" \
        "b'GET /metrics HTTP/1.1\r\nHost: a b\r\n\r\n'" \
        "b'GET /metrics HTTP/1.1\r\nHost: a/b\r\n\r\n'" \
        "b'GET /metrics HTTP/1.1\r\nHost: \t[::1]:9464 \r\n\r\n'" \
        "b'GET /metrics HTTP/1.1\r\nHost:\r\n\r\n'" | tr -d '\r' | paste -sd,)
    eq "$got" "HTTP/1.1 400 Bad Request,HTTP/1.1 400 Bad Request,HTTP/1.1 200 OK,HTTP/1.1 400 Bad Request,HTTP/1.1 400 Bad Request,HTTP/1.1 200 OK,HTTP/1.1 200 OK,HTTP/1.1 404 Not Found,HTTP/1.1 400 Bad Request,HTTP/1.1 400 Bad Request,HTTP/1.1 400 Bad Request,HTTP/1.1 200 OK,HTTP/1.1 200 OK" "status lines"
    sleep 0.15
    http_get /metrics | grep -qx 'heaptrace_http_bad_requests_total 7' || fail "400s not counted"
    stop_clean
}

# Configurations the daemon took though they are not what they say: a fraction (1.5
# sessions ran as 1), a key given twice (the first kept), text after the object, "limits.x"
# as one key (taken as the member of "limits"), a \u0000 in a string (the string cut
# there: "127.0.0.1:1\u0000x" listened on 127.0.0.1:1); a FIFO as the file hung the start forever.
# Each is refused now, the daemon not starting, with a reason.
case_adv26_config_refused() {
    local cfg why n=0
    for cfg in '{"max_sessions": 1.5}|bad value' \
        '{"max_sessions": 16, "max_sessions": 17}|given twice' \
        '{"limits": {"max_stacks": 5, "max_stacks": 6}}|given twice' \
        '{"max_sessions": 16} x|not a JSON object' \
        '{"limits.max_stacks": 5}|unknown key' \
        '{"metrics_listen": "127.0.0.1:1\u0000x"}|NUL'; do
        why=${cfg#*|}
        printf '%s\n' "${cfg%|*}" >"$T/c$n.json"
        HEAPTRACE_PIPE=$T/c.sock timeout 10 "$HT_DAEMON" --foreground --config "$T/c$n.json" \
            >"$T/c$n.log" 2>&1
        eq "$?" 1 "exit code with ${cfg%|*}"
        grep -q "$why" "$T/c$n.log" || fail "no reason for ${cfg%|*}: $(cat "$T/c$n.log")"
        n=$((n + 1))
    done
    mkfifo "$T/fifo"
    HEAPTRACE_PIPE=$T/c.sock timeout 10 "$HT_DAEMON" --foreground --config "$T/fifo" \
        >"$T/fifo.log" 2>&1
    eq "$?" 1 "exit code with a FIFO as the configuration"
    grep -q "not a JSON object" "$T/fifo.log" || fail "no reason: $(cat "$T/fifo.log")"
    mkdir "$T/dir"
    HEAPTRACE_PIPE=$T/c.sock timeout 10 "$HT_DAEMON" --foreground --config "$T/dir" >"$T/dir.log" 2>&1
    eq "$?" 1 "exit code with a directory as the configuration"
    grep -q "a directory" "$T/dir.log" || fail "no reason: $(cat "$T/dir.log")"
    # Still taken: white space after the object, comments given twice, 1e3.
    printf '{"_c": 1, "_c": "\\\\u0000", "max_sessions": 1e3}\n\n' >"$T/ok.json"
    start_daemon --config "$T/ok.json"
    stop_clean
}

# Clients that ask for /metrics and never read: each connection held its own copy of the
# exposition until the idle timeout (200 clients and 40 sessions: ~140 MB of the daemon's
# memory; 256 clients and 500 sessions: 2 GB; a copy is held whole until its last byte
# is in the kernel's send buffer, at most 4 MiB: tcp_wmem). The exposition is shared now:
# the daemon's resident memory grows by a few copies at most. (The top-sites gauge is off: its
# queries, one per session a scrape, are not what this measures, and under ASan the memory they
# free stays in its quarantine.)
case_adv26_http_nonreaders_share() {
    HPORT=$(http_port)
    printf '{"metrics_listen": "127.0.0.1:%s", "max_sessions": 400, "metrics_top_sites": 0}\n' \
        "$HPORT" >"$T/http.json"
    start_daemon --config "$T/http.json"
    head -n 20 "$DEMO" >"$T/small.htev"
    local i
    for i in $(seq 300); do
        ctl load "$T/small.htev" --name "s$i" >/dev/null 2>&1 || fail "load $i"
    done
    local size rss0 rss1
    size=$(http_get /metrics | wc -c)
    [ "$size" -gt 4500000 ] || fail "exposition of $size bytes: too small to tell"
    rss0=$(awk '/^VmRSS/ {print $2}' /proc/"$DPID"/status)
    python3 - "$HPORT" "$T/held" <<'PY' &
import socket, sys, time
socks = []
for _ in range(60):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", int(sys.argv[1])))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    socks.append(s)
open(sys.argv[2], "w").close()
time.sleep(30)
PY
    local py=$!
    for _ in $(seq 100); do [ -e "$T/held" ] && break; sleep 0.1; done
    sleep 1
    rss1=$(awk '/^VmRSS/ {print $2}' /proc/"$DPID"/status)
    kill "$py"
    wait "$py" 2>/dev/null
    echo "exposition $size bytes, daemon RSS $rss0 -> $rss1 KB with 60 clients not reading"
    # A copy each: 60 x size. Shared: a copy per 100 ms the clients took to connect (a few; under
    # ASan, slower, more, and the freed renders stay in its quarantine): half the copies' worth
    # tells the two apart in every build.
    [ $((rss1 - rss0)) -lt $((size * 30 / 1024)) ] || fail "RSS grew by $((rss1 - rss0)) KB"
    stop_clean
}

# A listener on an address other than loopback serves every session's names and numbers to
# whoever reaches it (docs/fleet.md): the daemon now says so in its log; on loopback (v4,
# v6) it does not. IPv6 loopback answers /metrics.
case_adv26_http_not_loopback_warned() {
    HPORT=$(http_port)
    printf '{"metrics_listen": "0.0.0.0:%s"}\n' "$HPORT" >"$T/any.json"
    start_daemon --config "$T/any.json"
    http_get /metrics | grep -q '^heaptrace_sessions 0' || fail "GET over 0.0.0.0"
    grep -q "metrics_listen 0.0.0.0:$HPORT is not a loopback address" "$T/daemon.log" ||
        fail "no warning for 0.0.0.0"
    stop_clean
    : >"$T/daemon.log"
    if python3 -c 'import socket; s=socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null; then
        printf '{"metrics_listen": "[::1]:%s"}\n' "$HPORT" >"$T/v6.json"
        start_daemon --config "$T/v6.json"
        curl -sS --max-time 10 "http://[::1]:$HPORT/metrics" | grep -q '^heaptrace_sessions 0' ||
            fail "GET over [::1]"
        stop_clean
    fi
    http_daemon
    stop_clean
    ! grep -q "not a loopback" "$T/daemon.log" || fail "loopback warned"
}

# export -o onto a file whose directory takes no new file (/proc/version): the error was
# the temporary file's, told as the target's ("/proc/version: No such file or directory").
# Now the file that could not be made is named. /dev/full: the write error, no file.
case_adv26_export_unwritable() {
    start_daemon
    load_demo
    ctl export demo --format pprof -o /proc/version 2>"$T/e1" && fail "export onto /proc/version"
    grep -q "/proc/version: cannot create the file written before it replaces it (/proc/.version" \
        "$T/e1" || fail "unclear: $(cat "$T/e1")"
    ctl export demo --format pprof -o /dev/full 2>"$T/e2" && fail "export onto /dev/full"
    grep -q "No space left on device" "$T/e2" || fail "unclear: $(cat "$T/e2")"
    # A directory that is gone: nothing made, the reason said.
    ctl export demo --format pprof -o "$T/gone/x.pb.gz" 2>"$T/e3" && fail "export into no dir"
    [ ! -e "$T/gone" ] || fail "directory made"
    stop_clean
}

# Lines ended by a CR alone ("GET / HTTP/1.1\rHost: x\r\r"): no line ever ends, and the
# connection was held without an answer to the 10 s idle timeout (a slot of 256 each).
# Answered 400 at once now; a NUL before the head's end likewise.
case_adv26_http_bare_cr_at_once() {
    http_daemon
    local t0 got
    t0=$(date +%s%N)
    got=$(adv26_http_status "b'GET /metrics HTTP/1.1\rHost: x\r\r'" "b'GET /metrics HTTP/1.1\r\nX: \x00'" |
        tr -d '\r' | paste -sd,)
    eq "$got" "HTTP/1.1 400 Bad Request,HTTP/1.1 400 Bad Request" "status lines"
    [ $((($(date +%s%N) - t0) / 1000000)) -lt 5000 ] || fail "answered after the idle timeout"
    stop_clean
}
