/* The consumer's table of the target's mappings: a sorted array of non-overlapping regions. */
#include "regions.h"

#include "ht-alloc.h"

#include <string.h>

void regions_init(struct regions *rt, uint32_t cap)
{
    memset(rt, 0, sizeof(*rt));
    rt->cap = cap;
}

void regions_close(struct regions *rt)
{
    ht_free(rt->r);
    memset(rt, 0, sizeof(*rt));
}

/* Index of the first region ending after addr. */
static uint32_t lower(const struct regions *rt, uint64_t addr)
{
    uint32_t lo = 0, hi = rt->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (rt->r[mid].end <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const struct region *regions_find(const struct regions *rt, uint64_t addr)
{
    uint32_t i = lower(rt, addr);
    return i < rt->n && rt->r[i].start <= addr ? &rt->r[i] : NULL;
}

static int grow(struct regions *rt)
{
    if (rt->n < rt->alloc)
        return 0;
    if (rt->n >= rt->cap)
        return -1;
    uint32_t na = rt->alloc ? rt->alloc * 2 : 64;
    if (na > rt->cap)
        na = rt->cap;
    struct region *r = ht_realloc(rt->r, (size_t)na * sizeof(*r));
    if (!r)
        return -1;
    rt->r = r;
    rt->alloc = na;
    return 0;
}

static int insert_at(struct regions *rt, uint32_t i, const struct region *g)
{
    if (grow(rt))
        return -1;
    memmove(&rt->r[i + 1], &rt->r[i], (size_t)(rt->n - i) * sizeof(*g));
    rt->r[i] = *g;
    rt->n++;
    return 0;
}

/* No region straddles addr afterwards (unless the table is full: then the
 * straddling region is cut at addr, losing its tail, counted). */
static void split(struct regions *rt, uint64_t addr)
{
    uint32_t i = lower(rt, addr);
    if (i >= rt->n || rt->r[i].start >= addr)
        return;
    struct region tail = rt->r[i];
    tail.start = addr;
    rt->r[i].end = addr;
    if (insert_at(rt, i + 1, &tail))
        rt->drops++;
}

/* Regions [*i, *j) lie inside [start, end) once split. */
static void span(struct regions *rt, uint64_t start, uint64_t end, uint32_t *i, uint32_t *j)
{
    split(rt, start);
    split(rt, end);
    *i = lower(rt, start);
    *j = *i;
    while (*j < rt->n && rt->r[*j].start < end)
        (*j)++;
}

static int same(const struct region *a, const struct region *b)
{
    return a->end == b->start && a->heap == b->heap && a->committed == b->committed;
}

/* Join equal neighbours around [i, j] so heap arenas changed page by page stay one region. */
static void merge(struct regions *rt, uint32_t i, uint32_t j)
{
    if (i > 0)
        i--;
    if (j + 1 < rt->n)
        j++;
    for (uint32_t k = i; k < j && k + 1 < rt->n;) {
        if (same(&rt->r[k], &rt->r[k + 1])) {
            rt->r[k].end = rt->r[k + 1].end;
            memmove(&rt->r[k + 1], &rt->r[k + 2], (size_t)(rt->n - k - 2) * sizeof(rt->r[0]));
            rt->n--;
            j--;
        } else {
            k++;
        }
    }
}

static void remove_span(struct regions *rt, uint32_t i, uint32_t j, regions_fn fn, void *arg)
{
    if (i == j)
        return;
    for (uint32_t k = i; k < j; k++)
        if (fn)
            fn(arg, &rt->r[k]);
    memmove(&rt->r[i], &rt->r[j], (size_t)(rt->n - j) * sizeof(rt->r[0]));
    rt->n -= j - i;
}

void regions_unmap(struct regions *rt, uint64_t start, uint64_t end, regions_fn fn, void *arg)
{
    uint32_t i, j;
    if (start >= end)
        return;
    span(rt, start, end, &i, &j);
    remove_span(rt, i, j, fn, arg);
}

void regions_map(struct regions *rt, uint64_t start, uint64_t end, int heap, int committed,
                 regions_fn fn, void *arg)
{
    uint32_t i, j;
    if (start >= end)
        return;
    span(rt, start, end, &i, &j);
    remove_span(rt, i, j, fn, arg);
    struct region g = {start, end, (uint8_t) !!heap, (uint8_t) !!committed};
    if (insert_at(rt, i, &g)) {
        rt->drops++;
        return;
    }
    merge(rt, i, i);
}

void regions_protect(struct regions *rt, uint64_t start, uint64_t end, int committed, regions_fn fn,
                     void *arg)
{
    uint32_t i, j;
    if (start >= end)
        return;
    span(rt, start, end, &i, &j);
    for (uint32_t k = i; k < j; k++) {
        struct region *g = &rt->r[k];
        if (g->heap || g->committed == !!committed)
            continue;
        if (fn)
            fn(arg, g);
        g->committed = (uint8_t) !!committed;
    }
    if (j > i)
        merge(rt, i, j - 1);
    else
        merge(rt, i, i);
}
