# The adversary of the .etl reader (issue 25): `load FILE.etl` against an independent model
# (etl-model.py), and what a hostile or changing file does to it. Sourced by run.sh.

ETL_MODEL=$HERE/etl-model.py

# Random heap allocations, frees, reallocs (in place and moving) and VirtualAlloc commits
# over four processes (one 32-bit, two with the same image) and three processors, plain and
# XPRESS: every session's status, stacks (whole trace, four random windows, each --type)
# and timeline equal to the model computed from the events generated.
case_adv25_model_seeds() {
    local seed x
    for seed in 1 2 3 4 5 6; do
        start_daemon
        x=
        [ $((seed % 2)) = 0 ] && x=--xpress
        python3 "$ETL_MODEL" gen "$T/m.etl" "$T/m.json" "$seed" $x --events 1500 ||
            fail "etl-model.py gen $seed"
        ctl load "$T/m.etl" >"$T/load.out" 2>&1 || fail "seed $seed load: $(cat "$T/load.out")"
        python3 "$ETL_MODEL" check "$T/m.json" >"$T/check.out" 2>&1 ||
            fail "seed $seed $x: $(cat "$T/check.out")"
        stop_clean
    done
}
