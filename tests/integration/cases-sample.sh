# Issue 22 items 4 and 5: run --sample (a Poisson sample of the allocated bytes, each sample
# weighted by 1/p(s)) and run --max-overhead (the agent's overhead governor). Estimates are
# checked against the ground truth mtalloc prints. Sourced by run.sh (helpers from cases-agent.sh
# and cases-live.sh).

# The standard error of a site's byte estimate is about sqrt(R/B) for B bytes sampled at mean R
# (each block of s << R bytes is taken with p ~ s/R and weighed R/s): 7% at B = 200 R, so a +-10%
# bound there is 1.4 sigma. mtalloc 1 thread x 12000 rounds puts every site it checks well past
# that (the smallest checked, ~1100 R: sigma 3%, the bound 3.4 sigma); sites under 200 R (a few
# MiB) are only in the total.
# 1 thread (its countdown and the daemon's rounding then repeat with the seed), default stacks.
SAMPLE_THREADS=1
SAMPLE_ROUNDS=12000

# sample_estimate NAME SITE KIND: the session's estimate of what the truth's figure is for the
# site: live bytes (AIFO) of a leaking site, bytes allocated and freed (AIFI) of a transient one.
sample_estimate() {
    local type=AIFO
    [ "$3" = transient ] && type=AIFI
    ctl --json stacks "$1" --type "$type" --require "$2" >"$T/j" || fail "stacks --require $2"
    jget total.size <"$T/j"
}

# sample_check NAME TRUTH MEAN: every site of at least 200x MEAN bytes within +-10%, the sum of
# all sites within +-3%. Prints "site NAME truth estimate error%" lines (bench/ reads them).
sample_check() {
    local name=$1 truth=$2 mean=$3 n i site kind want got sum_want=0 sum_got=0 bad=""
    n=$(echo "$truth" | jget sites.#)
    [ "$n" -ge 15 ] || fail "ground truth has $n sites: $truth"
    for ((i = 0; i < n; i++)); do
        site=$(echo "$truth" | jget "sites.$i.site")
        kind=$(echo "$truth" | jget "sites.$i.kind")
        if [ "$kind" = transient ]; then
            want=$(echo "$truth" | jget "sites.$i.bytes")
        else
            want=$(echo "$truth" | jget "sites.$i.live_bytes")
        fi
        got=$(sample_estimate "$name" "$site" "$kind")
        sum_want=$((sum_want + want))
        sum_got=$((sum_got + got))
        echo "site $site $want $got $(awk -v w="$want" -v g="$got" 'BEGIN{printf "%.2f", (g-w)*100/w}')"
        if [ "$want" -ge $((200 * mean)) ] &&
            ! awk -v w="$want" -v g="$got" 'BEGIN{exit !(g >= w*0.9 && g <= w*1.1)}'; then
            bad="$bad $site($got/$want)"
        fi
    done
    echo "total $sum_want $sum_got $(awk -v w="$sum_want" -v g="$sum_got" 'BEGIN{printf "%.2f", (g-w)*100/w}')"
    [ -z "$bad" ] || fail "sites off by more than 10%:$bad"
    awk -v w="$sum_want" -v g="$sum_got" 'BEGIN{exit !(g >= w*0.97 && g <= w*1.03)}' ||
        fail "total $sum_got, truth $sum_want: off by more than 3%"
}

# sample_header NAME MEAN: the session says it is sampled, in JSON and text, in status and in
# a query's reply.
sample_header() {
    local name=$1 mean=$2
    ctl --json status "$name" >"$T/s" || fail "status"
    eq "$(jget quality.sampled.mean_bytes <"$T/s")" "$mean" "status: sampled.mean_bytes"
    eq "$(jget quality.sample_set_full <"$T/s")" 0 "sample_set_full"
    ctl --json top "$name" --count 1 >"$T/j" || fail "top"
    eq "$(jget quality.sampled.mean_bytes <"$T/j")" "$mean" "top: sampled.mean_bytes"
    ctl --json stacks "$name" --type AIFI >"$T/j" || fail "stacks"
    eq "$(jget quality.sampled.mean_bytes <"$T/j")" "$mean" "stacks: sampled.mean_bytes"
    ctl stacks "$name" | grep -q "^sampled: mean .*figures are estimates" ||
        fail "stacks (text) does not say the figures are estimates: $(ctl stacks "$name" | head -3)"
    ctl status "$name" | grep -q "sampled: mean" || fail "status (text) does not say sampled"
}

# mtalloc under run --sample 64KiB with a fixed seed (HT_SAMPLE_SEED, default 1: bench/ runs
# other seeds): each site's estimate against the truth, nothing lost or malformed, and every
# reply says the session is sampled.
case_sample_mtalloc_accuracy() {
    local name=smt seed=${HT_SAMPLE_SEED:-1}
    agent_setup
    agent_run "$name" --name "$name" --sample 64KiB --sample-seed "$seed" \
        -- "$LIVE_APPS/mtalloc" $SAMPLE_THREADS $SAMPLE_ROUNDS
    local pid=$APID
    live_go "$pid"
    live_wait_line "$name" '"done":true'
    live_settle "$name"
    sample_header "$name" 65536
    eq "$(ctl --json status "$name" | live_lost)" 0 "lost events"
    eq "$(ctl --json status "$name" | jget source_status.malformed)" 0 "malformed records"
    eq "$(ctl --json status "$name" | jget quality.unknown_frees)" 0 "unknown frees"
    sample_check "$name" "$(live_truth "$name")" 65536
    live_go "$pid"
    wait "$pid" || fail "mtalloc exit code"
    stop_clean
}

# An exact session's replies carry no "sampled" (exact replies stay as they were).
case_sample_exact_says_nothing() {
    agent_setup
    agent_run sxe --name sxe -- "$LIVE_APPS/mtalloc" 2 5
    live_go "$APID"
    live_wait_line sxe '"done":true'
    live_settle sxe
    ctl --json status sxe >"$T/s"
    eq "$(jget quality.sampled <"$T/s")" "(missing)" "exact status: sampled"
    eq "$(jget quality.sample_set_full <"$T/s")" "(missing)" "exact status: sample_set_full"
    live_go "$APID"
    wait "$APID" || fail "mtalloc exit code"
    stop_clean
}

# --sample takes sizes with units and refuses what a record cannot carry.
case_sample_bad_args() {
    agent_setup
    ctl run --sample 0 -- /bin/true >"$T/o" 2>&1 && fail "--sample 0 accepted"
    grep -q "sample" "$T/o" || fail "--sample 0: $(cat "$T/o")"
    ctl run --sample 4GiB -- /bin/true >"$T/o" 2>&1 && fail "--sample 4GiB accepted"
    ctl run --max-overhead 0 -- /bin/true >"$T/o" 2>&1 && fail "--max-overhead 0 accepted"
    stop_clean
}

# sample_check_loose NAME TRUTH MEAN: as sample_check, at the bounds the final mean allows when a
# session's mean changed under it (the governor): each site of at least 200x MEAN within the
# larger of 10% and 4 standard errors (sqrt(MEAN/bytes)), the total within the larger of 3% and
# 4 standard errors.
sample_check_loose() {
    local name=$1 truth=$2 mean=$3 n i site kind want got sum_want=0 sum_got=0 bad=""
    n=$(echo "$truth" | jget sites.#)
    for ((i = 0; i < n; i++)); do
        site=$(echo "$truth" | jget "sites.$i.site")
        kind=$(echo "$truth" | jget "sites.$i.kind")
        if [ "$kind" = transient ]; then
            want=$(echo "$truth" | jget "sites.$i.bytes")
        else
            want=$(echo "$truth" | jget "sites.$i.live_bytes")
        fi
        got=$(sample_estimate "$name" "$site" "$kind")
        sum_want=$((sum_want + want))
        sum_got=$((sum_got + got))
        echo "site $site $want $got"
        if [ "$want" -ge $((200 * mean)) ] &&
            ! awk -v w="$want" -v g="$got" -v r="$mean" 'BEGIN{b = 4 * sqrt(r / w); if (b < 0.1) b = 0.1;
                  exit !(g >= w * (1 - b) && g <= w * (1 + b))}'; then
            bad="$bad $site($got/$want)"
        fi
    done
    echo "total $sum_want $sum_got"
    [ -z "$bad" ] || fail "sites off by more than their bound:$bad"
    awk -v w="$sum_want" -v g="$sum_got" -v r="$mean" 'BEGIN{b = 4 * sqrt(r / w); if (b < 0.03) b = 0.03;
        exit !(g >= w * (1 - b) && g <= w * (1 + b))}' ||
        fail "total $sum_got, truth $sum_want: off by more than its bound at mean $mean"
}

# run --max-overhead 1: mtalloc traced exactly (DWARF stacks on every allocation) costs far more
# than 1% of its CPU time, so the governor raises the sampling mean while it runs; status says so
# (the mean, the measured overhead, the changes), and the estimates over a window that spans
# every mean it went through (exact, then sampled) are still right.
case_sample_governor_raises() {
    local name=sgov
    agent_setup
    agent_run "$name" --name "$name" --stacks fp --max-overhead 1 --sample-seed 1 \
        -- "$LIVE_APPS/mtalloc" $SAMPLE_THREADS $SAMPLE_ROUNDS
    local pid=$APID
    live_go "$pid"
    live_wait_line "$name" '"done":true'
    live_settle "$name"
    ctl --json status "$name" >"$T/s" || fail "status"
    local mean changes
    mean=$(jget quality.sampled.mean_bytes <"$T/s")
    changes=$(jget quality.sampled.rate_changes <"$T/s")
    echo "governor: mean $mean, $changes changes, overhead $(jget quality.sampled.overhead_pct <"$T/s")%"
    [ "$changes" -ge 1 ] && [ "$mean" -gt 0 ] || fail "the governor never raised the mean: $(jget quality <"$T/s")"
    eq "$(jget quality.sampled.max_overhead_pct <"$T/s")" 1 "max_overhead_pct"
    # Each change is a mark rate.N in the session (no two changes within one drain here: the
    # governor ticks every 100 ms), and a window can start there.
    eq "$(jget marks.# <"$T/s")" "$changes" "rate marks"
    eq "$(jget marks.0.name <"$T/s")" rate.1 "the first change's mark"
    eq "$(jget source_status.rate_marks_dropped <"$T/s")" 0 "rate marks dropped"
    ctl --json stacks "$name" --range rate.1:now >"$T/w" || fail "a window from rate.1"
    [ "$(jget total.count <"$T/w")" -gt 0 ] || fail "nothing allocated after the first change"
    ctl status "$name" | grep -q "agent overhead .* (budget 1%)" || fail "status (text) shows no overhead"
    eq "$(live_lost <"$T/s")" 0 "lost events"
    eq "$(jget source_status.malformed <"$T/s")" 0 "malformed records"
    eq "$(jget quality.unknown_frees <"$T/s")" 0 "unknown frees"
    sample_check_loose "$name" "$(live_truth "$name")" "$mean"
    live_go "$pid"
    wait "$pid" || fail "mtalloc exit code"
    stop_clean
}

# record refuses a sampled session (.htev has no weights: a replay would be silently wrong).
case_sample_record_refused() {
    agent_setup
    agent_run srec --name srec --stacks fp --sample 64KiB -- "$LIVE_APPS/mtalloc" 2 5
    ctl record srec -o "$T/r.htev" >"$T/o" 2>&1 && fail "record of a sampled session accepted"
    grep -q "sampled" "$T/o" || fail "record's refusal does not say why: $(cat "$T/o")"
    live_go "$APID"
    live_wait_line srec '"done":true'
    live_go "$APID"
    wait "$APID" || fail "mtalloc exit code"
    stop_clean
}
