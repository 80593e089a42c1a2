/* Lifetime ring and timeline ring. */
#include "rings.h"

#include "ht-alloc.h"

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

void life_ring_init(struct life_ring *r, uint64_t cap)
{
    memset(r, 0, sizeof(*r));
    r->cap = cap ? cap : 1;
}

void life_ring_close(struct life_ring *r)
{
    for (uint64_t i = 0; i < r->nchunks; i++)
        ht_free(r->chunks[i]);
    ht_free(r->chunks);
    memset(r, 0, sizeof(*r));
}

static struct life_rec *rec_slot(const struct life_ring *r, uint64_t idx)
{
    return &r->chunks[idx >> LIFE_CHUNK_SHIFT][idx & ((1u << LIFE_CHUNK_SHIFT) - 1)];
}

/* Storage for slot idx (< cap): a new chunk when the ring first reaches it. */
static int cover(struct life_ring *r, uint64_t idx)
{
    uint64_t c = idx >> LIFE_CHUNK_SHIFT;
    if (c < r->nchunks)
        return 0;
    if (c >= r->chunk_slots) {
        uint64_t n = r->chunk_slots ? r->chunk_slots * 2 : 16;
        struct life_rec **nc =
            mem_realloc(r->acct, MEM_lifetimes, r->chunks, (size_t)r->chunk_slots * sizeof(*nc),
                        (size_t)n * sizeof(*nc));
        if (!nc)
            return -1;
        r->chunks = nc;
        r->chunk_slots = n;
    }
    uint64_t base = c << LIFE_CHUNK_SHIFT, len = (uint64_t)1 << LIFE_CHUNK_SHIFT;
    if (len > r->cap - base)
        len = r->cap - base; /* the last chunk holds only what cap needs */
    if (!(r->chunks[c] = mem_alloc(r->acct, MEM_lifetimes, (size_t)len * sizeof(struct life_rec))))
        return -1;
    r->nchunks++;
    r->alloc += len;
    return 0;
}

void life_ring_push(struct life_ring *r, const struct life_rec *rec)
{
    if (r->pushed < r->cap) {
        if (cover(r, r->pushed) != 0) {
            /* Out of memory: behave as if the record was evicted at once. */
            r->dropped++;
            r->evicted = 1;
            if (rec->f > r->horizon)
                r->horizon = rec->f;
            return;
        }
        *rec_slot(r, r->pushed++) = *rec;
        return;
    }
    struct life_rec *slot = rec_slot(r, r->pushed % r->cap);
    if (!r->evicted || slot->f > r->horizon)
        r->horizon = slot->f;
    r->evicted = 1;
    *slot = *rec;
    r->pushed++;
}

uint64_t life_ring_len(const struct life_ring *r)
{
    return r->pushed < r->cap ? r->pushed : r->cap;
}

const struct life_rec *life_ring_at(const struct life_ring *r, uint64_t i)
{
    return rec_slot(r, r->pushed <= r->cap ? i : (r->pushed + i) % r->cap);
}

uint64_t life_ring_lower_bound(const struct life_ring *r, uint64_t t)
{
    uint64_t lo = 0, hi = life_ring_len(r);
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (life_ring_at(r, mid)->f < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int life_ring_complete_from(const struct life_ring *r, uint64_t t)
{
    return !r->evicted || r->horizon < t;
}

void realloc_ring_init(struct realloc_ring *r, uint64_t cap)
{
    memset(r, 0, sizeof(*r));
    r->cap = cap ? cap : 1;
}

void realloc_ring_close(struct realloc_ring *r)
{
    for (uint64_t i = 0; i < r->nchunks; i++)
        ht_free(r->chunks[i]);
    ht_free(r->chunks);
    memset(r, 0, sizeof(*r));
}

static struct realloc_rec *re_slot(const struct realloc_ring *r, uint64_t idx)
{
    return &r->chunks[idx >> LIFE_CHUNK_SHIFT][idx & ((1u << LIFE_CHUNK_SHIFT) - 1)];
}

/* Storage for slot idx (< cap), a chunk at a time as for the lifetime ring. */
static int re_cover(struct realloc_ring *r, uint64_t idx)
{
    uint64_t c = idx >> LIFE_CHUNK_SHIFT;
    if (c < r->nchunks)
        return 0;
    if (c >= r->chunk_slots) {
        uint64_t n = r->chunk_slots ? r->chunk_slots * 2 : 16;
        struct realloc_rec **nc = ht_realloc(r->chunks, (size_t)n * sizeof(*nc));
        if (!nc)
            return -1;
        r->chunks = nc;
        r->chunk_slots = n;
    }
    uint64_t base = c << LIFE_CHUNK_SHIFT, len = (uint64_t)1 << LIFE_CHUNK_SHIFT;
    if (len > r->cap - base)
        len = r->cap - base;
    if (!(r->chunks[c] = ht_malloc((size_t)len * sizeof(struct realloc_rec))))
        return -1;
    r->nchunks++;
    r->alloc += len;
    return 0;
}

void realloc_ring_push(struct realloc_ring *r, const struct realloc_rec *rec)
{
    if (r->pushed < r->cap) {
        if (re_cover(r, r->pushed) != 0) {
            /* Out of memory: as if the event was evicted at once. */
            r->dropped++;
            r->evicted = 1;
            if (rec->t > r->horizon)
                r->horizon = rec->t;
            return;
        }
        *re_slot(r, r->pushed++) = *rec;
        return;
    }
    struct realloc_rec *slot = re_slot(r, r->pushed % r->cap);
    if (!r->evicted || slot->t > r->horizon)
        r->horizon = slot->t;
    r->evicted = 1;
    *slot = *rec;
    r->pushed++;
}

uint64_t realloc_ring_len(const struct realloc_ring *r)
{
    return r->pushed < r->cap ? r->pushed : r->cap;
}

struct realloc_rec *realloc_ring_at(const struct realloc_ring *r, uint64_t i)
{
    return re_slot(r, r->pushed <= r->cap ? i : (r->pushed + i) % r->cap);
}

uint64_t realloc_ring_lower_bound(const struct realloc_ring *r, uint64_t t)
{
    uint64_t lo = 0, hi = realloc_ring_len(r);
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (realloc_ring_at(r, mid)->t < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int realloc_ring_complete_from(const struct realloc_ring *r, uint64_t t)
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
