#!/usr/bin/env bash
# Fails (exit 1, listing FILE:LINE) on any reference that leads outside the
# repository: the project's old design notes (never part of it) and paths of
# the machine the code was written on. A clone must read on its own: facts
# belong in docs/ or in the comment itself.
#
# ../shared/traces is allowed in tests/ and scripts/ only: real traces the CI
# places beside the clone, read as test inputs (docs/testing.md).
# scripts/check-refs.allow lists files not checked yet, one path or glob per
# line, each with a "# why" comment; it is meant to be emptied.
#
#   scripts/check-refs.sh [--self-test] [ROOT]
# ROOT defaults to this repository. A self-test (planted references in a
# throwaway repository) runs first, so a check that cannot fail fails here.
set -euo pipefail

# The design notes by name, and paths outside the tree.
pattern='(ARCHITECTURE|STYLE)\.md|etw-mechanics|linux-backend|windows-build|etl-format|\.\./shared|\.\./seeds|\.\./traces|/work/'
# Recorded data: the paths inside were written by the tool that recorded them
# (heaptrack writes the build path of each file) and are never followed.
data_paths=(':!bench/heaptrack/testdata/*.interpreted' ':!bench/heaptrack/testdata/*.raw'
            ':!tests/fuzz/corpus/*' ':!tests/data/*')

# check ROOT: prints offending FILE:LINE: TEXT lines, returns 1 when any.
check() {
    local root=$1 allow=$1/scripts/check-refs.allow
    local -a allowed=()
    if [ -f "$allow" ]; then
        local line path
        while IFS= read -r line || [ -n "$line" ]; do
            path=${line%%#*}
            path=${path//[[:space:]]/}
            [ -z "$path" ] && continue
            if [[ $line != *"#"* ]]; then
                echo "scripts/check-refs.allow: '$path' has no comment saying why" >&2
                return 1
            fi
            allowed+=("$path")
        done <"$allow"
    fi
    local hits found=0 file rest text a skip rc=0
    # git grep: the repository's own files (tracked or new), never build trees.
    hits=$(git -C "$root" grep -nIE --untracked -e "$pattern" -- . \
        ':!scripts/check-refs.sh' ':!scripts/check-refs.allow' "${data_paths[@]}") || rc=$?
    if [ "$rc" -gt 1 ]; then
        echo "check-refs: git grep failed in $root (not a git work tree?)" >&2
        return 2
    fi
    while IFS= read -r line; do
        [ -z "$line" ] && continue
        file=${line%%:*}
        rest=${line#*:}
        text=${rest#*:}
        skip=0
        for a in "${allowed[@]+"${allowed[@]}"}"; do
            # shellcheck disable=SC2053 # a glob on purpose
            [[ $file == $a ]] && skip=1 && break
        done
        [ "$skip" = 1 ] && continue
        case $file in
        tests/* | scripts/*) text=${text//..\/shared\/traces/} ;;
        esac
        if grep -qE -e "$pattern" <<<"$text"; then
            echo "$line"
            found=1
        fi
    done <<<"$hits"
    return "$found"
}

# Plants each kind of reference in a throwaway repository and checks that the
# check finds exactly the ones it must.
self_test() {
    local t rc=0 out
    t=$(mktemp -d)
    git -C "$t" init -q
    mkdir -p "$t/daemon" "$t/tests" "$t/scripts" "$t/docs" "$t/tests/data"
    printf '/* see ARCHITECTURE.md */\n' >"$t/daemon/a.c"
    printf '/* etw-mechanics.md 2.2 */\n' >"$t/daemon/b.c"
    printf 'read ../shared/traces/x.etl\n' >"$t/daemon/c.c"
    printf 'in=../shared/traces/x.etl\n' >"$t/tests/ok.sh"
    printf 'in=../shared/design/linux-backend.md\n' >"$t/tests/bad.sh"
    printf 'cd /work/main\n' >"$t/scripts/d.sh"
    printf 'See [architecture](architecture.md#data-flow).\n' >"$t/docs/ok.md"
    printf '/work/somewhere recorded\n' >"$t/tests/data/rec.htev"
    printf '/* windows-build.md */\n' >"$t/daemon/allowed.c"
    printf 'daemon/allowed.c  # being moved\n' >"$t/scripts/check-refs.allow"
    out=$(check "$t") && rc=1
    local want='daemon/a.c:1: daemon/b.c:1: daemon/c.c:1: scripts/d.sh:1: tests/bad.sh:1:'
    local got
    got=$(sed -E 's/^([^:]*:[0-9]+:).*/\1/' <<<"$out" | sort | tr '\n' ' ')
    [ "$got" = "$want " ] || rc=1
    printf 'daemon/allowed.c\n' >"$t/scripts/check-refs.allow"
    check "$t" >/dev/null 2>&1 && rc=1
    rm -rf "$t"
    if [ "$rc" != 0 ]; then
        echo "check-refs: self-test failed: found '$got', want '$want '" >&2
        return 1
    fi
}

self_only=0
if [ "${1:-}" = --self-test ]; then
    self_only=1
    shift
fi
self_test
[ "$self_only" = 1 ] && { echo "check-refs: self-test passed"; exit 0; }
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
rc=0
out=$(check "$root") || rc=$?
if [ "$rc" = 2 ]; then
    exit 2
elif [ "$rc" != 0 ]; then
    echo "$out"
    echo "check-refs: $(grep -c . <<<"$out") reference(s) outside the repository (see docs/testing.md)" >&2
    exit 1
fi
echo "check-refs: no reference outside the repository"
