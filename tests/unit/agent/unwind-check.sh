#!/usr/bin/env bash
# unwind-check.sh CASE CHECK_SO DLRELOAD LIBA LIBB XMLLEAK: runs a real program with
# unwind-check.so preloaded (every malloc's stack taken by the agent's fast unwinder
# and by libunwind; the fast one through the agent's stack cache, as the agent takes
# it) and fails when a stack differs, or when the fast unwinder or the cache took too
# few stacks for the comparison to mean anything.
set -u
FAST_PCT=80 # stacks the fast unwinder must take itself, % of those checked
CASE=$1 SO=$2 DLRELOAD=$3 LIBA=$4 LIBB=$5 XMLLEAK=$6
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export UNWIND_CHECK_OUT=$T/out
fail() { echo "FAIL: $*"; cat "$T/out" 2>/dev/null; exit 1; }
# The fast unwinder is x86-64's (elsewhere every stack goes to libunwind).
[ "$(uname -m)" = x86_64 ] || { echo "SKIP: not x86-64"; exit 77; }
pre() { LD_PRELOAD=$SO "$@"; }

case $CASE in
redis) # Debian's redis-server (jemalloc, no frame pointers) under a few hundred commands
    command -v redis-server >/dev/null || exit 77
    port=$((20000 + $$ % 20000))
    pre redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >"$T/redis.log" 2>&1 &
    p=$!
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
    for i in $(seq 200); do echo "SET k$i $(head -c $((i * 7)) /dev/zero | tr '\0' x)"; echo "LPUSH l$((i % 9)) $i"; echo "ZADD z $i m$i"; done |
        redis-cli -p "$port" >/dev/null || fail "redis-cli"
    redis-benchmark -p "$port" -t set,get,lpush,hset -n 3000 -q >/dev/null 2>&1
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1
    wait "$p"
    ;;
python3) # Debian's python3: imports (dlopen of extension modules), a workload
    [ -x /usr/bin/python3 ] || exit 77
    pre /usr/bin/python3 -c '
import json, decimal, collections, re, zlib
d = [{"k": i, "v": str(i) * (i % 17), "d": decimal.Decimal(i) / 7} for i in range(3000)]
s = json.dumps(d, default=str); json.loads(s)
c = collections.Counter(re.findall(r"\d+", s)); zlib.compress(s.encode())
' || fail "python3"
    ;;
xmllint) # Debian's xmllint (libxml2)
    command -v xmllint >/dev/null || exit 77
    { echo '<?xml version="1.0"?><r>'; for i in $(seq 2000); do echo "<e a=\"$i\"><f>t$i</f><!-- c --></e>"; done; echo '</r>'; } >"$T/d.xml"
    pre xmllint --noout --format "$T/d.xml" || fail "xmllint"
    pre xmllint --xpath 'count(//e)' "$T/d.xml" >/dev/null || fail "xmllint --xpath"
    ;;
xmlleak) # a program against Debian's libxml2, -O2 without frame pointers
    [ -x "$XMLLEAK" ] || exit 77
    printf 'xx' | pre "$XMLLEAK" 300 3 >/dev/null || fail "xmlleak"
    ;;
dlreload) # a module dlclose'd, another with other CFI at the same address
    pre "$DLRELOAD" "$LIBA" "$LIBB" >"$T/addr" || fail "dlreload"
    [ "$(sed -n 1p "$T/addr")" = "$(sed -n 2p "$T/addr")" ] ||
        { echo "SKIP: the two libraries were not loaded at one address: $(tr '\n' ' ' <"$T/addr")"; exit 77; }
    grep -q "invalidated=[1-9]" "$T/out" || fail "no dlclose seen"
    # The handler's stacks pass a signal frame: left to libunwind, and taken right (slow_differ 0
    # below) although unw_backtrace keeps the unloaded library's frame shapes.
    grep -q " fallback=[1-9]" "$T/out" || fail "no stack left to libunwind: the slow path unchecked"
    FAST_PCT=60 # 8 of 27 through the signal frame
    ;;
*) fail "unknown case $CASE" ;;
esac

[ -s "$T/out" ] || fail "no report (was unwind-check.so preloaded?)"
cat "$T/out"
# Every process's report: no difference, and most stacks taken fast (a test in
# which everything fell back to libunwind would compare nothing).
awk -v pct="$FAST_PCT" '{for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      if (v["differ"] != 0 || v["slow_differ"] != 0) bad = 1; fast += v["fast"]; all += v["checked"]; cached += v["cached"] }
     END { if (bad) { print "differences"; exit 1 }
           if (all < 8 || fast * 100 < all * pct) { print "fast " fast " of " all ": too few to compare"; exit 1 }
           if (cached == 0) { print "no stack from the stack cache: it was not checked"; exit 1 } }' "$T/out" ||
    fail "fast unwinder against libunwind"
echo "ok"
