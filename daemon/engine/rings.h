/* Bounded histories: completed allocations/commits (lifetime ring) and the timeline. */
#ifndef RINGS_H
#define RINGS_H

#include "mem-acct.h"

#include <stddef.h>
#include <stdint.h>

/* A block's realloc byte (in the alloc table and the lifetime ring): whether
 * a realloc made it (that realloc is counted at the block's alloc time) and
 * how many in-place reallocs it had, saturating. */
#define HT_RE_CREATED 0x80u
#define HT_RE_INPLACE_MAX 0x7fu

/* One completed block: allocated (or committed) at a, freed at f. In a
 * sampled session a block stands for mult blocks (0 meaning 1): its low 16
 * bits ride above the size's 48 (ALLOC_SIZE_BITS), its high 8 in mult_hi,
 * so the record stays 40 bytes (a weight is under 2^24: HTA_RATE_MAX).
 * Read the size with life_rec_size. */
#define LIFE_MULT_MAX ((1u << 24) - 1)
struct life_rec {
    uint64_t a, f;
    uint64_t size; /* size (low 48 bits) | mult's low 16 bits */
    uint64_t addr; /* with heap and a, names the block in the realloc ring */
    uint32_t stack;
    uint16_t heap;    /* heap index (heap domain) */
    uint8_t reallocs; /* HT_RE_CREATED | in-place count */
    uint8_t mult_hi;
};

static inline uint64_t life_rec_size(const struct life_rec *r)
{
    return r->size & ((1ull << 48) - 1);
}
static inline uint64_t life_rec_mult(const struct life_rec *r)
{
    uint64_t m = (r->size >> 48) | (uint64_t)r->mult_hi << 16;
    return m ? m : 1;
}
/* size must be under 2^48; mult 0 (exact) leaves the record as before. */
static inline void life_rec_set_mult(struct life_rec *r, uint32_t mult)
{
    uint64_t m = mult > LIFE_MULT_MAX ? LIFE_MULT_MAX : mult;
    r->size = (r->size & ((1ull << 48) - 1)) | (m & 0xffff) << 48;
    r->mult_hi = (uint8_t)(m >> 16);
}

/*
 * A chunked ring of fixed-size records in time order: the last cap records,
 * each with a time at byte offset time_off. When a record is overwritten,
 * horizon becomes its time: the ring then holds every record with a time
 * after horizon, and nothing about older ones. Storage comes in chunks as the
 * ring fills, so an idle session costs little and growth never copies (a
 * realloc of a 100 MiB ring would need both copies). The lifetime rings
 * (completed blocks in free-time order) and the realloc ring are such rings.
 */
#define LIFE_CHUNK_SHIFT 12 /* 4 Ki records per chunk */

struct ring_retired {
    unsigned char *p;
    size_t bytes;
};

struct chunk_ring {
    unsigned char **chunks;
    uint64_t nchunks, chunk_slots;
    uint64_t alloc; /* records allocated */
    uint64_t cap;
    uint64_t pushed; /* total ever pushed; the ring holds min(pushed, cap) */
    uint64_t horizon;
    int evicted;
    uint64_t dropped; /* records not kept for lack of memory (or of byte budget) */
    uint32_t elem, time_off;
    int kind;              /* what its growth is charged as (enum mem_kind) */
    struct mem_acct *acct; /* growth charged here; NULL: unaccounted */
    /* Pinning (chunk_ring_pin): chunks [0, npinned) with shared[c] set are
     * read by a view; a write into one replaces it with a copy first. */
    int pinned;
    uint64_t npinned;
    uint8_t *shared;
    struct ring_retired *retired; /* the originals, freed at unpin */
    uint64_t nretired;
};

void chunk_ring_init(struct chunk_ring *r, uint64_t cap, uint32_t elem, uint32_t time_off,
                     int kind);
void chunk_ring_close(struct chunk_ring *r);
/* Where the next record (whose time is t) goes, overwriting the oldest once
 * full; NULL when there is no memory for it (counted in dropped, and the ring
 * then behaves as if the record was evicted at once). */
void *chunk_ring_next(struct chunk_ring *r, uint64_t t);
uint64_t chunk_ring_len(const struct chunk_ring *r);
/* The i-th record, to write (its chunk copied first if a view shares it);
 * NULL when the copy could not be made. */
void *chunk_ring_at_mut(struct chunk_ring *r, uint64_t i);
/*
 * Pin for a view: *view becomes a read-only copy of the ring (chunk_ring_at,
 * _len, _lower_bound, _complete_from work on it) whose records the ring does
 * not write until chunk_ring_unpin: a push that would overwrite one, or a
 * write through chunk_ring_at_mut, copies its chunk first. O(chunks). 0 or
 * UV_ENOMEM.
 */
int chunk_ring_pin(struct chunk_ring *r, struct chunk_ring *view);
/* Frees the view's chunk array and the chunks the copies replaced. */
void chunk_ring_unpin(struct chunk_ring *r, struct chunk_ring *view);
/* Bytes held: chunks (retired ones too) and the chunk array. */
uint64_t chunk_ring_memory(const struct chunk_ring *r);
/* Index of the first record whose time is at or after t. */
uint64_t chunk_ring_lower_bound(const struct chunk_ring *r, uint64_t t);
/* Does the ring hold every record whose time is at or after t? */
int chunk_ring_complete_from(const struct chunk_ring *r, uint64_t t);

/* i-th record, oldest first, i < chunk_ring_len (inline: query scans call it per record). */
static inline void *chunk_ring_at(const struct chunk_ring *r, uint64_t i)
{
    uint64_t idx = r->pushed <= r->cap ? i : (r->pushed + i) % r->cap;
    return r->chunks[idx >> LIFE_CHUNK_SHIFT] +
           (size_t)(idx & ((1u << LIFE_CHUNK_SHIFT) - 1)) * r->elem;
}

/* Completed blocks in free-time order, growth charged as MEM_lifetimes. */
void life_ring_init(struct chunk_ring *r, uint64_t cap);
static inline void life_ring_push(struct chunk_ring *r, const struct life_rec *rec)
{
    struct life_rec *slot = chunk_ring_next(r, rec->f);
    if (slot)
        *slot = *rec;
}
static inline const struct life_rec *life_ring_at(const struct chunk_ring *r, uint64_t i)
{
    return chunk_ring_at(r, i);
}

/*
 * In-place realloc events in time order, with the block each one resized
 * (heap, address and alloc time name a block). A window's realloc count needs
 * the time of every one: a block's count cannot say which fell inside. Kept
 * like the lifetime ring: the last cap events, storage in chunks, and a
 * horizon (the latest time evicted) after which every event is held.
 */
struct realloc_rec {
    uint64_t t, a; /* event time, the block's alloc time */
    uint64_t addr;
    uint16_t heap;
    uint8_t closed; /* the block was freed at its alloc time (see engine.c: realloc_close) */
};

/* Growth charged as MEM_lifetimes too: it holds as many events as the heap lifetime ring. */
void realloc_ring_init(struct chunk_ring *r, uint64_t cap);
static inline void realloc_ring_push(struct chunk_ring *r, const struct realloc_rec *rec)
{
    struct realloc_rec *slot = chunk_ring_next(r, rec->t);
    if (slot)
        *slot = *rec;
}
static inline struct realloc_rec *realloc_ring_at(const struct chunk_ring *r, uint64_t i)
{
    return chunk_ring_at(r, i);
}

#define HT_TIMELINE_HEAPS 8 /* heaps sampled one by one; the rest are summed in "other" */

struct tl_sample {
    uint64_t t;
    uint64_t heap_bytes; /* outstanding on all heaps */
    uint64_t heap_count;
    uint64_t commit_bytes;
    uint64_t private_bytes;
    uint64_t per_heap[HT_TIMELINE_HEAPS]; /* by heap index; the last slot sums the rest */
};

struct timeline {
    struct tl_sample *s;
    uint64_t cap, pushed;
    uint64_t alloc;
    uint64_t dropped;      /* samples not kept for lack of memory (or of byte budget) */
    struct mem_acct *acct; /* growth charged here (MEM_timeline); NULL: unaccounted */
};

void timeline_init(struct timeline *tl, uint64_t cap);
void timeline_close(struct timeline *tl);
void timeline_push(struct timeline *tl, const struct tl_sample *s);
uint64_t timeline_len(const struct timeline *tl);
const struct tl_sample *timeline_at(const struct timeline *tl, uint64_t i);

#endif
