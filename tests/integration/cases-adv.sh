# Adversarial review of issue 8's fixes: what broke under hostile or careless use.
# Sourced by run.sh (gen_deep comes from cases-out.sh).

# top refreshes big frames (1000 rows of 48 frames of 240-character names:
# 11 MiB each) every 10 ms: a client that reads is never cut off at
# client_output_cap; refreshes it has not read yet are skipped and counted.
case_top_big_frames_reader() {
    start_daemon
    gen_deep 1000 240 >"$T/big.htev"
    ctl load "$T/big.htev" --name big >/dev/null 2>&1 || fail "load big"
    ctl top big --top 1000 --interval 10ms --count 5 >"$T/top.out" 2>"$T/top.err" ||
        fail "top was cut off: $(cat "$T/top.err")"
    eq "$(grep -c "heaptrace top" "$T/top.out")" 5 "top frames"
    local skipped
    skipped=$(ctl --json version | jget clients.top_frames_skipped)
    [ "$skipped" -ge 1 ] || fail "no refresh counted as skipped ($skipped)"
    eq "$(ctl --json version | jget clients.dropped_slow)" 0 "clients dropped as slow"
    stop_clean
}
