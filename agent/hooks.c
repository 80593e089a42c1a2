/*
 * The interposed entry points: the C allocator, C++ new/delete (every
 * form), and the mapping calls for commits. Each forwards to the next
 * definition (agent_real, or dlsym(RTLD_NEXT) for the C++ ones, looked up
 * at the first call: a C program may dlopen libstdc++ later) and records
 * the outermost call of a thread only: what the real allocator calls
 * itself (operator new's malloc, jemalloc's mmap) is not the program's.
 */
#define _GNU_SOURCE
#include "agent-int.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* Enter a real allocator call: 1 when this call is the one to record. */
static int enter(void)
{
    struct agent_thread *t = &agent_self;
    if (t->in_hook) {
        if (__atomic_load_n(&agent_on, __ATOMIC_RELAXED))
            agent_count(HTA_CNT_REENTRANT);
        return 0;
    }
    return t->in_alloc++ == 0;
}

static void leave(int outer)
{
    struct agent_thread *t = &agent_self;
    if (outer || t->in_alloc)
        t->in_alloc--;
}

/* Would this call be the outer one (enter() returning 1)? Asked before it
 * is made, for what must happen while the block is still the program's. */
static int would_record(void)
{
    return !agent_self.in_hook && !agent_self.in_alloc;
}

/* Calls from inside the agent (in_hook) do not touch in_alloc: enter
 * returned 0 without counting, so leave must not uncount. */
#define CALL(outer, expr)                                                                          \
    ({                                                                                             \
        int hooked_ = !agent_self.in_hook;                                                         \
        outer = enter();                                                                           \
        __typeof__(expr) r_ = (expr);                                                              \
        if (hooked_)                                                                               \
            leave(outer);                                                                          \
        r_;                                                                                        \
    })

#define CALL_VOID(outer, expr)                                                                     \
    do {                                                                                           \
        int hooked_ = !agent_self.in_hook;                                                         \
        outer = enter();                                                                           \
        expr;                                                                                      \
        if (hooked_)                                                                               \
            leave(outer);                                                                          \
    } while (0)

EXPORT void *malloc(size_t n)
{
    if (!agent_real.malloc) {
        agent_resolve();
        if (!agent_real.malloc)
            return agent_boot_alloc(n, 16);
    }
    int outer;
    void *p = CALL(outer, agent_real.malloc(n));
    if (outer && p)
        agent_alloc((uintptr_t)p, n);
    return p;
}

EXPORT void free(void *p)
{
    if (!p || agent_boot_owns(p))
        return; /* the arena is never given back */
    if (!agent_real.free)
        agent_resolve();
    if (!agent_real.free)
        return;
    int outer, want = would_record() && agent_free_wanted((uintptr_t)p);
    CALL_VOID(outer, agent_real.free(p));
    if (outer && want)
        agent_free_record((uintptr_t)p);
}

EXPORT void *calloc(size_t n, size_t m)
{
    size_t bytes;
    if (__builtin_mul_overflow(n, m, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    if (!agent_real.calloc) {
        agent_resolve();
        if (!agent_real.calloc)
            return agent_boot_alloc(bytes, 16); /* static: zeroed */
    }
    int outer;
    void *p = CALL(outer, agent_real.calloc(n, m));
    if (outer && p)
        agent_alloc((uintptr_t)p, bytes);
    return p;
}

/* realloc of an arena block: a new real block with the old bytes. */
static void *boot_move(void *p, size_t n)
{
    void *q = malloc(n);
    if (q) {
        size_t old = agent_boot_size(p);
        memcpy(q, p, old < n ? old : n);
    }
    return q;
}

/* Sampled: the old block's free if it was sampled (forgotten before the
 * call, *had), and the new block decided like a malloc. A failed call left
 * the old block as it was. */
static void record_realloc_sampled(void *p, void *q, size_t n, int had)
{
    if (p && !q && n != 0) {
        if (had && agent_sample_keep((uintptr_t)p) != 0)
            agent_free_record((uintptr_t)p); /* no room: ends its record */
        return;
    }
    if (had)
        agent_free_record((uintptr_t)p);
    if (q)
        agent_alloc((uintptr_t)q, n);
}

/* Before a realloc-like call: was the old block sampled (now forgotten)? */
static int realloc_pre(void *p)
{
    return p && would_record() && __atomic_load_n(&agent_sampling, __ATOMIC_RELAXED) &&
           agent_sample_forget((uintptr_t)p);
}

/* The outcome of a realloc-like call, as the engine wants it. */
static void record_realloc(void *p, void *q, size_t n, int had)
{
    if (__atomic_load_n(&agent_sampling, __ATOMIC_RELAXED)) {
        record_realloc_sampled(p, q, n, had);
        return;
    }
    if (!p) {
        if (q)
            agent_alloc((uintptr_t)q, n);
    } else if (q) {
        agent_record(HTA_REALLOC, (uintptr_t)q, (uintptr_t)p, n, 0);
    } else if (n == 0) {
        agent_free_record((uintptr_t)p); /* realloc(p, 0) frees p (glibc) */
    }
}

EXPORT void *realloc(void *p, size_t n)
{
    if (p && agent_boot_owns(p))
        return boot_move(p, n);
    if (!agent_real.realloc) {
        agent_resolve();
        if (!agent_real.realloc)
            return agent_boot_alloc(n, 16);
    }
    int outer, had = realloc_pre(p);
    void *q = CALL(outer, agent_real.realloc(p, n));
    if (outer)
        record_realloc(p, q, n, had);
    return q;
}

EXPORT void *reallocarray(void *p, size_t n, size_t m)
{
    size_t bytes;
    if (__builtin_mul_overflow(n, m, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    if (!agent_real.reallocarray)
        return realloc(p, bytes);
    if (p && agent_boot_owns(p))
        return boot_move(p, bytes);
    int outer, had = realloc_pre(p);
    void *q = CALL(outer, agent_real.reallocarray(p, n, m));
    if (outer)
        record_realloc(p, q, bytes, had);
    return q;
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    if (!agent_real.posix_memalign)
        agent_resolve();
    int outer;
    int rc = CALL(outer, agent_real.posix_memalign(out, align, n));
    if (outer && rc == 0)
        agent_alloc((uintptr_t)*out, n);
    return rc;
}

#define ALIGNED(fn, ...)                                                                           \
    do {                                                                                           \
        if (!agent_real.fn)                                                                        \
            agent_resolve();                                                                       \
        int outer;                                                                                 \
        void *p = CALL(outer, agent_real.fn(__VA_ARGS__));                                         \
        if (outer && p)                                                                            \
            agent_alloc((uintptr_t)p, n);                                                          \
        return p;                                                                                  \
    } while (0)

EXPORT void *aligned_alloc(size_t align, size_t n)
{
    ALIGNED(aligned_alloc, align, n);
}

EXPORT void *memalign(size_t align, size_t n)
{
    ALIGNED(memalign, align, n);
}

EXPORT void *valloc(size_t n)
{
    ALIGNED(valloc, n);
}

EXPORT void *pvalloc(size_t n)
{
    if (!agent_real.pvalloc)
        agent_resolve();
    long page = sysconf(_SC_PAGESIZE);
    int outer;
    void *p = CALL(outer, agent_real.pvalloc(n));
    /* pvalloc rounds the size up to whole pages (malloc(3)). */
    if (outer && p)
        agent_alloc((uintptr_t)p, (n + (size_t)page - 1) & ~((size_t)page - 1));
    return p;
}

/* Commits: anonymous private mappings that can be written, as the eBPF
 * source counts them; the allocator's own mappings are heap, not commits. */
static int is_commit(int prot, int flags)
{
    return (flags & MAP_ANONYMOUS) && (flags & MAP_TYPE) == MAP_PRIVATE && (prot & PROT_WRITE);
}

static uint64_t page_up(size_t n)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    return ((uint64_t)n + page - 1) & ~(page - 1);
}

EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (!agent_real.mmap)
        agent_resolve();
    int outer;
    void *p = CALL(outer, agent_real.mmap(addr, len, prot, flags, fd, off));
    if (outer && p != MAP_FAILED) {
        if (is_commit(prot, flags))
            agent_record(HTA_COMMIT, (uintptr_t)p, 0, page_up(len), 0);
        else if (flags & MAP_FIXED) /* a file mapped over a commit ends it */
            agent_record(HTA_RELEASE, (uintptr_t)p, 0, page_up(len), 0);
    }
    return p;
}

EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return mmap(addr, len, prot, flags, fd, off);
}

EXPORT int munmap(void *addr, size_t len)
{
    if (!agent_real.munmap)
        agent_resolve();
    int outer;
    int rc = CALL(outer, agent_real.munmap(addr, len));
    if (outer && rc == 0)
        agent_record(HTA_RELEASE, (uintptr_t)addr, 0, page_up(len), 0);
    return rc;
}

EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
    void *want = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        want = va_arg(ap, void *);
        va_end(ap);
    }
    if (!agent_real.mremap)
        agent_resolve();
    int outer;
    void *p = CALL(outer, agent_real.mremap(old, old_len, new_len, flags, want));
    if (outer && p != MAP_FAILED) {
        /* Only a range we saw committed is one in the engine: the release of
         * any other is ignored there, and so is this commit's double. */
        agent_record(HTA_RELEASE, (uintptr_t)old, 0, page_up(old_len), 0);
        agent_record(HTA_COMMIT, (uintptr_t)p, 0, page_up(new_len), 0);
    }
    return p;
}

EXPORT void *sbrk(intptr_t inc)
{
    if (!agent_real.sbrk)
        agent_resolve();
    int outer;
    void *p = CALL(outer, agent_real.sbrk(inc));
    if (outer && p != (void *)-1 && inc > 0)
        agent_record(HTA_COMMIT, (uintptr_t)p, 0, (uint64_t)inc, 0);
    else if (outer && p != (void *)-1 && inc < 0)
        agent_record(HTA_RELEASE, (uintptr_t)p + (uintptr_t)inc, 0, (uint64_t)-inc, 0);
    return p;
}

EXPORT int brk(void *end)
{
    if (!agent_real.brk || !agent_real.sbrk)
        agent_resolve();
    int outer;
    void *before = agent_real.sbrk(0);
    int rc = CALL(outer, agent_real.brk(end));
    if (outer && rc == 0 && (uintptr_t)end > (uintptr_t)before)
        agent_record(HTA_COMMIT, (uintptr_t)before, 0, (uintptr_t)end - (uintptr_t)before, 0);
    else if (outer && rc == 0 && (uintptr_t)end < (uintptr_t)before)
        agent_record(HTA_RELEASE, (uintptr_t)end, 0, (uintptr_t)before - (uintptr_t)end, 0);
    return rc;
}
