#!/usr/bin/env bash
# Issue 26's second adversary, the attacks too heavy for the suite (their figures are in
# docs/fleet.md): 10,000 connections to the HTTP listener while the control socket is
# pinged, the daemon's descriptors before, during and after; export --format pprof --top 0
# of 1,000,000 stacks under the default pprof_max_bytes (the refusal, VmHWM, pings
# meanwhile); the same profile with the cap raised, read by a slow client (the bytes queued,
# the CRC-32); and, given an ASan build, /metrics and /debug/pprof/heap scraped while
# sessions are loaded and dropped.
# usage: bench/adv26b-load.sh BUILD [ASAN_BUILD]     (BUILD holds daemon/ and ctl/)
set -eu
B=$(cd "$1" && pwd)
ASAN=${2:+$(cd "$2" && pwd)}
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
export HEAPTRACE_PIPE=$W/ht.sock
C=$B/ctl/heaptracectl
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
DP=
trap '[ -n "$DP" ] && kill "$DP" 2>/dev/null; rm -rf "$W"' EXIT

daemon() { # daemon BUILD CONFIG_JSON
    echo "$2" >"$W/conf.json"
    "$1/daemon/heaptraced" --foreground --config "$W/conf.json" >"$W/daemon.log" 2>&1 &
    DP=$!
    for _ in $(seq 100); do "$C" ping >/dev/null 2>&1 && return 0; sleep 0.05; done
    echo "the daemon did not start" >&2
    exit 1
}
stop() { "$C" shutdown >/dev/null; wait "$DP" || true; DP=; }
fds() { ls "/proc/$DP/fd" | wc -l; }
mem() { grep -E "VmRSS|VmHWM" "/proc/$DP/status" | tr -s ' \t' ' ' | paste -sd' '; }
# pings N: N pings 50 ms apart, the median and the slowest (us).
pings() {
    for _ in $(seq "$1"); do
        local s
        s=$(date +%s%N)
        "$C" ping >/dev/null
        echo $((($(date +%s%N) - s) / 1000))
        sleep 0.05
    done | sort -n | awk '{a[NR]=$1} END {print "pings", NR, "median us", a[int((NR+1)/2)], "max us", a[NR]}'
}

echo "== 10,000 connections (RLIMIT_NOFILE 20000)"
ulimit -n 20000
daemon "$B" "{\"metrics_listen\": \"127.0.0.1:$PORT\"}"
echo "daemon fds before: $(fds)"
python3 - "$PORT" "$C" "$DP" <<'PY'
import os, socket, subprocess, sys, time
port, ctl, dp = int(sys.argv[1]), sys.argv[2], sys.argv[3]
socks = []
for i in range(10000):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    socks.append(s)
time.sleep(0.5)
t = []
for _ in range(5):
    t0 = time.monotonic()
    subprocess.run([ctl, "ping"], stdout=subprocess.DEVNULL, check=True)
    t.append((time.monotonic() - t0) * 1000)
    time.sleep(0.2)
print("pings (ms):", " ".join("%.1f" % x for x in t))
print("daemon fds during:", len(os.listdir("/proc/%s/fd" % dp)))
for s in socks:
    s.close()
PY
sleep 1
echo "daemon fds 1 s after: $(fds); after the 10 s idle timeout:"
sleep 10
echo "  $(fds)"
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^heaptrace_http_(refused|idle_closed|connections)'
stop

echo "== export --top 0 of 1,000,000 stacks, default pprof_max_bytes"
python3 - >"$W/m1.htev" <<'PY'
import sys
w = sys.stdout.write
w('{"ev":"process","pid":4343,"name":"million","wall":"2026-11-22T10:00:00Z"}\n')
for i in range(1000000):
    w('{"t":%d,"ev":"alloc","tid":7,"heap":"0x1","addr":"0x%x","size":%d,"stack":["libc.so.6!malloc",'
      '"app!site%d","app!mid%d","app!part%d","app!stage%d","app!run","app!main",'
      '"libc.so.6!__libc_start_main"]}\n' % (1000 * (i + 1), 0x10000 + 64 * i, 16 + i % 512,
                                             i, i % 1000, i % 100, i % 10))
PY
daemon "$B" '{}'
"$C" load "$W/m1.htev" --name million >/dev/null 2>&1
echo "loaded: $(mem)"
echo 5 >"/proc/$DP/clear_refs" # VmHWM from here
pings 60 >"$W/pings" &
PP=$!
s=$(date +%s%N)
"$C" export million --format pprof --top 0 -o "$W/big.pb.gz" || echo "exit $? in $((($(date +%s%N) - s) / 1000000)) ms"
wait "$PP"
echo "after: $(mem)"
cat "$W/pings"
stop

echo "== the same with pprof_max_bytes 1GiB, read 16 KiB per 10 ms"
daemon "$B" '{"pprof_max_bytes": "1GiB"}'
"$C" load "$W/m1.htev" --name million >/dev/null 2>&1
python3 - "$HEAPTRACE_PIPE" "$C" <<'PY'
import json, socket, subprocess, sys, time, zlib
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall((json.dumps({"v": 1, "id": 1, "cmd": "export", "args": {
    "format": "pprof", "session": "million", "top": 0, "transfer": "chunks"}}) + "\n").encode())
f = s.makefile("rb")
t0 = time.monotonic()
head = json.loads(f.readline())
print("header after %.1f s: %d bytes" % (time.monotonic() - t0, head["data"]["bytes"]))
v = json.loads(subprocess.check_output([sys.argv[2], "--json", "version"]))
print("queued_output while read:", v["memory"]["queued_output"])
crc = total = 0
while True:
    n = int(f.readline())
    if n == 0:
        break
    left = n
    while left:
        b = f.read(min(16384, left))
        crc = zlib.crc32(b, crc)
        left -= len(b)
        time.sleep(0.01)
    total += n
tr = json.loads(f.readline())
print("read in %.1f s, %d bytes, CRC-32 %s" % (time.monotonic() - t0, total,
                                             "equal" if tr["data"]["crc32"] == crc else "DIFFERENT"))
PY
stop

if [ -n "$ASAN" ]; then
    echo "== ASan: scrapes racing loads and drops (25 s)"
    head -n 200 "$HERE/../tests/data/memorytestapp.htev" >"$W/small.htev"
    daemon "$ASAN" "{\"metrics_listen\": \"127.0.0.1:$PORT\"}"
    python3 - "$PORT" <<'PY' &
import threading, time, urllib.request, sys
stop, n = time.time() + 25, [0, 0]
def scrape(path, k):
    while time.time() < stop:
        try:
            urllib.request.urlopen("http://127.0.0.1:%s%s" % (sys.argv[1], path), timeout=5).read()
            n[k] += 1
        except Exception:
            pass
        time.sleep(0.005)
ts = [threading.Thread(target=scrape, args=("/metrics", 0)) for _ in range(4)]
ts += [threading.Thread(target=scrape, args=("/debug/pprof/heap?session=s%d" % i, 1))
       for i in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
print("scrapes answered 200: metrics %d, profiles %d" % tuple(n))
PY
    SP=$!
    end=$((SECONDS + 24)) i=0
    while [ $SECONDS -lt $end ]; do
        "$C" load "$W/small.htev" --name "s$((i % 4))" >/dev/null 2>&1 || true
        "$C" drop "s$(((i + 3) % 4))" >/dev/null 2>&1 || true
        i=$((i + 1))
    done
    wait "$SP" || true
    echo "load+drop cycles: $i"
    stop
    echo "sanitizer reports: $(grep -cE 'ERROR: AddressSanitizer|LeakSanitizer|runtime error' "$W/daemon.log")"
    grep -q "stopped cleanly" "$W/daemon.log" && echo "stopped cleanly"
fi
