/*
 * The eBPF consumer's region table: which mappings of the target exist, and
 * of those, which belong to the allocator (made inside an allocator call: the
 * heap's own arenas and large blocks, already counted as heap events) and
 * which are committed (docs/linux.md#mmap-family-accounting). Only mappings made while
 * attached are known; calls on other addresses are ignored.
 *
 * Threads: one owner (the consumer thread). Bounded: past cap regions a new
 * mapping is not tracked (counted in drops).
 */
#ifndef HT_BPF_REGIONS_H
#define HT_BPF_REGIONS_H

#include <stdint.h>

struct region {
    uint64_t start, end; /* [start, end) */
    uint8_t heap;        /* made inside an allocator call */
    uint8_t committed;   /* accessible (not PROT_NONE): counted as a commit */
};

struct regions {
    struct region *r;
    uint32_t n, alloc, cap;
    uint64_t drops; /* mappings not tracked: cap reached or no memory */
};

/* Called for a piece whose state changes, with its state before. */
typedef void (*regions_fn)(void *arg, const struct region *old);

void regions_init(struct regions *rt, uint32_t cap);
void regions_close(struct regions *rt);
/* A new mapping over [start, end): fn for each known piece it replaces
 * (MAP_FIXED over an old mapping), then it is known. */
void regions_map(struct regions *rt, uint64_t start, uint64_t end, int heap, int committed,
                 regions_fn fn, void *arg);
/* [start, end) unmapped: fn for each known piece. */
void regions_unmap(struct regions *rt, uint64_t start, uint64_t end, regions_fn fn, void *arg);
/* Protection changed on [start, end): the known pieces not owned by the heap
 * whose committed state flips get fn (old state), then the new state. */
void regions_protect(struct regions *rt, uint64_t start, uint64_t end, int committed, regions_fn fn,
                     void *arg);
/* The known region holding addr, or NULL. */
const struct region *regions_find(const struct regions *rt, uint64_t addr);

#endif
