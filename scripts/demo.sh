#!/usr/bin/env bash
# The main job, end to end: install dependencies, build, start heaptraced on a
# private endpoint, load the MemoryTestApp demo stream (the run of the WPA lab
# in ../shared/seeds/000) and print the report a user would look at.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)" >/dev/null

tmp=$(mktemp -d)
export HEAPTRACE_PIPE=$tmp/heaptraced.sock
build/daemon/heaptraced --foreground --log-level warn 2>"$tmp/daemon.log" &
daemon=$!
trap 'build/ctl/heaptracectl shutdown >/dev/null 2>&1 || kill $daemon; wait $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do build/ctl/heaptracectl ping >/dev/null 2>&1 && break; sleep 0.05; done

ctl() { echo; echo "\$ heaptracectl $*"; build/ctl/heaptracectl "$@"; }
ctl load tests/data/memorytestapp.htev --name MemoryTestApp
ctl status
echo
echo "== Steady state: what grew around the halfway jump (WPA: zoom 14-16 s, sort by Impacting Size)"
ctl commits --range 14s:16s --sort impact --by frame
echo
echo "== Transient peaks: the last four spikes (WPA: Impacting Type = Transient)"
ctl commits --range 19s:29s --type AIFI --list
echo
echo "== Heap: allocations still alive at the end (AIFO), by the frame that called the allocator"
ctl stacks --type AIFO --by frame
ctl stacks --type AIFO --tree
echo
echo "== Footprint over time"
ctl timeline --step 3s
