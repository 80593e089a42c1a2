/*
 * A stand-in for the engine view's incremental readers, for test-diff-view:
 * the query files (query*.c) are compiled into that test with ev_live_nchunks,
 * ev_live_chunk and ev_live_reallocs renamed to the tv_* functions here
 * (tests/unit/CMakeLists.txt),
 * so the query's fast paths run against what a time-bounded, per-stack
 * engine view gives, whatever the engine-view.c it is linked with does:
 * - live chunks of tv_chunk_entries entries (small, so a few hundred live
 *   blocks span many chunks), each with the exact alloc-time bounds of its
 *   live entries, or loosened by up to tv_loose on either side (bounds may
 *   be loose, never wrong);
 * - a stack's live-block realloc count when no live block of the stack has a
 *   saturated in-place count (else 0: the caller counts), and 0 for the
 *   stacks tv_refuse_mod picks, so both answers meet in one query.
 */
/* This file calls the real readers: undo the test target's renames. */
#undef ev_live_nchunks
#undef ev_live_chunk
#undef ev_live_reallocs

#include "view-double.h"

#include "alloc-table.h"
#include "engine-view.h"
#include "rings.h"

#include <stdlib.h>

uint32_t tv_chunk_entries = 8;
uint64_t tv_loose;
uint32_t tv_refuse_mod;
uint64_t tv_calls_chunk, tv_calls_reallocs;

/* Sub-chunk i -> (real chunk, first entry); rebuilt by tv_live_nchunks,
 * which every scan calls first. */
#define TV_MAX 65536
static uint32_t tv_real[TV_MAX], tv_first[TV_MAX];
static uint32_t tv_n;

uint32_t tv_live_nchunks(const struct engine_view *v)
{
    tv_n = 0;
    uint32_t k = tv_chunk_entries ? tv_chunk_entries : 1;
    for (uint32_t i = 0; i < ev_live_nchunks(v); i++) {
        uint32_t n;
        uint64_t lo, hi;
        if (!ev_live_chunk(v, i, &n, &lo, &hi))
            continue;
        for (uint32_t f = 0; f < n && tv_n < TV_MAX; f += k) {
            tv_real[tv_n] = i;
            tv_first[tv_n++] = f;
        }
    }
    return tv_n;
}

/* A loosening for chunk i (fixed per chunk and setting, not per call). */
static uint64_t tv_slack(uint32_t i, int side)
{
    if (!tv_loose)
        return 0;
    uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15ULL + (uint64_t)side * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 29;
    return h % (tv_loose + 1);
}

const struct alloc_entry *tv_live_chunk(const struct engine_view *v, uint32_t i, uint32_t *n,
                                        uint64_t *min_a, uint64_t *max_a)
{
    tv_calls_chunk++;
    uint32_t rn;
    uint64_t lo, hi;
    const struct alloc_entry *ch = ev_live_chunk(v, tv_real[i], &rn, &lo, &hi);
    uint32_t k = tv_chunk_entries ? tv_chunk_entries : 1;
    uint32_t f = tv_first[i];
    *n = rn - f < k ? rn - f : k;
    uint64_t mn = UINT64_MAX, mx = 0;
    for (uint32_t j = 0; j < *n; j++) {
        const struct alloc_entry *en = &ch[f + j];
        if (alloc_entry_heap(en) == ALLOC_HEAP_FREE)
            continue;
        uint64_t a = alloc_entry_time(en);
        mn = a < mn ? a : mn;
        mx = a > mx ? a : mx;
    }
    if (mn > mx) /* no live entry: any bounds will do */
        mn = mx = 0;
    uint64_t s0 = tv_slack(i, 0), s1 = tv_slack(i, 1);
    *min_a = mn > s0 ? mn - s0 : 0;
    *max_a = mx + s1;
    return ch + f;
}

int tv_live_reallocs(const struct engine_view *v, uint32_t stack, uint64_t *out)
{
    tv_calls_reallocs++;
    *out = 0;
    if (tv_refuse_mod && stack % tv_refuse_mod == 0)
        return 0;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < ev_live_nchunks(v); i++) {
        uint32_t n;
        uint64_t lo, hi;
        const struct alloc_entry *ch = ev_live_chunk(v, i, &n, &lo, &hi);
        for (uint32_t j = 0; ch && j < n; j++) {
            const struct alloc_entry *en = &ch[j];
            if (alloc_entry_heap(en) == ALLOC_HEAP_FREE || en->stack != stack)
                continue;
            unsigned re = alloc_entry_reallocs(en);
            if ((re & HT_RE_INPLACE_MAX) == HT_RE_INPLACE_MAX)
                return 0; /* saturated: its events are counted from the ring */
            sum += (re & HT_RE_CREATED ? 1 : 0) + (re & HT_RE_INPLACE_MAX);
        }
    }
    *out = sum;
    return 1;
}
