# Issue 26 items 1 and 4 (pprof half): export --format pprof read by the real `go tool pprof`
# (Debian golang-go): its totals and top sites equal `stacks` for the same query. Sourced by
# run.sh (helpers from cases-agent.sh and cases-live.sh).

pprof_need() {
    command -v go >/dev/null || fail "go (golang-go) not installed: scripts/install-deps.sh installs it"
    # go tool pprof wants a writable home for its cache and never the network.
    export HOME="$T" GOFLAGS=-mod=mod GOTOOLCHAIN=local PPROF_TMPDIR="$T"
}

# pprof_totals FILE: the four sample columns' sums as go tool pprof -raw reads them
# ("alloc_objects alloc_space inuse_objects inuse_space"), and the sample count.
pprof_totals() {
    go tool pprof -raw "$1" 2>"$T/pprof.err" >"$T/raw" || fail "go tool pprof -raw: $(cat "$T/pprof.err")"
    grep -q '^alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes\[dflt\]$' \
        "$T/raw" || fail "sample types as pprof reads them: $(sed -n 1,8p "$T/raw")"
    awk '/^Samples:/ {s = 1; next} /^Locations/ {s = 0}
         s && /^ *[0-9-]+ +[0-9-]+ +[0-9-]+ +[0-9-]+:/ {a += $1; b += $2; c += $3; d += $4; n++}
         END {printf "%d %d %d %d %d\n", a, b, c, d, n}' "$T/raw"
}

# stacks_totals JSON: the same four sums over stacks' rows, and the row count.
stacks_totals() {
    python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
r = d["rows"]
print(sum(x["count"] for x in r), sum(x["size"] for x in r),
      sum(x["outstanding_count"] for x in r), sum(x["outstanding"] for x in r), len(r))' "$1"
}

# stacks_sites JSON FIELD N: the N largest allocation sites by FIELD (summed per leaf
# function, as pprof -top's flat column sums them): "value name" lines.
stacks_sites() {
    python3 -c '
import json, re, sys
d = json.load(open(sys.argv[1]))
by = {}
for x in d["rows"]:
    f = re.sub(r"\+0x[0-9a-fA-F]+$", "", x["frames"][0]) if x["frames"] else ""
    by[f] = by.get(f, 0) + x[sys.argv[2]]
for f, v in sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))[: int(sys.argv[3])]:
    if v:
        print(v, f)' "$@"
}

# pprof_sites FILE INDEX N: go tool pprof -top's N first rows for sample INDEX: "flat name".
pprof_sites() {
    go tool pprof -top -sample_index="$2" -nodecount="$3" -nodefraction=0 -unit=byte "$1" 2>"$T/pprof.err" \
        >"$T/top" || fail "go tool pprof -top: $(cat "$T/pprof.err")"
    awk '/^ *flat/ {s = 1; next} s && NF >= 6 {v = $1; sub(/[A-Za-z]+$/, "", v); if (v + 0 == 0) next; n = $6; for (i = 7; i <= NF; i++) n = n " " $i; print v, n}' "$T/top"
}

# pprof_run NAME [run options]: mtalloc (2 threads x 5 rounds) under run, its leaks kept,
# the session settled; the program still waits for its go.
pprof_run() {
    local name=$1
    shift
    pprof_need
    agent_setup
    agent_run "$name" --name "$name" "$@" -- "$LIVE_APPS/mtalloc" 2 5
    live_go "$APID"
    live_wait_line "$name" '"done":true'
    live_settle "$name"
}

pprof_end() {
    live_go "$APID"
    wait "$APID" || fail "mtalloc exit code"
    stop_clean
}

# pprof_same NAME FILE [query options]: the file's totals and top sites equal stacks' for the
# same query, for inuse and alloc.
pprof_same() {
    local name=$1 file=$2 st pt
    shift 2
    ctl --json stacks "$name" --top 10000 "$@" >"$T/stacks.json" || fail "stacks $*"
    st=$(stacks_totals "$T/stacks.json")
    pt=$(pprof_totals "$file")
    echo "stacks totals: $st"
    echo "pprof  totals: $pt"
    eq "$pt" "$st" "alloc_objects alloc_space inuse_objects inuse_space samples (pprof vs stacks $*)"
    local idx field
    for idx in inuse_space:outstanding alloc_space:size inuse_objects:outstanding_count \
        alloc_objects:count; do
        field=${idx#*:}
        stacks_sites "$T/stacks.json" "$field" 5 >"$T/want"
        pprof_sites "$file" "${idx%:*}" 5 >"$T/got"
        echo "top 5 by ${idx%:*}:"
        cat "$T/got"
        [ -s "$T/want" ] || fail "stacks has no site by $field"
        diff "$T/want" "$T/got" >"$T/diff" || fail "top sites by ${idx%:*} (pprof vs stacks): $(cat "$T/diff")"
    done
}

# pprof_mappings_check RAW: mtalloc's mapping carries its path and build id (readelf's), and
# every location in it symbolizes from the mapping alone (address - start + offset, the ELF
# virtual address of a PIE) to the function the profile names, as addr2line reads the file.
pprof_mappings_check() {
    local app=$LIVE_APPS/mtalloc bid line id start off n=0 addr name vaddr
    bid=$(readelf -n "$app" | awk '/Build ID/ {print $3}')
    line=$(grep -E "^ *[0-9]+: 0x[0-9a-f]+/0x[0-9a-f]+/0x[0-9a-f]+ $app $bid" "$1") ||
        fail "no mapping of $app with build id $bid: $(sed -n '/^Mappings/,$p' "$1")"
    id=$(echo "$line" | awk -F: '{print $1 + 0}')
    start=$(echo "$line" | awk '{split($2, a, "/"); print a[1]}')
    off=$(echo "$line" | awk '{split($2, a, "/"); print a[3]}')
    while read -r addr name; do
        vaddr=$(printf '0x%x' $((addr - start + off)))
        addr2line -f -i -e "$app" "$vaddr" | grep -qx "${name#mtalloc!}" ||
            fail "location $addr ($vaddr in $app) is $name, addr2line says $(addr2line -f -i -e "$app" "$vaddr" | paste -sd' ')"
        n=$((n + 1))
    done < <(awk -v m="M=$id" '/^Locations/ {s = 1; next} /^Mappings/ {s = 0}
                               s && $3 == m && $4 ~ /^mtalloc!/ {print $2, $4}' "$1")
    [ "$n" -ge 5 ] || fail "only $n locations in mtalloc: $(sed -n '/^Locations/,$p' "$1")"
    echo "$n locations in mtalloc symbolize from the mapping as the profile names them"
}

# The whole session, read back by go tool pprof: totals and the top sites equal stacks', the
# mappings name the modules (mtalloc itself, with its build id), locations carry addresses.
case_pprof_mtalloc() {
    pprof_run ppm
    ctl export ppm --format pprof -o "$T/p.pb.gz" >"$T/o" 2>&1 || fail "export: $(cat "$T/o")"
    [ "$(head -c 2 "$T/p.pb.gz" | od -An -tx1 | tr -d ' ')" = 1f8b ] || fail "not gzip"
    pprof_same ppm "$T/p.pb.gz"
    pprof_mappings_check "$T/raw"
    grep -q "in no mapping" "$T/o" && fail "a live process's profile: $(cat "$T/o")"
    # The process gone (the agent sends no module events): the profile keeps names and
    # addresses, and the ctl says it has no mapping.
    live_go "$APID"
    wait "$APID" || fail "mtalloc exit code"
    ctl export ppm --format pprof -o "$T/gone.pb.gz" >"$T/o" 2>&1 || fail "export: $(cat "$T/o")"
    grep -q "locations of the profile have an address in no mapping" "$T/o" ||
        fail "no mapping not told: $(cat "$T/o")"
    pprof_same ppm "$T/gone.pb.gz"
    stop_clean
}

# Any query a user can run: --type, a window, filters; the profile holds what stacks shows for
# the same options.
case_pprof_query() {
    pprof_run ppq
    local i opts
    local -a sets=("--type AIFO" "--type AIFI,AIFO" "--require mtalloc!leak_malloc"
        "--size 0:100" "--range 0:now --cull libc.so.6!start_thread")
    for ((i = 0; i < ${#sets[@]}; i++)); do
        read -ra opts <<<"${sets[$i]}"
        ctl export ppq --format pprof -o "$T/q$i.pb.gz" "${opts[@]}" >"$T/o" 2>&1 ||
            fail "export ${opts[*]}: $(cat "$T/o")"
        pprof_same ppq "$T/q$i.pb.gz" "${opts[@]}"
    done
    # --top keeps the largest stacks: the profile has them, and the ctl says it was cut.
    ctl export ppq --format pprof --top 3 -o "$T/top3.pb.gz" >"$T/o" 2>&1 || fail "export --top 3"
    grep -q "the profile holds the 3 largest of the [0-9]* stacks" "$T/o" || fail "--top 3 not told: $(cat "$T/o")"
    eq "$(pprof_totals "$T/top3.pb.gz" | cut -d' ' -f5)" 3 "samples of --top 3"
    pprof_end
}

# A sampled session (run --sample): the profile's values are the estimates stacks shows.
case_pprof_sampled() {
    pprof_run pps --sample 1KiB --sample-seed 1
    ctl --json stacks pps >"$T/j" || fail "stacks"
    eq "$(jget quality.sampled.mean_bytes <"$T/j")" 1024 "the session is sampled"
    ctl export pps --format pprof -o "$T/s.pb.gz" >"$T/o" 2>&1 || fail "export: $(cat "$T/o")"
    pprof_same pps "$T/s.pb.gz"
    pprof_end
}

# A query of no rows is a valid, empty profile (not a failure); a terminal gets no binary.
case_pprof_empty() {
    pprof_run ppe
    ctl export ppe --format pprof --require 'nosuch!frame' -o "$T/e.pb.gz" >"$T/o" 2>&1 ||
        fail "export of no rows: $(cat "$T/o")"
    eq "$(pprof_totals "$T/e.pb.gz")" "0 0 0 0 0" "an empty profile as pprof reads it"
    script -qec "$HT_CTL export ppe --format pprof" /dev/null </dev/null >"$T/tty" 2>&1 &&
        fail "pprof written to a terminal: $(head -c 300 "$T/tty" | od -c | head -3)"
    grep -q "pprof is binary" "$T/tty" || fail "terminal refusal: $(cat "$T/tty")"
    # Redirected, the bytes are the file's.
    ctl export ppe --format pprof --require 'nosuch!frame' >"$T/e2.pb.gz" || fail "export to stdout"
    eq "$(pprof_totals "$T/e2.pb.gz")" "0 0 0 0 0" "the same profile through stdout"
    pprof_end
}

# A trigger's snapshot as pprof: its totals equal the snapshot's rows (JSON export).
case_pprof_snapshot() {
    pprof_need
    start_daemon
    timeout 60 "$HT_CTL" load "$DEMO" --name d --snapshot-when 'outstanding>10KiB' --every 10KiB \
        >/dev/null 2>&1 || fail "load"
    ctl --json export d --format json --snapshot 3 >"$T/snap.json" || fail "export json --snapshot 3"
    python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["stacks"]["rows"]
print(sum(x["count"] for x in r), sum(x["size"] for x in r),
      sum(x["outstanding_count"] for x in r), sum(x["outstanding"] for x in r), len(r))' \
        "$T/snap.json" >"$T/want"
    ctl export d --format pprof --snapshot 3 -o "$T/snap.pb.gz" >"$T/o" 2>&1 ||
        fail "export pprof --snapshot 3: $(cat "$T/o")"
    eq "$(pprof_totals "$T/snap.pb.gz")" "$(cat "$T/want")" "snapshot 3 totals (pprof vs json)"
    [ "$(cut -d' ' -f5 "$T/want")" -gt 0 ] || fail "snapshot 3 has no rows"
    grep -q 'MemoryTestApp.exe!Initialize' "$T/raw" || fail "snapshot frames by name"
    # A window: pprof reads its length; names only, nothing is said of mappings.
    ctl export d --format pprof --range 2s:5s -o "$T/w.pb.gz" >"$T/o" 2>&1 || fail "export --range"
    [ ! -s "$T/o" ] || fail "export of names said: $(cat "$T/o")"
    pprof_totals "$T/w.pb.gz" >/dev/null
    grep -qx 'Duration: 3s' "$T/raw" || fail "window 2s:5s: $(sed -n 1,4p "$T/raw")"
    stop_clean
}

# A real Debian library built without frame pointers (libxml2, via tests/apps/xmlleak): the
# profile equals stacks, and libxml2's mapping carries the build id readelf reads from the file
# the process mapped, with libxml2's locations in it.
case_pprof_libxml2() {
    pprof_need
    agent_setup
    [ -x "$(xmlleak_bin)" ] || fail "no xmlleak at $(xmlleak_bin) (libxml2-dev: scripts/install-deps.sh)"
    mkfifo "$T/xin"
    "$HT_CTL" run --name pxml -- "$(xmlleak_bin)" 20 0 <"$T/xin" >"$T/pxml.out" 2>"$T/pxml.err" &
    APID=$!
    LIVE_PIDS+=("$APID")
    exec 8>"$T/xin"
    live_wait_line pxml '"ready"'
    printf g >&8 # the go-signal (app-sync.h)
    live_wait_line pxml '"done"'
    live_settle pxml
    local lib bid line id n
    lib=$(awk '/libxml2\.so/ {print $6; exit}' "/proc/$APID/maps")
    [ -n "$lib" ] || fail "xmlleak maps no libxml2"
    bid=$(readelf -n "$lib" | awk '/Build ID/ {print $3}')
    ctl export pxml --format pprof -o "$T/x.pb.gz" >"$T/o" 2>&1 || fail "export: $(cat "$T/o")"
    pprof_same pxml "$T/x.pb.gz"
    line=$(grep -E "^ *[0-9]+: 0x[0-9a-f]+/0x[0-9a-f]+/0x[0-9a-f]+ $lib $bid" "$T/raw") ||
        fail "no mapping of $lib with build id $bid: $(sed -n '/^Mappings/,$p' "$T/raw")"
    id=$(echo "$line" | awk -F: '{print $1 + 0}')
    n=$(awk -v m="M=$id" '/^Locations/ {s = 1; next} /^Mappings/ {s = 0}
                          s && $3 == m && $4 ~ /^libxml2\.so\.2!/ {k++} END {print k + 0}' "$T/raw")
    [ "$n" -gt 0 ] || fail "no libxml2 location in its mapping: $(sed -n '/^Locations/,$p' "$T/raw" | head)"
    echo "$n libxml2 locations in $lib's mapping (build id $bid)"
    printf x >&8
    exec 8>&-
    wait "$APID" || fail "xmlleak exit code"
    stop_clean
}
