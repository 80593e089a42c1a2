/* Lifetime ring and timeline ring. */
#include "rings.h"

#include "ht-alloc.h"

#include <stddef.h>
#include <string.h>

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
    ht_free(r->chunks);
    memset(r, 0, sizeof(*r));
}

static uint64_t rec_time(const struct chunk_ring *r, const unsigned char *rec)
{
    uint64_t t;
    memcpy(&t, rec + r->time_off, sizeof(t));
    return t;
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
    unsigned char *slot = chunk_ring_at(r, 0); /* the oldest */
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
