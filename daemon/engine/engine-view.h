/* A consistent, read-only picture of an engine at one instant, readable from
 * another thread while the engine's owner keeps applying events. */
#ifndef ENGINE_VIEW_H
#define ENGINE_VIEW_H

#include "agg.h"
#include "alloc-table.h"
#include "commit-map.h"
#include "rings.h"
#include "stack-intern.h"

#include <stdint.h>

struct engine;
struct query;
struct query_result;

/*
 * Owner thread (the one that calls engine_apply): engine_view_open and
 * engine_view_close. Any one thread at a time: the ev_* readers and
 * engine_query_view. Between open and close the engine goes on taking events;
 * the view keeps showing the engine as it was at open (copy-on-write of the
 * chunks the owner changes meanwhile, copies of the small tables): nothing
 * the owner does after open is visible through the view, and reading the
 * view never races with the owner. At most one view per engine is open.
 *
 * What open costs on the owner thread is bounded by the small structures it
 * copies (O(stacks + heaps + commits)), never by the live blocks or the rings.
 */
struct engine_view;

/* 0, UV_ENOMEM, or UV_EBUSY when a view is already open. */
int engine_view_open(struct engine *e, struct engine_view **out);
/* Owner thread: unpins, frees the chunks retired by copy-on-write. */
void engine_view_close(struct engine *e, struct engine_view *v);

/* Readers (the view's thread). */
uint64_t ev_now(const struct engine_view *v);
/* The interner as of open: stack_intern_frames / strget / frame_text work on
 * it; never intern through it (it has no hash tables: stack_intern_str or
 * _get on it crash; a query that needs new ids, e.g. image keys, keeps its
 * own map). Frame names go through its resolve hook: the hook's owner makes
 * that safe from the view's thread. */
const struct stack_intern *ev_stacks(const struct engine_view *v);
uint32_t ev_nstacks(const struct engine_view *v);
/* A stack's aggregate in a domain (enum ht_domain) as of open, or NULL. */
const struct agg *ev_agg(const struct engine_view *v, int domain, uint32_t stack);
/*
 * Live heap blocks, chunk by chunk (i < ev_live_nchunks; never NULL, the
 * list has no gaps): entries with alloc_entry_heap() == ALLOC_HEAP_FREE are
 * holes. Chunks hold ALLOC_CHUNK entries at most and are filled in alloc
 * time order (compaction and resizes under a view move a few older ones
 * into newer chunks, which the bounds account for). Every live entry's alloc time lies in
 * [*min_a, *max_a] of its chunk (bounds may be loose, never wrong), so a
 * window starting at t1 need only read chunks with max_a >= t1.
 */
uint32_t ev_live_nchunks(const struct engine_view *v);
const struct alloc_entry *ev_live_chunk(const struct engine_view *v, uint32_t i, uint32_t *n,
                                        uint64_t *min_a, uint64_t *max_a);
uint64_t ev_live_count(const struct engine_view *v);
/*
 * Realloc events (whole session, as query-realloc.c block_reallocs counts them) on
 * the live blocks of a stack: 1 with *out set when the engine knows it
 * exactly without a scan, 0 when the caller must count them block by block.
 */
int ev_live_reallocs(const struct engine_view *v, uint32_t stack, uint64_t *out);
/* Rings as of open: read records [0, chunk_ring_len) with chunk_ring_at. */
const struct chunk_ring *ev_heap_life(const struct engine_view *v);
const struct chunk_ring *ev_commit_life(const struct engine_view *v);
const struct chunk_ring *ev_re_ring(const struct engine_view *v);
uint64_t ev_re_unresolved(const struct engine_view *v);
/* Live commits as of open. */
const struct commit_range *ev_commits(const struct engine_view *v, uint32_t *n);
/* A heap index's handle (0 when unknown). */
uint64_t ev_heap_handle(const struct engine_view *v, unsigned heap);

/* The engine's query scratch (query-scratch.h), for the view's thread. */
struct query_scratch *ev_scratch(struct engine_view *v);

/* Run a query over the view (query.h semantics; q->t2 past ev_now is clamped).
 * The skip cache, if any, must not be used by another thread meanwhile. */
int engine_query_view(struct engine_view *v, const struct query *q, struct query_result *res);

#endif
