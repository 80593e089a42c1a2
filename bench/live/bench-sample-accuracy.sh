#!/usr/bin/env bash
# Sampling accuracy (issue 22): tests/apps/mtalloc (1 thread x 12000 rounds, known per-site truth)
# under `heaptracectl run --sample 64KiB`, once per seed (--sample-seed 1..SEEDS), through the CI
# case integration.sample_mtalloc_accuracy (tests/integration/cases-sample.sh). Prints every
# site's error per seed, then per site: the mean error across seeds (unbiased: within +-2%), its
# standard deviation and the worst seed; and how many seeds failed the CI case's own bounds (each
# site of at least 200x the mean within +-10%, the total within +-3%).
#
# usage: bench/live/bench-sample-accuracy.sh [--build DIR] [--seeds N]
# Runtime: about 10 s a seed on these hosts.
set -u
BUILD=build SEEDS=20
while [ $# -gt 0 ]; do
    case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --seeds) SEEDS=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "bench-sample-accuracy: unknown option $1" >&2; exit 2 ;;
    esac
done
HERE=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$BUILD" && pwd)
export HT_DAEMON=$BUILD/daemon/heaptraced HT_CTL=$BUILD/ctl/heaptracectl
export HT_TOOL=$BUILD/tests/integration/ht-testtool HT_DATA=$HERE/tests/data HT_TIME_FACTOR=1
export HT_CONVERT=$BUILD/daemon/ht-convert HT_ETW_SYNTH=/bin/false
OUT=$(mktemp /tmp/bench-sample.XXXXXX)
trap 'rm -f "$OUT"' EXIT
fails=0
for ((s = 1; s <= SEEDS; s++)); do
    if ! HT_SAMPLE_SEED=$s bash "$HERE/tests/integration/run.sh" sample_mtalloc_accuracy >"$OUT.$s" 2>&1; then
        fails=$((fails + 1))
        grep FAIL "$OUT.$s" | sed "s/^/seed $s: /"
    fi
    grep -E '^(site|total) ' "$OUT.$s" | sed "s/^/$s /" >>"$OUT"
    rm -f "$OUT.$s"
done
echo "seed site truth estimate error%"
cat "$OUT"
echo
echo "per site over $SEEDS seeds (mean error must be within +-2%):"
awk '{k = ($2 == "total") ? "TOTAL" : $3; e = ($2 == "total") ? $5 : $6; t = ($2 == "total") ? $3 : $4;
      n[k]++; s[k] += e; q[k] += e * e; tr[k] = t; if (!(k in w) || (e < 0 ? -e : e) > (w[k] < 0 ? -w[k] : w[k])) w[k] = e}
     END {printf "%-22s %12s %8s %8s %8s\n", "site", "truth_bytes", "mean%", "sd%", "worst%";
          for (k in n) {m = s[k] / n[k]; v = q[k] / n[k] - m * m; if (v < 0) v = 0;
            printf "%-22s %12d %8.2f %8.2f %8.2f\n", k, tr[k], m, sqrt(v), w[k]}}' "$OUT" | sort
echo
echo "seeds failing the CI case's bounds: $fails of $SEEDS"
