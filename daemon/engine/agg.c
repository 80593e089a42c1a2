/* Per-stack aggregates in 4096-entry chunks indexed by stack id. */
#include "agg.h"

#include "ht-alloc.h"

#include <string.h>

#define AGG_SHIFT 12
#define AGG_CHUNK (1u << AGG_SHIFT)

void agg_table_init(struct agg_table *t)
{
    memset(t, 0, sizeof(*t));
}

void agg_table_close(struct agg_table *t)
{
    for (uint32_t i = 0; i < t->nchunks; i++)
        ht_free(t->chunks[i]);
    ht_free(t->chunks);
    memset(t, 0, sizeof(*t));
}

struct agg *agg_get(struct agg_table *t, uint32_t stack)
{
    uint32_t c = stack >> AGG_SHIFT;
    if (c >= t->nchunks) {
        struct agg **nc = ht_realloc(t->chunks, (size_t)(c + 1) * sizeof(*nc));
        if (!nc)
            return NULL;
        memset(nc + t->nchunks, 0, (size_t)(c + 1 - t->nchunks) * sizeof(*nc));
        t->chunks = nc;
        t->nchunks = c + 1;
    }
    if (!t->chunks[c]) {
        t->chunks[c] = ht_calloc(AGG_CHUNK, sizeof(struct agg));
        if (!t->chunks[c])
            return NULL;
    }
    return &t->chunks[c][stack & (AGG_CHUNK - 1)];
}

const struct agg *agg_peek(const struct agg_table *t, uint32_t stack)
{
    uint32_t c = stack >> AGG_SHIFT;
    if (c >= t->nchunks || !t->chunks[c])
        return NULL;
    return &t->chunks[c][stack & (AGG_CHUNK - 1)];
}

uint64_t agg_table_memory(const struct agg_table *t)
{
    uint64_t m = (uint64_t)t->nchunks * sizeof(void *);
    for (uint32_t i = 0; i < t->nchunks; i++)
        if (t->chunks[i])
            m += AGG_CHUNK * sizeof(struct agg);
    return m;
}
