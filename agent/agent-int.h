/*
 * libheaptrace-agent.so internals: the interposed allocator entry points
 * (hooks.c), the ring and stack table writer (record.c), start-up, the
 * daemon connection and fork (agent.c).
 *
 * The library links no libuv and no cJSON: it runs inside someone else's
 * program, on its allocator's fast path. Nothing on that path takes a lock,
 * makes a syscall (clock_gettime is the vDSO) or allocates.
 */
#ifndef AGENT_INT_H
#define AGENT_INT_H

#include "agent-ring.h"

#include <stddef.h>
#include <stdint.h>

#define AGENT_TLS __attribute__((tls_model("initial-exec")))
#define AGENT_HIDDEN __attribute__((visibility("hidden")))

/* Per thread. in_alloc: inside the real allocator or the unwinder (their
 * own calls, such as libstdc++'s operator new calling malloc, jemalloc or
 * libunwind calling mmap, are the outer call's business). in_hook: inside
 * the agent's table and ring writes, which call nothing: a call then is a
 * signal handler's, forwarded untraced and counted. A signal handler that
 * allocates while its thread is inside the real allocator or the unwinder
 * is not told apart from the allocator's own calls: untraced, not counted
 * (glibc's malloc is not async-signal-safe anyway: signal-safety(7)). */
struct agent_thread {
    int in_alloc, in_hook;
    uint32_t tid;
    uintptr_t stack_lo, stack_hi; /* for the frame-pointer walk, 0: not read yet */
};
extern AGENT_HIDDEN __thread struct agent_thread agent_self AGENT_TLS;

enum agent_stacks { AGENT_STACKS_DWARF, AGENT_STACKS_FP, AGENT_STACKS_NONE };

/* The real entry points: the next definition after ours (RTLD_NEXT), so a
 * program linked against jemalloc or tcmalloc keeps its allocator. */
struct agent_real {
    void *(*malloc)(size_t);
    void (*free)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void *(*reallocarray)(void *, size_t, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    void *(*mmap)(void *, size_t, int, int, int, long);
    int (*munmap)(void *, size_t);
    void *(*mremap)(void *, size_t, size_t, int, ...);
    int (*brk)(void *);
    void *(*sbrk)(intptr_t);
};
extern AGENT_HIDDEN struct agent_real agent_real;

/* Resolve agent_real (once; allocations meanwhile come from a static arena). */
AGENT_HIDDEN void agent_resolve(void);
/* The bootstrap arena: dlsym may allocate before malloc is known. */
AGENT_HIDDEN void *agent_boot_alloc(size_t n, size_t align);
AGENT_HIDDEN int agent_boot_owns(const void *p);
AGENT_HIDDEN size_t agent_boot_size(const void *p);

/* Recording: 1 once connected and accepted, 0 otherwise (never connected,
 * the daemon went away or asked to stop, a fork child). */
extern AGENT_HIDDEN int agent_on;
AGENT_HIDDEN int agent_map(void *base, enum agent_stacks stacks, unsigned depth);
/* rate: the sampling mean an HTA_ALLOC was taken under (0: exact), or an
 * HTA_RATE's new mean; 0 for the other kinds. */
AGENT_HIDDEN void agent_record(int kind, uintptr_t addr, uintptr_t old, uint64_t size,
                               uint64_t rate);
AGENT_HIDDEN void agent_count(enum hta_counter c);
/* At load, before the environment is cleaned: what an exec of this process
 * must give the next program so that it stays traced (exec.c). */
AGENT_HIDDEN void agent_exec_save(const char *self_path, int follow);
/* Before exit or exec: wait (a while) for the daemon to take what was written. */
AGENT_HIDDEN void agent_flush(void);
/* A thread of the agent's (detached, every signal blocked): 0 or an errno. */
AGENT_HIDDEN int agent_thread_start(void *(*fn)(void *));
/* Our own code's address range: frames in it are cut from the stacks. */
AGENT_HIDDEN void agent_self_range(uintptr_t lo, uintptr_t hi);

/* Attach (attach.c, got.c): agent.c's connection pieces, the lookup
 * handle of the C++ hooks (RTLD_NEXT preloaded, RTLD_DEFAULT attached),
 * and the GOT pass (the number of malloc slots pointing at our hook). */
AGENT_HIDDEN int agent_memfd_make(void);
AGENT_HIDDEN int agent_hello_send(int s, int fd, const char *token);
AGENT_HIDDEN enum agent_stacks agent_stacks_of(const char *v);
extern AGENT_HIDDEN void *agent_next_handle;
AGENT_HIDDEN unsigned agent_got_patch_all(void);
AGENT_HIDDEN void agent_got_recheck(void);
/* The sampler (sample.c). agent_sampling: frees are recorded only for the
 * blocks the sampler took (run --sample or --max-overhead); agent_rate: the
 * mean in force, 0: every block. */
extern AGENT_HIDDEN int agent_sampling;
extern AGENT_HIDDEN uint64_t agent_rate;
extern AGENT_HIDDEN __thread int64_t agent_sample_left AGENT_TLS;
/* Reserve the set (only when sampling or governed): 0 or -1. */
AGENT_HIDDEN int agent_sample_init(uint64_t rate, uint64_t seed, int governed);
AGENT_HIDDEN void agent_sample_rate(uint64_t rate);
AGENT_HIDDEN int agent_sample_slow(size_t n, uint64_t *r);
AGENT_HIDDEN int agent_sample_keep(uintptr_t p);
AGENT_HIDDEN int agent_sample_forget(uintptr_t p);
AGENT_HIDDEN int agent_sample_has(uintptr_t p);
/* An allocation of the program's: recorded when it is taken. Sampling, an
 * unsampled block costs a subtraction and a compare (the countdown ran out:
 * agent_alloc_sampled decides); exact, it goes straight to the ring. */
AGENT_HIDDEN void agent_alloc_sampled(uintptr_t p, uint64_t n);
static inline void agent_alloc(uintptr_t p, uint64_t n)
{
    if (!__atomic_load_n(&agent_sampling, __ATOMIC_RELAXED))
        agent_record(HTA_ALLOC, p, 0, n, 0);
    else if (__builtin_expect((agent_sample_left -= (int64_t)n) <= 0, 0))
        agent_alloc_sampled(p, n);
}
/* A free (or release) of the program's, recorded; its time measured now and
 * then for the governor, like agent_alloc's. */
AGENT_HIDDEN void agent_free_record(uintptr_t p);
/* The governor (run --max-overhead PCT): started with the percent, called
 * by the watch thread every tick with the ring header to report into. */
AGENT_HIDDEN void agent_gov_init(unsigned pct);
AGENT_HIDDEN int agent_gov_on(void);
AGENT_HIDDEN void agent_gov_tick(struct hta_header *h);

/* Take a block of n bytes? The unsampled case is a subtraction and a compare. */
static inline int agent_sample_take(size_t n, uint64_t *r)
{
    if (__builtin_expect((agent_sample_left -= (int64_t)n) > 0, 1))
        return 0;
    return agent_sample_slow(n, r);
}

/* Is the free of p to be recorded? Asked before the real free: a sampled
 * block is forgotten while its address is still the program's. */
static inline int agent_free_wanted(uintptr_t p)
{
    return !__atomic_load_n(&agent_sampling, __ATOMIC_RELAXED) || agent_sample_forget(p);
}

#endif
