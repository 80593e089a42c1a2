/* Lifetime ring and timeline ring. */
#include "rings.h"

#include "ht-alloc.h"

#include <stddef.h>
#include <string.h>
#include <uv.h>

/* Grow a not-yet-wrapped ring's storage geometrically toward cap. */
static void *ring_grow(struct mem_acct *m, int kind, void *p, uint64_t *alloc, uint64_t cap,
                       uint64_t need, size_t sz)
{
    if (need <= *alloc)
        return p;
    uint64_t n = *alloc ? *alloc * 2 : 1024;
    if (n > cap)
        n = cap;
    void *np = mem_realloc(m, kind, p, (size_t)(*alloc * sz), (size_t)(n * sz));
    if (!np)
        return NULL;
    *alloc = n;
    return np;
}

void chunk_ring_init(struct chunk_ring *r, uint64_t cap, uint32_t elem, uint32_t time_off, int kind)
{
    memset(r, 0, sizeof(*r));
    r->cap = cap ? cap : 1;
    r->elem = elem;
    r->time_off = time_off;
    r->kind = kind;
}

void life_ring_init(struct chunk_ring *r, uint64_t cap)
{
    chunk_ring_init(r, cap, sizeof(struct life_rec), offsetof(struct life_rec, f), MEM_lifetimes);
}

void realloc_ring_init(struct chunk_ring *r, uint64_t cap)
{
    chunk_ring_init(r, cap, sizeof(struct realloc_rec), offsetof(struct realloc_rec, t),
                    MEM_lifetimes);
}

void chunk_ring_close(struct chunk_ring *r)
{
    for (uint64_t i = 0; i < r->nchunks; i++)
        ht_free(r->chunks[i]);
    for (uint64_t i = 0; i < r->nretired; i++)
        ht_free(r->retired[i].p);
    ht_free(r->retired);
    ht_free(r->shared);
    ht_free(r->chunks);
    memset(r, 0, sizeof(*r));
}

static uint64_t rec_time(const struct chunk_ring *r, const unsigned char *rec)
{
    uint64_t t;
    memcpy(&t, rec + r->time_off, sizeof(t));
    return t;
}

/* Bytes of chunk c: the last chunk holds only what cap needs. */
static size_t chunk_bytes(const struct chunk_ring *r, uint64_t c)
{
    uint64_t base = c << LIFE_CHUNK_SHIFT, len = (uint64_t)1 << LIFE_CHUNK_SHIFT;
    return (size_t)(len < r->cap - base ? len : r->cap - base) * r->elem;
}

/* Chunk c is about to be written: if a view shares it, the ring takes a copy. */
static int chunk_writable(struct chunk_ring *r, uint64_t c)
{
    if (!r->pinned || c >= r->npinned || !r->shared[c])
        return 0;
    size_t n = chunk_bytes(r, c);
    unsigned char *copy = mem_alloc_forced(r->acct, r->kind, n);
    if (!copy)
        return -1;
    memcpy(copy, r->chunks[c], n);
    r->retired[r->nretired++] = (struct ring_retired){r->chunks[c], n};
    r->chunks[c] = copy;
    r->shared[c] = 0;
    return 0;
}

static uint64_t slot_of(const struct chunk_ring *r, uint64_t i)
{
    return r->pushed <= r->cap ? i : (r->pushed + i) % r->cap;
}

void *chunk_ring_at_mut(struct chunk_ring *r, uint64_t i)
{
    if (chunk_writable(r, slot_of(r, i) >> LIFE_CHUNK_SHIFT) != 0)
        return NULL;
    return chunk_ring_at(r, i);
}

/* Storage for slot idx (< cap): a new chunk when the ring first reaches it. */
static int cover(struct chunk_ring *r, uint64_t idx)
{
    uint64_t c = idx >> LIFE_CHUNK_SHIFT;
    if (c < r->nchunks)
        return 0;
    if (c >= r->chunk_slots) {
        uint64_t n = r->chunk_slots ? r->chunk_slots * 2 : 16;
        unsigned char **nc =
            mem_realloc(r->acct, r->kind, r->chunks, (size_t)r->chunk_slots * sizeof(*nc),
                        (size_t)n * sizeof(*nc));
        if (!nc)
            return -1;
        r->chunks = nc;
        r->chunk_slots = n;
    }
    uint64_t base = c << LIFE_CHUNK_SHIFT, len = (uint64_t)1 << LIFE_CHUNK_SHIFT;
    if (len > r->cap - base)
        len = r->cap - base; /* the last chunk holds only what cap needs */
    if (!(r->chunks[c] = mem_alloc(r->acct, r->kind, (size_t)len * r->elem)))
        return -1;
    r->nchunks++;
    r->alloc += len;
    return 0;
}

void *chunk_ring_next(struct chunk_ring *r, uint64_t t)
{
    if (r->pushed < r->cap) {
        if (cover(r, r->pushed) != 0) {
            r->dropped++;
            r->evicted = 1;
            if (t > r->horizon)
                r->horizon = t;
            return NULL;
        }
        return chunk_ring_at(r, r->pushed++);
    }
    unsigned char *slot = chunk_ring_at_mut(r, 0); /* the oldest */
    if (!slot) {
        /* A view reads it and no copy could be made: the new record is
         * dropped (as when a chunk cannot be had), the oldest stays. */
        r->dropped++;
        r->evicted = 1;
        if (t > r->horizon)
            r->horizon = t;
        return NULL;
    }
    uint64_t old = rec_time(r, slot);
    if (!r->evicted || old > r->horizon)
        r->horizon = old;
    r->evicted = 1;
    r->pushed++;
    return slot;
}

uint64_t chunk_ring_len(const struct chunk_ring *r)
{
    return r->pushed < r->cap ? r->pushed : r->cap;
}

uint64_t chunk_ring_lower_bound(const struct chunk_ring *r, uint64_t t)
{
    uint64_t lo = 0, hi = chunk_ring_len(r);
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (rec_time(r, chunk_ring_at(r, mid)) < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int chunk_ring_complete_from(const struct chunk_ring *r, uint64_t t)
{
    return !r->evicted || r->horizon < t;
}

void timeline_init(struct timeline *tl, uint64_t cap)
{
    memset(tl, 0, sizeof(*tl));
    tl->cap = cap ? cap : 1;
}

void timeline_close(struct timeline *tl)
{
    ht_free(tl->s);
    memset(tl, 0, sizeof(*tl));
}

void timeline_push(struct timeline *tl, const struct tl_sample *s)
{
    if (tl->pushed < tl->cap) {
        struct tl_sample *n = ring_grow(tl->acct, MEM_timeline, tl->s, &tl->alloc, tl->cap,
                                        tl->pushed + 1, sizeof(*n));
        if (!n) {
            tl->dropped++; /* A missing sample shows as a gap in the timeline. */
            return;
        }
        tl->s = n;
        tl->s[tl->pushed++] = *s;
        return;
    }
    tl->s[tl->pushed % tl->cap] = *s;
    tl->pushed++;
}

uint64_t timeline_len(const struct timeline *tl)
{
    return tl->pushed < tl->cap ? tl->pushed : tl->cap;
}

const struct tl_sample *timeline_at(const struct timeline *tl, uint64_t i)
{
    if (tl->pushed <= tl->cap)
        return &tl->s[i];
    return &tl->s[(tl->pushed + i) % tl->cap];
}

int chunk_ring_pin(struct chunk_ring *r, struct chunk_ring *view)
{
    *view = *r;
    uint64_t n = r->nchunks ? r->nchunks : 1;
    view->chunks = ht_malloc((size_t)n * sizeof(*view->chunks));
    r->shared = ht_malloc((size_t)n);
    r->retired = ht_malloc((size_t)n * sizeof(*r->retired)); /* a chunk is retired once at most */
    if (!view->chunks || !r->shared || !r->retired) {
        ht_free(view->chunks);
        ht_free(r->shared);
        ht_free(r->retired);
        r->shared = NULL;
        r->retired = NULL;
        memset(view, 0, sizeof(*view));
        return UV_ENOMEM;
    }
    if (r->nchunks)
        memcpy(view->chunks, r->chunks, (size_t)r->nchunks * sizeof(*view->chunks));
    memset(r->shared, 1, (size_t)n);
    view->chunk_slots = r->nchunks;
    view->acct = NULL;
    view->shared = NULL;
    view->retired = NULL;
    view->nretired = 0;
    view->pinned = 0;
    r->npinned = r->nchunks;
    r->nretired = 0;
    r->pinned = 1;
    return 0;
}

void chunk_ring_unpin(struct chunk_ring *r, struct chunk_ring *view)
{
    for (uint64_t i = 0; i < r->nretired; i++)
        mem_free(r->acct, r->kind, r->retired[i].p, r->retired[i].bytes);
    ht_free(r->retired);
    ht_free(r->shared);
    r->retired = NULL;
    r->shared = NULL;
    r->nretired = r->npinned = 0;
    r->pinned = 0;
    ht_free(view->chunks);
    memset(view, 0, sizeof(*view));
}

uint64_t chunk_ring_memory(const struct chunk_ring *r)
{
    uint64_t m = r->alloc * r->elem + r->chunk_slots * sizeof(*r->chunks);
    for (uint64_t i = 0; i < r->nretired; i++)
        m += r->retired[i].bytes;
    return m;
}
