/* Live heap allocations keyed by (heap, address): chained hash, incremental rehash, hard cap. */
#ifndef ALLOC_TABLE_H
#define ALLOC_TABLE_H

#include "mem-acct.h"

#include <stdint.h>

/*
 * 32 bytes per live allocation plus 4-8 bytes of bucket array. Entries live
 * in 2 MiB chunks that are never moved, so growth never copies them; the
 * bucket array doubles at load 1.0 and is migrated a few buckets per
 * operation (after redis dict's incremental rehash), so no single event
 * pays for a whole rehash. The heap is an index into the session's heap list,
 * not the handle, to keep the entry at 32 bytes.
 */
#define ALLOC_TIME_BITS 56
#define ALLOC_SIZE_BITS 48
#define ALLOC_TIME_MAX ((1ULL << ALLOC_TIME_BITS) - 1)
#define ALLOC_SIZE_MAX ((1ULL << ALLOC_SIZE_BITS) - 1)
#define ALLOC_HEAP_FREE 0xffffu /* marks an unused entry */
#define ALLOC_MAX_HEAPS 0xfff0u

struct alloc_entry {
    uint64_t addr;
    uint64_t t_re;      /* alloc time (low 56 bits) | realloc count (high 8, saturating) */
    uint64_t size_heap; /* size (low 48 bits) | heap index (high 16) */
    uint32_t stack;
    uint32_t next; /* chain / free list: index + 1, 0 = end */
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
static inline unsigned alloc_entry_heap(const struct alloc_entry *e)
{
    return (unsigned)(e->size_heap >> ALLOC_SIZE_BITS);
}

struct alloc_table {
    struct alloc_entry **chunks;
    uint32_t nchunks;
    uint32_t high;      /* entries handed out from the chunks so far */
    uint32_t free_head; /* index + 1 of the first reusable entry */
    uint32_t count;     /* live entries */
    uint32_t cap;       /* hard cap on live entries */
    uint32_t *buckets[2];
    uint32_t mask[2];
    int64_t rehash_idx;    /* next old bucket to migrate, -1 when not rehashing */
    struct mem_acct *acct; /* growth is charged here (NULL: unaccounted) */
};

int alloc_table_init(struct alloc_table *t, uint32_t cap);
/* The same, every growth charged to acct (MEM_table); the owner gives it back. */
int alloc_table_init_acct(struct alloc_table *t, uint32_t cap, struct mem_acct *acct);
void alloc_table_close(struct alloc_table *t);

/* Insert a new entry: 0, HT_EFULL at the cap, UV_ENOMEM when growth was
 * refused (out of memory or over the byte budget, counted by the acct), HT_EEXIST
 * if the key is live (*out then points at the existing entry). */
int alloc_table_insert(struct alloc_table *t, unsigned heap, uint64_t addr, uint64_t time,
                       uint64_t size, uint32_t stack, struct alloc_entry **out);
/* The live entry for the key or NULL. Valid until the next insert/remove. */
struct alloc_entry *alloc_table_find(struct alloc_table *t, unsigned heap, uint64_t addr);
/* Remove the key; copies the entry to *out. 0, or UV_ENOENT. */
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
/* Bytes of memory held (entry chunks and bucket arrays). */
uint64_t alloc_table_memory(const struct alloc_table *t);

#endif
