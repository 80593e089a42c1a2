# Issue 26: the top allocation sites by outstanding bytes as a bounded gauge
# (heaptrace_site_outstanding_bytes, metrics_top_sites per session) on /metrics and in
# `heaptracectl metrics`, computed on the query workers: a scrape never waits for the query.
# Helpers from cases-http.sh.

# sites_htev FILE: 12 sites of 1..12 KiB outstanding (and one freed), their function names
# holding a quote, a backslash, a newline, and one of 300 bytes (cut to 200 in a label).
sites_htev() {
    python3 - "$1" <<'PY'
import json, sys
out = open(sys.argv[1], "w")
out.write(json.dumps({"ev": "process", "pid": 77, "name": "sites", "wall": "2026-11-22T10:00:00Z"}) + "\n")
names = ["site%d" % i for i in range(8)] + ['we"ird', 'back\\slash', 'new\nline', 'long' + 'x' * 296]
t, addr = 1000000, 0x10000
for i, n in enumerate(names):
    for k in range(i + 1):
        ev = {"t": t, "ev": "alloc", "tid": 1, "heap": "0x1", "addr": hex(addr), "size": 1024,
              "stack": ["ucrtbase.dll!malloc", "app.exe!" + n, "app.exe!main"]}
        out.write(json.dumps(ev) + "\n")
        t += 1000
        addr += 0x1000
ev = {"t": t, "ev": "alloc", "tid": 1, "heap": "0x1", "addr": hex(addr), "size": 64,
      "stack": ["ucrtbase.dll!malloc", "app.exe!freed", "app.exe!main"]}
out.write(json.dumps(ev) + "\n")
out.write(json.dumps({"t": t + 1000, "ev": "free", "tid": 1, "heap": "0x1", "addr": hex(addr)}) + "\n")
PY
}

# sites_want STACKS_JSON SESSION: the sample lines stacks --by frame says the gauge holds
# (label values escaped as the exposition format says, cut to 200 bytes), sorted.
sites_want() {
    python3 - "$@" <<'PY'
import json, sys
def esc(v):
    b = v.encode()[:200]
    while b and (b[-1] & 0xC0) == 0x80 and len(v.encode()) > 200:
        b = b[:-1]
    return b.decode().replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
for r in json.load(open(sys.argv[1]))["rows"]:
    if r["outstanding"] > 0:
        print('heaptrace_site_outstanding_bytes{session="%s",site="%s"} %d' % (esc(sys.argv[2]), esc(r["frame"]), r["outstanding"]))
PY
}

# The gauge holds what stacks --by frame --top 10 says, escaped and cut; promtool passes it; a
# scrape while the sites' query is slow (3 s) answers at once, the set shown later with its age.
case_metrics_sites() {
    command -v promtool >/dev/null || fail "promtool missing (scripts/install-deps.sh)"
    sites_htev "$T/sites.htev"
    HEAPTRACED_TEST_QUERY_DELAY_MS=3000 http_daemon
    ctl load "$T/sites.htev" --name 's"1' >/dev/null || fail "load"
    local t0 t1 i
    t0=$(date +%s%N)
    http_get /metrics >"$T/m0.txt" || fail "GET /metrics"
    t1=$(date +%s%N)
    [ $(((t1 - t0) / 1000000)) -lt 1000 ] || fail "a scrape waited $(((t1 - t0) / 1000000)) ms"
    grep -q '^heaptrace_site_outstanding_bytes{' "$T/m0.txt" && fail "sites before their query ended"
    for i in $(seq 100); do
        http_get /metrics >"$T/m.txt"
        grep -q '^heaptrace_site_groups{session="s\\"1"} 13$' "$T/m.txt" && break
        sleep 0.1
    done
    grep -q '^heaptrace_site_groups{session="s\\"1"} 13$' "$T/m.txt" ||
        fail "no sites in 10 s: $(grep site "$T/m.txt")"
    grep -q '^heaptrace_site_outstanding_age_seconds{session="s\\"1"} ' "$T/m.txt" || fail "no age"
    promtool check metrics <"$T/m.txt" || fail "promtool check metrics"
    ctl --json stacks 's"1' --by frame --top 10 >"$T/st.json" || fail "stacks --by frame"
    sites_want "$T/st.json" 's"1' | sort >"$T/want"
    grep '^heaptrace_site_outstanding_bytes{' "$T/m.txt" | sort >"$T/got"
    cat "$T/got"
    eq "$(wc -l <"$T/want")" 10 "sites kept (metrics_top_sites default 10)"
    diff "$T/want" "$T/got" || fail "the gauge vs stacks --by frame"
    grep -q 'site="app.exe!longx*"' "$T/got" || fail "the long name"
    grep -q 'site="app.exe!new\\nline"' "$T/got" || fail "the newline escaped"
    grep -q 'site="app.exe!we\\"ird"' "$T/got" || fail "the quote escaped"
    grep -q 'site="app.exe!back\\\\slash"' "$T/got" || fail "the backslash escaped"
    ctl metrics >"$T/ctl.txt" || fail "heaptracectl metrics"
    promtool check metrics <"$T/ctl.txt" || fail "promtool check metrics (ctl)"
    grep '^heaptrace_site_outstanding_bytes{' "$T/ctl.txt" | sort | diff "$T/want" - ||
        fail "heaptracectl metrics' sites"
    stop_clean
}

# metrics_top_sites 0: no site in the exposition, and no query run for them.
case_metrics_sites_off() {
    sites_htev "$T/sites.htev"
    HPORT=$(http_port)
    printf '{"metrics_listen": "127.0.0.1:%s", "metrics_top_sites": 0}\n' "$HPORT" >"$T/http.json"
    start_daemon --config "$T/http.json"
    ctl load "$T/sites.htev" --name s >/dev/null || fail "load"
    http_get /metrics >/dev/null
    sleep 0.3
    http_get /metrics >"$T/m.txt"
    grep -q 'heaptrace_site_' "$T/m.txt" && fail "sites with metrics_top_sites 0"
    grep -q 'metrics sites' "$T/daemon.log" && fail "a sites query ran"
    stop_clean
}
