#!/usr/bin/env bash
# Attach time (issue 23): `start --pid N --source agent` on a process with 50 threads (25 waiting
# on a condition variable, 25 in nanosleep) and 200 loaded modules (dlopen'ed, each calling
# malloc through its PLT), whose main thread allocates every millisecond. Per repetition, a
# fresh target:
#   inject   the source's own attach time (status source_status.attach_ms; the agent's: ptrace
#            stop, dlopen, the GOT pass over every module, restore)
#   reply    the start request's round trip, as the ctl sees it
#   first    request to the first event in the session (status quality.events > 0)
# and the same two end-to-end figures for --source bpf on the same kind of target. Every value
# is printed, then the medians. Not a timed test: figures for people.
#
# usage: bench/live/bench-attach.sh [--build DIR] [--reps R] [--threads T] [--modules M]
#        [--sources "agent bpf"]
set -u
BUILD=build REPS=5 THREADS=50 MODULES=200 SOURCES="agent bpf"
while [ $# -gt 0 ]; do
    case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --modules) MODULES=$2; shift 2 ;;
    --sources) SOURCES=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "bench-attach: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -d "$BUILD" ] && BUILD=$(cd "$BUILD" && pwd)
CTL=$BUILD/ctl/heaptracectl
W=$(mktemp -d /tmp/bench-attach.XXXXXX)
export HEAPTRACE_PIPE=$W/ht.sock
TPID=

cat >"$W/mod.c" <<'EOF'
#include <stdlib.h>
int MODFN(int n) { char *p = malloc((size_t)n + 1); int r = p ? n : -1; free(p); return r; }
EOF
cat >"$W/target.c" <<'EOF'
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static void *waiter(void *a) { pthread_mutex_lock(&mu); for (;;) pthread_cond_wait(&cv, &mu); return a; }
static void *sleeper(void *a) { for (;;) { struct timespec t = {0, 5000000}; nanosleep(&t, NULL); } return a; }
int main(int argc, char **argv) {
    int threads = atoi(argv[1]), mods = atoi(argv[2]);
    char path[4096];
    for (int i = 0; i < mods; i++) {
        snprintf(path, sizeof(path), "%s/mod%d.so", argv[3], i);
        if (!dlopen(path, RTLD_NOW)) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    }
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        pthread_create(&t, NULL, i % 2 ? sleeper : waiter, NULL);
    }
    printf("ready\n");
    fflush(stdout);
    for (;;) { free(malloc(64)); usleep(1000); }
}
EOF
echo "bench-attach: building $MODULES modules and the target in $W" >&2
for ((i = 0; i < MODULES; i++)); do
    cc -O2 -shared -fPIC -DMODFN="mod$i" "$W/mod.c" -o "$W/mod$i.so" || exit 1
done
cc -O2 "$W/target.c" -o "$W/target" -ldl -lpthread || exit 1

"$BUILD/daemon/heaptraced" --foreground --log-level warn 2>"$W/daemon.log" &
DPID=$!
trap 'kill $TPID 2>/dev/null; kill $DPID 2>/dev/null; wait $DPID 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 100); do "$CTL" ping >/dev/null 2>&1 && break; sleep 0.05; done

ms() { echo $(( ($(date +%s%N) - $1) / 1000 )) | awk '{printf "%.1f", $1 / 1000}'; }

# one SOURCE REP: a fresh target, attach, the figures on one line.
one() {
    local src=$1 rep=$2 name="$1$2" t0 reply first inject ev
    "$W/target" "$THREADS" "$MODULES" "$W" >"$W/t.out" 2>&1 &
    TPID=$!
    for _ in $(seq 200); do grep -q ready "$W/t.out" && break; sleep 0.05; done
    t0=$(date +%s%N)
    "$CTL" start --pid "$TPID" --source "$src" --name "$name" >"$W/start.out" 2>&1 ||
        { echo "start failed: $(cat "$W/start.out")" >&2; exit 1; }
    reply=$(ms "$t0")
    for _ in $(seq 2000); do
        ev=$("$CTL" --json status "$name" | "$BUILD/tests/integration/ht-testtool" get quality.events)
        [ "${ev:-0}" -gt 0 ] && break
    done
    first=$(ms "$t0")
    inject=$("$CTL" --json status "$name" | "$BUILD/tests/integration/ht-testtool" get source_status.attach_ms 2>/dev/null)
    echo "$src rep $rep: inject ${inject:--} ms, reply $reply ms, first event $first ms"
    echo "$src reply $reply" >>"$W/vals"
    echo "$src first $first" >>"$W/vals"
    [ -n "$inject" ] && echo "$src inject $inject" >>"$W/vals"
    "$CTL" stop "$name" >/dev/null
    kill "$TPID"
    wait "$TPID" 2>/dev/null
}

echo "target: $THREADS threads, $MODULES modules (+ its libc, libdl...), $REPS repetitions"
for ((r = 1; r <= REPS; r++)); do
    for src in $SOURCES; do
        [ "$src" = bpf ] && ! "$CTL" --json version | grep -q '"bpf"' && continue
        one "$src" "$r"
    done
done
echo "medians (ms):"
for src in agent bpf; do
    for what in inject reply first; do
        v=$(awk -v s="$src" -v w="$what" '$1 == s && $2 == w {print $3}' "$W/vals" | sort -n |
            awk '{a[NR] = $1} END {if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}')
        [ -n "$v" ] && echo "  $src $what $v"
    done
done
