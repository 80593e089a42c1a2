/* Window queries: classify each block (live, or completed in the ring) and aggregate. */
#include "query.h"

#include "engine.h"
#include "ht-alloc.h"
#include "ht-hash.h"

#include <stdlib.h>
#include <string.h>
#include <uv.h>

const char *const ht_by_names[] = {"stack", "frame", "image", "heap", "type", NULL};
const char *const ht_sort_names[] = {"so", "soc", "st", "stc", "src", "impact", NULL};
const char *const ht_type_names[] = {"AIFI", "AIFO", "AOFI", "AOFO", NULL};

#define MEMO_EXCLUDED UINT32_MAX
#define LIVE UINT64_MAX

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

struct qctx {
    struct engine *e;
    const struct query *q;
    uint32_t *memo; /* per stack id: 0 = not seen, group + 1, or MEMO_EXCLUDED */
    uint32_t nmemo;
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
    uint64_t *live_re; /* exact typed path: realloc events of live blocks by stack */
    int oom;
};

/* A block named by heap, address, alloc time and closed (freed at its alloc
 * time: engine.c, realloc_close). */
struct re_key {
    uint64_t addr, a;
    uint32_t heap_closed; /* heap << 1 | closed */
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

static int g_sort; /* qsort has no context argument in C11 */

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

static int row_cmp(const void *pa, const void *pb)
{
    const struct query_row *a = pa, *b = pb;
    if (row_before(g_sort, a, b))
        return -1;
    return row_before(g_sort, b, a) ? 1 : 0;
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
    const uint64_t *gf = stack_intern_frames(&c->e->si, g->stack, &gd);
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
    const char *text = frame_text(&c->e->si, frame, buf, sizeof(buf));
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
    const uint64_t *f = stack_intern_frames(&c->e->si, stack, &d);
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
    c.e = e;
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

static uint64_t image_key(struct qctx *c, uint64_t frame)
{
    char buf[FRAME_TEXT_MAX];
    const char *text = frame_text(&c->e->si, frame, buf, sizeof(buf));
    const char *m;
    size_t mlen = frame_module(text, &m);
    return mlen ? stack_intern_str(&c->e->si, m, (unsigned)mlen) : 0;
}

/* Group (+ 1) of a canonical stack, created on first use; MEMO_EXCLUDED when out of memory. */
static uint32_t canon_group(struct qctx *c, uint32_t canon)
{
    if (!c->canon_groups && !(c->canon_groups = ht_calloc(c->nmemo, sizeof(uint32_t)))) {
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
    const uint64_t *f = stack_intern_frames(&c->e->si, stack, &depth);
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
            key = n ? sf[0] : 0;
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
    const struct chunk_ring *r = &c->e->re_ring;
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
static uint64_t block_reallocs(struct qctx *c, unsigned heap, uint64_t addr, uint64_t a, uint64_t f,
                               unsigned re)
{
    const struct query *q = c->q;
    unsigned n = re & HT_RE_INPLACE_MAX;
    uint64_t k = (re & HT_RE_CREATED) && a >= q->t1;
    if (n == 0)
        return k;
    int all_in = a >= q->t1 && (f == LIVE ? q->t2 >= c->e->now : f <= q->t2);
    if (all_in && n < HT_RE_INPLACE_MAX)
        return k + n;
    const struct chunk_ring *r = &c->e->re_ring;
    if (!chunk_ring_complete_from(r, a > q->t1 ? a : q->t1) || c->e->re_unresolved)
        c->re_incomplete = 1;
    return k + re_lookup(c, heap, addr, a, f != LIVE && f == a);
}

/* One block, live (f == LIVE) or completed. */
static void add_block(struct qctx *c, uint32_t stack, unsigned heap, uint64_t addr, uint64_t a,
                      uint64_t f, uint64_t size, unsigned re)
{
    const struct query *q = c->q;
    if (size < q->size_min || (q->size_max != UINT64_MAX && size >= q->size_max))
        return;
    uint64_t life = f == LIVE ? UINT64_MAX : f - a;
    if (life < q->life_min || (q->life_max != UINT64_MAX && life >= q->life_max))
        return;
    int type = classify(q, a, f);
    if (type < 0 || !(q->types & (1u << type)))
        return;
    uint32_t m = stack_memo(c, stack);
    if (m == MEMO_EXCLUDED)
        return;
    uint64_t reallocs = q->domain == HT_DOM_HEAP ? block_reallocs(c, heap, addr, a, f, re) : 0;
    row_add(&c->total, type, 1, size, reallocs);
    if (q->list) {
        struct query_row r;
        memset(&r, 0, sizeof(r));
        r.stack = c->groups[m - 1].stack;
        r.skip = c->groups[m - 1].skip;
        r.key = c->nblocks++;
        r.a = a;
        r.f = f;
        row_add(&r, type, 1, size, reallocs);
        struct topn t = {(char *)c->heap, sizeof(r), c->hn, c->hcap, row_before_any, q->sort};
        topn_offer(&t, &r);
        c->hn = t.n;
        return;
    }
    uint32_t g;
    if (q->by == HT_BY_HEAP) {
        uint64_t handle =
            q->domain == HT_DOM_HEAP && heap < c->e->nheaps ? c->e->heaps[heap].handle : 0;
        g = group_for(c, handle, ht_mix64(handle), stack, 0, NULL, 0);
    } else if (q->by == HT_BY_TYPE) {
        g = group_for(c, (uint64_t)type, ht_mix64((uint64_t)type), 0, 0, NULL, 0);
    } else {
        g = m - 1;
    }
    if (g != MEMO_EXCLUDED)
        row_add(&c->groups[g], type, 1, size, reallocs);
}

static void live_heap_cb(const struct alloc_entry *en, void *arg)
{
    add_block(arg, en->stack, alloc_entry_heap(en), en->addr, alloc_entry_time(en), LIVE,
              alloc_entry_size(en), alloc_entry_reallocs(en));
}

static void scan(struct qctx *c)
{
    struct engine *e = c->e;
    const struct chunk_ring *ring = c->q->domain == HT_DOM_HEAP ? &e->heap_life : &e->commit_life;
    if (c->q->domain == HT_DOM_HEAP) {
        alloc_table_foreach(&e->table, live_heap_cb, c);
    } else {
        for (uint32_t i = 0; i < e->commits.n; i++) {
            const struct commit_range *r = &e->commits.r[i];
            add_block(c, r->stack, 0, r->start, r->t, LIVE, r->end - r->start, 0);
        }
    }
    /* Blocks freed before the window cannot be in it. */
    uint64_t n = chunk_ring_len(ring);
    for (uint64_t i = chunk_ring_lower_bound(ring, c->q->t1); i < n; i++) {
        const struct life_rec *r = life_ring_at(ring, i);
        add_block(c, r->stack, r->heap, r->addr, r->a, r->f, r->size, r->reallocs);
    }
}

/* Exact typed path: the realloc events of each stack's live blocks (whole
 * session), so that a stack's total splits exactly into AIFO and AIFI. */
static void live_re_cb(const struct alloc_entry *en, void *arg)
{
    struct qctx *c = arg;
    if (en->stack >= c->nmemo || stack_memo(c, en->stack) == MEMO_EXCLUDED)
        return;
    c->live_re[en->stack] += block_reallocs(c, alloc_entry_heap(en), en->addr, alloc_entry_time(en),
                                            LIVE, alloc_entry_reallocs(en));
}

static int live_reallocs(struct qctx *c)
{
    if (!(c->live_re = ht_calloc(c->nmemo + 1, sizeof(uint64_t))))
        return -1;
    alloc_table_foreach(&c->e->table, live_re_cb, c);
    return 0;
}

/* Whole session with no per-block filter: the exact totals since start answer it. */
static int whole_session(const struct engine *e, const struct query *q)
{
    return q->t1 == 0 && q->t2 == e->now && q->size_min == 0 && q->size_max == UINT64_MAX &&
           q->life_min == 0 && q->life_max == UINT64_MAX;
}

/* One type's part of a stack's exact figures, if the query keeps that type. */
static void add_part(struct qctx *c, uint32_t gi, int type, uint64_t count, uint64_t bytes,
                     uint64_t reallocs)
{
    if (!(c->q->types & (1u << type)))
        return;
    if (c->q->by == HT_BY_TYPE)
        gi = group_for(c, (uint64_t)type, ht_mix64((uint64_t)type), 0, 0, NULL, 0);
    if (gi != MEMO_EXCLUDED)
        row_add(&c->groups[gi], type, count, bytes, reallocs);
    row_add(&c->total, type, count, bytes, reallocs);
}

static void add_totals(struct qctx *c, int use_counts)
{
    struct engine *e = c->e;
    const struct agg_table *t = c->q->domain == HT_DOM_HEAP ? &e->heap_agg : &e->commit_agg;
    for (uint32_t s = 0; s < e->si.nstacks; s++) {
        const struct agg *a = agg_peek(t, s);
        if (!a || (a->total_count | a->untracked_count | a->total_bytes | a->untracked_bytes) == 0)
            continue;
        uint32_t m = stack_memo(c, s);
        if (m == MEMO_EXCLUDED)
            continue;
        uint32_t gi = c->q->by <= HT_BY_IMAGE ? m - 1 : MEMO_EXCLUDED;
        if (use_counts) {
            /* Whole session: the outstanding blocks are AIFO, the freed ones
             * AIFI. The live blocks' reallocs are known when the split
             * matters (live_reallocs); else the sum is all that is shown.
             * (Out of memory, an aggregate can miss a realloc its block has.) */
            uint64_t live_re = c->live_re ? c->live_re[s] : 0;
            add_part(c, gi, HT_AIFO, a->out_count, a->out_bytes, live_re);
            add_part(c, gi, HT_AIFI, agg_freed_count(a), agg_freed_bytes(a),
                     a->reallocs > live_re ? a->reallocs - live_re : 0);
        }
        if (gi != MEMO_EXCLUDED) {
            c->groups[gi].untracked_count += a->untracked_count;
            c->groups[gi].untracked_bytes += a->untracked_bytes;
        }
        c->total.untracked_count += a->untracked_count;
        c->total.untracked_bytes += a->untracked_bytes;
    }
}

/* Whole session by (culled) stack, top N. A sort key is summed per group
 * first (8 bytes per group rather than a 120-byte row), the best N groups
 * are chosen, and rows are built for those alone in a second pass. The
 * order is row_cmp's: key, then group key (the canonical stack). */
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

/* What sort_key gives for a stack's row on the exact path (nothing is
 * allocated before the start, so AOFI/AOFO are 0). */
static int64_t agg_sort_key(int sort, const struct agg *a)
{
    switch (sort) {
    case HT_SORT_SOC:
        return (int64_t)a->out_count;
    case HT_SORT_ST:
        return (int64_t)a->total_bytes;
    case HT_SORT_STC:
        return (int64_t)a->total_count;
    case HT_SORT_SRC:
        return (int64_t)a->reallocs;
    default: /* so and impact: the outstanding bytes */
        return (int64_t)a->out_bytes;
    }
}

static int agg_empty(const struct agg *a)
{
    return !a || (a->total_count | a->untracked_count | a->total_bytes | a->untracked_bytes) == 0;
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
    const uint64_t *f = stack_intern_frames(&c->e->si, s, &depth);
    uint32_t canon;
    stack_skip(c, s, f, depth, &canon);
    return canon;
}

static void add_stack_row(struct query_row *r, const struct agg *a)
{
    row_add(r, HT_AIFO, a->out_count, a->out_bytes, 0);
    row_add(r, HT_AIFI, agg_freed_count(a), agg_freed_bytes(a), 0);
    r->reallocs += a->reallocs;
    r->untracked_count += a->untracked_count;
    r->untracked_bytes += a->untracked_bytes;
}

/* 0 with res filled and sorted; 1 when this path cannot answer (a stack's
 * culled form could not be cached: the general path can) with res as it
 * was; UV_ENOMEM. */
static int exact_top_stacks(struct engine *e, const struct query *q, uint32_t top,
                            struct query_result *res)
{
    struct qctx ctx, *c = &ctx;
    memset(c, 0, sizeof(*c));
    c->e = e;
    c->q = q;
    struct query_result out;
    memset(&out, 0, sizeof(out));
    const struct agg_table *t = q->domain == HT_DOM_HEAP ? &e->heap_agg : &e->commit_agg;
    uint32_t n = e->si.nstacks;
    int64_t *gk = ht_calloc(n, sizeof(int64_t));
    uint8_t *used = ht_calloc(n, 1); /* 1: group has stacks, 2: and is in the top */
    struct kgroup *best = ht_malloc((size_t)(top < n ? top : n) * sizeof(*best) + 1);
    int rc = UV_ENOMEM;
    if (!gk || !used || !best)
        goto done;
    struct topn sel = {(char *)best, sizeof(*best), 0, top < n ? top : n, kg_before, 0};
    for (uint32_t s = 0; s < n; s++) {
        const struct agg *a = agg_peek(t, s);
        if (agg_empty(a))
            continue;
        uint32_t g = canon_of(c, s);
        if (g >= n || c->oom) {
            rc = c->oom ? UV_ENOMEM : 1;
            goto done;
        }
        gk[g] += agg_sort_key(c->q->sort, a);
        out.ngroups += !used[g];
        used[g] = 1;
        add_stack_row(&c->total, a);
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
        r->skip = c->q->ncull ? (uint16_t)(c->q->skip_cache->skip[best[i].g] - 1u) : 0;
        used[best[i].g] = 2;
    }
    for (uint32_t s = 0; s < n && nbest > 0; s++) {
        const struct agg *a = agg_peek(t, s);
        if (agg_empty(a))
            continue;
        uint32_t g = canon_of(c, s);
        if (used[g] != 2)
            continue;
        struct kgroup key = {0, g};
        const struct kgroup *w = bsearch(&key, best, nbest, sizeof(*best), kg_by_group);
        add_stack_row(&out.rows[w - best], a);
    }
    out.nrows = nbest;
    out.total = c->total;
    out.exact_totals = 1;
    out.complete = 1;
    g_sort = q->sort;
    qsort(out.rows, out.nrows, sizeof(struct query_row), row_cmp);
    *res = out;
    out.rows = NULL;
    rc = 0;
done:
    query_result_free(&out);
    ht_free(c->fm_keys);
    ht_free(c->fm_vals);
    ht_free(gk);
    ht_free(used);
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

int engine_query(struct engine *e, const struct query *qin, struct query_result *res)
{
    /* Nothing has happened after now: a window ends at now at the latest, so
     * live blocks (freed at "infinity") are always outside it. */
    struct query qc = *qin;
    const struct query *q = &qc;
    if (qc.t2 > e->now)
        qc.t2 = e->now;
    memset(res, 0, sizeof(*res));
    uint32_t top = q->top && q->top < HT_QUERY_TOP_MAX ? q->top : HT_QUERY_TOP_MAX;
    if (whole_session(e, q) && q->types == HT_TYPES_ALL && !q->list && q->by == HT_BY_STACK &&
        q->nrequire == 0 && (q->ncull == 0 || q->skip_cache)) {
        int rc = exact_top_stacks(e, q, top, res);
        if (rc <= 0)
            return rc;
    }
    struct qctx c;
    memset(&c, 0, sizeof(c));
    c.e = e;
    c.q = q;
    c.nmemo = e->si.nstacks;
    c.memo = ht_calloc(c.nmemo, sizeof(uint32_t));
    c.gmask = 255;
    c.gslots = ht_calloc(c.gmask + 1, sizeof(uint32_t));
    if (q->list) {
        c.hcap = top;
        c.heap = ht_malloc(top * sizeof(struct query_row));
    }
    if (!c.memo || !c.gslots || (q->list && !c.heap))
        goto oom;
    int whole = whole_session(e, q);
    const struct chunk_ring *ring = q->domain == HT_DOM_HEAP ? &e->heap_life : &e->commit_life;
    int ring_ok = 1;
    if (whole && !q->list && q->by != HT_BY_HEAP) {
        /* Exact: outstanding = AIFO, freed = AIFI, nothing before start (the
         * per-stack totals know no heap). Splitting a stack's reallocs by
         * type needs its live blocks' counts. */
        if (q->domain == HT_DOM_HEAP && (q->types != HT_TYPES_ALL || q->by == HT_BY_TYPE) &&
            live_reallocs(&c) != 0)
            goto oom;
        add_totals(&c, 1);
        res->exact_totals = 1;
    } else {
        scan(&c);
        if (whole && !q->list)
            add_totals(&c, 0);
        /* Blocks freed by now are needed only for AIFI/AOFI, or when the
         * window ends before now; else the live blocks answer alone. */
        int live_only = q->t2 == e->now && !(q->types & ((1u << HT_AIFI) | (1u << HT_AOFI)));
        ring_ok = live_only || chunk_ring_complete_from(ring, q->t1);
    }
    res->complete = ring_ok && !c.re_incomplete;
    if (!ring_ok)
        res->horizon = ring->horizon;
    if (c.re_incomplete && e->re_ring.horizon > res->horizon)
        res->horizon = e->re_ring.horizon;
    if (c.oom)
        goto oom;
    g_sort = q->sort;
    if (q->list) {
        res->ngroups = c.nblocks;
        res->rows = c.heap;
        res->nrows = c.hn;
        c.heap = NULL;
    } else {
        /* Select the best top groups with a bounded heap, then sort them. */
        struct query_row *best =
            ht_malloc((size_t)(top < c.ngroups ? top : c.ngroups + 1) * sizeof(struct query_row));
        if (!best)
            goto oom;
        struct topn t = {(char *)best, sizeof(*best), 0, top, row_before_any, q->sort};
        for (uint32_t g = 0; g < c.ngroups; g++) {
            if (!group_nonempty(&c.groups[g]))
                continue;
            res->ngroups++;
            topn_offer(&t, &c.groups[g]);
        }
        res->rows = best;
        res->nrows = t.n;
    }
    qsort(res->rows, res->nrows, sizeof(struct query_row), row_cmp);
    res->total = c.total;
    ht_free(c.memo);
    ht_free(c.gslots);
    ht_free(c.ghash);
    ht_free(c.groups);
    ht_free(c.heap);
    ht_free(c.fm_keys);
    ht_free(c.fm_vals);
    ht_free(c.canon_groups);
    ht_free(c.re_keys);
    ht_free(c.live_re);
    return 0;
oom:
    ht_free(c.memo);
    ht_free(c.gslots);
    ht_free(c.ghash);
    ht_free(c.groups);
    ht_free(c.heap);
    ht_free(c.fm_keys);
    ht_free(c.fm_vals);
    ht_free(c.canon_groups);
    ht_free(c.re_keys);
    ht_free(c.live_re);
    query_result_free(res);
    return UV_ENOMEM;
}

void query_result_free(struct query_result *res)
{
    ht_free(res->rows);
    res->rows = NULL;
    res->nrows = 0;
}
