#!/usr/bin/env bash
# Cross-build heaptrace's third-party libraries for Windows (mingw-w64) from Debian's own
# source packages: libuv1, cjson and libzstd, the same versions and Debian patches as the
# native libuv1-dev, libcjson-dev and libzstd-dev. Nothing third-party is stored in the repo.
# usage: scripts/win-deps.sh DEPS_DIR        (scripts/test-windows.sh uses build-win/deps)
#   DEPS_DIR/prefix    include/, lib/ (static libuv_a, cjson, zstd) and their CMake packages
#   DEPS_DIR/apt       a private deb-src list and apt state: the system's apt configuration is
#                      not changed (docs/windows.md#cross-build)
# Cached: when DEPS_DIR/prefix/.stamp names the same source versions and compiler, nothing is
# fetched or built. Needs the mingw-w64 compiler, cmake, make and dpkg-dev (dpkg-source).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
deps=${1:?usage: $0 DEPS_DIR}
mkdir -p "$deps"
deps=$(cd "$deps" && pwd)
toolchain=$here/cmake/mingw-w64-x86_64.cmake
prefix=$deps/prefix
jobs=$(nproc 2>/dev/null || echo 2)
[ "$jobs" -gt 2 ] && jobs=2

# Private apt sources: the deb-src twin of the system's deb822 sources (same mirrors, suites
# and keyrings; apt checks the download against the signed Sources index).
srcparts=$deps/apt/sources.list.d
lists=$deps/apt/lists
apt_opts=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$srcparts"
          -o Dir::State::Lists="$lists" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=)
# A fresh Sources index: first run, or when something is to be built (a version the mirror
# no longer has cannot be fetched).
apt_update() {
    rm -rf "$deps/apt"
    mkdir -p "$srcparts" "$lists/partial"
    # apt downloads as the unprivileged _apt user.
    chmod -R 0777 "$deps/apt"
    local f found=0
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        grep -q '^Types:.*\bdeb\b' "$f" || continue
        sed -e 's/^Types:.*$/Types: deb-src/' "$f" > "$srcparts/$(basename "$f")"
        found=1
    done
    if [ "$found" = 0 ]; then
        echo "win-deps: no deb822 source (/etc/apt/sources.list.d/*.sources) to derive deb-src from" >&2
        exit 1
    fi
    apt-get "${apt_opts[@]}" update -qq
    touch "$deps/apt/updated"
}

# The highest version the Sources index lists: the cache key, and what is fetched.
srcver() {
    apt-cache "${apt_opts[@]}" showsrc "$1" | sed -n 's/^Version: //p' | sort -V | tail -1
}
cc=x86_64-w64-mingw32-gcc-win32
# Sets uvver, cjver, zsver and stamp from the index; 0 when the prefix holds that build.
versions() {
    uvver=$(srcver libuv1)
    cjver=$(srcver cjson)
    zsver=$(srcver libzstd)
    stamp="libuv1=$uvver cjson=$cjver libzstd=$zsver $cc $($cc -dumpfullversion)"
    [ -n "$uvver" ] && [ -n "$cjver" ] && [ -n "$zsver" ] &&
        [ -f "$prefix/.stamp" ] && [ "$(cat "$prefix/.stamp")" = "$stamp" ]
}
if [ -f "$deps/apt/updated" ] && versions; then
    echo "win-deps: up to date ($stamp)"
    exit 0
fi
apt_update
if versions; then
    echo "win-deps: up to date ($stamp)"
    exit 0
fi
if [ -z "$uvver" ] || [ -z "$cjver" ] || [ -z "$zsver" ]; then
    echo "win-deps: source package not found (libuv1='$uvver' cjson='$cjver' libzstd='$zsver')" >&2
    exit 1
fi

echo "win-deps: building $stamp"
rm -rf "$deps/src" "$deps/b-"* "$prefix"
mkdir -p "$deps/src"
chmod 0777 "$deps/src"
(cd "$deps/src" && apt-get "${apt_opts[@]}" source -qq "libuv1=$uvver" "cjson=$cjver" \
    "libzstd=$zsver" >/dev/null)

log=$deps/build.log
: > "$log"
# build NAME SRCDIR CMAKE_ARGS...: configure, build and install one dependency. Their own
# warnings are theirs: the project's -Werror does not reach them. The log is shown on failure.
build() {
    local name=$1 src=$2; shift 2
    if ! { cmake -S "$src" -B "$deps/b-$name" -DCMAKE_TOOLCHAIN_FILE="$toolchain" \
               -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" "$@" &&
           cmake --build "$deps/b-$name" -j"$jobs" &&
           cmake --install "$deps/b-$name"; } >>"$log" 2>&1; then
        tail -40 "$log" >&2
        echo "win-deps: $name failed (whole log: $log)" >&2
        exit 1
    fi
}
# libuv builds its DLL and the static uv_a; heaptrace links uv_a.
build libuv "$(echo "$deps"/src/libuv1-*/)" -DLIBUV_BUILD_TESTS=OFF -DLIBUV_BUILD_BENCH=OFF
# cJSON's custom flags add -fstack-protector-strong (needs -lssp on mingw) and it dllexports
# its API unless hidden: the consumer defines CJSON_HIDE_SYMBOLS too (docs/windows.md#cross-build).
build cjson "$(echo "$deps"/src/cjson-*/)" -DBUILD_SHARED_LIBS=OFF -DENABLE_CJSON_TEST=OFF \
    -DENABLE_CJSON_UTILS=OFF -DENABLE_CUSTOM_COMPILER_FLAGS=OFF -DENABLE_PUBLIC_SYMBOLS=OFF \
    -DENABLE_HIDDEN_SYMBOLS=ON
# zstd: upstream's build/cmake wants a C++ compiler too (for contrib code), so the static
# library is built with upstream's lib/Makefile instead; no assembly (its x86-64 decoder loop
# is ELF-only).
zsrc=$(echo "$deps"/src/libzstd-*/)
if ! { make -C "$zsrc/lib" -j"$jobs" libzstd.a CC=x86_64-w64-mingw32-gcc-win32 \
           AR=x86_64-w64-mingw32-ar ZSTD_NO_ASM=1 &&
       make -C "$zsrc/lib" install-static install-includes PREFIX="$prefix"; } >>"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "win-deps: zstd failed (whole log: $log)" >&2
    exit 1
fi
echo "$stamp" > "$prefix/.stamp"
echo "win-deps: done"
