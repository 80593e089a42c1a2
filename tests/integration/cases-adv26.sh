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
    stop_clean
}
