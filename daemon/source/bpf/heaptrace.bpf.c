// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel side of the eBPF source: uprobes/uretprobes on the allocator
 * entry points, mmap-family syscall tracepoints, records into one ring
 * buffer (heaptrace-bpf.h). docs/linux.md#facts-and-measurements-behind-the-ebpf-source
 * explains the
 * choices: stacks taken at the return probe, inline and variable-size;
 * nested allocator calls counted once through a per-thread depth stack;
 * wakeups only past a quarter of the ring.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "heaptrace-bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by the loader before load. */
const volatile __u32 target_tgid = 0;
const volatile __u32 stack_mode = HB_STACKS_FP;
const volatile __u64 wake_bytes = 4 << 20; /* a quarter of the ring */
/* Every program returns at once: the bare cost of the probes (benchmarks). */
const volatile __u32 probe_floor = 0;
/* The target's [uprobes] page, where return probes' trampoline lives: set
 * by the consumer once the page appears (the first probe hit maps it). */
volatile __u64 tramp_lo = 0, tramp_hi = 0;
/* Set by the tracer before it detaches (tracer.c): the links go one by
 * one while the target runs, so without it a stop took the frees of blocks
 * whose malloc probe was already gone (thousands of unknown frees) or,
 * detached the other way round, allocations whose free went unseen. From
 * here on every program takes nothing: the trace ends at one instant. */
volatile __u32 detaching = 0;

/* Nested allocator calls kept per thread (realloc -> malloc, new -> malloc). */
#define DEPTH_MAX 8

struct frame {
    __u64 args[3];
    __u64 sp; /* at entry: a later entry at or above it means this call was left */
    __u32 fn;
    __u32 pad;
};

struct thread_state {
    __u32 depth;
    __u32 pad;
    struct frame frames[DEPTH_MAX];
    /* Entry of a hint function (HB_FN_HINT): its stack pointer, return
     * address and the caller's frame pointer; used by the next outermost
     * allocation made within it, then cleared. */
    __u64 hint_sp, hint_ra, hint_bp;
};

/* An allocation at most this far below a hint function's entry was made
 * within it. */
#define HINT_REACH 4096

struct sys_state {
    __u64 id;
    __u64 args[5];
};

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 16 << 20);
} events SEC(".maps");

/* Per thread of the target, removed when the thread exits (ht_thread_exit).
 * Not an LRU: an LRU evicts the state of a thread inside an allocator call
 * once more threads than entries live, and its return then vanished
 * uncounted. The loader sizes both maps for every thread the kernel allows
 * (attach.c); an entry that still finds no room is counted as lost
 * (HB_CNT_THREAD_FULL, HB_CNT_SYSCALL_FULL). Allocated as threads come
 * (BPF_F_NO_PREALLOC): the size is a cap, not memory. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 8192);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, __u32);
    __type(value, struct thread_state);
} threads SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 8192);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, __u32);
    __type(value, struct sys_state);
} syscalls SEC(".maps");

/* Per CPU, indexed by HB_CNT_* (heaptrace-bpf.h). */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, HB_CNT_COUNT);
    __type(key, __u32);
    __type(value, __u64);
} drops SEC(".maps");

struct scratch {
    struct hb_rec rec;
    union {
        __u64 frames[HB_MAX_FRAMES];
        struct {
            struct hb_regs regs;
            __u8 stack[HB_STACK_COPY];
        } dw;
    };
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct scratch);
} scratch_buf SEC(".maps");

/* An all-zero thread state to insert. */
static const struct thread_state zero_state;

static __always_inline int is_target(void)
{
    return !probe_floor && !detaching && (bpf_get_current_pid_tgid() >> 32) == target_tgid;
}

static __always_inline struct scratch *scratch_get(void)
{
    __u32 zero = 0;
    return bpf_map_lookup_elem(&scratch_buf, &zero);
}

static __always_inline void counter_add(__u32 k)
{
    __u64 *n = bpf_map_lookup_elem(&drops, &k);
    if (n)
        *n += 1;
}

static __always_inline void drop_count(void)
{
    counter_add(HB_CNT_RING);
}

static __always_inline void rec_init(struct hb_rec *r, __u16 kind)
{
    __builtin_memset(r, 0, sizeof(*r));
    r->t = bpf_ktime_get_ns();
    r->tid = (__u32)bpf_get_current_pid_tgid();
    r->kind = kind;
}

/* Hand size bytes of s to the ring; wake the consumer only past wake_bytes
 * (it polls every 10 ms otherwise: docs/linux.md#ring-buffer-and-event-rates). */
static __always_inline void rec_submit(struct scratch *s, __u64 size)
{
    __u64 flags = BPF_RB_NO_WAKEUP;
    if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > wake_bytes)
        flags = BPF_RB_FORCE_WAKEUP;
    if (size > sizeof(*s))
        size = sizeof(*s);
    if (bpf_ringbuf_output(&events, s, size, flags))
        drop_count();
}

/* The user stack by frame pointers from ip and bp, one 16-byte read per
 * frame. Done here rather than with bpf_get_stack(BPF_F_USER_STACK): the
 * perf callchain costs ~8 us more per event on these hosts (18.3 against
 * 26.9 us per malloc+free pair, tests/unit/bpf/measure.sh), for the same
 * frames. */
static __noinline __u64 stack_fp(__u64 ip, __u64 leaf_sp, __u64 bp, struct scratch *s)
{
    __u32 n = 1;
    int first = 1;
    s->frames[0] = ip;
    /* A leaf without a frame of its own (glibc's mmap and mprotect wrappers
     * make the syscall without touching the stack): its return address is
     * at sp, and the chain from bp starts at its caller's caller. */
    __u64 ra = 0;
    if (leaf_sp && bpf_probe_read_user(&ra, sizeof(ra), (void *)leaf_sp) == 0 && ra) {
        s->frames[1] = ra;
        n = 2;
        first = 2;
    }
    for (int i = first; i < HB_MAX_FRAMES; i++) {
        __u64 fr[2]; /* saved bp, return address */
        if (bp == 0 || bpf_probe_read_user(fr, sizeof(fr), (void *)bp) || fr[1] == 0)
            break;
        s->frames[i] = fr[1];
        n = i + 1;
        if (fr[0] <= bp) /* a frame chain goes up the stack */
            break;
        bp = fr[0];
    }
    s->rec.nframes = n;
    if (n == HB_MAX_FRAMES)
        s->rec.flags |= HB_F_TRUNCATED;
    return (__u64)n * 8;
}

/* Bytes from sp to the k-th page boundary below sp + HB_STACK_COPY (0 when
 * that boundary is at or below sp), bounded for the verifier. */
static __always_inline __u64 page_len(__u64 sp, int k)
{
    __u64 end = ((sp + HB_STACK_COPY) & ~4095ull) - (__u64)k * 4096;
    __u64 l = end > sp ? end - sp : 0;
    asm volatile("%0 &= 16383" : "+r"(l)); /* HB_STACK_COPY * 2 - 1 */
    if (l > HB_STACK_COPY)
        l = 0;
    return l;
}

/* Registers and the top of the user stack, for unwinding in user space. */
static __always_inline __u64 stack_dwarf(struct pt_regs *regs, struct scratch *s)
{
    struct hb_regs *r = &s->dw.regs;
    __u64 sp = regs->sp;
    r->r[0] = regs->ax;
    r->r[1] = regs->dx;
    r->r[2] = regs->cx;
    r->r[3] = regs->bx;
    r->r[4] = regs->si;
    r->r[5] = regs->di;
    r->r[6] = regs->bp;
    r->r[7] = sp;
    r->r[8] = regs->r8;
    r->r[9] = regs->r9;
    r->r[10] = regs->r10;
    r->r[11] = regs->r11;
    r->r[12] = regs->r12;
    r->r[13] = regs->r13;
    r->r[14] = regs->r14;
    r->r[15] = regs->r15;
    r->r[16] = regs->ip;
    s->rec.flags |= HB_F_DWARF;
    /* The copy fails when it crosses the top of the stack mapping (the main
     * thread runs within a few KiB of it: main's caller's frames are right
     * below the environment strings): retry up to each page boundary below,
     * so the copy ends exactly where the mapping does. */
    __u64 len = HB_STACK_COPY;
    if (bpf_probe_read_user(s->dw.stack, HB_STACK_COPY, (void *)sp)) {
        len = 0;
        for (int k = 0; k < HB_STACK_COPY / 4096 + 1; k++) {
            __u64 l = page_len(sp, k);
            if (l == 0)
                break;
            if (bpf_probe_read_user(s->dw.stack, l, (void *)sp) == 0) {
                len = l;
                break;
            }
        }
    }
    s->rec.stack_len = len;
    return sizeof(struct hb_regs) + len;
}

/* The user registers of a syscall, copied for stack_dwarf. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct pt_regs);
} regs_copy SEC(".maps");

static __always_inline __u64 sys_stack_dwarf(struct pt_regs *uregs, struct scratch *s)
{
    __u32 zero = 0;
    struct pt_regs *r = bpf_map_lookup_elem(&regs_copy, &zero);
    if (!r || bpf_probe_read_kernel(r, sizeof(*r), uregs))
        return 0;
    return stack_dwarf(r, s);
}

static __always_inline __u64 stack_take(struct pt_regs *regs, struct scratch *s)
{
    if (stack_mode == HB_STACKS_FP)
        return stack_fp(regs->ip, 0, regs->bp, s);
    if (stack_mode == HB_STACKS_DWARF)
        return stack_dwarf(regs, s);
    return 0;
}

static __always_inline struct thread_state *thread_get(__u32 tid, int create)
{
    struct thread_state *ts = bpf_map_lookup_elem(&threads, &tid);
    if (ts || !create)
        return ts;
    bpf_map_update_elem(&threads, &tid, &zero_state, BPF_NOEXIST);
    return bpf_map_lookup_elem(&threads, &tid);
}

/* An index into the depth stack the verifier can see bounded: clang drops a
 * plain mask after a range check and reuses the unmasked register. */
static __always_inline __u64 slot(__u64 d)
{
    asm volatile("%0 &= 7" : "+r"(d));
    return d;
}

/* Is the return address at sp the return probes' trampoline (a tail call
 * from a probed function)? Unknown until the consumer found the
 * trampoline's page (~10 ms after the first hit): meanwhile a tail call
 * counts as leaving the pending frame, which keeps the counts right but
 * starts that event's stack inside the allocator (operator new[] -> new). */
static __always_inline int chained_at(__u64 sp)
{
    __u64 ra = 0;
    if (!tramp_hi || bpf_probe_read_user(&ra, sizeof(ra), (void *)sp))
        return 0;
    return ra >= tramp_lo && ra < tramp_hi;
}

/* Calls left without a return (an exception through operator new, a
 * longjmp) would hold the depth up forever and silence the thread: an entry
 * whose stack pointer is above a pending frame's was made after that frame
 * was left (a nested call runs below it). At the same stack pointer it is
 * either a tail call (operator new[] jumping to operator new: the return
 * address there is the return probe's trampoline, chained) or a new call
 * after the frame was left. */
static __always_inline __u32 depth_live(struct thread_state *ts, __u64 sp, int may_chain)
{
    __u32 d = ts->depth;
#pragma unroll
    for (int i = 0; i < DEPTH_MAX; i++) {
        if (d == 0 || d > DEPTH_MAX)
            break;
        __u64 fsp = ts->frames[slot(d - 1)].sp;
        /* The return address is read only here: a user read costs ~0.1 us,
         * and most calls have no pending frame at their sp. */
        if (fsp > sp || (fsp == sp && may_chain && chained_at(sp)))
            break;
        d--;
    }
    ts->depth = d;
    return d;
}

/* The live depth of the thread at sp (may_chain: ask chained_at). */
static __always_inline __u32 thread_depth(__u64 sp, int may_chain)
{
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    struct thread_state *ts = bpf_map_lookup_elem(&threads, &tid);
    if (!ts)
        return 0;
    return depth_live(ts, sp, may_chain);
}

/* Entry of an allocating function: remember its arguments (the cookie says
 * which function) on the thread's depth stack. */
SEC("uprobe")
int BPF_KPROBE(ht_enter, __u64 a0, __u64 a1, __u64 a2)
{
    if (!is_target())
        return 0;
    struct thread_state *ts = thread_get((__u32)bpf_get_current_pid_tgid(), 1);
    if (!ts) {
        counter_add(HB_CNT_THREAD_FULL); /* this call's allocation is lost */
        return 0;
    }
    __u64 sp = PT_REGS_SP(ctx);
    __u32 d = depth_live(ts, sp, 1);
    if (d < DEPTH_MAX) {
        struct frame *f = &ts->frames[slot(d)];
        f->sp = sp;
        f->fn = (__u32)bpf_get_attach_cookie(ctx);
        f->args[0] = a0;
        f->args[1] = a1;
        f->args[2] = a2;
    }
    ts->depth = d + 1;
    return 0;
}

/* Return of an allocating function: only the outermost call of the thread
 * emits, with the stack taken here, where the IP is the caller's return
 * address (docs/linux.md#stacks). */
SEC("uretprobe")
int BPF_KRETPROBE(ht_return, __u64 ret)
{
    if (!is_target())
        return 0;
    struct thread_state *ts = thread_get((__u32)bpf_get_current_pid_tgid(), 0);
    if (!ts || ts->depth == 0) {
        counter_add(HB_CNT_NO_ENTRY); /* entered before we attached, or no room at entry */
        return 0;
    }
    __u32 d = ts->depth - 1;
    ts->depth = d;
    if (d != 0)
        return 0;
    struct scratch *s = scratch_get();
    if (!s)
        return 0;
    struct frame *f = &ts->frames[0];
    rec_init(&s->rec, HB_REC_ALLOC);
    s->rec.fn = f->fn;
    s->rec.args[0] = f->args[0];
    s->rec.args[1] = f->args[1];
    s->rec.args[2] = f->args[2];
    s->rec.ret = ret;
    if (f->fn == HB_FN_POSIX_MEMALIGN && ret == 0) {
        __u64 p = 0;
        bpf_probe_read_user(&p, sizeof(p), (void *)f->args[0]);
        s->rec.args[3] = p;
    }
    __u64 extra;
    __u64 sp = PT_REGS_SP(ctx);
    if (stack_mode == HB_STACKS_FP && ts->hint_sp > sp && ts->hint_sp - sp < HINT_REACH)
        /* Made within strdup or operator new, code without frame pointers:
         * the stack as it was at their entry, from their caller on. */
        extra = stack_fp(ts->hint_ra, 0, ts->hint_bp, s);
    else
        extra = stack_take(ctx, s);
    ts->hint_sp = 0;
    rec_submit(s, sizeof(struct hb_rec) + extra);
    return 0;
}

/* Entry of a function that allocates through malloc and has no frame
 * pointer (libstdc++'s operator new, strdup): the return address is at sp
 * and bp is still the caller's. The outermost hint of a nest is kept. */
SEC("uprobe")
int BPF_KPROBE(ht_hint)
{
    if (!is_target())
        return 0;
    struct thread_state *ts = thread_get((__u32)bpf_get_current_pid_tgid(), 1);
    if (!ts) {
        counter_add(HB_CNT_HINT_FULL); /* a stack may start inside strdup or new */
        return 0;
    }
    __u64 sp = PT_REGS_SP(ctx), ra = 0;
    if (ts->hint_sp > sp && ts->hint_sp - sp < HINT_REACH)
        return 0;
    if (bpf_probe_read_user(&ra, sizeof(ra), (void *)sp))
        return 0;
    ts->hint_sp = sp;
    ts->hint_ra = ra;
    ts->hint_bp = PT_REGS_FP(ctx);
    return 0;
}

/* free and operator delete: entry only. A free made inside another
 * allocator call (realloc(p, 0)) is that call's business. */
SEC("uprobe")
int BPF_KPROBE(ht_free, __u64 p)
{
    if (!is_target() || p == 0)
        return 0;
    __u64 sp = PT_REGS_SP(ctx);
    if (thread_depth(sp, 1) != 0)
        return 0;
    struct hb_rec r;
    rec_init(&r, HB_REC_FREE);
    r.fn = HB_FN_FREE;
    r.args[0] = p;
    __u64 flags = BPF_RB_NO_WAKEUP;
    if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > wake_bytes)
        flags = BPF_RB_FORCE_WAKEUP;
    if (bpf_ringbuf_output(&events, &r, sizeof(r), flags))
        drop_count();
    return 0;
}

/* The target replaced its program (execve, from any of its threads: the
 * TGID stays): the heap and mappings the trace knows are gone, and the
 * probes may no longer cover its allocator. Always woken: the consumer ends
 * the trace at once. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(ht_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
    if (!is_target())
        return 0;
    struct hb_rec r;
    rec_init(&r, HB_REC_EXEC);
    if (bpf_ringbuf_output(&events, &r, sizeof(r), BPF_RB_FORCE_WAKEUP))
        drop_count();
    return 0;
}

/* A thread of the target ends: its states go, so the maps hold only live
 * threads (a later thread reusing the id starts afresh). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(ht_thread_exit, struct task_struct *p)
{
    if ((bpf_get_current_pid_tgid() >> 32) != target_tgid)
        return 0;
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    bpf_map_delete_elem(&threads, &tid);
    bpf_map_delete_elem(&syscalls, &tid);
    return 0;
}

/* Syscalls: x86-64 numbers (arch/x86/entry/syscalls/syscall_64.tbl). */
#define NR_MMAP 9
#define NR_MPROTECT 10
#define NR_MUNMAP 11
#define NR_BRK 12
#define NR_MREMAP 25

static __always_inline void sys_enter(__u64 id, const __u64 *a)
{
    if (!is_target())
        return;
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    struct sys_state st = {.id = id};
    st.args[0] = a[0];
    st.args[1] = a[1];
    st.args[2] = a[2];
    st.args[3] = a[3];
    st.args[4] = a[4];
    if (bpf_map_update_elem(&syscalls, &tid, &st, BPF_ANY))
        counter_add(HB_CNT_SYSCALL_FULL); /* this mapping change is lost */
}

static __always_inline __u16 sys_kind(__u64 id)
{
    switch (id) {
    case NR_MMAP:
        return HB_REC_MMAP;
    case NR_MUNMAP:
        return HB_REC_MUNMAP;
    case NR_MREMAP:
        return HB_REC_MREMAP;
    case NR_MPROTECT:
        return HB_REC_MPROTECT;
    case NR_BRK:
        return HB_REC_BRK;
    }
    return 0;
}

/* The frame-pointer stack of a syscall. glibc's mremap has a stack frame
 * but no frame pointer: its caller's return address is found through the
 * hint probe on its entry (ht_hint), taken here and cleared. */
static __always_inline __u64 sys_stack_fp(__u64 id, struct pt_regs *uregs, struct scratch *s)
{
    __u64 sp = BPF_CORE_READ(uregs, sp);
    if (id == NR_MREMAP) {
        __u32 tid = (__u32)bpf_get_current_pid_tgid();
        struct thread_state *ts = bpf_map_lookup_elem(&threads, &tid);
        if (ts && ts->hint_sp > sp && ts->hint_sp - sp < HINT_REACH) {
            __u64 ra = ts->hint_ra, bp = ts->hint_bp;
            ts->hint_sp = 0;
            return stack_fp(ra, 0, bp, s);
        }
        return stack_fp(BPF_CORE_READ(uregs, ip), 0, BPF_CORE_READ(uregs, bp), s);
    }
    return stack_fp(BPF_CORE_READ(uregs, ip), sp, BPF_CORE_READ(uregs, bp), s);
}

static __always_inline void sys_exit(void *ctx, __u64 id, long ret)
{
    if (!is_target())
        return;
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    struct sys_state *st = bpf_map_lookup_elem(&syscalls, &tid);
    if (!st)
        return;
    if (st->id != id) {
        bpf_map_delete_elem(&syscalls, &tid);
        return;
    }
    struct scratch *s = scratch_get();
    if (!s) {
        bpf_map_delete_elem(&syscalls, &tid);
        return;
    }
    rec_init(&s->rec, sys_kind(id));
    s->rec.args[0] = st->args[0];
    s->rec.args[1] = st->args[1];
    s->rec.args[2] = st->args[2];
    s->rec.args[3] = st->args[3];
    s->rec.args[4] = st->args[4];
    s->rec.ret = ret;
    bpf_map_delete_elem(&syscalls, &tid);
    /* A syscall runs below any allocator frame it is inside: the user sp. */
    struct pt_regs *uregs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
    if (thread_depth(BPF_CORE_READ(uregs, sp), 0) != 0)
        s->rec.flags |= HB_F_IN_ALLOC;
    __u64 extra = 0;
    /* A mapping made outside the allocator may be a commit: keep its stack. */
    if (!(s->rec.flags & HB_F_IN_ALLOC) &&
        (id == NR_MMAP || id == NR_MREMAP || id == NR_MPROTECT)) {
        if (stack_mode == HB_STACKS_FP)
            extra = sys_stack_fp(id, uregs, s);
        else if (stack_mode == HB_STACKS_DWARF)
            extra = sys_stack_dwarf(uregs, s);
    }
    rec_submit(s, sizeof(struct hb_rec) + extra);
}

/* Per-syscall tracepoints (tracefs mounted): only the five syscalls run a
 * program. Each reads only the arguments its syscall has: the kernel refuses
 * (EACCES) a program reading past the tracepoint's record. */
#define SYS_TP(name, nr, nargs)                                                                    \
    SEC("tracepoint/syscalls/sys_enter_" #name)                                                    \
    int ht_enter_##name(struct trace_event_raw_sys_enter *ctx)                                     \
    {                                                                                              \
        __u64 a[5] = {};                                                                           \
        a[0] = ctx->args[0];                                                                       \
        if (nargs > 1)                                                                             \
            a[1] = ctx->args[1];                                                                   \
        if (nargs > 2)                                                                             \
            a[2] = ctx->args[2];                                                                   \
        if (nargs > 3)                                                                             \
            a[3] = ctx->args[3];                                                                   \
        if (nargs > 4)                                                                             \
            a[4] = ctx->args[4];                                                                   \
        sys_enter(nr, a);                                                                          \
        return 0;                                                                                  \
    }                                                                                              \
    SEC("tracepoint/syscalls/sys_exit_" #name)                                                     \
    int ht_exit_##name(struct trace_event_raw_sys_exit *ctx)                                       \
    {                                                                                              \
        sys_exit(ctx, nr, ctx->ret);                                                               \
        return 0;                                                                                  \
    }

SYS_TP(mmap, NR_MMAP, 5)
SYS_TP(munmap, NR_MUNMAP, 2)
SYS_TP(mremap, NR_MREMAP, 5)
SYS_TP(mprotect, NR_MPROTECT, 3)
SYS_TP(brk, NR_BRK, 1)

/* Fallback without tracefs: the raw syscall hooks by BTF (every syscall of
 * the system runs the tgid filter: ~37 ns each here, docs/linux.md#build-and-attach). */
SEC("tp_btf/sys_enter")
int BPF_PROG(ht_sys_enter_btf, struct pt_regs *regs, long id)
{
    if (!sys_kind(id) || !is_target())
        return 0;
    __u64 a[5];
    a[0] = regs->di;
    a[1] = regs->si;
    a[2] = regs->dx;
    a[3] = regs->r10;
    a[4] = regs->r8;
    sys_enter(id, a);
    return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(ht_sys_exit_btf, struct pt_regs *regs, long ret)
{
    __u64 id = regs->orig_ax;
    if (!sys_kind(id) || !is_target())
        return 0;
    sys_exit(ctx, id, ret);
    return 0;
}
