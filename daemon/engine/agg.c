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

struct agg *agg_get_slow(struct agg_table *t, uint32_t stack)
{
    uint32_t c = stack >> AGG_SHIFT;
    if (c >= t->nchunks) {
        struct agg **nc = ht_realloc(t->chunks, (size_t)(c + 1) * sizeof(*nc));
        if (nc)
            t->chunks = nc;
        void **nr = ht_realloc(t->raw, (size_t)(c + 1) * sizeof(*nr));
        if (nr)
            t->raw = nr;
        if (!nc || !nr)
            return NULL;
        memset(nc + t->nchunks, 0, (size_t)(c + 1 - t->nchunks) * sizeof(*nc));
        memset(nr + t->nchunks, 0, (size_t)(c + 1 - t->nchunks) * sizeof(*nr));
        t->nchunks = c + 1;
    }
    if (!t->chunks[c]) {
        /* Aligned to a cache line so each stack's figures are one line. */
        t->raw[c] = ht_calloc(AGG_CHUNK + 1, sizeof(struct agg));
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
