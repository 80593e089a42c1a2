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
 * Bounded: a region larger than QSCRATCH_KEEP_MAX is not kept, and a region
 * more than 4 times larger than what the last QSCRATCH_DECAY queries used is
 * given back. A query that needs more than the region gets the rest from the
 * allocator (freed at its end), and the next query finds a region that large.
 */
#define QSCRATCH_KEEP_MAX ((size_t)256 << 20)
#define QSCRATCH_DECAY 32u

struct qscratch_block;

struct query_scratch {
    unsigned char *base; /* the region's allocation */
    unsigned char *mem;  /* its aligned start */
    size_t cap, used;
    size_t need;                  /* bytes this query asked for (region and overflow) */
    struct qscratch_block *extra; /* overflow blocks of this query */
    size_t recent_max;            /* most any of the last queries needed */
    unsigned recent_n;            /* queries counted in recent_max */
    uint64_t held;                /* bytes held between queries (the region) */
    uint64_t charged;             /* of which charged to the engine's acct (owner thread) */
    uint64_t queries, grown, trimmed;
};

/* The query's thread. */
void qscratch_begin(struct query_scratch *s);
/* n * size zeroed bytes, 64-byte aligned, valid until qscratch_end; NULL when out of memory. */
void *qscratch_calloc(struct query_scratch *s, size_t n, size_t size);
void qscratch_end(struct query_scratch *s);

/* The owner thread, no view open: charge or give back the bytes held since
 * the last sync; a region the budget refuses is freed. */
void qscratch_sync(struct query_scratch *s, struct mem_acct *acct);
void qscratch_close(struct query_scratch *s, struct mem_acct *acct);

#endif
