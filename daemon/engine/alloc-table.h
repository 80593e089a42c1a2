/* Live heap allocations keyed by (heap, address): chained hash over time-ordered chunks. */
#ifndef ALLOC_TABLE_H
#define ALLOC_TABLE_H

#include "mem-acct.h"

#include <stdint.h>

/*
 * 32 bytes per entry, 4 bytes of chain link per entry and 4-8 bytes of
 * bucket array per live allocation. Entries are appended, in time order, to
 * the open chunk of ALLOC_CHUNK entries (128 KiB); a freed entry leaves a
 * hole that is never reused, so each chunk covers a short span of alloc
 * times and a window starting at t1 need only read the chunks whose latest
 * alloc time is at or after t1. A chunk whose entries are all freed is
 * recycled at once. When the holes pass a slack (ALLOC_COMPACT_SLACK) the
 * table compacts incrementally: each insert and remove moves a few live
 * entries of the sparsest chunk into a chunk of their own (re-linking their
 * chains) until it is empty, so no single event pays for a whole pass.
 *
 * The chain links live in an array apart from the entries, so rehashing
 * and re-linking never write an entry chunk, and a view can pin the table
 * (alloc_table_pin) without any chunk being copied.
 * The bucket array doubles at load 1.0 and is migrated a few buckets per
 * operation (after redis dict's incremental rehash). The heap is an index
 * into the session's heap list, not the handle, to keep the entry small.
 */
#define ALLOC_TIME_BITS 56
#define ALLOC_SIZE_BITS 48
#define ALLOC_TIME_MAX ((1ULL << ALLOC_TIME_BITS) - 1)
#define ALLOC_SIZE_MAX ((1ULL << ALLOC_SIZE_BITS) - 1)
#define ALLOC_HEAP_FREE 0xffffu /* marks a hole */
#define ALLOC_MAX_HEAPS 0xfff0u
#define ALLOC_CHUNK_SHIFT 12
#define ALLOC_CHUNK (1u << ALLOC_CHUNK_SHIFT)
#define ALLOC_NO_CHUNK UINT32_MAX
/* Compaction starts when holes pass live / ALLOC_COMPACT_SLACK + 2 chunks. */
#define ALLOC_COMPACT_SLACK 6

struct alloc_entry {
    uint64_t addr;
    uint64_t t_re;      /* alloc time (low 56 bits) | realloc count (high 8, saturating) */
    uint64_t size_heap; /* size (low 48 bits) | heap index (high 16) */
    uint32_t stack;
    /* Blocks the entry stands for in a sampled session, 0 meaning 1 (every
     * exact entry): its figures are size * mult bytes and mult blocks. */
    uint32_t mult;
};

static inline uint64_t alloc_entry_time(const struct alloc_entry *e)
{
    return e->t_re & ALLOC_TIME_MAX;
}
static inline unsigned alloc_entry_reallocs(const struct alloc_entry *e)
{
    return (unsigned)(e->t_re >> ALLOC_TIME_BITS);
}
static inline uint64_t alloc_entry_size(const struct alloc_entry *e)
{
    return e->size_heap & ALLOC_SIZE_MAX;
}
static inline uint64_t alloc_entry_mult(const struct alloc_entry *e)
{
    return e->mult ? e->mult : 1;
}
static inline unsigned alloc_entry_heap(const struct alloc_entry *e)
{
    return (unsigned)(e->size_heap >> ALLOC_SIZE_BITS);
}

/* One chunk slot; e == NULL: a free slot. */
struct alloc_chunk {
    struct alloc_entry *e;
    uint64_t min_a, max_a; /* every entry ever placed here has its alloc time within */
    uint32_t live;         /* live entries */
    uint16_t fill;         /* entries handed out: live + holes */
    uint8_t shared;        /* a pinned view reads it: copy before writing */
    uint8_t unused;
    uint32_t born; /* t->born when it was made */
};

struct alloc_table {
    struct alloc_chunk *chunks; /* by slot: entry index = slot << ALLOC_CHUNK_SHIFT | offset */
    uint32_t *links;            /* by entry index: next of its chain, index + 1, 0 = end */
    uint32_t slots;             /* length of chunks */
    uint32_t link_slots;        /* chunk slots the links array covers */
    uint32_t nslots;            /* slots ever used: chunks[nslots..] are free */
    uint32_t nchunks;           /* slots holding a chunk */
    uint32_t open;              /* slot new entries are appended to, or ALLOC_NO_CHUNK */
    uint32_t dest;              /* slot compaction moves entries into, or ALLOC_NO_CHUNK */
    uint32_t src;               /* slot compaction is emptying, or ALLOC_NO_CHUNK */
    uint32_t src_pos;           /* next entry of src to look at */
    uint64_t filled;            /* entries handed out in all chunks: live + holes */
    uint32_t born;              /* chunks opened for appends (wraps): a clock for ages */
    uint32_t count;             /* live entries */
    uint32_t cap;               /* hard cap on live entries */
    uint32_t *buckets[2];
    uint32_t mask[2];
    int64_t rehash_idx;        /* next old bucket to migrate, -1 when not rehashing */
    struct alloc_entry *spare; /* an emptied chunk kept for the next one needed */
    /*
     * Pinning (alloc_table_pin): no byte a view reads is written. A shared
     * chunk's entries are never rewritten: an entry freed meanwhile is only
     * marked in dead[] (made a hole at unpin), one resized in place moves
     * to the open chunk, and appends write past the view's fill. Shared
     * chunks that empty are retired (freed at unpin).
     */
    int pinned;
    struct alloc_entry **retired;
    uint32_t nretired, retired_cap;
    uint64_t *dead;        /* bit per entry index of the slots shared at the pin */
    uint32_t dead_slots;   /* slots dead[] covers */
    uint64_t moved;        /* entries moved by compaction */
    uint64_t compactions;  /* chunks compaction started to empty */
    uint64_t deferred;     /* entries that died while a view shared them */
    uint64_t pinned_moves; /* entries moved to the open chunk to be resized while shared */
    struct mem_acct *acct; /* growth is charged here (NULL: unaccounted) */
};

int alloc_table_init(struct alloc_table *t, uint32_t cap);
/* The same, every growth charged to acct (MEM_table); the owner gives it back. */
int alloc_table_init_acct(struct alloc_table *t, uint32_t cap, struct mem_acct *acct);
void alloc_table_close(struct alloc_table *t);

/* Insert a new entry: 0, HT_EFULL at the cap, UV_ENOMEM when growth was
 * refused (out of memory or over the byte budget, counted by the acct), HT_EEXIST
 * if the key is live (*out then points at the existing entry, read-only).
 * *out is writable until the next insert or remove. */
int alloc_table_insert(struct alloc_table *t, unsigned heap, uint64_t addr, uint64_t time,
                       uint64_t size, uint32_t stack, struct alloc_entry **out);
/* The live entry for the key or NULL, to read only. Valid until the next insert/remove. */
struct alloc_entry *alloc_table_find(struct alloc_table *t, unsigned heap, uint64_t addr);
/* The live entry for the key, to write (moved to the open chunk first if a
 * view shares its chunk): 0, UV_ENOENT, or UV_ENOMEM when the move found no room. */
int alloc_table_find_mut(struct alloc_table *t, unsigned heap, uint64_t addr,
                         struct alloc_entry **out);
/* Remove the key; copies the entry to *out. 0 or UV_ENOENT. */
int alloc_table_remove(struct alloc_table *t, unsigned heap, uint64_t addr,
                       struct alloc_entry *out);
/* Calls fn for each live entry (in memory order, not key order). fn may not
 * modify the table. */
void alloc_table_foreach(const struct alloc_table *t,
                         void (*fn)(const struct alloc_entry *, void *), void *arg);
/* Remove every entry of a heap, calling fn for each before removal. */
void alloc_table_remove_heap(struct alloc_table *t, unsigned heap,
                             void (*fn)(const struct alloc_entry *, void *), void *arg);
/* Cache hints for a key about to be looked up (batched ingest): stage 1
 * fetches its bucket, stage 2 (a few events later) the chain's first entry. */
uint64_t alloc_table_hash(unsigned heap, uint64_t addr);
void alloc_table_prefetch_bucket(const struct alloc_table *t, uint64_t hash);
void alloc_table_prefetch_entry(const struct alloc_table *t, uint64_t hash);
/* The first entry of the key's chain if it is the key's, else NULL (a hint). */
const struct alloc_entry *alloc_table_peek_head(const struct alloc_table *t, unsigned heap,
                                                uint64_t addr, uint64_t hash);
/* Bytes of memory held: entry chunks (the spare and the retired ones too),
 * links, chunk slots and bucket arrays. */
uint64_t alloc_table_memory(const struct alloc_table *t);

/* What a view of the table reads: a chunk as of the pin. */
struct alloc_view_chunk {
    const struct alloc_entry *e;
    uint64_t min_a, max_a;
    uint32_t n; /* entries e[0..n): live ones and holes (heap ALLOC_HEAP_FREE) */
};

/*
 * Pin the table for a view: *out (an array of *n, the caller frees it with
 * ht_free) lists every chunk, and until alloc_table_unpin the table writes
 * none of the bytes it lists (see pinned above; compaction waits). Costs
 * O(chunks). 0 or UV_ENOMEM; UV_EBUSY when already pinned.
 */
int alloc_table_pin(struct alloc_table *t, struct alloc_view_chunk **out, uint32_t *n);
/* The view is gone: frees the chunks the copies replaced. */
void alloc_table_unpin(struct alloc_table *t);

#endif
