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
    ctl export many --format pprof --top 100 -o "$T/small.pb.gz" >"$T/o" 2>&1 ||
        fail "a profile within the budget: $(cat "$T/o")"
    eq "$(pprof_totals "$T/small.pb.gz" | cut -d' ' -f5)" 100 "samples of --top 100"
    stop_clean
}
