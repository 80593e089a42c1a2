#!/bin/sh
# make-minidebuginfo.sh IN OUT: a stripped copy of IN whose function symbols
# live in an xz-compressed .gnu_debugdata section (MiniDebugInfo), as Fedora
# builds it (https://sourceware.org/gdb/current/onlinedocs/gdb.html/MiniDebugInfo.html).
set -e
in=$1 out=$2 tmp=$2.d
rm -rf "$tmp" && mkdir -p "$tmp"
nm -D "$in" --format=posix --defined-only | awk '{print $1}' | sort > "$tmp/dynsyms"
nm "$in" --format=posix --defined-only | awk '$2 == "T" || $2 == "t" {print $1}' | sort > "$tmp/funcsyms"
comm -13 "$tmp/dynsyms" "$tmp/funcsyms" > "$tmp/keep"
objcopy --only-keep-debug "$in" "$tmp/debug"
objcopy -S --remove-section .gdb_index --remove-section .comment --keep-symbols="$tmp/keep" \
  "$tmp/debug" "$tmp/mini"
xz -f "$tmp/mini"
strip --strip-all -R .comment -o "$tmp/out" "$in"
objcopy --add-section .gnu_debugdata="$tmp/mini.xz" "$tmp/out" "$out"
rm -rf "$tmp"
