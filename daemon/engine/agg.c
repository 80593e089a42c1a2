/* Per-stack aggregates in 4096-entry chunks indexed by stack id. */
#include "agg.h"

#include "ht-alloc.h"

#include <stdint.h>
#include <string.h>
#include <uv.h>

void agg_table_init(struct agg_table *t)
{
    memset(t, 0, sizeof(*t));
}

void agg_table_close(struct agg_table *t)
{
    for (uint32_t i = 0; i < t->nchunks; i++)
        ht_free(t->raw[i]);
    for (uint32_t i = 0; i < t->nretired; i++)
        ht_free(t->retired[i]);
    ht_free(t->retired);
    ht_free(t->shared);
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

/* Aligned to a cache line so each stack's figures are one line. */
static struct agg *chunk_align(void *raw)
{
    return (struct agg *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
}

/* Chunk c is shared with a view: give the table a copy, the view keeps the original. */
static int chunk_cow(struct agg_table *t, uint32_t c)
{
    void *raw = mem_alloc_forced(t->acct, MEM_aggregates, AGG_CHUNK_BYTES);
    if (!raw)
        return -1;
    struct agg *a = chunk_align(raw);
    memcpy(a, t->chunks[c], AGG_CHUNK_BYTES - sizeof(struct agg));
    t->retired[t->nretired++] = t->raw[c];
    t->raw[c] = raw;
    t->chunks[c] = a;
    t->shared[c] = 0;
    return 0;
}

struct agg *agg_get_slow(struct agg_table *t, uint32_t stack)
{
    uint32_t c = stack >> AGG_SHIFT;
    if (c >= t->nchunks && slots_grow(t, c) != 0)
        return NULL;
    if (!t->chunks[c]) {
        t->raw[c] = mem_calloc(t->acct, MEM_aggregates, 1, AGG_CHUNK_BYTES);
        if (!t->raw[c])
            return NULL;
        t->chunks[c] = chunk_align(t->raw[c]);
        if (t->pinned && c < t->npinned)
            t->shared[c] = 0; /* new since the pin: the view has no pointer to it */
    } else if (t->pinned && c < t->npinned && t->shared[c] && chunk_cow(t, c) != 0) {
        return NULL;
    }
    return &t->chunks[c][stack & (AGG_CHUNK - 1)];
}

uint64_t agg_table_memory(const struct agg_table *t)
{
    uint64_t m = (uint64_t)t->nchunks * 2 * sizeof(void *);
    for (uint32_t i = 0; i < t->nchunks; i++)
        if (t->chunks[i])
            m += AGG_CHUNK_BYTES;
    return m + (uint64_t)t->nretired * AGG_CHUNK_BYTES;
}

int agg_table_pin(struct agg_table *t, struct agg_table *view)
{
    memset(view, 0, sizeof(*view));
    uint32_t n = t->nchunks ? t->nchunks : 1;
    view->chunks = ht_malloc(n * sizeof(*view->chunks));
    t->shared = ht_malloc(n);
    t->retired = ht_malloc(n * sizeof(*t->retired)); /* each chunk is retired at most once */
    if (!view->chunks || !t->shared || !t->retired) {
        ht_free(view->chunks);
        ht_free(t->shared);
        ht_free(t->retired);
        view->chunks = NULL;
        t->shared = NULL;
        t->retired = NULL;
        return UV_ENOMEM;
    }
    if (t->nchunks)
        memcpy(view->chunks, t->chunks, t->nchunks * sizeof(*view->chunks));
    memset(t->shared, 1, n);
    view->nchunks = view->chunk_slots = t->nchunks;
    t->npinned = t->nchunks;
    t->nretired = 0;
    t->pinned = 1;
    return 0;
}

void agg_table_unpin(struct agg_table *t, struct agg_table *view)
{
    for (uint32_t i = 0; i < t->nretired; i++)
        mem_free(t->acct, MEM_aggregates, t->retired[i], AGG_CHUNK_BYTES);
    ht_free(t->retired);
    ht_free(t->shared);
    t->retired = NULL;
    t->shared = NULL;
    t->nretired = t->npinned = 0;
    t->pinned = 0;
    ht_free(view->chunks);
    memset(view, 0, sizeof(*view));
}
