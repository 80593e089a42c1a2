/*
 * Window queries over an engine view (engine-view.h): classify each block
 * (live, or completed in the lifetime ring) and aggregate, or answer from the
 * per-stack aggregates where they are exact. Nothing here writes to the
 * engine: a query runs on another thread while the engine's owner goes on.
 *
 * Where the work goes (the targets: 1M live blocks, 100k stacks):
 * - Blocks are summed into dense per-stack arrays (16 bytes per stack and
 *   type), and stacks are mapped to groups once at the end; grouped by stack,
 *   the groups' sort keys are summed first and rows built for the top N only.
 * - A whole-session question with no per-block filter is answered from the
 *   per-stack aggregates since start; its reallocs split by type (AIFO vs
 *   AIFI) from the view's per-stack count of the live blocks' reallocs, or,
 *   for the stacks the view cannot say, by counting their live blocks.
 * - A window starting at t1 reads only the live chunks that can hold a block
 *   allocated at or after t1 (ev_live_chunk bounds). The live blocks
 *   allocated before t1 (AOFO) are the stack's outstanding blocks minus those
 *   allocated at or after t1; their reallocs inside the window come from the
 *   few blocks the window's realloc events name, found from the earliest alloc
 *   time those events carry. A size filter, or a realloc ring that may have
 *   lost events of the window, sends the query back to reading every block.
 * - Completed blocks are read from the lifetime ring from the first freed at
 *   or after t1, run by run, and not at all when the window ends now and
 *   keeps no completed type (AIFI, AOFI).
 * - Blocks whose window reallocs need the realloc ring's event times are
 *   collected, and the window's events looked up among them in one pass
 *   (re_resolve), rather than sorting every event of the window.
 * - Fresh memory is what a cold query pays most for on these machines (a
 *   page fault costs tens of microseconds in their VMs), so the per-stack
 *   arrays are only made for the types kept and shared where they can be.
 *
 * Realloc counting rules: see block_reallocs.
 */
#include "query.h"

#include "engine-view.h"
#include "engine.h"
#include "ht-alloc.h"
#include "ht-hash.h"
#include "query-scratch.h"

#include <stdlib.h>
#include <string.h>
#include <uv.h>

const char *const ht_by_names[] = {"stack", "frame", "image", "heap", "type", NULL};
const char *const ht_sort_names[] = {"so", "soc", "st", "stc", "src", "impact", NULL};
const char *const ht_type_names[] = {"AIFI", "AIFO", "AOFI", "AOFO", NULL};

#define MEMO_EXCLUDED UINT32_MAX
#define LIVE UINT64_MAX
#define T_BIT(t) (1u << (t))
#define LIVE_TYPES (T_BIT(HT_AIFO) | T_BIT(HT_AOFO))
#define DONE_TYPES (T_BIT(HT_AIFI) | T_BIT(HT_AOFI))

void query_init(struct query *q)
{
    memset(q, 0, sizeof(*q));
    q->t2 = UINT64_MAX;
    q->types = HT_TYPES_ALL;
    q->size_max = UINT64_MAX;
    q->life_max = UINT64_MAX;
}

uint64_t query_row_size(const struct query_row *r)
{
    return r->bytes[HT_AIFI] + r->bytes[HT_AIFO];
}
uint64_t query_row_count(const struct query_row *r)
{
    return r->count[HT_AIFI] + r->count[HT_AIFO];
}
uint64_t query_row_outstanding(const struct query_row *r)
{
    return r->bytes[HT_AIFO] + r->bytes[HT_AOFO];
}
uint64_t query_row_outstanding_count(const struct query_row *r)
{
    return r->count[HT_AIFO] + r->count[HT_AOFO];
}
int64_t query_row_impacting(const struct query_row *r)
{
    return (int64_t)(r->bytes[HT_AIFO] - r->bytes[HT_AOFI]);
}

/* A stack's count and bytes of one type (dense accumulation). */
struct acc {
    uint64_t count, bytes;
};

struct qctx {
    struct engine_view *v; /* NULL when only the skip cache is being warmed */
    const struct stack_intern *si;
    const struct query *q;
    uint64_t now;
    const struct chunk_ring *re_ring;
    uint64_t re_unresolved;
    uint32_t *memo;         /* per stack id: 0 = not seen, group + 1, or MEMO_EXCLUDED */
    uint32_t nmemo;         /* stacks in the view */
    uint32_t *canon_groups; /* with a skip cache: canonical stack -> group + 1 */
    struct query_row *groups;
    uint32_t ngroups, galloc;
    uint32_t *gslots; /* group index + 1, keyed by ghash */
    uint64_t *ghash;
    uint32_t gmask;
    struct query_row total;
    /* Frame -> pattern results, so each distinct frame is matched once per
     * query (stacks share most of their frames). */
    uint64_t *fm_keys;
    uint8_t *fm_vals; /* bit 0: known, 1: matches cull, 2: matches require */
    uint32_t fm_mask, fm_n;
    /* List mode: a min-heap of the best q->top blocks. */
    struct query_row *heap;
    uint32_t hn, hcap;
    uint64_t nblocks;
    /* The window's in-place realloc events by block name, sorted, built
     * when a block first needs them (block_reallocs). */
    struct re_key *re_keys;
    uint64_t re_n;
    int re_built;
    int re_incomplete; /* some of those events may have been evicted */
    /* Dense accumulation, by stack id: counts and bytes per kept type, the
     * reallocs per type (allocated when a block first has some), and for
     * the AOFO subtraction the live blocks allocated at or after t1. */
    struct acc *acc[4];
    uint64_t *re[4];
    struct acc *ge;
    int ge_is_aifo;    /* ge is acc[HT_AIFO]: the window ends now, so they are the same blocks */
    uint64_t sub_from; /* live blocks allocated before this are AOFO: min(t1, t2 + 1) */
    int exact;         /* figures from the aggregates since start */
    uint64_t *live_re; /* exact typed path: realloc events of live blocks by stack */
    uint8_t *req;      /* per stack: 0 = not known, 1 = passes require, 2 = not */
    /* Dense path: blocks whose window reallocs need the realloc ring's
     * times, counted in one pass over the window's events (re_resolve). */
    struct re_defer *defer;
    uint64_t ndefer, defer_alloc;
    /* Image (module) names, key = index; 0 = none. Handed to the result.
     * A by-frame query keeps function names here instead, and in fnframe
     * the frame that keys each one's group (by index). */
    char **images;
    uint32_t nimages, images_alloc;
    uint64_t *fnframe;
    uint32_t fnframe_alloc;
    uint32_t *islots; /* index + 1, keyed by the name's hash */
    uint32_t imask;
    unsigned paths; /* QP_* */
    int oom;
    /* The per-stack arrays' memory (query-scratch.h), or NULL: the allocator's. */
    struct query_scratch *qs;
};

/* Bytes of scratch per stack a query over every type can take: the memo
 * (4), dense sums of four types (64), reallocs (8), the subtraction's sums
 * (16), group keys and marks (8 + 1 + 4), the require memo (1), the live
 * blocks' reallocs (8 + 1), rounded up. */
#define QUERY_SCRATCH_PER_STACK 128

/* A per-stack array: from the scratch arena kept between queries when the
 * query has one (fresh pages are what cold queries paid most for), zeroed. */
static void *qalloc(struct qctx *c, size_t n, size_t size)
{
    return c->qs ? qscratch_calloc(c->qs, n, size) : ht_calloc(n, size);
}

static void qfree(struct qctx *c, void *p)
{
    if (!c->qs)
        ht_free(p);
}

/* A block named by heap, address, alloc time and closed (freed at its alloc
 * time: engine.c, realloc_close). */
struct re_key {
    uint64_t addr, a;
    uint32_t heap_closed; /* heap << 1 | closed */
};

/* A block waiting for its window reallocs from the ring, and where they go. */
struct re_defer {
    struct re_key k;
    uint32_t stack;
    uint8_t type;
    uint64_t n;     /* events found (on the first entry of equal keys) */
    uint64_t first; /* index of the first entry with this key */
};

static int64_t sort_key(int sort, const struct query_row *r)
{
    switch (sort) {
    case HT_SORT_SOC:
        return (int64_t)query_row_outstanding_count(r);
    case HT_SORT_ST:
        return (int64_t)query_row_size(r);
    case HT_SORT_STC:
        return (int64_t)query_row_count(r);
    case HT_SORT_SRC:
        return (int64_t)r->reallocs;
    case HT_SORT_IMPACT:
        return query_row_impacting(r);
    default:
        return (int64_t)query_row_outstanding(r);
    }
}

/* 1 if a ranks before b: larger key first, then smaller group key, then earlier alloc. */
static int row_before(int sort, const struct query_row *a, const struct query_row *b)
{
    int64_t ka = sort_key(sort, a), kb = sort_key(sort, b);
    if (ka != kb)
        return ka > kb;
    if (a->key != b->key)
        return a->key < b->key;
    return a->a < b->a;
}

/* qsort has no context argument in C11, and queries run on several threads
 * at once (one per open view): a comparator per sort key. */
#define ROW_CMP(name, sort)                                                                        \
    static int name(const void *pa, const void *pb)                                                \
    {                                                                                              \
        const struct query_row *a = pa, *b = pb;                                                   \
        if (row_before(sort, a, b))                                                                \
            return -1;                                                                             \
        return row_before(sort, b, a) ? 1 : 0;                                                     \
    }
ROW_CMP(row_cmp_so, HT_SORT_SO)
ROW_CMP(row_cmp_soc, HT_SORT_SOC)
ROW_CMP(row_cmp_st, HT_SORT_ST)
ROW_CMP(row_cmp_stc, HT_SORT_STC)
ROW_CMP(row_cmp_src, HT_SORT_SRC)
ROW_CMP(row_cmp_impact, HT_SORT_IMPACT)

static void rows_sort(struct query_row *rows, uint32_t n, int sort)
{
    static int (*const cmp[])(const void *, const void *) = {
        [HT_SORT_SO] = row_cmp_so,   [HT_SORT_SOC] = row_cmp_soc,
        [HT_SORT_ST] = row_cmp_st,   [HT_SORT_STC] = row_cmp_stc,
        [HT_SORT_SRC] = row_cmp_src, [HT_SORT_IMPACT] = row_cmp_impact};
    qsort(rows, n, sizeof(*rows), cmp[sort >= 0 && sort <= HT_SORT_IMPACT ? sort : HT_SORT_SO]);
}

/* The best cap items of any type: a min-heap with the worst at the root.
 * before(a, b, sort) says whether a ranks before b. */
typedef int (*topn_before_fn)(const void *a, const void *b, int sort);

struct topn {
    char *items;
    size_t size; /* of an item, at most sizeof(struct query_row) */
    uint32_t n, cap;
    topn_before_fn before;
    int sort;
};

static void *topn_at(const struct topn *t, uint32_t i)
{
    return t->items + (size_t)i * t->size;
}

static void topn_swap(struct topn *t, uint32_t i, uint32_t j)
{
    char tmp[sizeof(struct query_row)];
    memcpy(tmp, topn_at(t, i), t->size);
    memcpy(topn_at(t, i), topn_at(t, j), t->size);
    memcpy(topn_at(t, j), tmp, t->size);
}

static int topn_below(const struct topn *t, uint32_t i, uint32_t j)
{
    return t->before(topn_at(t, i), topn_at(t, j), t->sort);
}

static void topn_offer(struct topn *t, const void *x)
{
    if (t->n < t->cap) {
        uint32_t i = t->n++;
        memcpy(topn_at(t, i), x, t->size);
        for (uint32_t p; i > 0 && topn_below(t, p = (i - 1) / 2, i); i = p)
            topn_swap(t, i, p);
        return;
    }
    if (t->cap == 0 || !t->before(x, topn_at(t, 0), t->sort))
        return;
    memcpy(topn_at(t, 0), x, t->size);
    for (uint32_t i = 0;;) {
        uint32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < t->n && topn_below(t, w, l))
            w = l;
        if (r < t->n && topn_below(t, w, r))
            w = r;
        if (w == i)
            return;
        topn_swap(t, i, w);
        i = w;
    }
}

static int row_before_any(const void *a, const void *b, int sort)
{
    return row_before(sort, a, b);
}

static int ctx_grow_groups(struct qctx *c)
{
    if (c->ngroups < c->galloc)
        return 0;
    uint32_t na = c->galloc ? c->galloc * 2 : 256;
    struct query_row *ng = ht_realloc(c->groups, na * sizeof(*ng));
    uint64_t *nh = ht_realloc(c->ghash, na * sizeof(*nh));
    if (ng)
        c->groups = ng;
    if (nh)
        c->ghash = nh;
    if (!ng || !nh)
        return -1;
    c->galloc = na;
    return 0;
}

static int gslots_grow(struct qctx *c)
{
    uint32_t size = (c->gmask + 1) * 2;
    uint32_t *ns = ht_calloc(size, sizeof(uint32_t));
    if (!ns)
        return -1;
    for (uint32_t g = 0; g < c->ngroups; g++) {
        uint32_t i = (uint32_t)c->ghash[g] & (size - 1);
        while (ns[i])
            i = (i + 1) & (size - 1);
        ns[i] = g + 1;
    }
    ht_free(c->gslots);
    c->gslots = ns;
    c->gmask = size - 1;
    return 0;
}

static int same_suffix(const struct qctx *c, const struct query_row *g, const uint64_t *f,
                       unsigned n)
{
    unsigned gd;
    const uint64_t *gf = stack_intern_frames(c->si, g->stack, &gd);
    if (gd - g->skip != n)
        return 0;
    return n == 0 || memcmp(gf + g->skip, f, n * sizeof(uint64_t)) == 0;
}

/* A new, empty group; MEMO_EXCLUDED (and oom) when out of memory. */
static uint32_t group_new(struct qctx *c, uint64_t key, uint32_t stack, unsigned skip)
{
    if (ctx_grow_groups(c)) {
        c->oom = 1;
        return MEMO_EXCLUDED;
    }
    uint32_t g = c->ngroups++;
    memset(&c->groups[g], 0, sizeof(c->groups[g]));
    c->groups[g].key = key;
    c->groups[g].stack = stack;
    c->groups[g].skip = (uint16_t)skip;
    return g;
}

/* Find or create the group for a key; for stack groups, equality is on the frames. */
static uint32_t group_for(struct qctx *c, uint64_t key, uint64_t h, uint32_t stack, unsigned skip,
                          const uint64_t *suffix, unsigned nsuffix)
{
    uint32_t i = (uint32_t)h & c->gmask;
    for (uint32_t g; (g = c->gslots[i]) != 0; i = (i + 1) & c->gmask) {
        struct query_row *r = &c->groups[g - 1];
        if (c->ghash[g - 1] != h)
            continue;
        if (c->q->by == HT_BY_STACK ? same_suffix(c, r, suffix, nsuffix) : r->key == key)
            return g - 1;
    }
    uint32_t g = group_new(c, key, stack, skip);
    if (g == MEMO_EXCLUDED)
        return g;
    c->ghash[g] = h;
    c->gslots[i] = g + 1;
    if ((uint64_t)c->ngroups * 2 > c->gmask && gslots_grow(c))
        c->oom = 1;
    return g;
}

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
 * (xperf's -cullFrames rule, seed 003). */
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
static unsigned stack_skip(struct qctx *c, uint32_t stack, const uint64_t *f, unsigned depth,
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

static int require_ok(struct qctx *c, const uint64_t *f, unsigned depth)
{
    if (c->q->nrequire == 0)
        return 1;
    for (unsigned k = 0; k < depth; k++)
        if (frame_flags(c, f[k]) & FM_REQUIRE)
            return 1;
    return 0;
}

/* Index of a module name in the query's own list, added if new; 0 (none)
 * when out of memory. The list is the result's: nothing is interned into
 * the engine, whose interner the query may not write. */
static uint32_t image_index(struct qctx *c, const char *m, size_t len)
{
    uint64_t h = ht_hash_bytes(m, len, 11);
    if ((uint64_t)(c->nimages + 1) * 2 > c->imask) {
        uint32_t size = c->imask ? (c->imask + 1) * 2 : 256;
        uint32_t *ns = ht_calloc(size, sizeof(uint32_t));
        if (!ns) {
            c->oom = 1;
            return 0;
        }
        for (uint32_t k = 1; k < c->nimages; k++) {
            uint32_t j =
                (uint32_t)ht_hash_bytes(c->images[k], strlen(c->images[k]), 11) & (size - 1);
            while (ns[j])
                j = (j + 1) & (size - 1);
            ns[j] = k + 1;
        }
        ht_free(c->islots);
        c->islots = ns;
        c->imask = size - 1;
    }
    uint32_t j = (uint32_t)h & c->imask;
    for (uint32_t k; (k = c->islots[j]) != 0; j = (j + 1) & c->imask) {
        const char *s = c->images[k - 1];
        if (strlen(s) == len && memcmp(s, m, len) == 0)
            return k - 1;
    }
    if (c->nimages == c->images_alloc) {
        uint32_t na = c->images_alloc ? c->images_alloc * 2 : 16;
        char **ni = ht_realloc(c->images, (size_t)na * sizeof(char *));
        if (!ni) {
            c->oom = 1;
            return 0;
        }
        c->images = ni;
        c->images_alloc = na;
        if (c->nimages == 0)
            c->images[c->nimages++] = NULL; /* index 0: no module */
    }
    char *s = ht_malloc(len + 1);
    if (!s) {
        c->oom = 1;
        return 0;
    }
    memcpy(s, m, len);
    s[len] = '\0';
    uint32_t k = c->nimages++;
    c->images[k] = s;
    c->islots[j] = k + 1;
    return k;
}

static uint64_t image_key(struct qctx *c, uint64_t frame)
{
    char buf[FRAME_TEXT_MAX];
    const char *text = frame_text(c->si, frame, buf, sizeof(buf));
    const char *m;
    size_t mlen = frame_module(text, &m);
    return mlen ? image_index(c, m, mlen) : 0;
}

/* Group key of a frame for --by frame: its function. Frames that name the
 * same function (module!symbol; a call-site offset "+0x..." left out) are
 * one group, keyed by the first such frame met: every return address into
 * a function is a frame of its own, and WPA groups them as one. A frame
 * with no symbol (an address, module!+0xOFF) is its own group. */
static uint64_t function_key(struct qctx *c, uint64_t frame)
{
    char buf[FRAME_TEXT_MAX];
    const char *text = frame_text(c->si, frame, buf, sizeof(buf));
    size_t len = frame_function_len(text);
    uint32_t k = len ? image_index(c, text, len) : 0;
    if (k == 0)
        return frame; /* no symbol, or out of memory (c->oom says so) */
    if (k >= c->fnframe_alloc) {
        uint32_t na = c->images_alloc;
        uint64_t *nf = ht_realloc(c->fnframe, (size_t)na * sizeof(uint64_t));
        if (!nf) {
            c->oom = 1;
            return frame;
        }
        memset(nf + c->fnframe_alloc, 0, (size_t)(na - c->fnframe_alloc) * sizeof(uint64_t));
        c->fnframe = nf;
        c->fnframe_alloc = na;
    }
    if (!c->fnframe[k])
        c->fnframe[k] = frame;
    return c->fnframe[k];
}

/* Group (+ 1) of a canonical stack, created on first use; MEMO_EXCLUDED when out of memory. */
static uint32_t canon_group(struct qctx *c, uint32_t canon)
{
    if (!c->canon_groups && !(c->canon_groups = qalloc(c, c->nmemo, sizeof(uint32_t)))) {
        c->oom = 1;
        return MEMO_EXCLUDED;
    }
    if (c->canon_groups[canon])
        return c->canon_groups[canon];
    uint32_t g = group_new(c, canon, canon, c->q->skip_cache->skip[canon] - 1u);
    if (g == MEMO_EXCLUDED)
        return g;
    return c->canon_groups[canon] = g + 1;
}

/* Group of a stack for stack/frame/image aggregation, or 1 (kept) for heap/type. */
static uint32_t stack_memo(struct qctx *c, uint32_t stack)
{
    if (stack < c->nmemo && c->memo[stack])
        return c->memo[stack];
    unsigned depth;
    const uint64_t *f = stack_intern_frames(c->si, stack, &depth);
    uint32_t v;
    if (!require_ok(c, f, depth)) {
        v = MEMO_EXCLUDED;
    } else {
        uint32_t canon = UINT32_MAX;
        unsigned skip = c->q->ncull ? stack_skip(c, stack, f, depth, &canon) : 0;
        const uint64_t *sf = f ? f + skip : NULL;
        unsigned n = depth - skip;
        uint64_t key, h;
        int by = c->q->list ? HT_BY_STACK : c->q->by;
        switch (by) {
        case HT_BY_FRAME:
            key = n ? function_key(c, sf[0]) : 0;
            h = ht_mix64(key);
            break;
        case HT_BY_IMAGE:
            key = n ? image_key(c, sf[0]) : 0;
            h = ht_mix64(key);
            break;
        case HT_BY_HEAP:
        case HT_BY_TYPE:
            key = 0;
            h = 0;
            break;
        default:
            key = stack;
            h = n ? ht_hash_bytes(sf, n * sizeof(uint64_t), 7) : 0;
            break;
        }
        if (by == HT_BY_HEAP || by == HT_BY_TYPE) {
            v = 1;
        } else if (by == HT_BY_STACK && canon != UINT32_MAX && canon < c->nmemo) {
            /* Cached: the group is found by the canonical stack, no hashing. */
            v = canon_group(c, canon);
        } else {
            uint32_t g = group_for(c, key, h, stack, skip, sf, n);
            v = g == MEMO_EXCLUDED ? MEMO_EXCLUDED : g + 1;
        }
    }
    if (stack < c->nmemo)
        c->memo[stack] = v;
    return v;
}

static int classify(const struct query *q, uint64_t a, uint64_t f)
{
    if (a > q->t2 || f < q->t1)
        return -1;
    if (a >= q->t1)
        return f <= q->t2 ? HT_AIFI : HT_AIFO;
    return f <= q->t2 ? HT_AOFI : HT_AOFO;
}

static void row_add(struct query_row *r, int type, uint64_t count, uint64_t size, uint64_t reallocs)
{
    r->count[type] += count;
    r->bytes[type] += size;
    r->reallocs += reallocs;
}

static int re_key_cmp(const void *pa, const void *pb)
{
    const struct re_key *x = pa, *y = pb;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    if (x->a != y->a)
        return x->a < y->a ? -1 : 1;
    return x->heap_closed < y->heap_closed ? -1 : x->heap_closed > y->heap_closed;
}

/* The window's in-place realloc events, sorted by block: a sort keeps the
 * memory sequential (a hash table of them was several times slower). */
static void re_build(struct qctx *c)
{
    const struct chunk_ring *r = c->re_ring;
    uint64_t lo = chunk_ring_lower_bound(r, c->q->t1);
    uint64_t hi = chunk_ring_lower_bound(r, c->q->t2 + 1); /* t2 <= now < 2^56 */
    c->re_built = 1;
    if (hi <= lo)
        return;
    if (!(c->re_keys = ht_malloc((size_t)(hi - lo) * sizeof(struct re_key)))) {
        c->oom = 1;
        return;
    }
    for (uint64_t i = lo; i < hi; i++) {
        const struct realloc_rec *x = realloc_ring_at(r, i);
        c->re_keys[i - lo] = (struct re_key){x->addr, x->a, (uint32_t)x->heap << 1 | x->closed};
    }
    c->re_n = hi - lo;
    qsort(c->re_keys, c->re_n, sizeof(struct re_key), re_key_cmp);
}

/* First key not below k (upper: first key above k). */
static uint64_t re_bound(const struct qctx *c, const struct re_key *k, int upper)
{
    uint64_t lo = 0, hi = c->re_n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int cmp = re_key_cmp(&c->re_keys[mid], k);
        if (cmp < 0 || (upper && cmp == 0))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* In-place realloc events of a block inside the window, from the ring. */
static uint64_t re_lookup(struct qctx *c, unsigned heap, uint64_t addr, uint64_t a, unsigned closed)
{
    if (!c->re_built)
        re_build(c);
    struct re_key k = {addr, a, (uint32_t)heap << 1 | closed};
    uint64_t first = re_bound(c, &k, 0);
    if (first == c->re_n || re_key_cmp(&c->re_keys[first], &k) != 0)
        return 0;
    return re_bound(c, &k, 1) - first;
}

/*
 * Realloc events of a block inside the window (seed 003: a range uses only
 * the event data between T1 and T2): the realloc that made it, at its alloc
 * time, and its in-place ones. The block's own count answers when all of
 * those fall inside the window and the count did not saturate; else the
 * realloc ring's event times do, and the answer is incomplete if the ring may
 * have evicted some of them.
 */
static uint64_t block_reallocs_own(struct qctx *c, uint64_t a, uint64_t f, unsigned re, int *ring)
{
    const struct query *q = c->q;
    unsigned n = re & HT_RE_INPLACE_MAX;
    uint64_t k = (re & HT_RE_CREATED) && a >= q->t1;
    *ring = 0;
    if (n == 0)
        return k;
    int all_in = a >= q->t1 && (f == LIVE ? q->t2 >= c->now : f <= q->t2);
    if (all_in && n < HT_RE_INPLACE_MAX)
        return k + n;
    const struct chunk_ring *r = c->re_ring;
    if (!chunk_ring_complete_from(r, a > q->t1 ? a : q->t1) || c->re_unresolved)
        c->re_incomplete = 1;
    *ring = 1;
    return k;
}

static uint64_t block_reallocs(struct qctx *c, unsigned heap, uint64_t addr, uint64_t a, uint64_t f,
                               unsigned re)
{
    int ring;
    uint64_t k = block_reallocs_own(c, a, f, re, &ring);
    return ring ? k + re_lookup(c, heap, addr, a, f != LIVE && f == a) : k;
}

/* Records [i, n) of a ring come in runs stored contiguously: the record at
 * i, and in *len how many follow it in its run (chunk_ring_at's layout). */
static const void *ring_run(const struct chunk_ring *r, uint64_t i, uint64_t n, uint64_t *len)
{
    uint64_t idx = r->pushed <= r->cap ? i : (r->pushed + i) % r->cap;
    uint64_t per = 1ULL << LIFE_CHUNK_SHIFT, off = idx & (per - 1), run = per - off;
    if (r->pushed > r->cap && run > r->cap - idx)
        run = r->cap - idx; /* wraps to record 0 of the storage */
    *len = run < n - i ? run : n - i;
    return r->chunks[idx >> LIFE_CHUNK_SHIFT] + (size_t)off * r->elem;
}

/* Does a stack pass the require list? Memoized per stack. */
static int stack_required(struct qctx *c, uint32_t stack)
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

static int size_kept(const struct query *q, uint64_t size)
{
    return size >= q->size_min && (q->size_max == UINT64_MAX || size < q->size_max);
}

static int life_kept(const struct query *q, uint64_t a, uint64_t f)
{
    uint64_t life = f == LIVE ? UINT64_MAX : f - a;
    return life >= q->life_min && (q->life_max == UINT64_MAX || life < q->life_max);
}

/* One block, live (f == LIVE) or completed, into its group (list mode, by heap). */
static void add_block(struct qctx *c, uint32_t stack, unsigned heap, uint64_t addr, uint64_t a,
                      uint64_t f, uint64_t size, unsigned re, uint64_t mult)
{
    const struct query *q = c->q;
    if (!size_kept(q, size) || !life_kept(q, a, f))
        return;
    int type = classify(q, a, f);
    if (type < 0 || !(q->types & T_BIT(type)))
        return;
    uint32_t m = stack_memo(c, stack);
    if (m == MEMO_EXCLUDED)
        return;
    uint64_t reallocs = q->domain == HT_DOM_HEAP ? block_reallocs(c, heap, addr, a, f, re) : 0;
    row_add(&c->total, type, mult, size * mult, reallocs);
    if (q->list) {
        struct query_row r;
        memset(&r, 0, sizeof(r));
        r.stack = c->groups[m - 1].stack;
        r.skip = c->groups[m - 1].skip;
        r.key = c->nblocks++;
        r.a = a;
        r.f = f;
        row_add(&r, type, mult, size * mult, reallocs);
        struct topn t = {(char *)c->heap, sizeof(r), c->hn, c->hcap, row_before_any, q->sort};
        topn_offer(&t, &r);
        c->hn = t.n;
        return;
    }
    /* By heap (the only other grouping that reads blocks one by one). */
    uint64_t handle = q->domain == HT_DOM_HEAP ? ev_heap_handle(c->v, heap) : 0;
    uint32_t g = group_for(c, handle, ht_mix64(handle), stack, 0, NULL, 0);
    if (g != MEMO_EXCLUDED)
        row_add(&c->groups[g], type, mult, size * mult, reallocs);
}

/* A stack's reallocs of one type, the array made on first use. */
static void dense_re(struct qctx *c, int type, uint32_t stack, uint64_t n)
{
    /* Split by type only where the rows are (less memory to touch). */
    if (c->q->by != HT_BY_TYPE)
        type = 0;
    if (!c->re[type] && !(c->re[type] = qalloc(c, c->nmemo, sizeof(uint64_t)))) {
        c->oom = 1;
        return;
    }
    c->re[type][stack] += n;
}

/* A block's window reallocs into its stack's: its own count now, the ring's
 * times later (re_resolve), for all such blocks in one pass. */
static void dense_block_re(struct qctx *c, int type, uint32_t stack, unsigned heap, uint64_t addr,
                           uint64_t a, uint64_t f, unsigned re)
{
    int ring;
    uint64_t n = block_reallocs_own(c, a, f, re, &ring);
    if (n)
        dense_re(c, type, stack, n);
    if (!ring)
        return;
    if (c->ndefer == c->defer_alloc) {
        uint64_t na = c->defer_alloc ? c->defer_alloc * 2 : 1024;
        /* From the scratch arena too (the old array stays there until the
         * query ends: twice the last size at most). */
        struct re_defer *nd = c->qs ? qalloc(c, (size_t)na, sizeof(*nd))
                                    : ht_realloc(c->defer, (size_t)na * sizeof(*nd));
        if (!nd) {
            c->oom = 1;
            return;
        }
        if (c->qs && c->ndefer)
            memcpy(nd, c->defer, (size_t)c->ndefer * sizeof(*nd));
        c->defer = nd;
        c->defer_alloc = na;
    }
    struct re_defer *d = &c->defer[c->ndefer++];
    memset(d, 0, sizeof(*d));
    d->k = (struct re_key){addr, a, (uint32_t)heap << 1 | (f != LIVE && f == a)};
    d->stack = stack;
    d->type = (uint8_t)type;
}

static uint64_t re_key_hash(const struct re_key *k)
{
    return ht_mix64(k->addr ^ ht_mix64(k->a ^ ((uint64_t)k->heap_closed << 56)));
}

/* The deferred blocks' reallocs: one pass over the window's in-place events,
 * each looked up among the deferred blocks (a table as large as they are,
 * rather than sorting every event of the window). */
static void re_resolve(struct qctx *c)
{
    if (c->ndefer == 0 || c->oom)
        return;
    uint64_t size = 16;
    while (size < c->ndefer * 2)
        size *= 2;
    uint64_t mask = size - 1;
    uint64_t *slots = qalloc(c, size, sizeof(uint64_t)); /* deferred index + 1 */
    if (!slots) {
        c->oom = 1;
        return;
    }
    for (uint64_t i = 0; i < c->ndefer; i++) {
        struct re_defer *d = &c->defer[i];
        uint64_t j = re_key_hash(&d->k) & mask;
        d->first = i;
        for (; slots[j]; j = (j + 1) & mask) {
            if (re_key_cmp(&c->defer[slots[j] - 1].k, &d->k) == 0) {
                d->first = slots[j] - 1;
                break;
            }
        }
        if (!slots[j])
            slots[j] = i + 1;
    }
    const struct chunk_ring *r = c->re_ring;
    uint64_t lo = chunk_ring_lower_bound(r, c->q->t1);
    uint64_t hi = chunk_ring_lower_bound(r, c->q->t2 + 1); /* t2 <= now < 2^56 */
    for (uint64_t i = lo; i < hi;) {
        uint64_t len;
        const unsigned char *run = ring_run(r, i, hi, &len);
        for (uint64_t m = 0; m < len; m++) {
            const struct realloc_rec *x = (const void *)(run + m * r->elem);
            struct re_key k = {x->addr, x->a, (uint32_t)x->heap << 1 | x->closed};
            for (uint64_t j = re_key_hash(&k) & mask; slots[j]; j = (j + 1) & mask) {
                if (re_key_cmp(&c->defer[slots[j] - 1].k, &k) == 0) {
                    c->defer[slots[j] - 1].n++;
                    break;
                }
            }
        }
        i += len;
    }
    qfree(c, slots);
    for (uint64_t i = 0; i < c->ndefer; i++) {
        const struct re_defer *d = &c->defer[i];
        uint64_t n = c->defer[d->first].n;
        if (n)
            dense_re(c, d->type, d->stack, n);
    }
}

/* One block into its stack's dense sums; groups are made at the end. */
static void dense_block(struct qctx *c, uint32_t stack, unsigned heap, uint64_t addr, uint64_t a,
                        uint64_t f, uint64_t size, unsigned re, uint64_t mult)
{
    const struct query *q = c->q;
    if (!size_kept(q, size) || !life_kept(q, a, f))
        return;
    int type = classify(q, a, f);
    /* The view's blocks all have stacks interned before it opened. */
    if (type < 0 || !(q->types & T_BIT(type)) || stack >= c->nmemo)
        return;
    struct acc *x = &c->acc[type][stack];
    x->count += mult;
    x->bytes += size * mult;
    /* Reallocs only for blocks the query keeps: a block of an excluded
     * stack must not make the answer incomplete. */
    if (re && q->domain == HT_DOM_HEAP && stack_required(c, stack))
        dense_block_re(c, type, stack, heap, addr, a, f, re);
}

enum live_mode {
    LIVE_BLOCKS, /* each block read and classified */
    LIVE_SUB,    /* AOFO by subtraction (sub_block) */
};

/*
 * The subtraction path's live block: allocated at or after t1, or after t2
 * (sub_from), it is counted in its stack's ge (and is AIFO if allocated in
 * the window); else it is AOFO, counted by the subtraction, and only its
 * reallocs inside the window are added.
 */
static void sub_block(struct qctx *c, const struct alloc_entry *en, uint64_t a)
{
    const struct query *q = c->q;
    uint32_t s = en->stack;
    if (s >= c->nmemo)
        return;
    uint64_t size = alloc_entry_size(en), m = alloc_entry_mult(en);
    unsigned re = alloc_entry_reallocs(en);
    if (a >= c->sub_from) {
        if (c->ge_is_aifo) {
            dense_block(c, s, alloc_entry_heap(en), en->addr, a, LIVE, size, re, m);
            return;
        }
        c->ge[s].count += m;
        c->ge[s].bytes += size * m;
        if (a >= q->t1 && a <= q->t2 && (q->types & T_BIT(HT_AIFO)))
            dense_block(c, s, alloc_entry_heap(en), en->addr, a, LIVE, size, re, m);
        return;
    }
    if ((re & HT_RE_INPLACE_MAX) && a <= q->t2 && stack_required(c, s))
        dense_block_re(c, HT_AOFO, s, alloc_entry_heap(en), en->addr, a, LIVE, re);
}

/* Live heap blocks allocated at or after lo, chunk by chunk. */
static void scan_live_heap(struct qctx *c, int dense, enum live_mode mode, uint64_t lo)
{
    struct engine_view *v = c->v;
    uint32_t nch = ev_live_nchunks(v);
    for (uint32_t i = 0; i < nch; i++) {
        uint32_t n;
        uint64_t min_a, max_a;
        const struct alloc_entry *ch = ev_live_chunk(v, i, &n, &min_a, &max_a);
        if (!ch || n == 0)
            continue;
        if (max_a < lo) {
            c->paths |= QP_CHUNKS_SKIPPED;
            continue;
        }
        int all = min_a >= lo; /* no per-block time test needed */
        for (uint32_t j = 0; j < n; j++) {
            const struct alloc_entry *en = &ch[j];
            unsigned heap = alloc_entry_heap(en);
            if (heap == ALLOC_HEAP_FREE)
                continue;
            uint64_t a = alloc_entry_time(en);
            if (!all && a < lo)
                continue;
            if (mode == LIVE_SUB)
                sub_block(c, en, a);
            else if (dense)
                dense_block(c, en->stack, heap, en->addr, a, LIVE, alloc_entry_size(en),
                            alloc_entry_reallocs(en), alloc_entry_mult(en));
            else
                add_block(c, en->stack, heap, en->addr, a, LIVE, alloc_entry_size(en),
                          alloc_entry_reallocs(en), alloc_entry_mult(en));
        }
    }
}

/* The earliest alloc time of a block allocated before t1 that one of the
 * window's in-place realloc events names (sub_from if none): the AOFO blocks whose
 * reallocs the window counts are all allocated at or after it. Events of
 * blocks freed since only make it earlier than needed. */
static uint64_t re_reach(struct qctx *c)
{
    const struct chunk_ring *r = c->re_ring;
    uint64_t lo = chunk_ring_lower_bound(r, c->q->t1);
    uint64_t hi = chunk_ring_lower_bound(r, c->q->t2 + 1); /* t2 <= now < 2^56 */
    uint64_t m = c->sub_from;
    for (uint64_t i = lo; i < hi;) {
        uint64_t len;
        const unsigned char *run = ring_run(r, i, hi, &len);
        for (uint64_t k = 0; k < len; k++) {
            const struct realloc_rec *x = (const void *)(run + k * r->elem);
            if (!x->closed && x->a < m)
                m = x->a;
        }
        i += len;
    }
    return m;
}

/* The subtraction's per-stack sums of live blocks from sub_from on: the
 * AIFO sums themselves when the window ends now (every live block allocated
 * from t1 on is then AIFO, with no size filter). 0 when out of memory. */
static int sub_ge(struct qctx *c)
{
    const struct query *q = c->q;
    if ((q->types & T_BIT(HT_AIFO)) && q->t2 == c->now) {
        c->ge = c->acc[HT_AIFO];
        c->ge_is_aifo = 1;
        return 1;
    }
    return (c->ge = qalloc(c, c->nmemo + 1, sizeof(struct acc))) != NULL;
}

/* Read the live blocks the query can keep. */
static void scan_live(struct qctx *c, int dense)
{
    const struct query *q = c->q;
    /* A live block's lifetime is infinite; it is AIFO or AOFO. */
    if (!(q->types & LIVE_TYPES) || q->life_max != UINT64_MAX) {
        c->paths |= QP_NO_LIVE;
        return;
    }
    /* Only AOFO blocks are allocated before t1. */
    int need_old = (q->types & T_BIT(HT_AOFO)) && q->t1 > 0;
    if (q->domain == HT_DOM_COMMIT) {
        uint32_t n;
        const struct commit_range *r = ev_commits(c->v, &n);
        for (uint32_t i = 0; i < n; i++) {
            if (!need_old && r[i].t < q->t1)
                continue;
            if (dense)
                dense_block(c, r[i].stack, 0, r[i].start, r[i].t, LIVE, r[i].end - r[i].start, 0,
                            1);
            else
                add_block(c, r[i].stack, 0, r[i].start, r[i].t, LIVE, r[i].end - r[i].start, 0, 1);
        }
        return;
    }
    if (!need_old) {
        scan_live_heap(c, dense, LIVE_BLOCKS, q->t1);
        return;
    }
    /* The subtraction needs every live block's figures to count (no size
     * filter) and every realloc event of the window (else each AOFO block
     * must be looked at to know whether the answer is complete). */
    if (dense && q->size_min == 0 && q->size_max == UINT64_MAX &&
        chunk_ring_complete_from(c->re_ring, q->t1) && !c->re_unresolved && sub_ge(c)) {
        c->paths |= QP_AOFO_SUB;
        c->sub_from = q->t1 < q->t2 + 1 ? q->t1 : q->t2 + 1; /* t2 <= now < 2^56 */
        scan_live_heap(c, dense, LIVE_SUB, re_reach(c));
        return;
    }
    c->paths |= QP_FULL_SCAN;
    scan_live_heap(c, dense, LIVE_BLOCKS, 0);
}

/* Completed blocks: only those freed at or after t1 can be in the window. */
static void scan_ring(struct qctx *c, int dense)
{
    const struct chunk_ring *ring =
        c->q->domain == HT_DOM_HEAP ? ev_heap_life(c->v) : ev_commit_life(c->v);
    const struct query *q = c->q;
    uint64_t n = chunk_ring_len(ring);
    /* Up to now with no filter, every block freed from t1 on is AIFI or
     * AOFI by its alloc time alone. */
    int plain = dense && q->t2 == c->now && q->size_min == 0 && q->size_max == UINT64_MAX &&
                q->life_min == 0 && q->life_max == UINT64_MAX;
    for (uint64_t i = chunk_ring_lower_bound(ring, q->t1); i < n;) {
        uint64_t len;
        const unsigned char *run = ring_run(ring, i, n, &len);
        i += len;
        if (plain) {
            struct acc *in = c->acc[HT_AIFI], *out = c->acc[HT_AOFI];
            for (uint64_t k = 0; k < len; k++) {
                const struct life_rec *r = (const void *)(run + k * ring->elem);
                uint32_t s = r->stack;
                int aifi = r->a >= q->t1;
                struct acc *x = aifi ? in : out;
                if (!x || s >= c->nmemo)
                    continue;
                x[s].count += life_rec_mult(r);
                x[s].bytes += life_rec_size(r) * life_rec_mult(r);
                if (r->reallocs && q->domain == HT_DOM_HEAP && stack_required(c, s))
                    dense_block_re(c, aifi ? HT_AIFI : HT_AOFI, s, r->heap, r->addr, r->a, r->f,
                                   r->reallocs);
            }
            continue;
        }
        for (uint64_t k = 0; k < len; k++) {
            const struct life_rec *r = (const void *)(run + k * ring->elem);
            /* Allocated after t2, a block is in no window (classify): a
             * window ending before now walks the blocks freed since, few of
             * them allocated by t2, so the rest are passed over here on
             * their alloc time alone (no call, no other field read). */
            if (r->a > q->t2)
                continue;
            if (dense)
                dense_block(c, r->stack, r->heap, r->addr, r->a, r->f, life_rec_size(r),
                            r->reallocs, life_rec_mult(r));
            else
                add_block(c, r->stack, r->heap, r->addr, r->a, r->f, life_rec_size(r), r->reallocs,
                          life_rec_mult(r));
        }
    }
}

/* Exact typed path: the realloc events of each kept stack's live blocks
 * (whole session), so that a stack's total splits exactly into AIFO and
 * AIFI. The view knows most stacks' counts; the live blocks of the others
 * are counted in one pass over the table. */
static int live_reallocs(struct qctx *c)
{
    uint32_t n = c->nmemo;
    uint8_t *need = NULL;
    if (!(c->live_re = qalloc(c, n + 1, sizeof(uint64_t))))
        return -1;
    int any = 0;
    for (uint32_t s = 0; s < n; s++) {
        const struct agg *a = ev_agg(c->v, HT_DOM_HEAP, s);
        if (!a || a->reallocs == 0 || !stack_required(c, s))
            continue;
        uint64_t x;
        if (ev_live_reallocs(c->v, s, &x)) {
            c->live_re[s] = x;
            c->paths |= QP_LIVE_RE_VIEW;
            continue;
        }
        if (!need && !(need = qalloc(c, n, 1)))
            return -1;
        need[s] = 1;
        any = 1;
    }
    if (!any)
        return 0;
    c->paths |= QP_LIVE_RE_SCAN;
    uint32_t nch = ev_live_nchunks(c->v);
    for (uint32_t i = 0; i < nch; i++) {
        uint32_t m;
        uint64_t min_a, max_a;
        const struct alloc_entry *ch = ev_live_chunk(c->v, i, &m, &min_a, &max_a);
        for (uint32_t j = 0; ch && j < m; j++) {
            const struct alloc_entry *en = &ch[j];
            unsigned re = alloc_entry_reallocs(en);
            if (!re || alloc_entry_heap(en) == ALLOC_HEAP_FREE || en->stack >= n ||
                !need[en->stack])
                continue;
            c->live_re[en->stack] +=
                block_reallocs(c, alloc_entry_heap(en), en->addr, alloc_entry_time(en), LIVE, re);
        }
    }
    qfree(c, need);
    return 0;
}

/* Whole session with no per-block filter: the exact totals since start answer it. */
static int whole_session(const struct query *q, uint64_t now)
{
    return q->t1 == 0 && q->t2 == now && q->size_min == 0 && q->size_max == UINT64_MAX &&
           q->life_min == 0 && q->life_max == UINT64_MAX;
}

/* A stack's figures in the answer, before grouping. */
struct sfig {
    struct query_row r; /* counts, bytes, reallocs (all types), untracked */
    uint64_t re[4];     /* reallocs by type (by type groups) */
};

static void fig_part(struct sfig *f, const struct query *q, int type, uint64_t count,
                     uint64_t bytes, uint64_t re)
{
    if (!(q->types & T_BIT(type)))
        return;
    f->r.count[type] += count;
    f->r.bytes[type] += bytes;
    f->r.reallocs += re;
    f->re[type] += re;
}

/* A stack's figures: 1 when any is nonzero. */
static int stack_fig(struct qctx *c, uint32_t s, struct sfig *f)
{
    const struct query *q = c->q;
    memset(f, 0, sizeof(*f));
    if (c->exact) {
        const struct agg *a = ev_agg(c->v, q->domain, s);
        if (!a)
            return 0;
        /* Whole session: the outstanding blocks are AIFO, the freed ones
         * AIFI. The live blocks' reallocs are known when the split matters
         * (live_reallocs); else the sum is all that is shown. (Out of
         * memory, an aggregate can miss a realloc its block has.) */
        uint64_t live_re = c->live_re ? c->live_re[s] : 0;
        fig_part(f, q, HT_AIFO, a->out_count, a->out_bytes, live_re);
        fig_part(f, q, HT_AIFI, agg_freed_count(a), agg_freed_bytes(a),
                 a->reallocs > live_re ? a->reallocs - live_re : 0);
        f->r.untracked_count = a->untracked_count;
        f->r.untracked_bytes = a->untracked_bytes;
    } else {
        for (int t = 0; t < 4; t++) {
            if (c->acc[t]) {
                f->r.count[t] = c->acc[t][s].count;
                f->r.bytes[t] = c->acc[t][s].bytes;
            }
            if (c->re[t]) {
                f->re[t] = c->re[t][s];
                f->r.reallocs += f->re[t];
            }
        }
        if (c->ge) {
            /* AOFO live blocks: outstanding minus those allocated from sub_from on.
             * (The aggregate counts every live block of its stack; out of
             * memory it may not, and the figure is then not exact.) */
            const struct agg *a = ev_agg(c->v, HT_DOM_HEAP, s);
            if (a && a->out_count > c->ge[s].count) {
                f->r.count[HT_AOFO] += a->out_count - c->ge[s].count;
                f->r.bytes[HT_AOFO] += a->out_bytes - c->ge[s].bytes;
            }
        }
    }
    for (int t = 0; t < 4; t++)
        if (f->r.count[t] | f->r.bytes[t])
            return 1;
    return (f->r.reallocs | f->r.untracked_count | f->r.untracked_bytes) != 0;
}

static void row_add_fig(struct query_row *r, const struct sfig *f)
{
    for (int t = 0; t < 4; t++) {
        r->count[t] += f->r.count[t];
        r->bytes[t] += f->r.bytes[t];
    }
    r->reallocs += f->r.reallocs;
    r->untracked_count += f->r.untracked_count;
    r->untracked_bytes += f->r.untracked_bytes;
}

/* Groups by (culled) stack, top N: a sort key is summed per group first (8
 * bytes per group rather than a 120-byte row), the best N groups are chosen,
 * and rows are built for those alone in a second pass. The order is
 * row_cmp's: key, then group key (the canonical stack). */
struct kgroup {
    int64_t k;
    uint32_t g;
};

static int kg_before(const void *pa, const void *pb, int sort)
{
    const struct kgroup *a = pa, *b = pb;
    (void)sort;
    return a->k != b->k ? a->k > b->k : a->g < b->g;
}

static int kg_by_group(const void *pa, const void *pb)
{
    const struct kgroup *a = pa, *b = pb;
    return a->g < b->g ? -1 : a->g > b->g;
}

/* The group of a stack: itself without culling, else its canonical stack
 * from the skip cache; UINT32_MAX if that cannot be had (out of memory). */
static uint32_t canon_of(struct qctx *c, uint32_t s)
{
    const struct skip_cache *sc = c->q->skip_cache;
    if (c->q->ncull == 0)
        return s;
    if (s < sc->alloc && sc->skip[s])
        return sc->canon[s];
    unsigned depth;
    const uint64_t *f = stack_intern_frames(c->si, s, &depth);
    uint32_t canon;
    stack_skip(c, s, f, depth, &canon);
    return canon;
}

/* 0 with res filled and sorted; 1 when this way cannot answer (a stack's
 * culled form could not be cached: finish_rows can) with res as it was;
 * UV_ENOMEM. */
static int finish_canon(struct qctx *c, uint32_t top, struct query_result *res)
{
    const struct query *q = c->q;
    uint32_t n = c->nmemo;
    struct query_result out;
    memset(&out, 0, sizeof(out));
    struct query_row total;
    memset(&total, 0, sizeof(total));
    int64_t *gk = qalloc(c, n + 1, sizeof(int64_t));
    uint8_t *used = qalloc(c, n + 1, 1); /* 1: group has stacks, 2: and is in the top */
    struct kgroup *best = ht_malloc((size_t)(top < n ? top : n) * sizeof(*best) + 1);
    int rc = UV_ENOMEM;
    if (!gk || !used || !best)
        goto done;
    struct topn sel = {(char *)best, sizeof(*best), 0, top < n ? top : n, kg_before, 0};
    struct sfig f;
    for (uint32_t s = 0; s < n; s++) {
        if (!stack_fig(c, s, &f) || !stack_required(c, s))
            continue;
        uint32_t g = canon_of(c, s);
        if (g >= n || c->oom) {
            rc = c->oom ? UV_ENOMEM : 1;
            goto done;
        }
        gk[g] += sort_key(q->sort, &f.r);
        out.ngroups += !used[g];
        used[g] = 1;
        row_add_fig(&total, &f);
    }
    for (uint32_t g = 0; g < n; g++)
        if (used[g])
            topn_offer(&sel, &(struct kgroup){gk[g], g});
    uint32_t nbest = sel.n;
    qsort(best, nbest, sizeof(*best), kg_by_group);
    out.rows = ht_calloc(nbest + 1, sizeof(struct query_row));
    if (!out.rows)
        goto done;
    for (uint32_t i = 0; i < nbest; i++) {
        struct query_row *r = &out.rows[i];
        r->key = r->stack = best[i].g;
        r->skip = q->ncull ? (uint16_t)(q->skip_cache->skip[best[i].g] - 1u) : 0;
        used[best[i].g] = 2;
    }
    for (uint32_t s = 0; s < n && nbest > 0; s++) {
        uint32_t g = canon_of(c, s);
        if (g >= n || used[g] != 2 || !stack_fig(c, s, &f) || !stack_required(c, s))
            continue;
        struct kgroup key = {0, g};
        const struct kgroup *w = bsearch(&key, best, nbest, sizeof(*best), kg_by_group);
        row_add_fig(&out.rows[w - best], &f);
    }
    out.nrows = nbest;
    c->total = total;
    rows_sort(out.rows, out.nrows, q->sort);
    res->rows = out.rows;
    res->nrows = out.nrows;
    res->ngroups = out.ngroups;
    out.rows = NULL;
    c->paths |= QP_CANON;
    rc = 0;
done:
    ht_free(out.rows);
    qfree(c, gk);
    qfree(c, used);
    ht_free(best);
    return rc;
}

static int group_nonempty(const struct query_row *r)
{
    for (int k = 0; k < 4; k++)
        if (r->count[k] || r->bytes[k])
            return 1;
    return r->untracked_count || r->untracked_bytes || r->reallocs;
}

/* The best top groups with a bounded heap, sorted. 0 or UV_ENOMEM. */
static int select_groups(struct qctx *c, uint32_t top, struct query_result *res)
{
    struct query_row *best =
        ht_malloc((size_t)(top < c->ngroups ? top : c->ngroups + 1) * sizeof(struct query_row));
    if (!best)
        return UV_ENOMEM;
    struct topn t = {(char *)best, sizeof(*best), 0, top, row_before_any, c->q->sort};
    for (uint32_t g = 0; g < c->ngroups; g++) {
        if (!group_nonempty(&c->groups[g]))
            continue;
        res->ngroups++;
        topn_offer(&t, &c->groups[g]);
    }
    res->rows = best;
    res->nrows = t.n;
    rows_sort(res->rows, res->nrows, c->q->sort);
    return 0;
}

/* Each stack's figures into its group's row (by stack without a skip cache,
 * frame, image, type), then the top groups. */
static int finish_rows(struct qctx *c, uint32_t top, struct query_result *res)
{
    const struct query *q = c->q;
    memset(&c->total, 0, sizeof(c->total));
    struct sfig f;
    for (uint32_t s = 0; s < c->nmemo && !c->oom; s++) {
        if (!stack_fig(c, s, &f))
            continue;
        uint32_t m = stack_memo(c, s);
        if (m == MEMO_EXCLUDED)
            continue;
        row_add_fig(&c->total, &f);
        if (q->by != HT_BY_TYPE) {
            row_add_fig(&c->groups[m - 1], &f);
            continue;
        }
        /* By type: each kept type's part into its group; untracked blocks
         * have no type and count in the total alone. */
        for (int t = 0; t < 4; t++) {
            if ((f.r.count[t] | f.r.bytes[t] | f.re[t]) == 0)
                continue;
            uint32_t g = group_for(c, (uint64_t)t, ht_mix64((uint64_t)t), 0, 0, NULL, 0);
            if (g != MEMO_EXCLUDED)
                row_add(&c->groups[g], t, f.r.count[t], f.r.bytes[t], f.re[t]);
        }
    }
    if (c->oom)
        return UV_ENOMEM;
    return select_groups(c, top, res);
}

static int finish_dense(struct qctx *c, uint32_t top, struct query_result *res)
{
    const struct query *q = c->q;
    if (q->by == HT_BY_STACK && (q->ncull == 0 || q->skip_cache)) {
        int rc = finish_canon(c, top, res);
        if (rc <= 0)
            return rc;
    }
    return finish_rows(c, top, res);
}

/* Untracked blocks (dropped at the table cap) of the kept stacks, whole
 * session: into the total (list mode and by heap have no stack groups). */
static void add_untracked(struct qctx *c)
{
    for (uint32_t s = 0; s < c->nmemo; s++) {
        const struct agg *a = ev_agg(c->v, c->q->domain, s);
        if (!a || (a->untracked_count | a->untracked_bytes) == 0 || !stack_required(c, s))
            continue;
        c->total.untracked_count += a->untracked_count;
        c->total.untracked_bytes += a->untracked_bytes;
    }
}

static void ctx_free(struct qctx *c)
{
    qfree(c, c->memo);
    ht_free(c->gslots);
    ht_free(c->ghash);
    ht_free(c->groups);
    ht_free(c->heap);
    ht_free(c->fm_keys);
    ht_free(c->fm_vals);
    qfree(c, c->canon_groups);
    ht_free(c->re_keys);
    qfree(c, c->live_re);
    qfree(c, c->req);
    if (!c->ge_is_aifo)
        qfree(c, c->ge);
    qfree(c, c->defer);
    for (int t = 0; t < 4; t++) {
        qfree(c, c->acc[t]);
        qfree(c, c->re[t]);
    }
    for (uint32_t k = 1; k < c->nimages; k++)
        ht_free(c->images[k]);
    ht_free(c->images);
    ht_free(c->islots);
    ht_free(c->fnframe);
}

int engine_query_view(struct engine_view *v, const struct query *qin, struct query_result *res)
{
    /* Nothing has happened after now: a window ends at now at the latest, so
     * live blocks (freed at "infinity") are always outside it. */
    struct query qc = *qin;
    const struct query *q = &qc;
    uint64_t now = ev_now(v);
    if (qc.t2 > now)
        qc.t2 = now;
    memset(res, 0, sizeof(*res));
    uint32_t top = q->top && q->top < HT_QUERY_TOP_MAX ? q->top : HT_QUERY_TOP_MAX;
    struct qctx c;
    memset(&c, 0, sizeof(c));
    c.v = v;
    c.si = ev_stacks(v);
    c.q = q;
    c.now = now;
    c.re_ring = ev_re_ring(v);
    c.re_unresolved = ev_re_unresolved(v);
    c.nmemo = ev_nstacks(v);
    c.qs = ev_scratch(v);
    qscratch_begin(c.qs);
    c.memo = qalloc(&c, c.nmemo + 1, sizeof(uint32_t));
    c.gmask = 255;
    c.gslots = ht_calloc(c.gmask + 1, sizeof(uint32_t));
    if (q->nrequire)
        c.req = qalloc(&c, c.nmemo + 1, 1);
    if (q->list) {
        c.hcap = top;
        c.heap = ht_malloc(top * sizeof(struct query_row));
    }
    if (!c.memo || !c.gslots || (q->list && !c.heap) || (q->nrequire && !c.req))
        goto oom;
    int whole = whole_session(q, now);
    int dense = !q->list && q->by != HT_BY_HEAP;
    const struct chunk_ring *ring = q->domain == HT_DOM_HEAP ? ev_heap_life(v) : ev_commit_life(v);
    int ring_ok = 1, rc;
    if (whole && dense) {
        /* Exact: outstanding = AIFO, freed = AIFI, nothing before start (the
         * per-stack totals know no heap). Splitting a stack's reallocs by
         * type needs its live blocks' counts. */
        c.exact = 1;
        c.paths |= QP_EXACT;
        if (q->domain == HT_DOM_HEAP && (q->types != HT_TYPES_ALL || q->by == HT_BY_TYPE) &&
            live_reallocs(&c) != 0)
            goto oom;
        res->exact_totals = 1;
    } else {
        if (dense) {
            c.paths |= QP_DENSE;
            for (int t = 0; t < 4; t++)
                if ((q->types & T_BIT(t)) &&
                    !(c.acc[t] = qalloc(&c, c.nmemo + 1, sizeof(struct acc))))
                    goto oom;
        }
        scan_live(&c, dense);
        /* Blocks freed by now are needed only for AIFI/AOFI, or when the
         * window ends before now; else the live blocks answer alone. */
        int live_only = q->t2 == now && !(q->types & DONE_TYPES);
        if (live_only)
            c.paths |= QP_NO_RING;
        else
            scan_ring(&c, dense);
        re_resolve(&c);
        if (whole && !q->list)
            add_untracked(&c);
        ring_ok = live_only || chunk_ring_complete_from(ring, q->t1);
    }
    if (c.oom)
        goto oom;
    if (dense) {
        rc = finish_dense(&c, top, res);
        if (rc != 0)
            goto fail;
    } else if (q->list) {
        res->ngroups = c.nblocks;
        res->rows = c.heap;
        res->nrows = c.hn;
        c.heap = NULL;
        rows_sort(res->rows, res->nrows, q->sort);
    } else if (select_groups(&c, top, res) != 0) {
        goto oom;
    }
    res->complete = ring_ok && !c.re_incomplete;
    if (!ring_ok)
        res->horizon = ring->horizon;
    if (c.re_incomplete && c.re_ring->horizon > res->horizon)
        res->horizon = c.re_ring->horizon;
    res->total = c.total;
    res->paths = c.paths;
    res->images = c.images;
    res->nimages = c.nimages;
    c.images = NULL;
    c.nimages = 0;
    ctx_free(&c);
    qscratch_end(c.qs);
    return 0;
oom:
    rc = UV_ENOMEM;
fail:
    ctx_free(&c);
    qscratch_end(c.qs);
    query_result_free(res);
    return rc;
}

int engine_query(struct engine *e, const struct query *q, struct query_result *res)
{
    struct engine_view *v;
    memset(res, 0, sizeof(*res));
    int rc = engine_view_open(e, &v);
    if (rc != 0)
        return rc;
    rc = engine_query_view(v, q, res);
    engine_view_close(e, v);
    return rc;
}

const char *query_result_image(const struct query_result *res, uint64_t key)
{
    return key > 0 && key < res->nimages ? res->images[key] : NULL;
}

void query_result_free(struct query_result *res)
{
    ht_free(res->rows);
    res->rows = NULL;
    res->nrows = 0;
    for (uint32_t k = 1; k < res->nimages; k++)
        ht_free(res->images[k]);
    ht_free(res->images);
    res->images = NULL;
    res->nimages = 0;
}
