/*
 * The agent's writer: records into the shared ring, stacks into the shared
 * table (agent-ring.h). Lock-free: a record is reserved with a CAS on head
 * and published by its seq; a stack entry is claimed with a CAS on its hash
 * and published by its state. A full ring or table drops and counts, never
 * waits: the target must not slow down because the daemon is slow.
 */
#define _GNU_SOURCE
#include "agent-int.h"
#include "stack-cache.h"
#include "unwind-fast.h"

/* Local unwinding only: the fast path of libunwind (libunwind(3)). */
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

AGENT_HIDDEN __thread struct agent_thread agent_self AGENT_TLS;
AGENT_HIDDEN int agent_on;

static struct hta_header *ring_hdr;
static struct hta_rec *ring_recs;
static struct hta_stack *ring_stacks;
static enum agent_stacks stack_mode;
static unsigned stack_depth = HTA_DEPTH;
static uintptr_t self_lo, self_hi;
static uint64_t tail_seen; /* the daemon's tail as last read */
static int use_tsc;        /* records stamped with rdtsc (HTA_CLOCK_TSC) */
static uint32_t ring_epoch; /* rings mapped: stack ids are a ring's (stack-cache.h tag) */

/* rdtsc takes a third of clock_gettime's time here, where the vDSO reads
 * the TSC itself. Only when the kernel's clocksource is tsc (agent-ring.h
 * HTA_CLOCK_TSC) and this process may run rdtsc (prctl(2) PR_GET_TSC).
 * Read once, at start: a fork child's agent_map finds it known. */
static int tsc_usable(void)
{
#if defined(__x86_64__)
    static int known, ok;
    if (known)
        return ok;
    known = 1;
    int mode = 0;
    if (prctl(PR_GET_TSC, &mode, 0, 0, 0) != 0 || mode != PR_TSC_ENABLE)
        return 0;
    char buf[16] = {0};
    int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                  O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    ok = n >= 3 && memcmp(buf, "tsc", 3) == 0 && (n == 3 || buf[3] == '\n');
    return ok;
#else
    return 0;
#endif
}

static uint64_t now_stamp(void)
{
#if defined(__x86_64__)
    if (use_tsc)
        return __rdtsc();
#endif
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

AGENT_HIDDEN int agent_map(void *base, enum agent_stacks stacks, unsigned depth)
{
    ring_hdr = base;
    tail_seen = 0;
    ring_epoch++;
    ring_recs = (struct hta_rec *)((char *)base + HTA_RECS_OFFSET);
    ring_stacks = (struct hta_stack *)((char *)base + HTA_STACKS_OFFSET);
    stack_mode = stacks;
    stack_depth = depth && depth < HTA_DEPTH ? depth : HTA_DEPTH;
    /* libunwind's default cache is global, behind a lock: one per thread
     * instead, and larger than the default (unw_set_caching_policy(3)). */
    if (stacks == AGENT_STACKS_DWARF) {
        unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
        unw_set_cache_size(unw_local_addr_space, 1024, 0);
        fu_init();
        sc_init();
    }
    ring_hdr->magic = HTA_MAGIC;
    ring_hdr->version = HTA_VERSION;
    ring_hdr->records = HTA_RECORDS;
    ring_hdr->stacks = HTA_STACKS;
    ring_hdr->depth = HTA_DEPTH;
    ring_hdr->pid = (uint32_t)getpid();
    use_tsc = tsc_usable();
    ring_hdr->clock = use_tsc ? HTA_CLOCK_TSC : HTA_CLOCK_MONO;
    return 0;
}

AGENT_HIDDEN void agent_self_range(uintptr_t lo, uintptr_t hi)
{
    self_lo = lo;
    self_hi = hi;
}

AGENT_HIDDEN void agent_count(enum hta_counter c)
{
    if (ring_hdr)
        __atomic_fetch_add(&ring_hdr->counters[c], 1, __ATOMIC_RELAXED);
}

static uint32_t thread_id(struct agent_thread *t)
{
    if (!t->tid)
        t->tid = (uint32_t)syscall(SYS_gettid); /* once per thread */
    return t->tid;
}

/* The thread's stack bounds, read once (pthread_getattr_np may allocate and
 * read /proc/self/maps: marked as the allocator's own, so untraced). */
static void stack_bounds(struct agent_thread *t)
{
    pthread_attr_t a;
    void *lo;
    size_t sz;
    t->stack_hi = 1; /* tried */
    t->in_alloc++;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        if (pthread_attr_getstack(&a, &lo, &sz) == 0) {
            t->stack_lo = (uintptr_t)lo;
            t->stack_hi = (uintptr_t)lo + sz;
        }
        pthread_attr_destroy(&a);
    }
    t->in_alloc--;
}

/* Frame-pointer walk (--stacks fp): right only where everything on the
 * stack keeps rbp as a frame pointer; bounded by the thread's stack so a
 * garbage rbp ends the walk instead of faulting. x86-64 and aarch64 frame
 * records are {previous fp, return address} (System V psABI, AAPCS64). */
static unsigned walk_fp(struct agent_thread *t, uint64_t *out, unsigned max)
{
    if (!t->stack_hi)
        stack_bounds(t);
    uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
    unsigned n = 0;
    while (n < max && !(fp & 7) && fp >= t->stack_lo && fp + 16 <= t->stack_hi) {
        const uintptr_t *f = (const uintptr_t *)fp;
        if (!f[1])
            break;
        out[n++] = f[1];
        if (f[0] <= fp)
            break;
        fp = f[0];
    }
    return n;
}

/* The unwinder's reentrancy guard (unwind-fast.h): its calls, like the
 * allocator's, are not the program's. */
AGENT_HIDDEN void fu_untraced(int delta)
{
    agent_self.in_alloc += delta;
}

AGENT_HIDDEN void fu_note(enum fu_event e)
{
    agent_count(e == FU_RULE_EVICTED ? HTA_CNT_RULES_EVICTED : HTA_CNT_MODULES_FULL);
}

/* Where the program called us: the first return address out of our code,
 * with the caller's stack pointer after the return and its rbp, from our
 * own frame records (the agent is built with frame pointers). */
static int agent_caller(struct agent_thread *t, uintptr_t *pc, uintptr_t *sp, uintptr_t *rbp)
{
    uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
    for (unsigned i = 0; i < 16; i++) {
        if ((fp & 7) || fp < t->stack_lo || fp + 16 > t->stack_hi)
            return -1;
        const uintptr_t *f = (const uintptr_t *)fp;
        if (f[1] < self_lo || f[1] >= self_hi) {
            *pc = f[1];
            *sp = fp + 16; /* past the saved rbp and the return address */
            *rbp = f[0];
            return 0;
        }
        if (f[0] <= fp)
            return -1;
        fp = f[0];
    }
    return -1;
}

/* Where a fast walk started and what it read (the stack cache's key). */
struct walk {
    uintptr_t pc, sp, rbp;
    uint64_t tag;
    struct fu_trace tr;
};

/* The default stacks with the cached-rule unwinder: 1 and *stack, *cut
 * from the thread's stack cache; 0 and the frames (*n) walked, w kept for
 * sc_store; -1 for libunwind. One frame more than max tells a cut stack. */
static int walk_fast(struct agent_thread *t, struct walk *w, uint64_t *out, unsigned max,
                     unsigned *n, uint32_t *stack, int *cut)
{
    if (!t->stack_hi)
        stack_bounds(t);
    if (agent_caller(t, &w->pc, &w->sp, &w->rbp))
        return -1;
    w->tag = fu_generation() << 32 | ring_epoch;
    if (sc_ready() && sc_lookup(w->pc, w->sp, w->rbp, w->tag, stack, cut))
        return 1;
    int k = fu_walk(w->pc, w->sp, w->rbp, t->stack_hi, out, max + 1, &w->tr);
    if (k < 0)
        return -1;
    *cut = (unsigned)k > max;
    *n = *cut ? max : (unsigned)k;
    return 0;
}

/* Frames of the caller, ours cut off. */
static unsigned take_frames(struct agent_thread *t, uint64_t *out, unsigned max, int *cut)
{
    uint64_t raw[HTA_DEPTH + 8];
    unsigned want = max + 8, n;
    if (stack_mode == AGENT_STACKS_FP) {
        n = walk_fp(t, raw, want);
    } else {
        int r = fu_backtrace(raw, (int)want);
        if (r <= 0) {
            agent_count(HTA_CNT_UNWIND_FAILED);
            return 0;
        }
        n = (unsigned)r;
    }
    unsigned i = 0;
    while (i < n && raw[i] >= self_lo && raw[i] < self_hi)
        i++;
    unsigned k = n - i > max ? max : n - i;
    *cut = n - i > max;
    memcpy(out, raw + i, k * sizeof(*out));
    return k;
}

static uint64_t frames_hash(const uint64_t *f, unsigned n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (unsigned i = 0; i < n; i++) {
        h ^= f[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    return h | 1; /* 0 marks a free entry */
}

/* The table id + 1 of the stack, interned now if new (0: table full). */
static uint32_t stack_intern(const uint64_t *f, unsigned n)
{
    uint64_t h = frames_hash(f, n);
    for (uint32_t i = 0; i < 64; i++) {
        uint32_t idx = (uint32_t)(h + i) & (HTA_STACKS - 1);
        struct hta_stack *e = &ring_stacks[idx];
        uint64_t cur = __atomic_load_n(&e->hash, __ATOMIC_ACQUIRE);
        if (cur == 0) {
            if (__atomic_compare_exchange_n(&e->hash, &cur, h, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
                e->depth = n;
                memcpy(e->frames, f, n * sizeof(*f));
                __atomic_store_n(&e->state, 1, __ATOMIC_RELEASE);
                return idx + 1;
            }
        }
        /* Another thread may still be writing an entry of the same hash:
         * then this stack takes another entry (interned twice, same frames). */
        if (cur == h && __atomic_load_n(&e->state, __ATOMIC_ACQUIRE) == 1 && e->depth == n &&
            memcmp(e->frames, f, n * sizeof(*f)) == 0)
            return idx + 1;
    }
    agent_count(HTA_CNT_STACKS_FULL);
    return 0;
}

static int ring_put(struct agent_thread *t, int kind, uintptr_t addr, uintptr_t old, uint64_t size,
                    uint32_t stack, int flags, uint64_t rate)
{
    uint64_t h = __atomic_load_n(&ring_hdr->head, __ATOMIC_RELAXED);
    for (;;) {
        /* The daemon's tail, read again only when the ring looks full: its
         * cache line stays put while there is room. */
        uint64_t tail = __atomic_load_n(&tail_seen, __ATOMIC_RELAXED);
        if (h - tail >= HTA_RECORDS) {
            tail = __atomic_load_n(&ring_hdr->tail, __ATOMIC_ACQUIRE);
            __atomic_store_n(&tail_seen, tail, __ATOMIC_RELAXED);
        }
        if (h - tail >= HTA_RECORDS) {
            agent_count(HTA_CNT_RING_FULL);
            return -1;
        }
        if (__atomic_compare_exchange_n(&ring_hdr->head, &h, h + 1, 1, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            break;
    }
    struct hta_rec *r = &ring_recs[h & (HTA_RECORDS - 1)];
    r->t = now_stamp();
    r->addr = addr;
    r->old_addr = old;
    r->size = size;
    r->stack = stack;
    r->tid = thread_id(t);
    r->kind = (uint8_t)kind;
    r->flags = (uint8_t)flags;
    r->rate = rate;
    __atomic_store_n(&r->seq, h + 1, __ATOMIC_RELEASE);
    return 0;
}

AGENT_HIDDEN void agent_record(int kind, uintptr_t addr, uintptr_t old, uint64_t size,
                               uint64_t rate)
{
    struct agent_thread *t = &agent_self;
    if (!__atomic_load_n(&agent_on, __ATOMIC_RELAXED))
        return;
    if (__atomic_load_n(&ring_hdr->stop, __ATOMIC_RELAXED)) {
        __atomic_store_n(&agent_on, 0, __ATOMIC_RELAXED);
        return;
    }
    uint32_t stack = 0;
    int flags = 0;
    if (kind != HTA_FREE && kind != HTA_RELEASE && kind != HTA_RATE &&
        stack_mode != AGENT_STACKS_NONE) {
        uint64_t frames[HTA_DEPTH + 1];
        struct walk w;
        int cut = 0, fast = -1;
        unsigned n = 0;
        /* The unwinders map memory for their caches (mmap) and read CFI:
         * their own calls, like the allocator's, are not the program's. */
        t->in_alloc++;
        if (stack_mode == AGENT_STACKS_DWARF)
            fast = walk_fast(t, &w, frames, stack_depth, &n, &stack, &cut);
        if (fast < 0 && stack_mode == AGENT_STACKS_DWARF)
            agent_count(HTA_CNT_UNWIND_SLOW);
        if (fast < 0)
            n = take_frames(t, frames, stack_depth, &cut);
        t->in_alloc--;
        t->in_hook = 1;
        if (fast != 1 && n)
            stack = stack_intern(frames, n);
        if (fast == 0 && stack)
            sc_store(w.pc, w.sp, w.rbp, w.tag, &w.tr, stack, cut);
        if (cut)
            flags |= HTA_F_TRUNCATED;
    }
    t->in_hook = 1;
    ring_put(t, kind, addr, old, size, stack, flags, rate);
    t->in_hook = 0;
}
