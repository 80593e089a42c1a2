# Issue 26, pprof side: a profile of every stack (export --format pprof --top 0, capped by
# pprof_max_bytes), and binary replies as raw chunks instead of base64 in the JSON. Sourced
# by run.sh (helpers from cases-pprof.sh).

# pprofraw_htev N: a trace of N allocations, each its own 8-frame stack, every other one freed
# (bench/bench-pprof.sh's shape), on stdout.
pprofraw_htev() {
    python3 - "$1" <<'PY'
import json, sys
n = int(sys.argv[1])
print(json.dumps({"ev": "process", "pid": 4242, "name": "many", "wall": "2026-11-22T10:00:00Z"}))
for i in range(n):
    stack = ["libc.so.6!malloc", "app!site%d" % i, "app!mid%d" % (i % 1000), "app!part%d" % (i % 100),
             "app!stage%d" % (i % 10), "app!run", "app!main", "libc.so.6!__libc_start_main"]
    print(json.dumps({"t": 1000 * (i + 1), "ev": "alloc", "tid": 7, "heap": "0x1",
                      "addr": "0x%x" % (0x10000 + 64 * i), "size": 16 + i % 512, "stack": stack}))
for i in range(0, n, 2):
    print(json.dumps({"t": 1000 * (n + i + 1), "ev": "free", "tid": 7, "heap": "0x1",
                      "addr": "0x%x" % (0x10000 + 64 * i)}))
PY
}

# pprofraw_load N NAME [daemon options]: a private daemon with a session NAME of N stacks.
pprofraw_load() {
    local n=$1 name=$2
    shift 2
    pprof_need
    pprofraw_htev "$n" >"$T/many.htev"
    start_daemon "$@"
    ctl load "$T/many.htev" --name "$name" >/dev/null 2>&1 || fail "load $n stacks"
}

# stacks_total NAME [query options]: stacks' whole-query totals as pprof_totals prints them
# (the row count is the groups the query found).
stacks_total() {
    local name=$1
    shift
    ctl --json stacks "$name" --top 1 "$@" >"$T/st.json" || fail "stacks $*"
    python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
t = d["total"]
print(t["count"], t["size"], t["outstanding_count"], t["outstanding"], d["groups"])' "$T/st.json"
}

# Every stack of a session past export's 10,000-row cap: --top 0 (and --top N past 10,000) for
# pprof holds them all, its totals equal stacks' for the same query; other formats still
# refuse more than 10,000 rows; the default stays the 10,000 largest, told.
case_pprofraw_all_stacks() {
    pprofraw_load 12000 many
    ctl export many --format pprof --top 0 -o "$T/all.pb.gz" >"$T/o" 2>&1 ||
        fail "export --top 0: $(cat "$T/o")"
    [ ! -s "$T/o" ] || fail "a whole profile said: $(cat "$T/o")"
    eq "$(pprof_totals "$T/all.pb.gz")" "$(stacks_total many)" "every stack (pprof vs stacks totals)"
    ctl export many --format pprof --top 0 --type AIFO -o "$T/aifo.pb.gz" >"$T/o" 2>&1 ||
        fail "export --top 0 --type AIFO: $(cat "$T/o")"
    eq "$(pprof_totals "$T/aifo.pb.gz")" "$(stacks_total many --type AIFO)" "--type AIFO"
    ctl export many --format pprof --top 11000 -o "$T/11k.pb.gz" >"$T/o" 2>&1 || fail "--top 11000"
    grep -q "the profile holds the 11000 largest of the 12000 stacks" "$T/o" || fail "cut not told: $(cat "$T/o")"
    eq "$(pprof_totals "$T/11k.pb.gz" | cut -d' ' -f5)" 11000 "samples of --top 11000"
    ctl export many --format pprof -o "$T/dflt.pb.gz" >"$T/o" 2>&1 || fail "export"
    grep -q "the profile holds the 10000 largest of the 12000 stacks.*--top 0 for all" "$T/o" ||
        fail "the default's cut not told: $(cat "$T/o")"
    ctl export many --format csv --top 0 -o "$T/c.csv" >"$T/o" 2>&1 && fail "csv --top 0 taken"
    grep -q -- "--top must be between 1 and 10000" "$T/o" || fail "csv --top 0: $(cat "$T/o")"
    [ ! -e "$T/c.csv" ] || fail "a refused export left a file"
    stop_clean
}

# A profile past pprof_max_bytes is refused, the cap named, and no file is written; a smaller
# --top fits.
case_pprofraw_budget() {
    echo '{"pprof_max_bytes": "2MiB"}' >"$T/conf.json"
    pprofraw_load 12000 many --config "$T/conf.json"
    ctl export many --format pprof --top 0 -o "$T/big.pb.gz" >"$T/o" 2>&1
    eq $? 1 "exit code of a profile over its budget"
    grep -q "EFULL.*passed pprof_max_bytes (2097152 bytes" "$T/o" || fail "the cap not named: $(cat "$T/o")"
    ls "$T" | grep -q 'big\.pb\.gz' && fail "a refused profile left a file: $(ls "$T")"
    eq "$(ctl --json version | jget memory.pprof_refused)" 1 "the refusal counted"
    ctl export many --format pprof --top 100 -o "$T/small.pb.gz" >"$T/o" 2>&1 ||
        fail "a profile within the budget: $(cat "$T/o")"
    eq "$(pprof_totals "$T/small.pb.gz" | cut -d' ' -f5)" 100 "samples of --top 100"
    stop_clean
}

# pprofraw_raw_client SOCKET TRANSFER OUT [ARGS_JSON]: export --format pprof --top 0 requested as
# a client of the protocol would (python, no heaptracectl): TRANSFER chunks, base64 or "" (not
# said: an old ctl). Writes the profile's bytes to OUT, checked against python's own zlib
# (length, CRC-32, gzip), and prints "how bytes_on_socket".
pprofraw_raw_client() {
    python3 - "$@" <<'PY'
import base64, gzip, json, socket, sys, zlib
path, transfer, out = sys.argv[1:4]
args = {"format": "pprof", "top": 0}
if transfer:
    args["transfer"] = transfer
s = socket.socket(socket.AF_UNIX)
s.connect(path)
s.sendall((json.dumps({"v": 1, "id": 1, "cmd": "export", "args": args}) + "\n").encode())
f = s.makefile("rb")
total = 0
def line():
    global total
    l = f.readline()
    total += len(l)
    return json.loads(l)
head = line()
assert head["ok"], head
d = head["data"]
if d.get("transfer") == "chunks":
    assert "data" not in d, "a chunked header carries no base64"
    body = b""
    while True:
        h = f.readline()
        total += len(h)
        n = int(h)
        if n == 0:
            break
        assert n <= 4 << 20
        c = f.read(n)
        assert len(c) == n
        total += n
        body += c
    tr = line()
    assert tr["ok"] and "more" not in tr, tr
    assert tr["data"]["bytes"] == len(body) == d["bytes"], (tr, len(body))
    assert tr["data"]["crc32"] == zlib.crc32(body), (tr, zlib.crc32(body))
    how = "chunks"
else:
    body = b"".join(base64.b64decode(p) for p in d["data"])
    more = head.get("more")
    while more:
        fr = line()
        more = fr.get("more")
        body += b"".join(base64.b64decode(p) for p in fr["data"]["data"])
    assert len(body) == d["bytes"]
    how = "base64"
gzip.decompress(body)
open(out, "wb").write(body)
print(how, total)
PY
}

# Binary replies as raw chunks: heaptracectl (chunks, its default) and --transfer base64 write
# the same file; a protocol client that says nothing (an old ctl) still gets base64; a client
# asking for chunks gets a JSON header, raw chunks and a trailer whose length and CRC-32 match
# what python's zlib computes; the socket carries about 3/4 of base64's bytes. A snapshot
# (trigger) exported as pprof comes either way too.
case_pprofraw_chunks() {
    pprofraw_load 12000 many
    ctl export many --format pprof --top 0 -o "$T/raw.pb.gz" >"$T/o" 2>&1 || fail "chunks: $(cat "$T/o")"
    ctl export many --format pprof --top 0 --transfer base64 -o "$T/b64.pb.gz" >"$T/o" 2>&1 ||
        fail "base64: $(cat "$T/o")"
    cmp "$T/raw.pb.gz" "$T/b64.pb.gz" || fail "chunks and base64 differ"
    eq "$(pprof_totals "$T/raw.pb.gz")" "$(stacks_total many)" "the chunked profile's totals"
    local old new
    old=$(pprofraw_raw_client "$HEAPTRACE_PIPE" "" "$T/old.pb.gz") || fail "a client that does not say"
    new=$(pprofraw_raw_client "$HEAPTRACE_PIPE" chunks "$T/new.pb.gz") || fail "a client asking for chunks"
    echo "old client: $old; chunks: $new"
    eq "${old% *}" base64 "what a request without transfer gets"
    eq "${new% *}" chunks "what a request with transfer chunks gets"
    cmp "$T/old.pb.gz" "$T/raw.pb.gz" || fail "the old encoding's bytes"
    cmp "$T/new.pb.gz" "$T/raw.pb.gz" || fail "the chunks' bytes"
    [ $((${new#* } * 100 / ${old#* })) -lt 80 ] || fail "chunks carried ${new#* } bytes, base64 ${old#* }"
    ctl export many --format pprof --transfer nope -o "$T/x" >"$T/o" 2>&1 && fail "--transfer nope taken"
    grep -q "transfer must be chunks or base64" "$T/o" || fail "--transfer nope: $(cat "$T/o")"
    stop_clean
    # A trigger's snapshot, both ways.
    start_daemon
    timeout 60 "$HT_CTL" load "$DEMO" --name d --snapshot-when 'outstanding>10KiB' --every 10KiB \
        >/dev/null 2>&1 || fail "load"
    ctl export d --format pprof --snapshot 3 -o "$T/s.pb.gz" >"$T/o" 2>&1 || fail "snapshot: $(cat "$T/o")"
    ctl export d --format pprof --snapshot 3 --transfer base64 -o "$T/s64.pb.gz" >"$T/o" 2>&1 ||
        fail "snapshot base64: $(cat "$T/o")"
    cmp "$T/s.pb.gz" "$T/s64.pb.gz" || fail "the snapshot's profile differs between transfers"
    [ "$(pprof_totals "$T/s.pb.gz" | cut -d' ' -f5)" -gt 0 ] || fail "snapshot 3 has no samples"
    stop_clean
}

# A transfer that fails leaves nothing under the final name (nor a temporary file) and the old
# file as it was: a fake daemon (python on the endpoint) sends a chunked header then half the
# bytes and closes; then all the bytes with a wrong CRC-32; then a malformed chunk header.
case_pprofraw_short_transfer() {
    local how rc
    for how in short badcrc badchunk; do
        rm -f "$HEAPTRACE_PIPE"
        python3 - "$HEAPTRACE_PIPE" "$how" <<'PY' &
import json, os, socket, sys, zlib
path, how = sys.argv[1:3]
l = socket.socket(socket.AF_UNIX)
l.bind(path)
l.listen(1)
c, _ = l.accept()
req = json.loads(c.makefile("rb").readline())
body = os.urandom(200000)
head = {"format": "pprof", "bytes": len(body), "samples": 1, "groups": 1, "transfer": "chunks"}
c.sendall((json.dumps({"v": 1, "id": req["id"], "ok": True, "more": True, "data": head}) + "\n").encode())
if how == "short":
    c.sendall(b"100000\n" + body[:100000])
elif how == "badchunk":
    c.sendall(b"100000\n" + body[:100000] + b"x9\n")
else:
    c.sendall(b"%d\n" % len(body) + body + b"0\n")
    tr = {"bytes": len(body), "crc32": zlib.crc32(body) ^ 1}
    c.sendall((json.dumps({"v": 1, "id": req["id"], "ok": True, "data": tr}) + "\n").encode())
c.close()
PY
        local fpid=$!
        for _ in $(seq 100); do [ -S "$HEAPTRACE_PIPE" ] && break; sleep 0.05; done
        echo old >"$T/keep.pb.gz"
        ctl export x --format pprof -o "$T/keep.pb.gz" >"$T/o" 2>&1
        rc=$?
        wait "$fpid"
        echo "$how: exit $rc: $(cat "$T/o")"
        [ "$rc" -ne 0 ] || fail "$how: a damaged transfer exited 0"
        eq "$(cat "$T/keep.pb.gz")" old "$how: the file under the final name"
        [ -z "$(ls -A "$T" | grep '^\.keep')" ] || fail "$how: a temporary file left: $(ls -A "$T")"
        case $how in
        badcrc) grep -q "came damaged: 200000 bytes" "$T/o" || fail "$how: not told: $(cat "$T/o")" ;;
        *) grep -q "bytes stopped after 100000" "$T/o" || fail "$how: not told: $(cat "$T/o")" ;;
        esac
    done
}

# pprofraw_noisy_htev N: N stacks of 8 frames with random names (a profile that gzip cannot
# shrink much: about 150 bytes a stack).
pprofraw_noisy_htev() {
    python3 - "$1" <<'PY'
import json, random, sys
random.seed(7)
n = int(sys.argv[1])
print(json.dumps({"ev": "process", "pid": 4243, "name": "noisy", "wall": "2026-11-22T10:00:00Z"}))
for i in range(n):
    stack = ["app!f%016x" % random.getrandbits(64) for _ in range(8)]
    print(json.dumps({"t": 1000 * (i + 1), "ev": "alloc", "tid": 7, "heap": "0x1",
                      "addr": "0x%x" % (0x10000 + 64 * i), "size": 16 + i % 512, "stack": stack}))
PY
}

# A client that asks for a big profile as chunks and never reads: the daemon makes the next
# chunk only while the client has less than 512 KiB unread, so its queued output stays the
# profile it holds plus that (not the profile twice, not growing); the daemon answers others
# meanwhile and closes the client as stalled after client_idle_timeout, its output freed.
case_pprofraw_slow_reader() {
    pprof_need
    pprofraw_noisy_htev 30000 >"$T/noisy.htev"
    echo '{"client_idle_timeout": "3s"}' >"$T/conf.json"
    start_daemon --config "$T/conf.json"
    ctl load "$T/noisy.htev" --name noisy >/dev/null 2>&1 || fail "load"
    ctl export noisy --format pprof --top 0 -o "$T/p.pb.gz" >"$T/o" 2>&1 || fail "export: $(cat "$T/o")"
    local size q1 q2 peak=0 q i
    size=$(stat -c %s "$T/p.pb.gz")
    [ "$size" -gt $((2 << 20)) ] || fail "the profile is only $size bytes"
    python3 - "$HEAPTRACE_PIPE" <<'PY' &
import json, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(sys.argv[1])
s.sendall((json.dumps({"v": 1, "id": 1, "cmd": "export", "args": {"format": "pprof", "top": 0, "transfer": "chunks"}}) + "\n").encode())
time.sleep(8)
PY
    local rpid=$!
    for i in $(seq 40); do
        q=$(ctl --json version | jget memory.queued_output)
        [ "$q" -gt "$peak" ] && peak=$q
        grep -q "closed as stalled" "$T/daemon.log" && break
        sleep 0.1
    done
    echo "profile $size bytes; queued output at most $peak while the client did not read"
    [ "$peak" -gt "$size" ] || fail "the profile was not held for the client ($peak <= $size)"
    [ "$peak" -le $((size + 512 * 1024 + 65536 + 4096)) ] ||
        fail "queued output $peak past the profile and 512 KiB + a chunk"
    for _ in $(seq 60); do grep -q "closed as stalled" "$T/daemon.log" && break; sleep 0.1; done
    grep -q "closed as stalled" "$T/daemon.log" || fail "the non-reader was not closed"
    eq "$(ctl --json version | jget memory.queued_output)" 0 "queued output once it was closed"
    [ "$(ctl --json version | jget clients.closed_stalled)" -ge 1 ] || fail "not counted"
    wait "$rpid"
    stop_clean
}
