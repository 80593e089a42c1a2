/* Per-stack aggregates (exact since session start), chunked so growth never copies. */
#ifndef AGG_H
#define AGG_H

#include <stdint.h>

struct agg {
    uint64_t out_count, out_bytes;     /* outstanding now */
    uint64_t total_count, total_bytes; /* allocated since start (final sizes) */
    uint64_t freed_count, freed_bytes;
    uint64_t reallocs;
    uint64_t peak_bytes; /* highest out_bytes seen */
    uint64_t untracked_count, untracked_bytes; /* dropped at the table cap */
};

struct agg_table {
    struct agg **chunks;
    uint32_t nchunks;
};

void agg_table_init(struct agg_table *t);
void agg_table_close(struct agg_table *t);
/* The aggregate of a stack, created zeroed on first use; NULL only when out of memory. */
struct agg *agg_get(struct agg_table *t, uint32_t stack);
/* The aggregate if it exists, else NULL (never allocates). */
const struct agg *agg_peek(const struct agg_table *t, uint32_t stack);
uint64_t agg_table_memory(const struct agg_table *t);

#endif
