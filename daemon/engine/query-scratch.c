/* Query scratch arena (query-scratch.h). */
#define _GNU_SOURCE /* MADV_HUGEPAGE */
#include "query-scratch.h"

#include "ht-alloc.h"

#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define QS_ALIGN 64
#define QS_HUGE ((size_t)2 << 20)

/* An overflow block: the header, then its bytes. */
struct qscratch_block {
    struct qscratch_block *next;
    unsigned char pad[QS_ALIGN - sizeof(void *)];
};

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

static void region_free(struct query_scratch *s)
{
    ht_free(s->base);
    s->base = s->mem = NULL;
    s->cap = 0;
}

/* A region of at least n bytes (rounded to huge pages); 0 or -1. */
static int region_make(struct query_scratch *s, size_t n)
{
    size_t cap = round_up(n, QS_HUGE);
    unsigned char *base = ht_malloc(cap + QS_HUGE);
    if (!base)
        return -1;
    region_free(s);
    s->base = base;
    s->mem = (unsigned char *)round_up((size_t)(uintptr_t)base, QS_HUGE);
    s->cap = cap;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* Advice only: where THP is off, or set to "never", pages are 4 KiB. */
    (void)madvise(s->mem, cap, MADV_HUGEPAGE);
#endif
    s->grown++;
    return 0;
}

void qscratch_begin(struct query_scratch *s)
{
    s->used = 0;
    s->need = 0;
    s->extra = NULL;
}

void *qscratch_calloc(struct query_scratch *s, size_t n, size_t size)
{
    if (size && n > (SIZE_MAX - 2 * QS_ALIGN) / size)
        return NULL;
    size_t bytes = round_up(n * size > 0 ? n * size : 1, QS_ALIGN);
    s->need += bytes;
    if (s->cap - s->used >= bytes) {
        void *p = s->mem + s->used;
        s->used += bytes;
        memset(p, 0, bytes);
        return p;
    }
    struct qscratch_block *b = ht_malloc(sizeof(*b) + bytes);
    if (!b)
        return NULL;
    b->next = s->extra;
    s->extra = b;
    memset(b + 1, 0, bytes);
    return b + 1;
}

void qscratch_end(struct query_scratch *s)
{
    while (s->extra) {
        struct qscratch_block *b = s->extra;
        s->extra = b->next;
        ht_free(b);
    }
    s->queries++;
    if (s->recent_n >= QSCRATCH_DECAY) {
        s->recent_max = 0;
        s->recent_n = 0;
    }
    s->recent_n++;
    if (s->need > s->recent_max)
        s->recent_max = s->need;
    if (s->need > s->cap && s->need <= QSCRATCH_KEEP_MAX) {
        /* Not touched here: the next query that needs it faults it in. */
        (void)region_make(s, s->need);
    } else if (s->cap > QSCRATCH_KEEP_MAX ||
               (s->recent_n == QSCRATCH_DECAY && s->cap > 4 * round_up(s->recent_max, QS_HUGE))) {
        region_free(s);
        s->trimmed++;
        if (s->recent_max && s->recent_max <= QSCRATCH_KEEP_MAX)
            (void)region_make(s, s->recent_max);
    }
    s->used = 0;
    s->need = 0;
    s->held = s->cap ? s->cap + QS_HUGE : 0;
}

void qscratch_sync(struct query_scratch *s, struct mem_acct *acct)
{
    if (s->held > s->charged) {
        if (mem_acct_charge(acct, MEM_query_scratch, s->held - s->charged) != 0) {
            /* Over the budget (counted by the acct): not kept. */
            region_free(s);
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
    region_free(s);
    s->held = 0;
    qscratch_sync(s, acct);
    memset(s, 0, sizeof(*s));
}
