#!/usr/bin/env bash
# The whole test suite: installs dependencies, then builds and runs ctest twice,
# once optimized with -Werror and once with AddressSanitizer + UBSan.
# Fuzz corpora replay as ctest cases in both builds.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
run_suite() {
    local dir=$1; shift
    echo "== $dir: configure + build"
    cmake -S . -B "$dir" -DHEAPTRACE_WERROR=ON "$@" >/dev/null
    cmake --build "$dir" -j"$jobs" >/dev/null
    echo "== $dir: ctest"
    ctest --test-dir "$dir" --output-on-failure -j"$jobs"
}

run_suite build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo
# Sanitizers: any report fails the test (halt_on_error), leaks included.
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DHEAPTRACE_SANITIZE=ON -DHEAPTRACE_BENCH=OFF
echo "== all suites passed"
