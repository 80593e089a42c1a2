# Issue 26: GET /debug/pprof/heap and /debug/pprof/allocs on the HTTP listener, read by the
# real `go tool pprof` from the URL: totals and top sites equal `stacks` for the same query
# (helpers from cases-pprof.sh, cases-http.sh, cases-agent.sh and cases-live.sh).

# pph_url PATH QUERY: the listener's URL of a profile.
pph_url() { echo "http://127.0.0.1:$HPORT$1?$2"; }

# pph_run NAME: a daemon with the listener, mtalloc (2 threads x 5 rounds) traced by run,
# its leaks kept, the session settled; the program still waits for its go.
pph_run() {
    pprof_need
    HPORT=$(http_port)
    printf '{"metrics_listen": "127.0.0.1:%s"}\n' "$HPORT" >"$T/http.json"
    agent_setup --config "$T/http.json"
    agent_run "$1" --name "$1" -- "$LIVE_APPS/mtalloc" 2 5
    live_go "$APID"
    live_wait_line "$1" '"done":true'
    live_settle "$1"
}

# The URL read by go tool pprof is the profile export writes: its totals and top sites are
# stacks' for the whole session, for a query (type, range) and for top; allocs shows
# alloc_space by default, as Go's allocs profile does; the answer is application/octet-stream
# with its length.
case_pprofhttp_live() {
    pph_run pph
    pprof_same pph "$(pph_url /debug/pprof/heap session=pph)"
    pprof_mappings_check "$T/raw"
    pprof_same pph "$(pph_url /debug/pprof/heap 'session=pph&type=AIFO&range=0%3Anow')" \
        --type AIFO --range 0:now
    pprof_same pph "$(pph_url /debug/pprof/heap 'session=pph&type=AIFI&type=AIFO')" \
        --type AIFI,AIFO
    eq "$(pprof_totals "$(pph_url /debug/pprof/heap 'session=pph&top=3')" | cut -d' ' -f5)" 3 \
        "samples of top=3"
    # allocs: the same samples, alloc_space the default type.
    go tool pprof -raw "$(pph_url /debug/pprof/allocs session=pph)" >"$T/araw" 2>"$T/pprof.err" ||
        fail "go tool pprof allocs: $(cat "$T/pprof.err")"
    grep -qx 'alloc_objects/count alloc_space/bytes\[dflt\] inuse_objects/count inuse_space/bytes' \
        "$T/araw" || fail "allocs default type: $(sed -n 1,4p "$T/araw")"
    ctl --json stacks pph --top 10000 >"$T/stacks.json" || fail stacks
    stacks_sites "$T/stacks.json" size 5 >"$T/want"
    pprof_sites "$(pph_url /debug/pprof/allocs session=pph)" alloc_space 5 >"$T/got"
    diff "$T/want" "$T/got" || fail "allocs top sites by alloc_space"
    # The same bytes as export writes (one view instant apart: the session is settled).
    ctl export pph --format pprof -o "$T/e.pb.gz" >/dev/null 2>&1 || fail export
    curl -sS -D "$T/h" -o "$T/h.pb.gz" "$(pph_url /debug/pprof/heap session=pph)" || fail curl
    grep -qi '^Content-Type: application/octet-stream' "$T/h" || fail "content type: $(cat "$T/h")"
    grep -qi "^Content-Length: $(stat -c %s "$T/h.pb.gz")"$'\r'"\$" "$T/h" || fail "length: $(cat "$T/h")"
    eq "$(pprof_totals "$T/h.pb.gz")" "$(pprof_totals "$T/e.pb.gz")" "HTTP profile vs export"
    http_get /metrics >"$T/m.txt"
    grep -qx 'heaptrace_http_profiles_total [1-9][0-9]*' "$T/m.txt" || fail "profiles counted"
    # top=3 of 21 stacks was the one cut (the others hold every stack).
    grep -qx 'heaptrace_http_profiles_cut_total 1' "$T/m.txt" || fail "cut: $(grep cut "$T/m.txt")"
    pprof_end
}

# No session, an unknown one, bad parameters: 400/404 with a plain-text body naming the
# sessions, names escaped; each counted.
case_pprofhttp_errors() {
    http_daemon
    ctl load "$DEMO" --name 'de"mo\x' >/dev/null || fail "load failed"
    local code
    code=$(curl -sS -o "$T/b" -w '%{http_code}' "http://127.0.0.1:$HPORT/debug/pprof/heap")
    eq "$code" 400 "no session"
    grep -q 'no session=NAME given' "$T/b" || fail "why: $(cat "$T/b")"
    grep -qx '  1 "de\\x22mo\\x5cx"' "$T/b" || fail "session listed, escaped: $(cat "$T/b")"
    code=$(curl -sS -o "$T/b" -w '%{http_code}' "http://127.0.0.1:$HPORT/debug/pprof/allocs?session=nope")
    eq "$code" 404 "unknown session"
    grep -qx '  1 "de\\x22mo\\x5cx"' "$T/b" || fail "session listed: $(cat "$T/b")"
    local q
    for q in 'session=1&type=XYZ' 'session=1&top=abc' 'session=1&top=0' 'session=1&foo=1' \
        'session=1&range=zz' 'session=%zz' 'session=1&debug=1' 'session=1&x=%00'; do
        code=$(curl -sS -o "$T/b" -w '%{http_code}' "http://127.0.0.1:$HPORT/debug/pprof/heap?$q")
        eq "$code" 400 "$q"
        grep -q 'sessions (session=NAME or ID):' "$T/b" || fail "$q: $(cat "$T/b")"
        echo "$q: $(head -n 1 "$T/b")"
    done
    # By id and by the name, %-encoded: a profile.
    eq "$(curl -sS -o "$T/p" -w '%{http_code}' "http://127.0.0.1:$HPORT/debug/pprof/heap?session=1")" 200 "by id"
    eq "$(curl -sS -o "$T/p" -w '%{http_code}' "http://127.0.0.1:$HPORT/debug/pprof/heap?session=de%22mo%5Cx")" 200 "by name"
    http_get /metrics >"$T/m.txt"
    grep -qx 'heaptrace_http_bad_requests_total 9' "$T/m.txt" || fail "400s: $(grep bad_req "$T/m.txt")"
    grep -qx 'heaptrace_http_not_found_total 1' "$T/m.txt" || fail "404s: $(grep not_found "$T/m.txt")"
    stop_clean
}

# A profile slower than the 10 s request deadline is still answered (the connection is held
# while the worker makes it); a client that goes away meanwhile costs nothing but its profile
# (counted), and the daemon goes on answering.
case_pprofhttp_held() {
    HEAPTRACED_TEST_QUERY_DELAY_MS=11000 http_daemon
    ctl load "$DEMO" --name d >/dev/null || fail "load failed"
    local code
    code=$(curl -sS --max-time 30 -o "$T/p" -w '%{http_code}' "http://127.0.0.1:$HPORT/debug/pprof/heap?session=d")
    eq "$code" 200 "a profile made in 11 s"
    [ "$(head -c 2 "$T/p" | od -An -tx1 | tr -d ' ')" = 1f8b ] || fail "not gzip"
    # Gone while its profile is made, and gone while waiting behind it.
    local c1 c2
    curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$HPORT/debug/pprof/heap?session=d" &
    c1=$!
    curl -s --max-time 2 -o /dev/null "http://127.0.0.1:$HPORT/debug/pprof/allocs?session=d" &
    c2=$!
    wait "$c1" "$c2"
    ctl ping >/dev/null || fail "ping while the job runs"
    sleep 1
    http_get /metrics >"$T/m.txt"
    grep -qx 'heaptrace_http_gone_pending_total 2' "$T/m.txt" || fail "gone: $(grep gone "$T/m.txt")"
    grep -qx 'heaptrace_http_connections 1' "$T/m.txt" || fail "conns: $(grep connections "$T/m.txt")"
    # The running job ends with nobody to answer; the next profile is served.
    sleep 10
    code=$(curl -sS --max-time 30 -o "$T/p2" -w '%{http_code}' "http://127.0.0.1:$HPORT/debug/pprof/heap?session=d")
    eq "$code" 200 "a profile after the gone ones"
    grep -qx 'heaptrace_http_profiles_total 2' <(http_get /metrics) || fail "profiles: 2 answered"
    # The daemon stops while a profile is being made: the held connection closes, the job
    # answers nobody, every handle is closed (under ASan: nothing used after it was freed).
    curl -s --max-time 30 -o /dev/null -w '%{http_code}' \
        "http://127.0.0.1:$HPORT/debug/pprof/heap?session=d" >"$T/code" &
    c1=$!
    sleep 1
    stop_clean
    wait "$c1"
    [ "$(cat "$T/code")" != 200 ] || fail "a profile answered by a daemon stopping"
}
