/*
 * Frame filters of a query: --cull (frames dropped from the allocation
 * site's end, and the skip cache that remembers them per stack across
 * queries) and --require (stacks kept only if a frame matches).
 */
#include "query-int.h"

#include "engine.h"
#include "ht-hash.h"

#include <string.h>

#define FM_KNOWN 1
#define FM_CULL 2
#define FM_REQUIRE 4

static void fm_grow(struct qctx *c)
{
    uint32_t size = c->fm_mask ? (c->fm_mask + 1) * 2 : 1024;
    uint64_t *keys = ht_calloc(size, sizeof(uint64_t));
    uint8_t *vals = ht_calloc(size, 1);
    if (!keys || !vals) {
        ht_free(keys);
        ht_free(vals);
        return; /* keep the old map: lookups stay correct, just slower */
    }
    for (uint32_t i = 0; c->fm_vals && i <= c->fm_mask; i++) {
        if (!c->fm_vals[i])
            continue;
        uint32_t j = (uint32_t)ht_mix64(c->fm_keys[i]) & (size - 1);
        while (vals[j])
            j = (j + 1) & (size - 1);
        keys[j] = c->fm_keys[i];
        vals[j] = c->fm_vals[i];
    }
    ht_free(c->fm_keys);
    ht_free(c->fm_vals);
    c->fm_keys = keys;
    c->fm_vals = vals;
    c->fm_mask = size - 1;
}

/* Cull/require results for a frame, matched against the patterns once. */
static unsigned frame_flags(struct qctx *c, uint64_t frame)
{
    if (c->fm_n * 2 >= c->fm_mask)
        fm_grow(c);
    uint32_t j = 0;
    if (c->fm_vals) {
        j = (uint32_t)ht_mix64(frame) & c->fm_mask;
        while (c->fm_vals[j]) {
            if (c->fm_keys[j] == frame)
                return c->fm_vals[j];
            j = (j + 1) & c->fm_mask;
        }
    }
    char buf[FRAME_TEXT_MAX];
    const char *text = frame_text(c->si, frame, buf, sizeof(buf));
    unsigned v = FM_KNOWN;
    if (frame_pat_match_any(c->q->cull, c->q->ncull, text))
        v |= FM_CULL;
    if (frame_pat_match_any(c->q->require, c->q->nrequire, text))
        v |= FM_REQUIRE;
    if (c->fm_vals && c->fm_n * 2 < c->fm_mask) {
        c->fm_keys[j] = frame;
        c->fm_vals[j] = (uint8_t)v;
        c->fm_n++;
    }
    return v;
}

/* Frames culled from the allocation-site end: the longest prefix whose every
 * frame matches a cull pattern; all but the bottom frame if that is everything
 * (xperf's -cullFrames rule: Microsoft, "Using Actions to Analyze Process
 * Heap Data", xperf -a heap). */
static unsigned cull_skip(struct qctx *c, const uint64_t *f, unsigned depth)
{
    unsigned k = 0;
    while (k < depth && (frame_flags(c, f[k]) & FM_CULL))
        k++;
    return k == depth && depth > 0 ? depth - 1 : k;
}

void skip_cache_free(struct skip_cache *sc)
{
    ht_free(sc->skip);
    ht_free(sc->canon);
    ht_free(sc->slots);
    memset(sc, 0, sizeof(*sc));
}

static uint64_t suffix_hash(const uint64_t *f, unsigned n)
{
    return n ? ht_hash_bytes(f, n * sizeof(uint64_t), 7) : 0;
}

/* Per-stack arrays long enough for id. */
static int cache_cover(struct skip_cache *sc, uint32_t id)
{
    if (id < sc->alloc)
        return 0;
    uint32_t na = sc->alloc ? sc->alloc : 4096;
    while (na <= id)
        na *= 2;
    uint16_t *ns = ht_realloc(sc->skip, (size_t)na * sizeof(uint16_t));
    if (ns)
        sc->skip = ns;
    uint32_t *nc = ht_realloc(sc->canon, (size_t)na * sizeof(uint32_t));
    if (nc)
        sc->canon = nc;
    if (!ns || !nc)
        return -1;
    memset(ns + sc->alloc, 0, (size_t)(na - sc->alloc) * sizeof(uint16_t));
    sc->alloc = na;
    return 0;
}

/* Culled frames of a cached stack. */
static const uint64_t *cached_suffix(const struct qctx *c, const struct skip_cache *sc,
                                     uint32_t stack, unsigned *n)
{
    unsigned d;
    const uint64_t *f = stack_intern_frames(c->si, stack, &d);
    unsigned skip = sc->skip[stack] - 1u;
    *n = d - skip;
    return f ? f + skip : NULL;
}

/* A slot: the culled suffix's hash (high half) and canonical stack id + 1;
 * 0 = empty. The hash is compared before any frames are. */
static uint64_t slot_make(uint64_t h, uint32_t stack)
{
    return (h & 0xffffffff00000000ULL) | ((uint64_t)stack + 1);
}

static uint32_t slot_stack(uint64_t slot)
{
    return (uint32_t)slot - 1u;
}

/* Double the suffix table; the slots carry their hashes, so no frames are read. */
static int slots_grow(struct skip_cache *sc)
{
    uint32_t size = sc->mask ? (sc->mask + 1) * 2 : 4096;
    uint64_t *slots = ht_calloc(size, sizeof(uint64_t));
    if (!slots)
        return -1;
    for (uint32_t i = 0; sc->slots && i <= sc->mask; i++) {
        if (!sc->slots[i])
            continue;
        uint32_t j = (uint32_t)(sc->slots[i] >> 32) & (size - 1);
        while (slots[j])
            j = (j + 1) & (size - 1);
        slots[j] = sc->slots[i];
    }
    ht_free(sc->slots);
    sc->slots = slots;
    sc->mask = size - 1;
    return 0;
}

/* Culled frames of a stack and (with a cache) the first stack that has the
 * same culled frames, both computed once per session; *canon is UINT32_MAX
 * without a cache. */
unsigned stack_skip(struct qctx *c, uint32_t stack, const uint64_t *f, unsigned depth,
                    uint32_t *canon)
{
    struct skip_cache *sc = c->q->skip_cache;
    *canon = UINT32_MAX;
    if (!sc || cache_cover(sc, stack) != 0)
        return cull_skip(c, f, depth);
    if (sc->skip[stack]) {
        *canon = sc->canon[stack];
        return sc->skip[stack] - 1u;
    }
    unsigned skip = cull_skip(c, f, depth);
    if ((uint64_t)(sc->n + 1) * 2 > sc->mask && slots_grow(sc) != 0)
        return skip; /* not cached; correct all the same */
    unsigned n = depth - skip;
    const uint64_t *sf = f ? f + skip : NULL;
    /* The high half of the hash is kept in the slot, the low half indexes. */
    uint64_t h = suffix_hash(sf, n);
    uint32_t i = (uint32_t)(h >> 32) & sc->mask, rep = stack;
    for (; sc->slots[i]; i = (i + 1) & sc->mask) {
        if ((sc->slots[i] ^ h) >> 32)
            continue;
        unsigned rn;
        const uint64_t *rf = cached_suffix(c, sc, slot_stack(sc->slots[i]), &rn);
        if (rn == n && (n == 0 || memcmp(rf, sf, n * sizeof(uint64_t)) == 0)) {
            rep = slot_stack(sc->slots[i]);
            break;
        }
    }
    sc->skip[stack] = (uint16_t)(skip + 1);
    sc->canon[stack] = rep;
    if (rep == stack) {
        sc->slots[i] = slot_make(h, stack);
        sc->n++;
    }
    *canon = rep;
    return skip;
}

void skip_cache_warm(struct engine *e, struct skip_cache *sc, const struct frame_pat *cull,
                     unsigned ncull, uint32_t from, uint32_t to)
{
    struct query q;
    query_init(&q);
    q.cull = cull;
    q.ncull = ncull;
    q.skip_cache = sc;
    struct qctx c;
    memset(&c, 0, sizeof(c));
    c.si = &e->si;
    c.q = &q;
    for (uint32_t s = from; s < to && s < e->si.nstacks; s++) {
        if (s < sc->alloc && sc->skip[s])
            continue;
        unsigned depth;
        const uint64_t *f = stack_intern_frames(&e->si, s, &depth);
        uint32_t canon;
        stack_skip(&c, s, f, depth, &canon);
    }
    ht_free(c.fm_keys);
    ht_free(c.fm_vals);
    /* The owner thread, the session warming: the query scratch made ready
     * for the stacks there are, unless a view (a query) holds it now. */
    if (!e->view) {
        size_t n = (size_t)e->si.nstacks + 1;
        (void)qscratch_reserve(&e->qscratch, n * QUERY_SCRATCH_PER_STACK, n * sizeof(struct acc));
        qscratch_sync(&e->qscratch, &e->acct);
    }
}

int require_ok(struct qctx *c, const uint64_t *f, unsigned depth)
{
    if (c->q->nrequire == 0)
        return 1;
    for (unsigned k = 0; k < depth; k++)
        if (frame_flags(c, f[k]) & FM_REQUIRE)
            return 1;
    return 0;
}

/* Does a stack pass the require list? Memoized per stack. */
int stack_required(struct qctx *c, uint32_t stack)
{
    if (c->q->nrequire == 0)
        return 1;
    if (c->req && stack < c->nmemo && c->req[stack])
        return c->req[stack] == 1;
    unsigned depth;
    const uint64_t *f = stack_intern_frames(c->si, stack, &depth);
    int ok = require_ok(c, f, depth);
    if (c->req && stack < c->nmemo)
        c->req[stack] = ok ? 1 : 2;
    return ok;
}
