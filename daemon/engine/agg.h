/* Per-stack aggregates (exact since session start), chunked so growth never copies. */
#ifndef AGG_H
#define AGG_H

#include "mem-acct.h"

#include <stddef.h>
#include <stdint.h>

/* One cache line per stack: freed figures are total - outstanding. */
struct agg {
    uint64_t out_count, out_bytes;     /* outstanding now */
    uint64_t total_count, total_bytes; /* allocated since start (final sizes) */
    uint64_t reallocs;
    uint64_t peak_bytes;                       /* highest out_bytes seen */
    uint64_t untracked_count, untracked_bytes; /* dropped at the table cap */
};

static inline uint64_t agg_freed_count(const struct agg *a)
{
    return a->total_count - a->out_count;
}
static inline uint64_t agg_freed_bytes(const struct agg *a)
{
    return a->total_bytes - a->out_bytes;
}

struct agg_table {
    struct agg **chunks; /* 64-byte aligned views of raw[] */
    void **raw;
    uint32_t nchunks;
    uint32_t chunk_slots, raw_slots; /* sizes of the two pointer arrays */
    struct mem_acct *acct;           /* growth charged here (MEM_aggregates); NULL: unaccounted */
};

void agg_table_init(struct agg_table *t);
void agg_table_close(struct agg_table *t);
#define AGG_SHIFT 12
#define AGG_CHUNK (1u << AGG_SHIFT)

struct agg *agg_get_slow(struct agg_table *t, uint32_t stack);

/* The aggregate of a stack, created zeroed on first use; NULL only when out of memory. */
static inline struct agg *agg_get(struct agg_table *t, uint32_t stack)
{
    uint32_t c = stack >> AGG_SHIFT;
    if (c < t->nchunks && t->chunks[c])
        return &t->chunks[c][stack & (AGG_CHUNK - 1)];
    return agg_get_slow(t, stack);
}

/* The aggregate if it exists, else NULL (never allocates). */
static inline const struct agg *agg_peek(const struct agg_table *t, uint32_t stack)
{
    uint32_t c = stack >> AGG_SHIFT;
    if (c >= t->nchunks || !t->chunks[c])
        return NULL;
    return &t->chunks[c][stack & (AGG_CHUNK - 1)];
}
uint64_t agg_table_memory(const struct agg_table *t);

#endif
