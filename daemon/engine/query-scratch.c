/* Query scratch arena (query-scratch.h). */
#include "query-scratch.h"

#include "ht-alloc.h"
#include "huge-pages.h"

#include <string.h>

#define QS_ALIGN 64
#define QS_HUGE ((size_t)2 << 20)

/* An allocation no region could take: the header, then its bytes. */
struct qscratch_extra {
    struct qscratch_extra *next;
    unsigned char pad[QS_ALIGN - sizeof(void *)];
};

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

static void regions_free(struct query_scratch *s)
{
    for (unsigned i = 0; i < s->nr; i++)
        ht_free(s->r[i].base);
    memset(s->r, 0, sizeof(s->r));
    s->nr = 0;
    s->cap = 0;
}

/* A new region of at least n bytes (2 MiB aligned and rounded, so that the
 * kernel can back it with huge pages); NULL when none can be had. */
static struct qscratch_region *region_add(struct query_scratch *s, size_t n)
{
    if (s->nr == QSCRATCH_REGIONS || s->cap + n > QSCRATCH_KEEP_MAX)
        return NULL;
    /* Small sessions' arenas stay small: huge page alignment only from 2 MiB on. */
    int huge = n >= QS_HUGE;
    size_t align = huge ? QS_HUGE : QS_ALIGN;
    size_t cap = round_up(n, huge ? QS_HUGE : (size_t)4096);
    unsigned char *base = ht_malloc(cap + align);
    if (!base)
        return NULL;
    struct qscratch_region *r = &s->r[s->nr++];
    r->base = base;
    r->mem = (unsigned char *)round_up((size_t)(uintptr_t)base, align);
    r->cap = cap;
    r->used = 0;
    r->touched = 0;
    r->bytes = cap + align;
    s->cap += cap;
    if (huge)
        ht_huge_pages_advise(r->mem, cap);
    s->grown++;
    return r;
}

static uint64_t held_bytes(const struct query_scratch *s)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < s->nr; i++)
        n += s->r[i].bytes;
    return n;
}

void qscratch_begin(struct query_scratch *s)
{
    for (unsigned i = 0; i < s->nr; i++)
        s->r[i].used = 0;
    s->need = 0;
    s->extra = NULL;
}

void *qscratch_calloc(struct query_scratch *s, size_t n, size_t size)
{
    if (size && n > (SIZE_MAX - 2 * QS_HUGE) / size)
        return NULL;
    size_t bytes = round_up(n * size > 0 ? n * size : 1, QS_ALIGN);
    s->need += bytes;
    struct qscratch_region *r = NULL;
    for (unsigned i = 0; i < s->nr && !r; i++)
        if (s->r[i].cap - s->r[i].used >= bytes)
            r = &s->r[i];
    /* Grown geometrically: a few regions at most. */
    if (!r)
        r = region_add(s, bytes > s->cap ? bytes : s->cap);
    if (r) {
        void *p = r->mem + r->used;
        r->used += bytes;
        memset(p, 0, bytes);
        return p;
    }
    struct qscratch_extra *x = ht_malloc(sizeof(*x) + bytes);
    if (!x)
        return NULL;
    x->next = s->extra;
    s->extra = x;
    memset(x + 1, 0, bytes);
    return x + 1;
}

void qscratch_end(struct query_scratch *s)
{
    while (s->extra) {
        struct qscratch_extra *x = s->extra;
        s->extra = x->next;
        ht_free(x);
    }
    s->queries++;
    if (s->recent_n >= QSCRATCH_DECAY) {
        s->recent_max = 0;
        s->recent_n = 0;
    }
    s->recent_n++;
    if (s->need > s->recent_max)
        s->recent_max = s->need;
    size_t want = round_up(s->recent_max, QS_HUGE);
    if (want < s->floor)
        want = s->floor;
    if (s->recent_n == QSCRATCH_DECAY && s->cap > 4 * want) {
        /* Oversized for a while: one region as large as the queries need. */
        regions_free(s);
        s->trimmed++;
        (void)region_add(s, s->recent_max > s->floor ? s->recent_max : s->floor);
    }
    s->need = 0;
    s->held = held_bytes(s);
}

int qscratch_reserve(struct query_scratch *s, size_t bytes, size_t step)
{
    if (bytes > QSCRATCH_KEEP_MAX)
        bytes = QSCRATCH_KEEP_MAX;
    s->floor = bytes;
    while (s->cap < bytes) {
        size_t n = bytes - s->cap;
        if (n < step)
            n = step;
        if (n < s->cap / 2)
            n = s->cap / 2; /* geometric: a few regions however the stacks come */
        if (!region_add(s, n))
            return -1;
    }
    s->held = held_bytes(s);
    (void)qscratch_touch(s);
    return 0;
}

int qscratch_touch(struct query_scratch *s)
{
    size_t left = QSCRATCH_TOUCH_STEP;
    for (unsigned i = 0; i < s->nr; i++) {
        struct qscratch_region *r = &s->r[i];
        if (r->touched >= r->cap)
            continue;
        if (left == 0)
            return s->untouched = 1;
        size_t n = r->cap - r->touched < left ? r->cap - r->touched : left;
        memset(r->mem + r->touched, 0, n); /* the page faults, now rather than in a query */
        r->touched += n;
        left -= n;
    }
    s->untouched = 0;
    for (unsigned i = 0; i < s->nr; i++)
        if (s->r[i].touched < s->r[i].cap)
            s->untouched = 1;
    return s->untouched;
}

void qscratch_sync(struct query_scratch *s, struct mem_acct *acct)
{
    if (s->held > s->charged) {
        if (mem_acct_charge(acct, MEM_query_scratch, s->held - s->charged) != 0) {
            /* Over the budget (counted by the acct): not kept. */
            regions_free(s);
            s->held = 0;
            s->trimmed++;
        } else {
            s->charged = s->held;
        }
    }
    if (s->held < s->charged) {
        mem_acct_discharge(acct, MEM_query_scratch, s->charged - s->held);
        s->charged = s->held;
    }
}

void qscratch_close(struct query_scratch *s, struct mem_acct *acct)
{
    regions_free(s);
    s->held = 0;
    qscratch_sync(s, acct);
    memset(s, 0, sizeof(*s));
}
