/* Scratch memory for queries, kept with the engine between queries. */
#ifndef QUERY_SCRATCH_H
#define QUERY_SCRATCH_H

#include "mem-acct.h"

#include <stddef.h>
#include <stdint.h>

/*
 * A bump arena for a query's per-stack arrays (dense sums, group keys,
 * memos): tens of bytes per stack, ~10 MB at 100k stacks. Fresh memory is
 * what a cold query paid most for on the CI VMs (a 4 KiB page fault costs
 * ~50 us there: calloc and touch of 10 MB took 106-154 ms, the same bytes
 * reused 0.6 ms), so the arena keeps its region between queries and asks
 * for transparent huge pages where the kernel has them (the same 10 MB
 * first touched in 2 MiB pages: 1-14 ms; measured with a probe on these VMs).
 *
 * Threads: one query per engine at a time (one view per engine), and only
 * the view's holder uses the arena, on whatever thread runs the query:
 * qscratch_begin / _calloc / _end there. qscratch_sync and _close run on the
 * engine's owner thread while no view is open (at view close), and move the
 * arena's bytes into the engine's accounting (MEM_query_scratch), which
 * belongs to the owner thread.
 *
 * Bounded: memory past QSCRATCH_KEEP_MAX is not kept, and when the arena
 * holds more than 4 times what any of the last QSCRATCH_DECAY queries
 * needed (and than its reserve), it is given back. It grows by regions kept for the next queries
 * (a query that needs more than the arena holds adds a region and touches
 * it once; replacing the region by a larger one would make the next query
 * fault the whole of it in again).
 */
#define QSCRATCH_KEEP_MAX ((size_t)256 << 20)
#define QSCRATCH_DECAY 32u
#define QSCRATCH_REGIONS 24 /* each at least the size of all before it: 2 MiB << 23 is plenty */

struct qscratch_region {
    unsigned char *base; /* the allocation */
    unsigned char *mem;  /* its aligned start */
    size_t cap, used;
    size_t touched; /* bytes from mem on that qscratch_reserve has faulted in */
    size_t bytes;   /* allocated, with the alignment slack */
};

struct query_scratch {
    struct qscratch_region r[QSCRATCH_REGIONS];
    unsigned nr;
    size_t cap;        /* bytes in all regions */
    size_t need;       /* bytes this query asked for */
    void *extra;       /* this query's allocations that no region could take */
    size_t recent_max; /* most any of the last queries needed */
    unsigned recent_n; /* queries counted in recent_max */
    size_t floor;      /* never trimmed below this (qscratch_reserve) */
    int untouched;     /* some of the reserve is left to touch (qscratch_touch) */
    uint64_t held;     /* bytes held between queries */
    uint64_t charged;  /* of which charged to the engine's acct (owner thread) */
    uint64_t queries, grown, trimmed;
};

/* The query's thread. */
void qscratch_begin(struct query_scratch *s);
/* n * size zeroed bytes, 64-byte aligned, valid until qscratch_end; NULL when out of memory. */
void *qscratch_calloc(struct query_scratch *s, size_t n, size_t size);
void qscratch_end(struct query_scratch *s);

/*
 * The owner thread, no view open: make the arena hold at least bytes, in
 * regions of at least step bytes (the largest array a query takes), and keep
 * them from trimming; their pages are touched QSCRATCH_TOUCH_STEP bytes per
 * call at most (qscratch_touch), so that no call holds the owner's loop for
 * long (2 MiB: 1-5 ms on the CI VMs). A query's first use of memory is what
 * costs (page faults); done while the engine warms a session
 * (skip_cache_warm), at view closes and at event batches while some is left
 * (engine_apply_batch), the first queries find it ready.
 * 0, or -1 when not all could be had (queries then grow the arena themselves).
 */
#define QSCRATCH_TOUCH_STEP ((size_t)2 << 20)
int qscratch_reserve(struct query_scratch *s, size_t bytes, size_t step);
/* Touch up to QSCRATCH_TOUCH_STEP more bytes of the reserve; 1 while some remain. */
int qscratch_touch(struct query_scratch *s);

/* The owner thread, no view open: charge or give back the bytes held since
 * the last sync; an arena the budget refuses is freed. */
void qscratch_sync(struct query_scratch *s, struct mem_acct *acct);
void qscratch_close(struct query_scratch *s, struct mem_acct *acct);

#endif
