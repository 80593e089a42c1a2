/*
 * The query's internals, shared by the engine's query files and by no one
 * else (query.h is the engine's query API): the context a query runs in and
 * the functions one job's file calls in another's.
 *   query.c          the plan: which path answers, and the result
 *   query-scan.c     reading live blocks and the lifetime ring
 *   query-realloc.c  realloc counts of a window
 *   query-group.c    groups, per-stack figures into rows, the top N
 *   query-topn.c     row order and the bounded top-N heap
 *   query-cull.c     --cull / --require and the skip cache
 *   query-image.c    image and function group keys
 */
#ifndef QUERY_INT_H
#define QUERY_INT_H

#include "engine-view.h"
#include "ht-alloc.h"
#include "query-scratch.h"
#include "query.h"

#include <stddef.h>
#include <stdint.h>

#define MEMO_EXCLUDED UINT32_MAX
#define LIVE UINT64_MAX
#define T_BIT(t) (1u << (t))
#define LIVE_TYPES (T_BIT(HT_AIFO) | T_BIT(HT_AOFO))
#define DONE_TYPES (T_BIT(HT_AIFI) | T_BIT(HT_AOFI))

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
static inline void *qalloc(struct qctx *c, size_t n, size_t size)
{
    return c->qs ? qscratch_calloc(c->qs, n, size) : ht_calloc(n, size);
}

static inline void qfree(struct qctx *c, void *p)
{
    if (!c->qs)
        ht_free(p);
}

/* query-topn.c (with query.h's query_row_* figures, which sort_key reads) */
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

int64_t sort_key(int sort, const struct query_row *r);
void rows_sort(struct query_row *rows, uint32_t n, int sort);
void topn_offer(struct topn *t, const void *x);
int row_before_any(const void *a, const void *b, int sort); /* a topn_before_fn for rows */

/* query-group.c */
uint32_t group_for(struct qctx *c, uint64_t key, uint64_t h, uint32_t stack, unsigned skip,
                   const uint64_t *suffix, unsigned nsuffix);
uint32_t stack_memo(struct qctx *c, uint32_t stack);
void row_add(struct query_row *r, int type, uint64_t count, uint64_t size, uint64_t reallocs);
int select_groups(struct qctx *c, uint32_t top, struct query_result *res);
int finish_dense(struct qctx *c, uint32_t top, struct query_result *res);

/* query-cull.c */
unsigned stack_skip(struct qctx *c, uint32_t stack, const uint64_t *f, unsigned depth,
                    uint32_t *canon);
int require_ok(struct qctx *c, const uint64_t *f, unsigned depth);

/* query-image.c */
uint64_t image_key(struct qctx *c, uint64_t frame);
uint64_t function_key(struct qctx *c, uint64_t frame);

/* query-realloc.c */
uint64_t block_reallocs(struct qctx *c, unsigned heap, uint64_t addr, uint64_t a, uint64_t f,
                        unsigned re);
void dense_block_re(struct qctx *c, int type, uint32_t stack, unsigned heap, uint64_t addr,
                    uint64_t a, uint64_t f, unsigned re);
void re_resolve(struct qctx *c);
uint64_t re_reach(struct qctx *c);
int live_reallocs(struct qctx *c);

/* query-scan.c */
const void *ring_run(const struct chunk_ring *r, uint64_t i, uint64_t n, uint64_t *len);
/* Here, beside the block loops that call it for each block with reallocs. */
int stack_required(struct qctx *c, uint32_t stack);
void scan_live(struct qctx *c, int dense);
void scan_ring(struct qctx *c, int dense);

#endif
