/*
 * Reading blocks: the live table (chunk by chunk, or the AOFO subtraction)
 * and the lifetime ring (run by run), each block classified into its type
 * and summed per stack (dense) or into its group (list mode, by heap).
 */
#include "query-int.h"

#include "ht-hash.h"

#include <string.h>

static int classify(const struct query *q, uint64_t a, uint64_t f)
{
    if (a > q->t2 || f < q->t1)
        return -1;
    if (a >= q->t1)
        return f <= q->t2 ? HT_AIFI : HT_AIFO;
    return f <= q->t2 ? HT_AOFI : HT_AOFO;
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
void scan_live(struct qctx *c, int dense)
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
void scan_ring(struct qctx *c, int dense)
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
