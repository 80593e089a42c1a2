#!/usr/bin/env bash
# The Windows test suite: cross-builds heaptrace for Windows x86-64 with mingw-w64 and runs
# its ctest suite under wine (CMake's cross-compiling emulator runs each test .exe).
# Installs the toolchain and wine from Debian 12 packages (root, or sudo), builds libuv,
# cJSON and zstd from Debian's source packages (scripts/win-deps.sh, cached in
# build-win/deps), and uses a throwaway wine prefix set to Windows 10.
# usage: scripts/test-windows.sh [BUILD_DIR]     (default build-win)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-win}
mkdir -p "$build"
build=$(cd "$build" && pwd)
jobs=$(nproc 2>/dev/null || echo 2)
[ "$jobs" -gt 2 ] && jobs=2
# step NAME CMD...: runs one step and says how long it took.
step() {
    local name=$1 s=$SECONDS; shift
    "$@"
    echo "== windows: $name took $((SECONDS - s)) s"
}

install_pkgs() {
    # The win32 thread model compilers only (cmake/mingw-w64-x86_64.cmake names them; g++ for
    # tests/apps' MemoryTestApp port); wine64
    # runs the 64-bit .exe files, without recommends (no X or audio stack).
    local pkgs=(gcc-mingw-w64-x86-64-win32 g++-mingw-w64-x86-64-win32 mingw-w64-x86-64-dev wine wine64 cmake make dpkg-dev)
    local missing=() p
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
    $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

configure_build() {
    cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64-x86_64.cmake \
        -DWIN_DEPS_PREFIX="$build/deps/prefix" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DHEAPTRACE_WERROR=ON >/dev/null
    cmake --build "$build" -j"$jobs" >/dev/null
}

# Static executables: every .exe imports only DLLs that come with Windows (no libgcc,
# libwinpthread, libuv or zstd DLL to ship).
check_imports() {
    local system='^(kernel32|msvcrt|ucrtbase|advapi32|user32|ws2_32|iphlpapi|userenv|psapi|dbghelp|ntdll|tdh|ole32|shell32|bcrypt|secur32)\.dll$'
    local exe dll bad=0 n=0
    while IFS= read -r exe; do
        n=$((n + 1))
        while IFS= read -r dll; do
            if ! echo "$dll" | tr 'A-Z' 'a-z' | grep -Eq "$system"; then
                echo "== windows: $exe imports $dll (not a system DLL)" >&2
                bad=1
            fi
        done < <(x86_64-w64-mingw32-objdump -p "$exe" | sed -n 's/^[[:space:]]*DLL Name: //p')
    done < <(find "$build" -name '*.exe' -not -path "$build/deps/*" -not -path '*/CMakeFiles/*')
    if [ "$n" = 0 ]; then
        echo "== windows: no .exe built in $build" >&2
        return 1
    fi
    [ "$bad" = 0 ] || return 1
    echo "== windows: $n .exe files import only system DLLs"
}

# A throwaway prefix (about 0.7 GB) under /tmp, removed at the end.
wine_prefix() {
    export WINEPREFIX
    WINEPREFIX=$(mktemp -d /tmp/heaptrace-wine.XXXXXX)
    # err+module: a missing DLL is named instead of a silent exit code 53; no mono/gecko
    # install attempts (docs/windows.md#what-wine-does-and-does-not-do).
    export WINEDEBUG=-all,err+module WINEDLLOVERRIDES="mscoree,mshtml="
    if ! wineboot --init >/dev/null 2>&1; then
        echo "== windows: wineboot --init failed in $WINEPREFIX" >&2
        return 1
    fi
    # Wine reports Windows 7 by default.
    wine reg add 'HKCU\Software\Wine' /v Version /t REG_SZ /d win10 /f >/dev/null 2>&1
    # The wineserver these started exits a few seconds after its last client (and saves
    # the registry); "wineserver -p" refuses (exit 2) while one runs.
    wineserver -w
    # One wineserver for the whole run; wine's system processes inherit stdout, so a first
    # wine call whose output is not captured starts them before ctest pipes a test's output
    # (otherwise each test waits for the wineserver to exit:
    # docs/windows.md#what-wine-does-and-does-not-do).
    wineserver -p
    wine cmd /c exit </dev/null >/dev/null 2>&1
}
wine_cleanup() {
    if [ -n "${WINEPREFIX:-}" ] && [ -d "$WINEPREFIX" ]; then
        wineserver -k 2>/dev/null || true
        wineserver -w 2>/dev/null || true
        rm -rf "$WINEPREFIX"
    fi
}
trap wine_cleanup EXIT

# Tests that need real Windows behaviour wine lacks: each skips under wine (exit 77, with a
# message naming what wine lacks) and is verified only on real Windows (docs/windows.md). Any other
# skip fails the run unless HEAPTRACE_ALLOW_SKIP is set: it means something stopped running.
wine_skips=(
    endpoint.nonadmin_refused     # wine lets a token with Administrators deny-only open the pipe
    endpoint.operator_admitted    # ... and ask for GENERIC_WRITE (FILE_CREATE_PIPE_INSTANCE) too
    test-service.recovery_actions # wine's services.exe drops SERVICE_CONFIG_FAILURE_ACTIONS
    test-service.log_dir_dacl     # wine keeps a file's DACL as Unix mode bits: not read back
)
run_tests() {
    ctest --test-dir "$build" --output-on-failure --no-tests=error -j"$jobs" --timeout 300 |
        tee "$build/ctest.out"
    local skipped name allowed a bad=""
    skipped=$(grep -E '\*\*\*Skipped|Not Run' "$build/ctest.out" | sed -n 's/.*Test *#[0-9]*: \([^ ]*\) .*/\1/p' || true)
    for name in $skipped; do
        allowed=0
        for a in "${wine_skips[@]}"; do
            [ "$name" = "$a" ] && allowed=1
        done
        [ "$allowed" = 1 ] && echo "== windows: $name skipped under wine (verified only on real Windows)"
        [ "$allowed" = 1 ] || bad="$bad $name"
    done
    if [ -n "$bad" ] && [ -z "${HEAPTRACE_ALLOW_SKIP:-}" ]; then
        echo "== windows: tests skipped under wine that are not in wine_skips (set HEAPTRACE_ALLOW_SKIP=1 to accept):$bad"
        return 1
    fi
}

step "install mingw-w64 and wine" install_pkgs
step "deps (libuv, cJSON, zstd from Debian sources)" scripts/win-deps.sh "$build/deps"
step "configure + build" configure_build
step "imports" check_imports
step "wine prefix" wine_prefix
step "ctest under wine" run_tests
wine_cleanup
trap - EXIT
echo "== windows: all tests passed"
