# Where the eBPF probes sit (issue 21 item 0): every allocator probe on an
# instruction the kernel emulates, as status reports it at attach, checked
# against objdump's disassembly of the installed library (an independent
# decoder). Sourced by run.sh; uses cases-bpf.sh's helpers.

# The first instruction at file address $2 of ELF $1, as objdump prints it
# ("mnemonic operands").
probes_insn_at() {
    objdump -d --no-show-raw-insn --start-address="$2" --stop-address=$(($2 + 16)) "$1" |
        awk -F'\t' '/^ *[0-9a-f]+:\t/ { print $2; exit }'
}

# Whether the kernel emulates the instruction objdump printed
# (arch/x86/kernel/uprobes.c: push_setup_xol_ops, branch_setup_xol_ops):
# push of a register, a direct jmp, jcc or call, a one-byte nop.
probes_emulated_insn() {
    case "$1" in
    "push   %"*) return 0 ;;
    "jmp    *"* | "call   *"*) return 1 ;;
    j[a-z]*" "[0-9a-f]* | "call   "[0-9a-f]*) return 0 ;;
    nop | "xchg   %ax,%ax") return 0 ;;
    esac
    return 1
}

# Attach to target $1 as session $2, check every probe status lists; prints the
# "module function" pairs it saw to $T/seen.
probes_check_target() {
    HT_BPF_TARGET=$1
    rm -f "$T/in" "$T/target.out"
    bpf_spawn
    ctl start --source bpf --pid "$BPF_TPID" --name "$2" >"$T/start.out" 2>&1 || fail "start --pid: $(cat "$T/start.out")"
    ctl --json status "$2" >"$T/status.json" || fail "status"
    local n i fn mod off site why addr insn stepped=0
    n=$(jget source_status.probes.# <"$T/status.json")
    [ "$n" -gt 0 ] || fail "no probes in status"
    for i in $(seq 0 $((n - 1))); do
        fn=$(jget "source_status.probes.$i.function" <"$T/status.json")
        mod=$(jget "source_status.probes.$i.module" <"$T/status.json")
        off=$(jget "source_status.probes.$i.probe_offset" <"$T/status.json")
        site=$(jget "source_status.probes.$i.site" <"$T/status.json")
        addr=$(nm -D --defined-only "$mod" | awk -v f="$fn" '$3 == f || index($3, f "@@") == 1 { print "0x" $1; exit }')
        [ -n "$addr" ] || fail "$fn not in $mod"
        insn=$(probes_insn_at "$mod" $((addr + off)))
        echo "$mod $fn +$off $site: $insn"
        echo "$(basename "$mod") $fn" >>"$T/seen"
        if [ "$site" != emulated ]; then
            stepped=$((stepped + 1))
            why=$(jget "source_status.probes.$i.why" <"$T/status.json")
            # glibc 2.36's reallocarray multiplies its arguments before its
            # first branch: no site keeps them (test-bpf-prologue.installed_libc).
            [ -n "$why" ] || fail "$fn: single-stepped without why"
            # Hints (strdup, mremap: not allocators, entry only, --stacks fp)
            # may have no site: mremap's wrapper starts with sub $0x58,%rsp.
            [ "$(jget "source_status.probes.$i.as" <"$T/status.json")" = hint ] && continue
            case "$(basename "$mod") $fn $off" in
            "libc.so.6 reallocarray 0") ;;
            *) fail "$fn in $mod at +$off is $site ($why): $insn" ;;
            esac
            continue
        fi
        probes_emulated_insn "$insn" || fail "$fn in $mod at +$off: status says emulated, objdump: $insn"
    done
    eq "$(jget source_status.probes_single_stepped <"$T/status.json")" "$stepped" "single-stepped count"
    eq "$(jget source_status.probes_emulated <"$T/status.json")" $((n - stepped)) "emulated count"
    # The table says it too, with each single-stepped probe and why.
    ctl status "$2" >"$T/status.txt" || fail "status (table)"
    grep -q "^  probes  *$((n - stepped)) emulated, $stepped single-stepped$" "$T/status.txt" ||
        fail "status table: $(grep probes "$T/status.txt")"
    [ "$(grep -c ", single-stepped: " "$T/status.txt")" = "$stepped" ] || fail "single-stepped lines"
    ctl stop "$2" >/dev/null || fail "stop"
    echo x >&7
    exec 7>&-
    wait "$BPF_TPID"
}

case_probe_sites_emulated() {
    start_daemon
    bpf_need
    command -v objdump >/dev/null || fail "no objdump (binutils)"
    local dir
    dir=$(dirname "$(bpf_target)")
    [ -x "$dir/bpf-target-je" ] || {
        echo "skip: no bpf-target-je (libjemalloc-dev)"
        exit 77
    }
    probes_check_target "$dir/bpf-target" glibc
    probes_check_target "$dir/bpf-target-je" je
    # Both allocators' entry points were among them.
    for p in "libc.so.6 malloc" "libc.so.6 free" "libc.so.6 aligned_alloc" "libjemalloc.so.2 malloc" \
        "libjemalloc.so.2 free" "libjemalloc.so.2 calloc" "libjemalloc.so.2 _Znwm"; do
        grep -qx "$p" "$T/seen" || fail "no probe on $p"
    done
    stop_clean
}

# Issue 21 item 5: the per-thread map. bpf-threads (tests/unit/bpf/bpf-threads.c)
# holds N threads inside its own valloc at once.
threads_spawn() {
    local bin
    bin=$(dirname "$(bpf_target)")/bpf-threads
    [ -x "$bin" ] || fail "no bpf-threads at $bin"
    mkfifo "$T/in"
    "$bin" "$@" <"$T/in" >"$T/target.out" &
    BPF_TPID=$!
    exec 7>"$T/in"
    bpf_wait_line ready
}

# Run N threads traced as session s: the valloc calls counted (the rows
# whose frame is thread_main), into $T/stacks.json and $T/status.json.
# Frame-pointer stacks: 9000 threads allocating at once overflow the 16 MiB
# kernel ring with the default's 8 KiB DWARF copies (~1,900 records; counted
# as lost), and these cases are about the thread map, not stacks.
threads_run() {
    threads_spawn "$@"
    ctl start --source bpf --pid "$BPF_TPID" --name s --stacks fp >"$T/start.out" 2>&1 || fail "start --pid: $(cat "$T/start.out")"
    echo go >&7
    for _ in $(seq 600); do
        grep -q "done\|only" "$T/target.out" && break
        sleep 0.05
    done
    grep -q done "$T/target.out" || fail "target: $(cat "$T/target.out")"
    # The consumer polls every 10 ms: wait until the count stays put (and is not the nothing
    # of a daemon that has not started on the burst yet: under ASan the first 0.4 s may be).
    local a b=
    for _ in $(seq 150); do
        sleep 0.2
        ctl --json stacks s --by frame >"$T/stacks.json" || fail "stacks"
        a=$(bpf_frame_row '!thread_main')
        [ "$a" = "$b" ] && [ "${a%% *}" != 0 ] && break
        b=$a
    done
    ctl --json status s >"$T/status.json" || fail "status"
    echo x >&7
    exec 7>&-
    wait "$BPF_TPID"
}

# More threads inside an allocator call at once than the old LRU map held
# (8192): every allocation is there (main: ~800 of 9000 vanished, and the
# reply said complete, lost 0).
case_thread_map_many_threads() {
    start_daemon
    bpf_need
    local n=9000 row
    threads_run $n
    row=$(bpf_frame_row '!thread_main')
    eq "${row%% *}" $n "valloc calls counted of $n threads"
    eq "$(jget quality.lost <"$T/stacks.json")" 0 "lost"
    eq "$(jget source_status.thread_map_full <"$T/status.json")" 0 "thread_map_full"
    [ "$(jget source_status.thread_map_entries <"$T/status.json")" -ge $n ] || fail "thread map smaller than $n"
    stop_clean
}

# With a map smaller than the threads (the test knob), every allocation that
# found no room is counted lost, under its own name and in every reply's
# quality.lost (main had no such count: the returns were dropped silently).
case_thread_map_full_counted() {
    HEAPTRACED_TEST_THREAD_MAP=16 start_daemon
    bpf_need
    local n=200 row counted full lost
    threads_run $n
    row=$(bpf_frame_row '!thread_main')
    counted=${row%% *}
    full=$(jget source_status.thread_map_full <"$T/status.json")
    lost=$(jget quality.lost <"$T/stacks.json")
    echo "counted $counted, thread_map_full $full, lost $lost"
    eq "$(jget source_status.thread_map_entries <"$T/status.json")" 16 "thread map entries"
    [ "$full" -ge $((n - 16)) ] || fail "thread_map_full $full, expected at least $((n - 16))"
    eq $((counted + full)) $n "counted + thread_map_full"
    [ "$lost" -ge "$full" ] || fail "lost $lost < thread_map_full $full"
    stop_clean
}

# A preload named by a symlink (Debian's libtcmalloc_minimal.so.4 ->
# .so.4.5.10, what the maps show): its malloc is the one probed, on an
# emulated site (main probed libc's, which the target never calls).
case_probe_sites_preload_symlink() {
    start_daemon
    bpf_need
    local tc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
    [ -L "$tc" ] || {
        echo "skip: no $tc symlink (libtcmalloc-minimal4)"
        exit 77
    }
    mkfifo "$T/in"
    LD_PRELOAD=$tc "$(bpf_target)" <"$T/in" >"$T/target.out" &
    BPF_TPID=$!
    exec 7>"$T/in"
    bpf_wait_line ready
    ctl start --source bpf --pid "$BPF_TPID" --name tc >"$T/start.out" 2>&1 || fail "start --pid: $(cat "$T/start.out")"
    ctl --json status tc >"$T/status.json" || fail "status"
    local n i fn mod malloc_mod=
    n=$(jget source_status.probes.# <"$T/status.json")
    for i in $(seq 0 $((n - 1))); do
        fn=$(jget "source_status.probes.$i.function" <"$T/status.json")
        mod=$(jget "source_status.probes.$i.module" <"$T/status.json")
        case "$fn" in
        malloc | free)
            case "$mod" in *libtcmalloc_minimal.so.4*) ;; *) fail "$fn probed in $mod, not tcmalloc" ;; esac
            eq "$(jget "source_status.probes.$i.site" <"$T/status.json")" emulated "$fn site"
            malloc_mod=$mod ;;
        esac
    done
    [ -n "$malloc_mod" ] || fail "no malloc probe"
    echo go >&7
    bpf_wait_line done
    echo x >&7
    exec 7>&-
    wait "$BPF_TPID"
    stop_clean
}

# Threads that ended give their room back (the map keeps live threads only):
# 200 threads one after the other through a map of 16 lose nothing.
case_thread_map_reused() {
    HEAPTRACED_TEST_THREAD_MAP=16 start_daemon
    bpf_need
    local n=200 row
    threads_run $n seq
    row=$(bpf_frame_row '!thread_main')
    eq "${row%% *}" $n "valloc calls counted of $n threads in turn"
    eq "$(jget source_status.thread_map_full <"$T/status.json")" 0 "thread_map_full"
    eq "$(jget quality.lost <"$T/stacks.json")" 0 "lost"
    stop_clean
}
