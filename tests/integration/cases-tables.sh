# shellcheck shell=bash
# Cases of the tables: configuration keys (daemon/config.def).

# A misspelt key stopped nothing: the daemon came up on the default the user
# meant to change. It now refuses to start and names the key; the shipped
# example starts it.
case_config_unknown_key() {
    printf '{"max_session": 2}\n' >"$T/bad.json"
    timeout 10 "$HT_DAEMON" --foreground --config "$T/bad.json" >"$T/bad.log" 2>&1
    local rc=$?
    [ "$rc" -eq 1 ] || fail "a config with an unknown key: exit $rc, expected 1: $(cat "$T/bad.log")"
    grep -q 'unknown key "max_session"' "$T/bad.log" || fail "key not named: $(cat "$T/bad.log")"
    start_daemon --config "$HERE/../../config/heaptraced.json"
    stop_clean
}

# --help-config lists every key with its default and range; markdown is the
# table of docs/configuration.md.
case_config_help() {
    "$HT_DAEMON" --help-config >"$T/help.txt" || fail "--help-config failed"
    grep -q '^max_sessions  *count  *default 16; 1 to 4294967295$' "$T/help.txt" ||
        fail "max_sessions missing: $(head -20 "$T/help.txt")"
    grep -q '^limits.timeline_ring .*default 86400; 1 to 16777216$' "$T/help.txt" ||
        fail "limits.timeline_ring missing"
    "$HT_DAEMON" --help-config=markdown >"$T/help.md" || fail "--help-config=markdown failed"
    grep -q '^| `client_idle_timeout` | duration | `30s` | at least 1ms |' "$T/help.md" ||
        fail "client_idle_timeout row missing"
}
