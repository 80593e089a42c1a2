/*
 * Groups: a stack's group (by its culled stack, function, image, heap or
 * type), found or made once per stack, and the end of a query that sums
 * each stack's figures into its group and keeps the top N.
 */
#include "query-int.h"

#include "ht-hash.h"

#include <stdlib.h>
#include <string.h>
#include <uv.h>

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
uint32_t group_for(struct qctx *c, uint64_t key, uint64_t h, uint32_t stack, unsigned skip,
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
uint32_t stack_memo(struct qctx *c, uint32_t stack)
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

void row_add(struct query_row *r, int type, uint64_t count, uint64_t size, uint64_t reallocs)
{
    r->count[type] += count;
    r->bytes[type] += size;
    r->reallocs += reallocs;
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
int select_groups(struct qctx *c, uint32_t top, struct query_result *res)
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

int finish_dense(struct qctx *c, uint32_t top, struct query_result *res)
{
    const struct query *q = c->q;
    if (q->by == HT_BY_STACK && (q->ncull == 0 || q->skip_cache)) {
        int rc = finish_canon(c, top, res);
        if (rc <= 0)
            return rc;
    }
    return finish_rows(c, top, res);
}
