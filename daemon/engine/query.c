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
 * Realloc counting rules: see block_reallocs_own (query-realloc.c).
 *
 * This file is the plan (which path answers, and the result); the jobs are
 * in the query-*.c files query-int.h lists.
 */
#include "query-int.h"

#include "engine.h"
#include "ht-alloc.h"

#include <string.h>
#include <uv.h>

/* Whole session with no per-block filter: the exact totals since start answer it. */
static int whole_session(const struct query *q, uint64_t now)
{
    return q->t1 == 0 && q->t2 == now && q->size_min == 0 && q->size_max == UINT64_MAX &&
           q->life_min == 0 && q->life_max == UINT64_MAX;
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

/* The context of a query over v: the scratch arena begun (qscratch_end
 * after ctx_free, whatever this returns) and the arrays every path needs.
 * 0, or -1 when out of memory. */
static int ctx_open(struct qctx *c, struct engine_view *v, const struct query *q, uint64_t now,
                    uint32_t top)
{
    memset(c, 0, sizeof(*c));
    c->v = v;
    c->si = ev_stacks(v);
    c->q = q;
    c->now = now;
    c->re_ring = ev_re_ring(v);
    c->re_unresolved = ev_re_unresolved(v);
    c->nmemo = ev_nstacks(v);
    c->qs = ev_scratch(v);
    qscratch_begin(c->qs);
    c->memo = qalloc(c, c->nmemo + 1, sizeof(uint32_t));
    c->gmask = 255;
    c->gslots = ht_calloc(c->gmask + 1, sizeof(uint32_t));
    if (q->nrequire)
        c->req = qalloc(c, c->nmemo + 1, 1);
    if (q->list) {
        c->hcap = top;
        c->heap = ht_malloc(top * sizeof(struct query_row));
    }
    if (!c->memo || !c->gslots || (q->list && !c->heap) || (q->nrequire && !c->req))
        return -1;
    return 0;
}

/* The figures of the query: from the aggregates since start (exact), or
 * the blocks read; *ring_ok 0 when the lifetime ring may have evicted some
 * the window needs. 0, or -1 when out of memory. */
static int ctx_gather(struct qctx *c, int whole, int dense, const struct chunk_ring *ring,
                      struct query_result *res, int *ring_ok)
{
    const struct query *q = c->q;
    uint64_t now = c->now;
    *ring_ok = 1;
    if (whole && dense) {
        /* Exact: outstanding = AIFO, freed = AIFI, nothing before start (the
         * per-stack totals know no heap). Splitting a stack's reallocs by
         * type needs its live blocks' counts. */
        c->exact = 1;
        c->paths |= QP_EXACT;
        if (q->domain == HT_DOM_HEAP && (q->types != HT_TYPES_ALL || q->by == HT_BY_TYPE) &&
            live_reallocs(c) != 0)
            return -1;
        res->exact_totals = 1;
        return 0;
    }
    if (dense) {
        c->paths |= QP_DENSE;
        for (int t = 0; t < 4; t++)
            if ((q->types & T_BIT(t)) && !(c->acc[t] = qalloc(c, c->nmemo + 1, sizeof(struct acc))))
                return -1;
    }
    scan_live(c, dense);
    /* Blocks freed by now are needed only for AIFI/AOFI, or when the
     * window ends before now; else the live blocks answer alone. */
    int live_only = q->t2 == now && !(q->types & DONE_TYPES);
    if (live_only)
        c->paths |= QP_NO_RING;
    else
        scan_ring(c, dense);
    re_resolve(c);
    if (whole && !q->list)
        add_untracked(c);
    *ring_ok = live_only || chunk_ring_complete_from(ring, q->t1);
    return 0;
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
    uint32_t top = !q->top || (q->list && q->top > HT_QUERY_TOP_MAX) ? HT_QUERY_TOP_MAX : q->top;
    struct qctx c;
    if (ctx_open(&c, v, q, now, top) != 0)
        goto oom;
    int whole = whole_session(q, now);
    int dense = !q->list && q->by != HT_BY_HEAP;
    const struct chunk_ring *ring = q->domain == HT_DOM_HEAP ? ev_heap_life(v) : ev_commit_life(v);
    int ring_ok, rc;
    if (ctx_gather(&c, whole, dense, ring, res, &ring_ok) != 0 || c.oom)
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
