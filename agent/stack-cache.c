/* The thread's stack cache (stack-cache.h): 64 entries, direct-mapped (40 KiB of static TLS a
 * thread). */
#include "stack-cache.h"

#include <string.h>

#define SC_ENTRIES 64u

struct sc_entry {
    uint64_t pc, sp, rbp, tag; /* pc 0: empty */
    uint32_t id;
    uint8_t cut, rbp_used;
    uint16_t n;
    uint32_t off[FU_TRACE_MAX];
    uint64_t val[FU_TRACE_MAX];
};

static __thread struct sc_entry cache[SC_ENTRIES] __attribute__((tls_model("initial-exec")));

static struct sc_entry *entry_of(uintptr_t pc, uintptr_t sp)
{
    uint64_t h = (pc ^ (sp * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
    return &cache[(h >> 32) & (SC_ENTRIES - 1)];
}

int sc_lookup(uintptr_t pc, uintptr_t sp, uintptr_t rbp, uint64_t tag, uint32_t *id, int *cut)
{
    const struct sc_entry *e = entry_of(pc, sp);
    if (e->pc != pc || e->sp != sp || e->tag != tag || (e->rbp_used && e->rbp != rbp))
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
