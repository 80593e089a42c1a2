# Issue 26's second adversary: what landed on it today (HTTP keep-alive, the exposition
# reused, pprof as raw chunks, pprof_max_bytes) attacked as a hostile or careless client
# would. Sourced by run.sh; http_daemon and http_get from cases-http.sh, pprofraw_* from
# cases-pprofraw.sh.

# adv26b_smuggle MODE: a GET /metrics whose body (MODE cl: Content-Length, te: chunked
# Transfer-Encoding) is a second request, sent after the first answer came; prints the
# status lines the server sent on the connection, comma-separated.
adv26b_smuggle() {
    python3 - "$HPORT" "$1" <<'PY'
import re, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
inner = b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
if sys.argv[2] == "cl":
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(inner))
    body = inner
else:
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(inner), inner)
time.sleep(0.3)
try:
    s.sendall(body)
except OSError:
    pass
out = b""
s.settimeout(2)
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
except OSError:
    pass
print(",".join(m.decode() for m in re.findall(rb"HTTP/1\.1 \d\d\d", out)))
PY
}

# A GET whose body is another request: the body was not read, the connection was kept,
# and the body was served as the next request (request smuggling past any proxy that
# passed it as body): on main "HTTP/1.1 200,HTTP/1.1 404" (the /smuggled path answered).
# A request with a body is answered 400 now, and the connection closes.
case_adv26b_http_body_smuggling() {
    http_daemon
    load_demo
    eq "$(adv26b_smuggle cl)" "HTTP/1.1 400" "Content-Length body"
    eq "$(adv26b_smuggle te)" "HTTP/1.1 400" "Transfer-Encoding body"
    curl -sS -o /dev/null -H 'Content-Length: 0' "http://127.0.0.1:$HPORT/metrics" ||
        fail "Content-Length: 0 refused"
    sleep 0.15
    http_get /metrics | grep -qx 'heaptrace_http_not_found_total 0' || fail "/smuggled was served"
    stop_clean
}
