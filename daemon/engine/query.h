/* Window queries over heap allocations and commits (WPA's Impacting Type semantics). */
#ifndef QUERY_H
#define QUERY_H

#include "frame-match.h"

#include <stdint.h>

struct engine;

enum ht_domain { HT_DOM_HEAP, HT_DOM_COMMIT };
enum ht_by { HT_BY_STACK, HT_BY_FRAME, HT_BY_IMAGE, HT_BY_HEAP, HT_BY_TYPE };
enum ht_sort { HT_SORT_SO, HT_SORT_SOC, HT_SORT_ST, HT_SORT_STC, HT_SORT_SRC, HT_SORT_IMPACT };
enum ht_itype { HT_AIFI, HT_AIFO, HT_AOFI, HT_AOFO };
#define HT_TYPES_ALL 0xfu
#define HT_QUERY_TOP_MAX 10000 /* xperf's cap on displayed items */

extern const char *const ht_by_names[];   /* "stack", "frame", ... */
extern const char *const ht_sort_names[]; /* "so", "soc", ... */
extern const char *const ht_type_names[]; /* "AIFI", ... */

/* Frames culled per stack for one fixed cull list, kept across queries (the
 * daemon's default list never changes within a session). Owned by the caller;
 * valid only with the same cull patterns every time. */
struct skip_cache {
    uint16_t *skip;  /* per stack id: culled frames + 1, 0 = not computed */
    uint32_t *canon; /* per stack id: the first stack with the same culled frames */
    uint32_t alloc;
    uint64_t *slots; /* culled-suffix hash -> canonical stack id (query-cull.c: slot_make) */
    uint32_t mask, n;
};

void skip_cache_free(struct skip_cache *sc);
/* Compute the cache's entries for stacks [from, to) with these cull patterns
 * (the ones the cache is for), so the first query after they appear does not
 * pay for them. Out of memory leaves entries to be computed by queries.
 * The engine's owner thread: it also makes the engine's query scratch ready
 * for its stacks (query-scratch.h: qscratch_reserve) when no view is open. */
void skip_cache_warm(struct engine *e, struct skip_cache *sc, const struct frame_pat *cull,
                     unsigned ncull, uint32_t from, uint32_t to);

struct query {
    int domain, by, sort;
    int list;                    /* one row per block (commits --list) instead of groups */
    uint64_t t1, t2;             /* window, ns since session start, inclusive */
    unsigned types;              /* bit (1 << ht_itype) per type kept */
    /* 0 = HT_QUERY_TOP_MAX; more only for a profile of every group (export
     * --format pprof, whose memory its caller caps), never in list mode. */
    uint32_t top;
    uint64_t size_min, size_max; /* [min, max); max UINT64_MAX = open */
    uint64_t life_min, life_max; /* [min, max); a live block's lifetime is infinite */
    const struct frame_pat *require;
    unsigned nrequire;
    const struct frame_pat *cull;
    unsigned ncull;
    struct skip_cache *skip_cache; /* optional: see struct skip_cache */
};

void query_init(struct query *q);

struct query_row {
    uint64_t key;   /* stack id, frame, image (query_result_image), heap handle or type, by q->by */
    uint32_t stack; /* a stack of the group; frames[skip..] is what the group shows */
    uint16_t skip;  /* frames culled from the allocation site's end */
    uint64_t count[4], bytes[4]; /* per ht_itype */
    uint64_t reallocs;           /* realloc events inside the window on the group's blocks */
    uint64_t untracked_count, untracked_bytes; /* since start; only for whole-session windows */
    uint64_t a, f; /* list mode: alloc/commit and free time (UINT64_MAX = live) */
};

/* Derived figures of a row. */
uint64_t query_row_size(const struct query_row *r);        /* st: AIFI + AIFO */
uint64_t query_row_count(const struct query_row *r);       /* stc */
uint64_t query_row_outstanding(const struct query_row *r); /* so: AIFO + AOFO */
uint64_t query_row_outstanding_count(const struct query_row *r);
int64_t query_row_impacting(const struct query_row *r); /* AIFO - AOFI */

struct query_result {
    struct query_row *rows; /* sorted, at most top */
    uint32_t nrows;
    uint64_t ngroups; /* groups (or blocks) before top-N */
    struct query_row total;
    int complete;     /* 1 when exact; 0 when the answer needs blocks or realloc
                       * events a ring may have evicted (at or before horizon) */
    uint64_t horizon; /* valid when !complete */
    int exact_totals; /* answered from the per-stack totals since start */
    unsigned paths;   /* QP_* bits: how it was answered (tests, benchmarks) */
    char **images;    /* by image: the module names, [key]; [0] (no module) is NULL */
    uint32_t nimages;
};

/* How a query was answered (query_result.paths). */
#define QP_EXACT (1u << 0)          /* from the per-stack aggregates since start */
#define QP_LIVE_RE_VIEW (1u << 1)   /* some stacks' live-block reallocs from the view */
#define QP_LIVE_RE_SCAN (1u << 2)   /* ... and some counted block by block */
#define QP_DENSE (1u << 3)          /* blocks summed per stack, grouped at the end */
#define QP_CANON (1u << 4)          /* grouped by (culled) stack, rows for the top only */
#define QP_AOFO_SUB (1u << 5)       /* live AOFO = outstanding - live blocks from t1 */
#define QP_CHUNKS_SKIPPED (1u << 6) /* live chunks allocated before the window's reach not read */
#define QP_NO_LIVE (1u << 7)        /* no live block could be kept: the table not read */
#define QP_NO_RING (1u << 8)        /* no completed block could be kept: the ring not read */
#define QP_FULL_SCAN (1u << 9)      /* AOFO wanted and every live block read */

/* Run a query (an engine view opened and closed around engine_query_view,
 * engine-view.h). 0, UV_ENOMEM, or UV_EBUSY while another view of the engine
 * is open; the caller frees with query_result_free. */
int engine_query(struct engine *e, const struct query *q, struct query_result *res);
/* An image row's module name (q->by == HT_BY_IMAGE), NULL for none. */
const char *query_result_image(const struct query_result *res, uint64_t key);
void query_result_free(struct query_result *res);

#endif
