#!/usr/bin/env bash
# Install what heaptrace needs to build and test, from Debian 12 packages only.
# Runs as root (or with sudo). Idempotent: only missing packages are installed.
# usage: scripts/install-deps.sh [--bench]
#   --bench   also what bench/live/bench-live.sh compares against (bcc's memleak, heaptrack,
#             bpftrace); not needed to build or test
set -euo pipefail

bench=0
for a in "$@"; do
    case "$a" in
    --bench) bench=1 ;;
    *) echo "usage: $0 [--bench]" >&2; exit 2 ;;
    esac
done

# Build and unit/integration tests.
pkgs=(build-essential cmake pkg-config libuv1-dev libcjson-dev libzstd-dev)
# The eBPF live backend (HEAPTRACE_WITH_BPF): CO-RE program built with clang -target bpf,
# vmlinux.h and the skeleton from bpftool, libbpf; symbols with elfutils' libdw (needs libelf,
# zlib) and libiberty's demangler; capstone decodes allocator prologues to place the probes.
pkgs+=(clang libbpf-dev bpftool libelf-dev zlib1g-dev libdw-dev libiberty-dev libcapstone-dev)
# The in-process agent (agent/, libheaptrace-agent.so): its stacks come from .eh_frame
# (right on programs built without frame pointers), read with libdw (above), and from
# libunwind for frames of other shapes.
pkgs+=(libunwind-dev)
# tests/unit/agent (the agent's unwinder against libunwind on Debian programs): xmllint.
pkgs+=(libxml2-utils)
# tests/apps: the C++ apps, and the leak program linked with jemalloc and tcmalloc.
pkgs+=(g++ libjemalloc-dev libtcmalloc-minimal4 libgoogle-perftools-dev)
# tests/apps/xmlleak (libxml2, no frame pointers) and the live cases on Debian programs
# (cases-stacks.sh: redis-server with jemalloc, below, and redis-cli).
pkgs+=(libxml2-dev redis-tools)
# tests/integration/cases-sec.sh: a setgid program (ssh-agent), a jemalloc program
# (redis-server) and a member's client (the system python3), run as group heaptrace members.
pkgs+=(openssh-client redis-server python3)
# export --format pprof: profile.proto encoded with protobuf-c (protoc-c generates its C at build
# time) and gzip'd with zlib (zlib1g-dev, above); tests/integration/cases-pprof.sh reads the
# profiles with the real `go tool pprof` (golang-go).
pkgs+=(libprotobuf-c-dev protobuf-c-compiler golang-go)
# script(1): integration.ctl_* run the ctl on a pseudo-terminal (essential in Debian, named
# here as the tests need it).
pkgs+=(bsdutils)
# tests/integration/cases-attach.sh: a target under strace (another tracer), and a 32-bit
# target (gcc -m32) the agent must refuse.
pkgs+=(strace gcc-multilib)
# tests/etl: the real Windows traces are kept zipped and 7-zipped, unpacked during the test.
pkgs+=(unzip p7zip-full)
# tests/integration/cases-adv25.sh (and cases-adv23.sh): a run's peak RSS and time by GNU time.
pkgs+=(time)
# tests/integration/cases-http.sh: the HTTP listener scraped by a real Prometheus server (its
# exposition checked by promtool, from the same package), fetched with curl.
pkgs+=(prometheus curl)
if [ "$bench" = 1 ]; then
    pkgs+=(bpfcc-tools heaptrack bpftrace)
fi

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
