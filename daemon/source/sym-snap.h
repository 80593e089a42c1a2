/*
 * A live source's symbol cache counters as of its last use, for stats and
 * status (source.h): the cache and the acct it charges belong to whoever
 * holds the session's symbolizer lock (the loop or a query worker), and the
 * loop reads their counters without waiting for that lock. The holder copies
 * them here after each use, under a mutex held only for the copy.
 */
#ifndef SYM_SNAP_H
#define SYM_SNAP_H

#include "mem-acct.h"
#include "source.h"
#include "symbols.h"

#include <string.h>
#include <uv.h>

struct sym_snap {
    uv_mutex_t mu;
    struct sym_stats ss;
    uint64_t bytes, over_budget, no_memory; /* the acct's, under its kind */
};

static inline int sym_snap_init(struct sym_snap *sn)
{
    memset(sn, 0, sizeof(*sn));
    return uv_mutex_init(&sn->mu);
}

static inline void sym_snap_destroy(struct sym_snap *sn)
{
    uv_mutex_destroy(&sn->mu);
}

/* Under the symbolizer lock (or before any worker can use the cache). c may be NULL. */
static inline void sym_snap_take(struct sym_snap *sn, const struct sym_cache *c,
                                 const struct mem_acct *acct, int kind)
{
    struct sym_stats ss;
    memset(&ss, 0, sizeof(ss));
    if (c)
        sym_cache_stats(c, &ss);
    uv_mutex_lock(&sn->mu);
    sn->ss = ss;
    sn->bytes = acct->bytes[kind];
    sn->over_budget = acct->over_budget[kind];
    sn->no_memory = acct->no_memory[kind];
    uv_mutex_unlock(&sn->mu);
}

/* Any thread. */
static inline void sym_snap_read(struct sym_snap *sn, struct sym_stats *ss, uint64_t *bytes,
                                 uint64_t *over_budget, uint64_t *no_memory)
{
    uv_mutex_lock(&sn->mu);
    *ss = sn->ss;
    *bytes = sn->bytes;
    *over_budget = sn->over_budget;
    *no_memory = sn->no_memory;
    uv_mutex_unlock(&sn->mu);
}

/* Add the snapshot's charges under kind to a source's counters. */
static inline void sym_snap_add(struct sym_snap *sn, struct source_stats *st, int kind)
{
    struct sym_stats ss;
    uint64_t b, ob, nm;
    sym_snap_read(sn, &ss, &b, &ob, &nm);
    st->mem[kind] += b;
    st->over_budget[kind] += ob;
    st->no_memory[kind] += nm;
}

#endif
