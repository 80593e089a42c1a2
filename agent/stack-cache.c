/* The thread's stack cache (stack-cache.h): 64 entries, direct-mapped (40 KiB of static TLS a
 * thread). */
#include "stack-cache.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#define SC_ENTRIES 64u

struct sc_entry {
    uint64_t pc, sp, rbp, tag; /* pc 0: empty */
    uint32_t id;
    uint8_t cut, rbp_used;
    uint16_t n;
    uint32_t off[FU_TRACE_MAX];
    uint64_t val[FU_TRACE_MAX];
};

/* Mapped at the thread's first walk, unmapped at its exit: 40 KiB of
 * static TLS in every thread would not fit where static TLS is scarce (a
 * library dlopen'ed into a running program gets glibc's small surplus). */
static __thread struct sc_entry *cache __attribute__((tls_model("initial-exec")));
static pthread_key_t cache_key;
static int cache_key_ok;

#define SC_BYTES (SC_ENTRIES * sizeof(struct sc_entry))

/* Thread exit: our own mapping, untraced. */
static void cache_drop(void *p)
{
    fu_untraced(1);
    munmap(p, SC_BYTES);
    fu_untraced(-1);
    cache = NULL;
}

int sc_init(void)
{
    if (cache_key_ok)
        return 0;
    if (pthread_key_create(&cache_key, cache_drop) != 0)
        return -1;
    cache_key_ok = 1;
    return 0;
}

int sc_ready(void)
{
    if (cache)
        return 1;
    if (!cache_key_ok)
        return 0;
    fu_untraced(1);
    void *p = mmap(NULL, SC_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED && pthread_setspecific(cache_key, p) != 0) {
        munmap(p, SC_BYTES);
        p = MAP_FAILED;
    }
    fu_untraced(-1);
    if (p == MAP_FAILED)
        return 0;
    cache = p;
    return 1;
}

static struct sc_entry *entry_of(uintptr_t pc, uintptr_t sp)
{
    if (!cache)
        return NULL;
    uint64_t h = (pc ^ (sp * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
    return &cache[(h >> 32) & (SC_ENTRIES - 1)];
}

int sc_lookup(uintptr_t pc, uintptr_t sp, uintptr_t rbp, uint64_t tag, uint32_t *id, int *cut)
{
    const struct sc_entry *e = entry_of(pc, sp);
    if (!e || e->pc != pc || e->sp != sp || e->tag != tag || (e->rbp_used && e->rbp != rbp))
        return 0;
    /* The slots lie in [sp, the stack's top): read when the entry was made,
     * from this same sp and stack. */
    for (unsigned i = 0; i < e->n; i++)
        if (*(const uint64_t *)(sp + e->off[i]) != e->val[i])
            return 0;
    *id = e->id;
    *cut = e->cut;
    return 1;
}

void sc_store(uintptr_t pc, uintptr_t sp, uintptr_t rbp, uint64_t tag, const struct fu_trace *tr,
              uint32_t id, int cut)
{
    if (tr->n > FU_TRACE_MAX) /* a walk too deep to keep */
        return;
    struct sc_entry *e = entry_of(pc, sp);
    if (!e)
        return;
    e->pc = pc;
    e->sp = sp;
    e->rbp = rbp;
    e->tag = tag;
    e->id = id;
    e->cut = (uint8_t)cut;
    e->rbp_used = (uint8_t)tr->rbp_used;
    e->n = (uint16_t)tr->n;
    memcpy(e->off, tr->off, tr->n * sizeof(*tr->off));
    memcpy(e->val, tr->val, tr->n * sizeof(*tr->val));
}
