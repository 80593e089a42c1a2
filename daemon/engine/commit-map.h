/* Committed virtual-memory ranges (VirtualAlloc MEM_COMMIT / mmap) with commit time and stack. */
#ifndef COMMIT_MAP_H
#define COMMIT_MAP_H

#include "mem-acct.h"

#include <stdint.h>

/*
 * Ranges never overlap and are kept sorted by address. Committing pages that
 * are already committed adds nothing (they keep their first commit's time and
 * stack), so one commit may add several ranges, one per gap it fills. A
 * decommit, release or munmap of part of a range splits it; every piece keeps
 * the commit's time and stack. Each range is one block of the commit domain:
 * the pieces decommitted are completed blocks, the pieces left live ones, so
 * counts, sizes and the number of ranges always agree.
 */
struct commit_range {
    uint64_t start, end; /* [start, end) */
    uint64_t t;
    uint32_t stack;
};

struct commit_map {
    struct commit_range *r;
    uint32_t n, alloc;
    uint32_t cap;          /* hard cap on ranges created by commits */
    uint64_t bytes;        /* committed bytes now */
    uint64_t split_drops;  /* pieces lost because a split went past the slack (counted) */
    struct mem_acct *acct; /* growth charged here (MEM_commits); NULL: unaccounted */
};

/* A piece that stopped being committed: committed at a, freed at f; left is
 * how many pieces of its range stay committed (0, 1 or 2: each a block now). */
typedef void (*commit_done_fn)(void *arg, const struct commit_range *piece, uint64_t f,
                               unsigned left);

void commit_map_init(struct commit_map *cm, uint32_t cap);
void commit_map_close(struct commit_map *cm);
/* Commit [start, end). *new_bytes: bytes that were not committed before;
 * *dropped: new bytes not tracked because the cap was reached, in
 * *dropped_ranges ranges. Returns the number of ranges added. */
unsigned commit_map_commit(struct commit_map *cm, uint64_t start, uint64_t end, uint64_t t,
                           uint32_t stack, uint64_t *new_bytes, uint64_t *dropped,
                           unsigned *dropped_ranges);
/* Decommit [start, end): fn is called for each piece removed, in address
 * order. Returns the number of bytes in the range that were not committed. */
uint64_t commit_map_decommit(struct commit_map *cm, uint64_t start, uint64_t end, uint64_t t,
                             commit_done_fn fn, void *arg);
uint64_t commit_map_memory(const struct commit_map *cm);

#endif
