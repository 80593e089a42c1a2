/*
 * Realloc counting of a window: a block's own count where it answers, else
 * the realloc ring's event times (looked up per block, or resolved for all
 * deferred blocks in one pass), and the live blocks' counts for the exact
 * whole-session path. The rules: see block_reallocs_own.
 */
#include "query-int.h"

#include "ht-hash.h"

#include <stdlib.h>
#include <string.h>

/* Records [i, n) of a ring come in runs stored contiguously: the record at
 * i, and in *len how many follow it in its run (chunk_ring_at's layout). */
const void *ring_run(const struct chunk_ring *r, uint64_t i, uint64_t n, uint64_t *len)
{
    uint64_t idx = r->pushed <= r->cap ? i : (r->pushed + i) % r->cap;
    uint64_t per = 1ULL << LIFE_CHUNK_SHIFT, off = idx & (per - 1), run = per - off;
    if (r->pushed > r->cap && run > r->cap - idx)
        run = r->cap - idx; /* wraps to record 0 of the storage */
    *len = run < n - i ? run : n - i;
    return r->chunks[idx >> LIFE_CHUNK_SHIFT] + (size_t)off * r->elem;
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
 * Realloc events of a block inside the window (xperf's -range T1 T2 uses
 * only the event data between T1 and T2: Microsoft, "Using Actions to
 * Analyze Process Heap Data"): the realloc that made it, at its alloc
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

uint64_t block_reallocs(struct qctx *c, unsigned heap, uint64_t addr, uint64_t a, uint64_t f,
                        unsigned re)
{
    int ring;
    uint64_t k = block_reallocs_own(c, a, f, re, &ring);
    return ring ? k + re_lookup(c, heap, addr, a, f != LIVE && f == a) : k;
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
void dense_block_re(struct qctx *c, int type, uint32_t stack, unsigned heap, uint64_t addr,
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
void re_resolve(struct qctx *c)
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

/* The earliest alloc time of a block allocated before t1 that one of the
 * window's in-place realloc events names (sub_from if none): the AOFO blocks whose
 * reallocs the window counts are all allocated at or after it. Events of
 * blocks freed since only make it earlier than needed. */
uint64_t re_reach(struct qctx *c)
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

/* Exact typed path: the realloc events of each kept stack's live blocks
 * (whole session), so that a stack's total splits exactly into AIFO and
 * AIFI. The view knows most stacks' counts; the live blocks of the others
 * are counted in one pass over the table. */
int live_reallocs(struct qctx *c)
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
