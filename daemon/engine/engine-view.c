/* Engine views. FIRST CUT (placeholder until the copy-on-write pins land):
 * the view reads the engine itself, so it is consistent only while the
 * owner applies nothing; it exists so the query and server work can build
 * against engine-view.h. Replaced by the real implementation (issue 10). */
#include "engine-view.h"

#include "engine.h"
#include "ht-alloc.h"
#include "query.h"

#include <uv.h>

struct engine_view {
    struct engine *e;
    uint64_t now;
};

int engine_view_open(struct engine *e, struct engine_view **out)
{
    struct engine_view *v = ht_calloc(1, sizeof(*v));
    if (!v)
        return UV_ENOMEM;
    v->e = e;
    v->now = e->now;
    *out = v;
    return 0;
}

void engine_view_close(struct engine *e, struct engine_view *v)
{
    (void)e;
    ht_free(v);
}

uint64_t ev_now(const struct engine_view *v)
{
    return v->now;
}
const struct stack_intern *ev_stacks(const struct engine_view *v)
{
    return &v->e->si;
}
uint32_t ev_nstacks(const struct engine_view *v)
{
    return v->e->si.nstacks;
}
const struct agg *ev_agg(const struct engine_view *v, int domain, uint32_t stack)
{
    return agg_peek(domain == HT_DOM_HEAP ? &v->e->heap_agg : &v->e->commit_agg, stack);
}

#define VIEW_CHUNK_SHIFT 16 /* alloc-table.c CHUNK_SHIFT */

uint32_t ev_live_nchunks(const struct engine_view *v)
{
    return v->e->table.nchunks;
}
const struct alloc_entry *ev_live_chunk(const struct engine_view *v, uint32_t i, uint32_t *n,
                                        uint64_t *min_a, uint64_t *max_a)
{
    const struct alloc_table *t = &v->e->table;
    uint64_t first = (uint64_t)i << VIEW_CHUNK_SHIFT;
    uint64_t left = t->high > first ? t->high - first : 0;
    *n = (uint32_t)(left < (1u << VIEW_CHUNK_SHIFT) ? left : (1u << VIEW_CHUNK_SHIFT));
    *min_a = 0;
    *max_a = UINT64_MAX;
    return t->chunks[i];
}
uint64_t ev_live_count(const struct engine_view *v)
{
    return v->e->table.count;
}
int ev_live_reallocs(const struct engine_view *v, uint32_t stack, uint64_t *out)
{
    (void)v;
    (void)stack;
    *out = 0;
    return 0;
}
const struct chunk_ring *ev_heap_life(const struct engine_view *v)
{
    return &v->e->heap_life;
}
const struct chunk_ring *ev_commit_life(const struct engine_view *v)
{
    return &v->e->commit_life;
}
const struct chunk_ring *ev_re_ring(const struct engine_view *v)
{
    return &v->e->re_ring;
}
uint64_t ev_re_unresolved(const struct engine_view *v)
{
    return v->e->re_unresolved;
}
const struct commit_range *ev_commits(const struct engine_view *v, uint32_t *n)
{
    *n = v->e->commits.n;
    return v->e->commits.r;
}
uint64_t ev_heap_handle(const struct engine_view *v, unsigned heap)
{
    return heap < v->e->nheaps ? v->e->heaps[heap].handle : 0;
}
