/* Row order (a row's derived figures, sort keys, ties) and the bounded top-N heap. */
#include "query-int.h"

#include <stdlib.h>
#include <string.h>

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

int64_t sort_key(int sort, const struct query_row *r)
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

void rows_sort(struct query_row *rows, uint32_t n, int sort)
{
    static int (*const cmp[])(const void *, const void *) = {
        [HT_SORT_SO] = row_cmp_so,   [HT_SORT_SOC] = row_cmp_soc,
        [HT_SORT_ST] = row_cmp_st,   [HT_SORT_STC] = row_cmp_stc,
        [HT_SORT_SRC] = row_cmp_src, [HT_SORT_IMPACT] = row_cmp_impact};
    qsort(rows, n, sizeof(*rows), cmp[sort >= 0 && sort <= HT_SORT_IMPACT ? sort : HT_SORT_SO]);
}

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

void topn_offer(struct topn *t, const void *x)
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

int row_before_any(const void *a, const void *b, int sort)
{
    return row_before(sort, a, b);
}
