/* Bounded histories: completed allocations/commits (lifetime ring) and the timeline. */
#ifndef RINGS_H
#define RINGS_H

#include "mem-acct.h"

#include <stdint.h>

/* A block's realloc byte (in the alloc table and the lifetime ring): whether
 * a realloc made it (that realloc is counted at the block's alloc time) and
 * how many in-place reallocs it had, saturating. */
#define HT_RE_CREATED 0x80u
#define HT_RE_INPLACE_MAX 0x7fu

/* One completed block: allocated (or committed) at a, freed at f. */
struct life_rec {
    uint64_t a, f;
    uint64_t size;
    uint64_t addr; /* with heap and a, names the block in the realloc ring */
    uint32_t stack;
    uint16_t heap;    /* heap index (heap domain) */
    uint8_t reallocs; /* HT_RE_CREATED | in-place count */
};

/*
 * Ring of the last cap completed blocks in free-time order. When a record is
 * overwritten, horizon becomes its free time: the ring then holds every
 * completed block with f > horizon, and nothing about older ones.
 * Storage comes in chunks as the ring fills, so an idle session costs little
 * and growth never copies (a realloc of a 100 MiB ring would need both copies).
 */
#define LIFE_CHUNK_SHIFT 12 /* 4 Ki records, 128 KiB, per chunk */

struct life_ring {
    struct life_rec **chunks;
    uint64_t nchunks, chunk_slots;
    uint64_t alloc; /* records allocated */
    uint64_t cap;
    uint64_t pushed; /* total ever pushed; the ring holds min(pushed, cap) */
    uint64_t horizon;
    int evicted;
    uint64_t dropped;      /* records not kept for lack of memory (or of byte budget) */
    struct mem_acct *acct; /* growth charged here (MEM_lifetimes); NULL: unaccounted */
};

void life_ring_init(struct life_ring *r, uint64_t cap);
void life_ring_close(struct life_ring *r);
void life_ring_push(struct life_ring *r, const struct life_rec *rec);
uint64_t life_ring_len(const struct life_ring *r);
/* i-th record, oldest first, i < life_ring_len. */
const struct life_rec *life_ring_at(const struct life_ring *r, uint64_t i);
/* Index of the first record freed at or after t (records are in free-time order). */
uint64_t life_ring_lower_bound(const struct life_ring *r, uint64_t t);
/* Does the ring see every block freed at or after t? */
int life_ring_complete_from(const struct life_ring *r, uint64_t t);

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

struct realloc_ring {
    struct realloc_rec **chunks;
    uint64_t nchunks, chunk_slots;
    uint64_t alloc, cap, pushed;
    uint64_t horizon;
    int evicted;
    uint64_t dropped;    /* events not kept for lack of memory */
    uint64_t unresolved; /* closed blocks whose events could not all be marked */
};

void realloc_ring_init(struct realloc_ring *r, uint64_t cap);
void realloc_ring_close(struct realloc_ring *r);
void realloc_ring_push(struct realloc_ring *r, const struct realloc_rec *rec);
uint64_t realloc_ring_len(const struct realloc_ring *r);
/* i-th event, oldest first, i < realloc_ring_len. */
struct realloc_rec *realloc_ring_at(const struct realloc_ring *r, uint64_t i);
/* Index of the first event at or after t. */
uint64_t realloc_ring_lower_bound(const struct realloc_ring *r, uint64_t t);
/* Does the ring hold every event at or after t? */
int realloc_ring_complete_from(const struct realloc_ring *r, uint64_t t);

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
