#!/usr/bin/env bash
# The main job, end to end: install dependencies, build, start heaptraced on a
# private endpoint, start the MemoryTestApp port (tests/apps/memorytestapp.cc,
# the program of Microsoft's WPA lab "Track User Mode Process Allocations"),
# attach to it by PID with eBPF while it runs, and print the report the lab
# finds, from the live session.
# Needs root (CAP_BPF) and a kernel with BTF. `scripts/demo.sh --replay` loads
# the recorded stream of the original Windows run instead (no privileges);
# `scripts/demo.sh --agent` starts the app under `heaptracectl run` (the
# in-process agent: the app runs as the caller).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-live}
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)" >/dev/null

tmp=$(mktemp -d)
app=
export HEAPTRACE_PIPE=$tmp/heaptraced.sock
build/daemon/heaptraced --foreground --log-level warn 2>"$tmp/daemon.log" &
daemon=$!
cleanup() {
    [ -n "$app" ] && kill -KILL "$app" 2>/dev/null
    build/ctl/heaptracectl shutdown >/dev/null 2>&1 || kill "$daemon"
    wait "$daemon" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
for _ in $(seq 100); do build/ctl/heaptracectl ping >/dev/null 2>&1 && break; sleep 0.05; done

ctl() { echo; echo "\$ heaptracectl $*"; build/ctl/heaptracectl "$@"; }
q() { build/ctl/heaptracectl "$@"; }

# Wait for the app to print a line matching $1 (it then waits for SIGUSR1).
app_line() {
    for _ in $(seq 400); do
        grep -q "$1" "$tmp/app.out" && return 0
        kill -0 "$app" 2>/dev/null || { cat "$tmp/app.out" "$tmp/app.err" >&2; exit 1; }
        sleep 0.05
    done
    echo "demo: memorytestapp never printed $1" >&2
    exit 1
}

# Wait until the session has taken every event of the paused app.
settle() {
    local a b
    a=$(q --json status MemoryTestApp | sed -n 's/.*"events":[[:space:]]*\([0-9]*\).*/\1/p' | head -1)
    for _ in $(seq 100); do
        sleep 0.3
        b=$(q --json status MemoryTestApp | sed -n 's/.*"events":[[:space:]]*\([0-9]*\).*/\1/p' | head -1)
        [ "$a" = "$b" ] && return 0
        a=$b
    done
}

if [ "$mode" = --replay ]; then
    ctl load tests/data/memorytestapp.htev --name MemoryTestApp
    mid=14s:16s spikes=19s:29s step=3s
else
    if [ "$mode" = --agent ]; then
        echo "== heaptracectl run --name MemoryTestApp -- build/tests/apps/memorytestapp"
        build/ctl/heaptracectl run --name MemoryTestApp -- build/tests/apps/memorytestapp \
            >"$tmp/app.out" 2>"$tmp/app.err" </dev/null &
        app=$!
        app_line '"ready":true'
    else
        [ "$(id -u)" -eq 0 ] || { echo "demo: live tracing needs root (or run scripts/demo.sh --replay or --agent)" >&2; exit 1; }
        build/tests/apps/memorytestapp >"$tmp/app.out" 2>"$tmp/app.err" </dev/null &
        app=$!
        app_line '"ready":true'
        echo "== MemoryTestApp is running as pid $app: attach to it"
        ctl start --source bpf --pid "$app" --name MemoryTestApp
    fi
    kill -USR1 "$app"
    # The app stops at each phase so the marks fall where the lab zooms in.
    for at in mid_before mid_after spikes_before; do
        app_line "\"at\":\"$at\""
        settle
        q mark MemoryTestApp "$at" >/dev/null
        kill -USR1 "$app"
    done
    app_line '"done":true'
    settle
    q mark MemoryTestApp done >/dev/null
    echo
    echo "== What the app says it did (its own ground truth)"
    grep '"done":true' "$tmp/app.out"
    mid=mid_before:mid_after spikes=spikes_before:done step=1s
fi

ctl status MemoryTestApp
echo
echo "== Steady state: what grew around the halfway jump (WPA: zoom on the jump, sort by Impacting Size)"
ctl commits MemoryTestApp --range "$mid" --sort impact --by frame
echo
echo "== Transient peaks: the last four spikes (WPA: Impacting Type = Transient)"
ctl commits MemoryTestApp --range "$spikes" --type AIFI --list
echo
echo "== Heap: allocations still alive at the end (AIFO), by the frame that called the allocator"
ctl stacks MemoryTestApp --type AIFO --by frame
ctl stacks MemoryTestApp --type AIFO --tree
echo
echo "== Footprint over time"
ctl timeline MemoryTestApp --step "$step"
if [ -n "$app" ]; then
    kill -USR1 "$app" 2>/dev/null || true
    wait "$app" 2>/dev/null || true
    app=
fi
