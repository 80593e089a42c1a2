/*
 * unwind-check.so: preloaded into a real program, it takes the stack of
 * each malloc call twice, with the agent's cached-rule unwinder
 * (agent/unwind-fast.c, built in) and with libunwind's unw_step, the
 * reference, and counts where they differ. At exit it appends one line to
 * $UNWIND_CHECK_OUT:
 *   pid=P checked=C fast=F fallback=S differ=D [first difference]
 * fast: stacks the fast unwinder took itself (cached: of those, from the
 * agent's stack cache, stack-cache.h, as the agent takes them); fallback:
 * stacks it left to libunwind (the agent then uses fu_backtrace's); differ:
 * fast stacks unequal to libunwind's step by step walk; slow_differ:
 * fu_backtrace's unequal to it. UNWIND_CHECK_MAX (default 200000) bounds the checks
 * (counted past it as skipped).
 */
#define _GNU_SOURCE
#include "stack-cache.h"
#include "unwind-fast.h"

#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <fcntl.h>
#include <libunwind.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEPTH 64
#define EXPORT __attribute__((visibility("default")))

static __thread int guard;
static __thread uintptr_t stack_hi;
static uintptr_t self_lo, self_hi;
static unsigned long checked, fast, cached, fallback, differ, slow_differ, skipped,
    max_checks = 200000;
/* The stacks the cache's ids stand for (id - 1), under lock. */
#define SAVED 16384
static uint64_t saved[SAVED][DEPTH];
static int saved_n[SAVED];
static unsigned n_saved;
static char first[512];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *(*real_malloc)(size_t);
static void (*real_free)(void *);
/* dlsym may allocate before real_malloc is known: from here, never freed. */
static char boot[1 << 16];
static size_t boot_used;

void fu_untraced(int delta)
{
    guard += delta;
}

void fu_note(enum fu_event e)
{
    (void)e; /* fu_stats has them */
}

static int self_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t me = (uintptr_t)arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && me >= lo && me < hi) {
            self_lo = lo;
            self_hi = hi;
            return 1;
        }
    }
    return 0;
}

static void resolve(void)
{
    static int resolving;
    if (resolving)
        return;
    resolving = 1;
    real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    void *m = dlsym(RTLD_NEXT, "malloc");
    dl_iterate_phdr(self_cb, (void *)(uintptr_t)resolve);
    const char *s = getenv("UNWIND_CHECK_MAX");
    if (s)
        max_checks = strtoul(s, NULL, 10);
    fu_init();
    sc_init();
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
    __atomic_store_n(&real_malloc, (void *(*)(size_t))m, __ATOMIC_RELEASE);
}

static void bounds(void)
{
    pthread_attr_t a;
    void *lo;
    size_t sz;
    stack_hi = 1;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        if (pthread_attr_getstack(&a, &lo, &sz) == 0)
            stack_hi = (uintptr_t)lo + sz;
        pthread_attr_destroy(&a);
    }
}

/* As the agent's start (agent/record.c agent_caller): our frame records
 * up to the first return address out of this library. */
static int caller(uintptr_t *pc, uintptr_t *sp, uintptr_t *rbp)
{
    uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
    for (int i = 0; i < 16; i++) {
        if ((fp & 7) || fp + 16 > stack_hi)
            return -1;
        const uintptr_t *f = (const uintptr_t *)fp;
        if (f[1] < self_lo || f[1] >= self_hi) {
            *pc = f[1];
            *sp = fp + 16;
            *rbp = f[0];
            return 0;
        }
        if (f[0] <= fp)
            return -1;
        fp = f[0];
    }
    return -1;
}

static void note(const uint64_t *a, int na, const uint64_t *b, int nb)
{
    if (first[0])
        return;
    int o = snprintf(first, sizeof(first), "fast %d frames, libunwind %d:", na, nb);
    for (int i = 0; i < (na > nb ? na : nb) && i < 12 && o < (int)sizeof(first) - 40; i++)
        o += snprintf(first + o, sizeof(first) - o, " %lx/%lx", i < na ? (unsigned long)a[i] : 0ul,
                      i < nb ? (unsigned long)b[i] : 0ul);
}

/* The reference: libunwind's step by step walk (unw_step(3)), not
 * unw_backtrace: its trace cache gave the old module's frames after a
 * dlclose and a dlopen at the same address (dlreload), flush or not. */
static int reference(uint64_t *out, int max)
{
    unw_context_t uc;
    unw_cursor_t c;
    unw_word_t ip;
    int n = 0;
    if (unw_getcontext(&uc) || unw_init_local(&c, &uc))
        return 0;
    do {
        if (unw_get_reg(&c, UNW_REG_IP, &ip) || ip == 0)
            break;
        out[n++] = ip;
    } while (n < max && unw_step(&c) > 0);
    return n;
}

/* The stack as the agent takes it: from the thread's stack cache, else
 * walked (and cached under a new id). -1: left to libunwind. */
static int fast_stack(uint64_t *a, uint64_t gen, int *hit)
{
    uintptr_t pc, sp, rbp;
    uint32_t id;
    int cut, na;
    struct fu_trace tr;
    *hit = 0;
    if (caller(&pc, &sp, &rbp))
        return -1;
    if (sc_ready() && sc_lookup(pc, sp, rbp, gen, &id, &cut)) {
        pthread_mutex_lock(&lock);
        na = id <= n_saved ? saved_n[id - 1] : -1;
        if (na >= 0)
            memcpy(a, saved[id - 1], (size_t)na * sizeof(*a));
        pthread_mutex_unlock(&lock);
        *hit = na >= 0;
        return na;
    }
    na = fu_walk(pc, sp, rbp, stack_hi, a, DEPTH, &tr);
    if (na < 0)
        return -1;
    pthread_mutex_lock(&lock);
    id = n_saved < SAVED ? ++n_saved : 0;
    if (id) {
        saved_n[id - 1] = na;
        memcpy(saved[id - 1], a, (size_t)na * sizeof(*a));
    }
    pthread_mutex_unlock(&lock);
    if (id)
        sc_store(pc, sp, rbp, gen, &tr, id, 0);
    return na;
}

static __attribute__((noinline)) void check(void)
{
    uint64_t a[DEPTH], raw[DEPTH + 16];
    int hit;
    if (!stack_hi)
        bounds();
    uint64_t gen = fu_generation();
    int na = fast_stack(a, gen, &hit);
    /* libunwind's cache outlives dlclose: flushed when a module went. */
    static uint64_t gen_seen;
    if (gen != __atomic_load_n(&gen_seen, __ATOMIC_RELAXED)) {
        unw_flush_cache(unw_local_addr_space, 0, 0);
        __atomic_store_n(&gen_seen, gen, __ATOMIC_RELAXED);
    }
    int nr = reference(raw, DEPTH + 16), i = 0;
    while (i < nr && raw[i] >= self_lo && raw[i] < self_hi)
        i++;
    int nb = nr - i > DEPTH ? DEPTH : nr - i;
    uint64_t slow[DEPTH + 16];
    int ns = 0, j = 0;
    if (na < 0) { /* what the agent then takes */
        ns = fu_backtrace(slow, DEPTH + 16);
        while (j < ns && slow[j] >= self_lo && slow[j] < self_hi)
            j++;
        ns = ns - j > DEPTH ? DEPTH : ns - j;
    }
    pthread_mutex_lock(&lock);
    checked++;
    if (na < 0) {
        fallback++;
        if (ns != nb || memcmp(slow + j, raw + i, (size_t)ns * sizeof(*slow))) {
            slow_differ++;
            note(slow + j, ns, raw + i, nb);
        }
    } else {
        fast++;
        cached += hit;
        if (na != nb || memcmp(a, raw + i, (size_t)na * sizeof(*a))) {
            differ++;
            note(a, na, raw + i, nb);
        }
    }
    pthread_mutex_unlock(&lock);
}

EXPORT void *malloc(size_t n)
{
    if (!__atomic_load_n(&real_malloc, __ATOMIC_ACQUIRE)) {
        resolve();
        if (!real_malloc) {
            size_t at = (boot_used + 15) & ~(size_t)15;
            if (at + n > sizeof(boot))
                return NULL;
            boot_used = at + n;
            return boot + at;
        }
    }
    void *p = real_malloc(n);
    if (guard)
        return p;
    guard++;
    if (__atomic_load_n(&checked, __ATOMIC_RELAXED) < max_checks)
        check();
    else
        __atomic_fetch_add(&skipped, 1, __ATOMIC_RELAXED);
    guard--;
    return p;
}

EXPORT void free(void *p)
{
    if ((char *)p >= boot && (char *)p < boot + sizeof(boot))
        return;
    if (!real_free)
        resolve();
    real_free(p);
}

static __attribute__((destructor)) void report(void)
{
    const char *out = getenv("UNWIND_CHECK_OUT");
    if (!out)
        return;
    guard++;
    struct fu_stats st;
    fu_stats(&st);
    char line[1024];
    int n = snprintf(line, sizeof(line),
                     "pid=%d checked=%lu fast=%lu cached=%lu fallback=%lu differ=%lu "
                     "slow_differ=%lu skipped=%lu "
                     "learned=%lu "
                     "evicted=%lu invalidated=%lu %s\n",
                     (int)getpid(), checked, fast, cached, fallback, differ, slow_differ, skipped,
                     (unsigned long)st.learned, (unsigned long)st.evicted,
                     (unsigned long)st.invalidated, first);
    int fd = open(out, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, line, (size_t)n) < 0)
            perror("unwind-check");
        close(fd);
    }
    guard--;
}
