/* Byte budgets (per session, daemon-wide) and per-structure accounting of memory that grows with
 * input. */
#ifndef MEM_ACCT_H
#define MEM_ACCT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Every structure that grows with its input takes its memory through a
 * struct mem_acct when it has one (NULL: plain ht_malloc, unaccounted, as in
 * the structures' own unit tests). The acct charges a struct mem_budget, and
 * the budget its parent: a session's budget sits under the daemon's, so a
 * growth must fit both. Charges happen when a structure grows (a chunk, an
 * arena, a ring, a table), never per event.
 *
 * A growth that does not fit, or whose allocation fails, is refused and
 * counted by structure; the structure then drops what needed the memory and
 * counts that in its own terms. After an allocation failure the acct backs
 * off: the next growths are refused without calling the allocator (an
 * allocator that fails, e.g. under an address-space limit, can cost a failed
 * mmap each time), for MEM_BACKOFF_FIRST refusals, doubling up to
 * MEM_BACKOFF_MAX after each further failure, and at once when the acct
 * frees memory.
 *
 * Threads: a mem_acct belongs to one thread (the engine's is the loop's, a
 * feed decoder's is its thread's); budgets are shared and atomic.
 */
#define MEM_KIND_MAP(X)                                                                            \
    X(table, "live allocation table: entry chunks and buckets")                                    \
    X(aggregates, "per-stack aggregates")                                                          \
    X(commits, "commit map")                                                                       \
    X(stacks, "engine stack interner: frames, records, hash table")                                \
    X(strings, "engine string interner: names, records, hash table")                               \
    X(lifetimes, "lifetime rings (heap and commit)")                                               \
    X(timeline, "timeline ring")                                                                   \
    X(heaps, "heap list and index")                                                                \
    X(marks, "marks")                                                                              \
    X(id_maps, "stream id maps")                                                                   \
    X(decoder_stacks, "the load decoder's private stack interner")                                 \
    X(decoder_strings, "the load decoder's private string interner")                               \
    X(decoder_buffers, "the load decoder's rings, stack cache and id maps")                        \
    X(snapshots, "snapshots (cJSON trees, estimated)")                                             \
    X(modules, "module list (module load events)")                                                 \
    X(symbols, "symbol caches of live sources (per module, by build id)")                          \
    X(source_buffers, "a live source's own tables: region map, thread state, unwinder")            \
    X(query_scratch, "query scratch kept between queries (query-scratch.h)")

enum mem_kind {
#define X(name, doc) MEM_##name,
    MEM_KIND_MAP(X)
#undef X
        MEM_KINDS
};

extern const char *const mem_kind_names[MEM_KINDS];

#define MEM_BACKOFF_FIRST 1024u
#define MEM_BACKOFF_MAX (1u << 20)

struct mem_budget {
    struct mem_budget *parent; /* the daemon's budget for a session's, or NULL */
    uint64_t limit;            /* bytes; 0 = no limit */
    _Atomic uint64_t used;     /* bytes charged by accts (and children) */
    _Atomic uint64_t outside;  /* bytes held elsewhere that count against limit (queued output) */
    _Atomic uint64_t refusals; /* growths refused at this budget's limit */
};

struct mem_acct {
    struct mem_budget *budget; /* NULL: count, never refuse for a budget */
    uint64_t bytes[MEM_KINDS];
    uint64_t over_budget[MEM_KINDS]; /* growths refused at a byte budget */
    uint64_t no_memory[MEM_KINDS];   /* growths refused: allocation failed, or backing off */
    uint64_t alloc_attempts;         /* calls of the allocator made for growth */
    uint64_t alloc_failures;         /* ... of which failed */
    uint64_t forced;                 /* growths charged past the budget (mem_alloc_forced) */
    uint32_t backoff_left, backoff_len;
};

void mem_budget_init(struct mem_budget *b, struct mem_budget *parent, uint64_t limit);
/* Charge n bytes to b and its parents: 0, or HT_EFULL (nothing charged) when
 * one of them would pass its limit. */
int mem_budget_take(struct mem_budget *b, uint64_t n);
void mem_budget_give(struct mem_budget *b, uint64_t n);
uint64_t mem_budget_used(const struct mem_budget *b);

void mem_acct_init(struct mem_acct *m, struct mem_budget *budget);
/* Give back whatever the acct still holds to its budget (the structures are freed). */
void mem_acct_close(struct mem_acct *m);
/* Growth allocations: NULL when refused (counted under kind). m may be NULL. */
void *mem_alloc(struct mem_acct *m, int kind, size_t n);
void *mem_calloc(struct mem_acct *m, int kind, size_t n, size_t size);
/* Resize p from old to n bytes; NULL when refused (p is then unchanged). */
void *mem_realloc(struct mem_acct *m, int kind, void *p, size_t old, size_t n);
void mem_free(struct mem_acct *m, int kind, void *p, size_t n);
/* An allocation that must not be refused for the budget: the copy a
 * copy-on-write makes so that an open engine view keeps its bytes (the
 * engine cannot take the event otherwise). Charged even past the limit
 * (counted in m->forced), for as long as the view is open; NULL only when
 * the allocator fails (counted under kind). m may be NULL. */
void *mem_alloc_forced(struct mem_acct *m, int kind, size_t n);
/* Charge / give back bytes the caller holds by other means (an estimate of a
 * cJSON tree). 0, or HT_EFULL / UV_ENOMEM (counted under kind). */
int mem_acct_charge(struct mem_acct *m, int kind, uint64_t n);
void mem_acct_discharge(struct mem_acct *m, int kind, uint64_t n);
/* mem_acct_charge for memory that is only nice to have (the zstd reader's
 * hold): 0, or HT_EFULL when a budget would keep less than reserve bytes
 * free after it, counted nowhere (no budget drop: nothing is lost without
 * it). The reserve keeps it from taking room that what is needed comes for
 * later (the decoder's tables, stacks and names). */
int mem_acct_charge_optional(struct mem_acct *m, int kind, uint64_t n, uint64_t reserve);
uint64_t mem_acct_total(const struct mem_acct *m);
uint64_t mem_acct_refusals(const struct mem_acct *m, int budget);

#endif
