/* Per-stack aggregates in 4096-entry chunks indexed by stack id. */
#include "agg.h"

#include "ht-alloc.h"

#include <stdint.h>
#include <string.h>

void agg_table_init(struct agg_table *t)
{
    memset(t, 0, sizeof(*t));
}

void agg_table_close(struct agg_table *t)
{
    for (uint32_t i = 0; i < t->nchunks; i++)
        ht_free(t->raw[i]);
    ht_free(t->chunks);
    ht_free(t->raw);
    memset(t, 0, sizeof(*t));
}

/* Room for c + 1 chunk pointers in both arrays; each array keeps its own size. */
static int slots_grow(struct agg_table *t, uint32_t c)
{
    size_t now = (size_t)(c + 1) * sizeof(void *);
    if (t->chunk_slots < c + 1) {
        struct agg **nc = mem_realloc(t->acct, MEM_aggregates, t->chunks,
                                      (size_t)t->chunk_slots * sizeof(void *), now);
        if (!nc)
            return -1;
        memset(nc + t->chunk_slots, 0, (size_t)(c + 1 - t->chunk_slots) * sizeof(*nc));
        t->chunks = nc;
        t->chunk_slots = c + 1;
    }
    if (t->raw_slots < c + 1) {
        void **nr = mem_realloc(t->acct, MEM_aggregates, t->raw,
                                (size_t)t->raw_slots * sizeof(void *), now);
        if (!nr)
            return -1;
        memset(nr + t->raw_slots, 0, (size_t)(c + 1 - t->raw_slots) * sizeof(*nr));
        t->raw = nr;
        t->raw_slots = c + 1;
    }
    t->nchunks = c + 1;
    return 0;
}

struct agg *agg_get_slow(struct agg_table *t, uint32_t stack)
{
    uint32_t c = stack >> AGG_SHIFT;
    if (c >= t->nchunks && slots_grow(t, c) != 0)
        return NULL;
    if (!t->chunks[c]) {
        /* Aligned to a cache line so each stack's figures are one line. */
        t->raw[c] = mem_calloc(t->acct, MEM_aggregates, AGG_CHUNK + 1, sizeof(struct agg));
        if (!t->raw[c])
            return NULL;
        uintptr_t p = ((uintptr_t)t->raw[c] + 63) & ~(uintptr_t)63;
        t->chunks[c] = (struct agg *)p;
    }
    return &t->chunks[c][stack & (AGG_CHUNK - 1)];
}

uint64_t agg_table_memory(const struct agg_table *t)
{
    uint64_t m = (uint64_t)t->nchunks * 2 * sizeof(void *);
    for (uint32_t i = 0; i < t->nchunks; i++)
        if (t->chunks[i])
            m += (AGG_CHUNK + 1) * sizeof(struct agg);
    return m;
}
