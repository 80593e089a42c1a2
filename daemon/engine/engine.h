/* The per-session engine: applies events, answers window queries. No I/O, no platform code. */
#ifndef ENGINE_H
#define ENGINE_H

#include "agg.h"
#include "alloc-table.h"
#include "commit-map.h"
#include "ht-event.h"
#include "mem-acct.h"
#include "modules.h"
#include "query-scratch.h"
#include "rings.h"
#include "stack-intern.h"

#include <stddef.h>
#include <stdint.h>

struct engine_limits {
    uint32_t table_cap;     /* live heap allocations tracked */
    uint32_t commit_cap;    /* committed ranges tracked */
    uint64_t life_ring;     /* completed heap allocations kept */
    uint64_t commit_ring;   /* completed commits kept */
    uint64_t timeline_ring; /* timeline samples kept */
    uint64_t timeline_ns;   /* sample interval */
    uint32_t max_stacks;
    uint32_t max_strings;
    uint32_t max_marks;
    uint32_t max_name_len; /* frame/string names longer are cut (counted); 0 = HT_STR_MAX_LEN */
    uint32_t max_modules;  /* modules kept (module_load events); 0 = MODULES_MAX_DEFAULT */
};

void engine_limits_default(struct engine_limits *lim);

/* Data-quality counters: every figure the engine could not take at face value. */
#define HT_QUALITY_MAP(X)                                                                          \
    X(events, "events applied")                                                                    \
    X(lost, "events the source lost (reported by the source)")                                     \
    X(unknown_frees, "frees/reallocs of addresses not in the table")                               \
    X(dup_allocs, "allocs of a live address (a free was missed)")                                  \
    X(no_stack, "allocs and commits without a stack")                                              \
    X(truncated_stacks, "stacks cut at the depth limit")                                           \
    X(cap_drops, "allocations untracked at the table cap")                                         \
    X(commit_cap_drops, "commits untracked at the commit cap")                                     \
    X(stack_drops, "allocs and commits whose stack was dropped (a stack or name cap, or memory)")  \
    X(decommit_unknown, "decommits/releases of uncommitted ranges")                                \
    X(bad_size, "events with an absurd size, dropped")                                             \
    X(time_backwards, "events whose time went backwards (clamped)")                                \
    X(malformed, "malformed input records, skipped")                                               \
    X(heap_overflow, "events on heaps past the heap limit, dropped")

struct ht_quality {
#define X(name, doc) uint64_t name;
    HT_QUALITY_MAP(X)
#undef X
};

struct heap_info {
    uint64_t handle;
    uint64_t out_bytes, out_count;
    uint64_t destroys;
};

struct engine_view;

struct mark {
    char name[64];
    uint64_t t;
};

struct engine {
    struct engine_limits lim;
    struct stack_intern si;
    struct alloc_table table;
    struct agg_table heap_agg, commit_agg;
    struct commit_map commits;
    struct chunk_ring heap_life, commit_life;
    struct chunk_ring re_ring; /* in-place reallocs, as many as heap_life holds blocks */
    uint64_t re_unresolved;    /* closed blocks whose realloc events could not all be marked */
    struct timeline tl;
    /* Heaps by index; a small open-addressing map finds the index of a handle. */
    struct heap_info *heaps;
    uint32_t nheaps, heaps_alloc;
    uint32_t *heap_slots;
    uint32_t heap_mask;
    uint32_t last_heap, last_heap_slot; /* one-entry cache of the lookup */
    struct mark *marks;
    uint32_t nmarks;
    struct module_table modules; /* module_load / module_unload events */
    uint64_t now;                /* latest time seen */
    uint64_t next_sample;        /* time of the next timeline sample */
    uint64_t heap_bytes, heap_count;
    uint64_t private_bytes;
    uint64_t peak_private_bytes, peak_heap_bytes, peak_commit_bytes;
    uint64_t pid;
    int exited;
    int64_t exit_code;
    struct ht_quality q;
    struct mem_acct acct;     /* every engine structure's memory, by structure */
    struct engine_view *view; /* the open view (engine-view.h), or NULL */
    /* Used by the open view's holder only (query-scratch.h), on its thread;
     * its bytes are charged to acct at view close. */
    struct query_scratch qscratch;
};

int engine_init(struct engine *e, const struct engine_limits *lim);
/* The same, every structure's growth charged to budget (NULL: counted, never
 * refused). Past the budget the engine drops what does not fit and counts it
 * by structure in e->acct. UV_ENOMEM when even the initial tables do not fit. */
int engine_init_budget(struct engine *e, const struct engine_limits *lim,
                       struct mem_budget *budget);
/* Any open view must be closed first (engine_view_close). */
void engine_close(struct engine *e);
/* Apply one event. Never fails: what cannot be taken is counted in e->q. */
void engine_apply(struct engine *e, const struct ht_event *ev);
/* Apply n events in order, overlapping their table look-ups with prefetches:
 * the same result as n calls of engine_apply, faster for large tables. */
void engine_apply_batch(struct engine *e, const struct ht_event *evs, size_t n);
/* The process's private bytes now (no event, the clock stays): a live
 * session's first reading, taken at attach, so that status, top and the
 * first timeline sample never show the 0 of "not read yet". */
void engine_private_bytes(struct engine *e, uint64_t v);
/* Move the clock to t (no event): takes timeline samples that fall due. */
void engine_advance(struct engine *e, uint64_t t);
/* Name a point in time. 0, HT_EEXIST, HT_EFULL or HT_EBADARG (empty/long name). */
int engine_mark(struct engine *e, const char *name, uint64_t t);
const struct mark *engine_mark_find(const struct engine *e, const char *name);
/* Heap index of a handle, adding it if new; ALLOC_HEAP_FREE when the limit is reached. */
unsigned engine_heap_index(struct engine *e, uint64_t handle);
/* Every byte the engine allocated and holds (all structures, stacks included). */
uint64_t engine_memory(const struct engine *e);
/* Every byte the engine allocated and holds, by structure (out[k] for each
 * enum mem_kind, indexes past the engine's own kinds left 0); returns the total. */
uint64_t engine_memory_by(const struct engine *e, uint64_t out[MEM_KINDS]);

#endif
