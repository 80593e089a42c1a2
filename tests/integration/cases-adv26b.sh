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

# adv26b_interrupt OUT DPID CTL_ARGS...: OUT holds "old"; heaptracectl CTL_ARGS -o OUT
# interrupted (SIGINT) mid-transfer: once its temporary file exists the daemon is stopped
# (SIGSTOP: the ctl then waits for the rest), the ctl is sent SIGINT, then the daemon
# continued. Tried again when the ctl still ended on its own (the transfer beat the stop).
# Prints the ctl's exit code, then what it said.
adv26b_interrupt() {
    python3 - "$HT_CTL" "$@" <<'PY'
import os, signal, subprocess, sys, time
ctl, out, dpid = sys.argv[1], sys.argv[2], int(sys.argv[3])
d, base = os.path.split(out)
for attempt in range(10):
    with open(out, "w") as f:  # what an attempt the ctl finished wrote is undone
        f.write("old\n")
    p = subprocess.Popen([ctl] + sys.argv[4:] + ["-o", out], stderr=subprocess.PIPE,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    tmp = False
    while p.poll() is None and not tmp:
        tmp = any(f.startswith("." + base + ".") for f in os.listdir(d))
    os.kill(dpid, signal.SIGSTOP)
    # What the daemon sent before the stop may hold the whole rest: the ctl
    # then ends on its own (tried again).
    time.sleep(0.2)
    if p.poll() is None and tmp:
        os.kill(p.pid, signal.SIGINT)
        try:
            rc = p.wait(timeout=10)
        finally:
            os.kill(dpid, signal.SIGCONT)
        print(rc)
        sys.stdout.write(p.stderr.read().decode())
        sys.exit(0)
    os.kill(dpid, signal.SIGCONT)
    p.wait()
print("the transfer always ended before the stop")
PY
}

# The daemon's open descriptors.
adv26b_fds() { ls "/proc/$DPID/fd" | wc -l; }

# A ctl interrupted (Ctrl-C, SIGINT) while a profile's chunks came left its temporary file
# (.all.pb.gz.XXXXXX) next to the target, unsaid, and died of the signal (on main: exit 130, the
# file left). Now the transfer ends, the file is removed, the ctl says so and exits 1; the
# target is left as it was. The daemon after: its descriptors as before, no output queued,
# the next export whole.
case_adv26b_pprof_interrupted() {
    pprofraw_load 40000 many
    local fds0
    fds0=$(adv26b_fds)
    adv26b_interrupt "$T/all.pb.gz" "$DPID" export many --format pprof --top 0 >"$T/o" 2>&1
    eq "$(head -n 1 "$T/o")" 1 "exit code of an interrupted export"
    grep -q "interrupted: .*all.pb.gz left as it was" "$T/o" || fail "not said: $(cat "$T/o")"
    eq "$(ls -A "$T" | grep -c '^\.all\.pb\.gz\.')" 0 "temporary files left: $(ls -A "$T")"
    eq "$(cat "$T/all.pb.gz")" old "the target"
    for _ in $(seq 40); do
        [ "$(adv26b_fds)" -le "$fds0" ] && break
        sleep 0.05
    done
    [ "$(adv26b_fds)" -le "$fds0" ] ||
        fail "the daemon's descriptors: $fds0 before, $(adv26b_fds) after"
    eq "$(ctl --json version | jget memory.queued_output)" 0 "output queued after"
    ctl export many --format pprof --top 0 -o "$T/all.pb.gz" || fail "the next export"
    eq "$(pprof_totals "$T/all.pb.gz")" "$(stacks_total many)" "the next export's totals"
    stop_clean
}

# adv26b_churn: scrapes /metrics, runs a ctl command (drop or load), scrapes again at once,
# and prints whether the second scrape shows the session: "gone:N new:N" (N lines of it).
# Pairs of scrapes more than 90 ms apart (past the 100 ms an exposition is reused) are
# tried again: the second must be one the first's would have answered.
adv26b_churn() {
    python3 - "$HPORT" "$HT_CTL" "$T/tiny.htev" <<'PY'
import subprocess, sys, time, urllib.request
port, ctl, tiny = sys.argv[1:4]
quiet = dict(check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def scrape():
    return urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=5).read().decode()
def lines(text, name):
    return sum(1 for l in text.splitlines() if 'session="%s"' % name in l)
def pair(cmd, name):
    for attempt in range(10):
        if cmd[0] == "drop":
            subprocess.run([ctl, "load", tiny, "--name", name], **quiet)
        t0 = time.monotonic()
        scrape()
        subprocess.run([ctl] + cmd, **quiet)
        text = scrape()
        if time.monotonic() - t0 < 0.09:
            return lines(text, name)
        if cmd[0] == "load":
            subprocess.run([ctl, "drop", name], **quiet)
        time.sleep(0.2)
    return "slow"
print("gone:%s new:%s" % (pair(["drop", "old"], "old"),
                          pair(["load", tiny, "--name", "new"], "new")))
PY
}

# The exposition reused for 100 ms (or 10 times its making) was reused across a change of the
# sessions: a session dropped was still exported after `drop` returned, one loaded missing
# after `load` returned (on main "gone:138 new:0"). A creation or a drop now makes a new one.
case_adv26b_metrics_session_churn() {
    http_daemon
    head -n 3 "$DEMO" >"$T/tiny.htev"
    ctl load "$T/tiny.htev" --name keep >/dev/null || fail "load"
    local got
    got=$(adv26b_churn)
    case "$got" in
    "gone:0 new:"[1-9]*) ;;
    *) fail "the exposition after a drop and a load: $got" ;;
    esac
    stop_clean
}

# Not a defect, pinned: ten requests in one write (the fourth garbage, the sixth a HEAD) get
# one answer, with Connection: close, and nothing else is served or counted as bad; a
# control request sent while a profile's raw chunks come is answered after the trailer,
# never between chunks.
case_adv26b_pipelined_and_mid_transfer() {
    HPORT=$(http_port)
    printf '{"metrics_listen": "127.0.0.1:%s"}\n' "$HPORT" >"$T/http.json"
    pprofraw_load 40000 many --config "$T/http.json"
    python3 - "$HPORT" <<'PY' >"$T/o" || fail "pipelined: $(cat "$T/o")"
import re, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
reqs = [b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n"] * 10
reqs[3] = b"GARBAGE\r\n\r\n"
reqs[5] = b"HEAD /metrics HTTP/1.1\r\nHost: a\r\n\r\n"
s.sendall(b"".join(reqs))
out = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    out += b
assert len(re.findall(rb"HTTP/1\.1 \d\d\d", out)) == 1, out[:300]
assert b"\r\nConnection: close" in out.split(b"\r\n\r\n")[0], out[:300]
PY
    sleep 0.15
    http_get /metrics >"$T/m.txt"
    grep -qx 'heaptrace_http_bad_requests_total 0' "$T/m.txt" || fail "a pipelined request parsed"
    # The pipelined batch's first, and this scrape.
    grep -qx 'heaptrace_http_requests_total 2' "$T/m.txt" ||
        fail "requests: $(grep '^heaptrace_http_requests_total' "$T/m.txt")"
    python3 - "$HEAPTRACE_PIPE" <<'PY' >"$T/o" || fail "mid-transfer: $(cat "$T/o")"
import json, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall((json.dumps({"v": 1, "id": 1, "cmd": "export", "args": {
    "session": "many", "format": "pprof", "top": 0, "transfer": "chunks"}}) + "\n").encode())
f = s.makefile("rb")
head = json.loads(f.readline())
assert head["ok"] and head["data"]["bytes"] > 1 << 19, head  # more than one window of 512 KiB
f.read(int(f.readline()))
s.sendall(b'{"v":1,"id":2,"cmd":"ping"}\n')
time.sleep(0.3)
while True:
    n = int(f.readline())  # a JSON line here is a reply between chunks
    if n == 0:
        break
    assert len(f.read(n)) == n
assert json.loads(f.readline())["id"] == 1
assert json.loads(f.readline())["id"] == 2
PY
    stop_clean
}

# -o '' was sent to the daemon, the export made, then "heaptracectl: : No such file or
# directory": a usage error now, before any request.
case_adv26b_empty_output() {
    local rc=0
    "$HT_CTL" --pipe "$T/nodaemon.sock" export s --format pprof -o '' >"$T/out" 2>&1 || rc=$?
    [ "$rc" = 2 ] || fail "exit $rc: $(cat "$T/out")"
    grep -q 'expected a file name' "$T/out" || fail "said: $(cat "$T/out")"
}
