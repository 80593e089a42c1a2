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

/*
 * Beside each stack's aggregate, one word about its live blocks' realloc
 * events (heap domain, whole session, counted as a query counts a block's:
 * the realloc that created it plus its in-place count): the sum over the
 * live blocks whose in-place count did not saturate (low AGG_RE_SUM_BITS)
 * and how many live blocks saturated (high bits; at its maximum it sticks,
 * and the sum is then unknown for good). A live block adds at most 127, and
 * the table holds under 2^32 blocks, so the sum fits in 40 bits.
 */
#define AGG_RE_SUM_BITS 40
#define AGG_RE_SUM_MAX ((1ULL << AGG_RE_SUM_BITS) - 1)
#define AGG_RE_SAT_STICKY (UINT64_MAX >> AGG_RE_SUM_BITS)

struct agg_table {
    struct agg **chunks; /* 64-byte aligned views of raw[] */
    void **raw;
    uint32_t nchunks;
    uint32_t chunk_slots, raw_slots; /* sizes of the two pointer arrays */
    struct mem_acct *acct;           /* growth charged here (MEM_aggregates); NULL: unaccounted */
    /* Pinning (agg_table_pin): chunks [0, npinned) with shared[c] set are
     * read by a view; the first write copies them, the originals retired. */
    int pinned;
    uint32_t npinned;
    uint8_t *shared;
    void **retired;
    uint32_t nretired;
};

void agg_table_init(struct agg_table *t);
void agg_table_close(struct agg_table *t);
/*
 * 256 stacks (18 KiB) a chunk: a view's first write to a chunk copies it,
 * and copies this small come from the allocator's arenas and go back to
 * them, where 4096-stack chunks (288 KiB) were mapped and unmapped for
 * every view (glibc maps blocks from 128 KiB): the page faults of ~25
 * fresh chunks cost ~10 ms per view at 100k stacks on these machines.
 */
#define AGG_SHIFT 8
#define AGG_CHUNK (1u << AGG_SHIFT)
/* A chunk: AGG_CHUNK aggregates (plus a line of alignment slack), then AGG_CHUNK re words. */
#define AGG_CHUNK_BYTES ((AGG_CHUNK + 1) * sizeof(struct agg) + AGG_CHUNK * sizeof(uint64_t))

struct agg *agg_get_slow(struct agg_table *t, uint32_t stack);

/* The aggregate of a stack to write, created zeroed on first use (copied
 * first while a view shares its chunk); NULL only when out of memory. */
static inline struct agg *agg_get(struct agg_table *t, uint32_t stack)
{
    uint32_t c = stack >> AGG_SHIFT;
    if (!t->pinned && c < t->nchunks && t->chunks[c])
        return &t->chunks[c][stack & (AGG_CHUNK - 1)];
    return agg_get_slow(t, stack);
}

/* The aggregate if it exists, else NULL (never allocates; to read). */
static inline const struct agg *agg_peek(const struct agg_table *t, uint32_t stack)
{
    uint32_t c = stack >> AGG_SHIFT;
    if (c >= t->nchunks || !t->chunks[c])
        return NULL;
    return &t->chunks[c][stack & (AGG_CHUNK - 1)];
}

/* The live-realloc word of a stack whose aggregate agg_get returned (writable then). */
static inline uint64_t *agg_live_re(struct agg_table *t, uint32_t stack)
{
    return (uint64_t *)(t->chunks[stack >> AGG_SHIFT] + AGG_CHUNK) + (stack & (AGG_CHUNK - 1));
}

/* The live-realloc word of a stack, or NULL when it has no aggregate. */
static inline const uint64_t *agg_peek_live_re(const struct agg_table *t, uint32_t stack)
{
    uint32_t c = stack >> AGG_SHIFT;
    if (c >= t->nchunks || !t->chunks[c])
        return NULL;
    return (const uint64_t *)(t->chunks[c] + AGG_CHUNK) + (stack & (AGG_CHUNK - 1));
}

uint64_t agg_table_memory(const struct agg_table *t);

/*
 * Pin for a view: *view becomes a read-only table (agg_peek works on it)
 * whose chunks the table does not write until agg_table_unpin (the first
 * write to one copies it). O(chunks). 0 or UV_ENOMEM.
 */
int agg_table_pin(struct agg_table *t, struct agg_table *view);
/* Frees the view's arrays and the chunks the copies replaced. */
void agg_table_unpin(struct agg_table *t, struct agg_table *view);

#endif
