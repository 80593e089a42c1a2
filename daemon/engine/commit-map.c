/* Commit map: a sorted array of ranges; binary search, memmove on insert/remove. */
#include "commit-map.h"

#include "ht-alloc.h"
#include "mem-acct.h"

#include <string.h>

/* Splits may go past the cap (committed memory must stay accounted) but not past this. */
#define SPLIT_SLACK 2

void commit_map_init(struct commit_map *cm, uint32_t cap)
{
    memset(cm, 0, sizeof(*cm));
    cm->cap = cap ? cap : 1;
}

void commit_map_close(struct commit_map *cm)
{
    ht_free(cm->r);
    memset(cm, 0, sizeof(*cm));
}

/* First range whose end is above addr. */
static uint32_t lower_bound(const struct commit_map *cm, uint64_t addr)
{
    uint32_t lo = 0, hi = cm->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (cm->r[mid].end <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int insert_at(struct commit_map *cm, uint32_t i, const struct commit_range *r)
{
    if (cm->n == cm->alloc) {
        uint32_t na = cm->alloc ? cm->alloc * 2 : 64;
        struct commit_range *nr =
            mem_realloc(cm->acct, MEM_commits, cm->r, (size_t)cm->alloc * sizeof(*nr),
                        (size_t)na * sizeof(*nr));
        if (!nr)
            return -1;
        cm->r = nr;
        cm->alloc = na;
    }
    memmove(&cm->r[i + 1], &cm->r[i], (size_t)(cm->n - i) * sizeof(*r));
    cm->r[i] = *r;
    cm->n++;
    return 0;
}

static void remove_at(struct commit_map *cm, uint32_t i)
{
    memmove(&cm->r[i], &cm->r[i + 1], (size_t)(cm->n - i - 1) * sizeof(cm->r[0]));
    cm->n--;
}

unsigned commit_map_commit(struct commit_map *cm, uint64_t start, uint64_t end, uint64_t t,
                           uint32_t stack, uint64_t *new_bytes, uint64_t *dropped,
                           unsigned *dropped_ranges)
{
    unsigned added = 0;
    *new_bytes = 0;
    *dropped = 0;
    *dropped_ranges = 0;
    uint32_t i = lower_bound(cm, start);
    uint64_t pos = start;
    while (pos < end) {
        uint64_t gap_end = end;
        if (i < cm->n && cm->r[i].start < end)
            gap_end = cm->r[i].start > pos ? cm->r[i].start : pos;
        if (gap_end > pos) {
            struct commit_range nr = {pos, gap_end, t, stack};
            if (cm->n >= cm->cap || insert_at(cm, i, &nr) != 0) {
                *dropped += gap_end - pos;
                (*dropped_ranges)++;
            } else {
                added++;
                cm->bytes += gap_end - pos;
                *new_bytes += gap_end - pos;
                i++;
            }
        }
        if (i < cm->n && cm->r[i].start < end) {
            pos = cm->r[i].end; /* skip pages that are already committed */
            i++;
        } else {
            pos = end;
        }
    }
    return added;
}

uint64_t commit_map_decommit(struct commit_map *cm, uint64_t start, uint64_t end, uint64_t t,
                             commit_done_fn fn, void *arg)
{
    uint64_t covered = 0;
    uint32_t i = lower_bound(cm, start);
    while (i < cm->n && cm->r[i].start < end) {
        struct commit_range *r = &cm->r[i];
        uint64_t os = r->start > start ? r->start : start;
        uint64_t oe = r->end < end ? r->end : end;
        struct commit_range piece = {os, oe, r->t, r->stack};
        unsigned left = (os > r->start) + (oe < r->end);
        covered += oe - os;
        cm->bytes -= oe - os;
        if (left == 0) {
            remove_at(cm, i);
        } else if (os == r->start) {
            r->start = oe;
            i++;
        } else if (oe == r->end) {
            r->end = os;
            i++;
        } else {
            struct commit_range right = {oe, r->end, r->t, r->stack};
            r->end = os;
            if (cm->n >= (uint64_t)cm->cap * SPLIT_SLACK || insert_at(cm, i + 1, &right) != 0) {
                cm->bytes -= right.end - right.start;
                cm->split_drops++;
                left = 1;
            } else {
                i++;
            }
            i++;
        }
        if (fn)
            fn(arg, &piece, t, left);
    }
    return (end - start) - covered;
}

uint64_t commit_map_memory(const struct commit_map *cm)
{
    return (uint64_t)cm->alloc * sizeof(struct commit_range);
}
