/* Engine views: pinned chunks and copies of the small tables, read off the owner thread. */
#include "engine-view.h"

#include "engine.h"
#include "ht-alloc.h"
#include "query.h"

#include <string.h>
#include <uv.h>

/*
 * What the view holds, all set on the owner thread at open and only read
 * afterwards: copies of the chunk-pointer arrays of the chunked structures
 * (the engine copies a chunk before it writes one of them: the pins) and
 * copies of the small tables (commits, heap handles).
 */
struct engine_view {
    struct engine *e;
    uint64_t now;
    struct stack_intern si;
    struct agg_table heap_agg, commit_agg;
    struct alloc_view_chunk *live;
    uint32_t nlive_chunks;
    uint64_t live_count;
    struct chunk_ring heap_life, commit_life, re_ring;
    uint64_t re_unresolved;
    struct commit_range *commits;
    uint32_t ncommits;
    uint64_t *heaps; /* handles by heap index */
    uint32_t nheaps;
    int pins; /* how many of the pins below open reached, for the unwinding */
};

enum {
    PIN_SI = 1,
    PIN_HEAP_AGG,
    PIN_COMMIT_AGG,
    PIN_TABLE,
    PIN_HEAP_LIFE,
    PIN_COMMIT_LIFE,
    PIN_RE
};

/* Undo the pins open made, in reverse. */
static void view_unpin(struct engine *e, struct engine_view *v)
{
    switch (v->pins) {
    case PIN_RE:
        chunk_ring_unpin(&e->re_ring, &v->re_ring);
        /* fall through */
    case PIN_COMMIT_LIFE:
        chunk_ring_unpin(&e->commit_life, &v->commit_life);
        /* fall through */
    case PIN_HEAP_LIFE:
        chunk_ring_unpin(&e->heap_life, &v->heap_life);
        /* fall through */
    case PIN_TABLE:
        alloc_table_unpin(&e->table);
        ht_free(v->live);
        /* fall through */
    case PIN_COMMIT_AGG:
        agg_table_unpin(&e->commit_agg, &v->commit_agg);
        /* fall through */
    case PIN_HEAP_AGG:
        agg_table_unpin(&e->heap_agg, &v->heap_agg);
        /* fall through */
    case PIN_SI:
        stack_intern_unpin(&v->si);
        /* fall through */
    default:
        break;
    }
    v->pins = 0;
}

static int view_pin(struct engine *e, struct engine_view *v)
{
    if (stack_intern_pin(&e->si, &v->si) != 0)
        return UV_ENOMEM;
    v->pins = PIN_SI;
    if (agg_table_pin(&e->heap_agg, &v->heap_agg) != 0)
        return UV_ENOMEM;
    v->pins = PIN_HEAP_AGG;
    if (agg_table_pin(&e->commit_agg, &v->commit_agg) != 0)
        return UV_ENOMEM;
    v->pins = PIN_COMMIT_AGG;
    if (alloc_table_pin(&e->table, &v->live, &v->nlive_chunks) != 0)
        return UV_ENOMEM;
    v->pins = PIN_TABLE;
    if (chunk_ring_pin(&e->heap_life, &v->heap_life) != 0)
        return UV_ENOMEM;
    v->pins = PIN_HEAP_LIFE;
    if (chunk_ring_pin(&e->commit_life, &v->commit_life) != 0)
        return UV_ENOMEM;
    v->pins = PIN_COMMIT_LIFE;
    if (chunk_ring_pin(&e->re_ring, &v->re_ring) != 0)
        return UV_ENOMEM;
    v->pins = PIN_RE;
    return 0;
}

static int view_copy_tables(const struct engine *e, struct engine_view *v)
{
    v->ncommits = e->commits.n;
    v->commits = ht_malloc((e->commits.n ? e->commits.n : 1) * sizeof(*v->commits));
    v->nheaps = e->nheaps;
    v->heaps = ht_malloc((e->nheaps ? e->nheaps : 1) * sizeof(*v->heaps));
    if (!v->commits || !v->heaps)
        return UV_ENOMEM;
    if (e->commits.n)
        memcpy(v->commits, e->commits.r, e->commits.n * sizeof(*v->commits));
    for (uint32_t h = 0; h < e->nheaps; h++)
        v->heaps[h] = e->heaps[h].handle;
    return 0;
}

int engine_view_open(struct engine *e, struct engine_view **out)
{
    if (e->view)
        return UV_EBUSY;
    struct engine_view *v = ht_calloc(1, sizeof(*v));
    if (!v)
        return UV_ENOMEM;
    v->e = e;
    v->now = e->now;
    v->live_count = e->table.count;
    v->re_unresolved = e->re_unresolved;
    if (view_copy_tables(e, v) != 0 || view_pin(e, v) != 0)
        goto fail;
    e->view = v;
    *out = v;
    return 0;
fail:
    view_unpin(e, v);
    ht_free(v->commits);
    ht_free(v->heaps);
    ht_free(v);
    return UV_ENOMEM;
}

void engine_view_close(struct engine *e, struct engine_view *v)
{
    if (!v)
        return;
    view_unpin(e, v);
    ht_free(v->commits);
    ht_free(v->heaps);
    if (e->view == v)
        e->view = NULL;
    ht_free(v);
}

uint64_t ev_now(const struct engine_view *v)
{
    return v->now;
}

const struct stack_intern *ev_stacks(const struct engine_view *v)
{
    return &v->si;
}

uint32_t ev_nstacks(const struct engine_view *v)
{
    return v->si.nstacks;
}

const struct agg *ev_agg(const struct engine_view *v, int domain, uint32_t stack)
{
    return agg_peek(domain == HT_DOM_HEAP ? &v->heap_agg : &v->commit_agg, stack);
}

uint32_t ev_live_nchunks(const struct engine_view *v)
{
    return v->nlive_chunks;
}

const struct alloc_entry *ev_live_chunk(const struct engine_view *v, uint32_t i, uint32_t *n,
                                        uint64_t *min_a, uint64_t *max_a)
{
    const struct alloc_view_chunk *c = &v->live[i];
    *n = c->n;
    *min_a = c->min_a;
    *max_a = c->max_a;
    return c->e;
}

uint64_t ev_live_count(const struct engine_view *v)
{
    return v->live_count;
}

int ev_live_reallocs(const struct engine_view *v, uint32_t stack, uint64_t *out)
{
    const uint64_t *w = agg_peek_live_re(&v->heap_agg, stack);
    *out = 0;
    if (!w || (*w >> AGG_RE_SUM_BITS) != 0)
        return 0; /* no aggregate (no memory once), or a live block saturated */
    *out = *w & AGG_RE_SUM_MAX;
    return 1;
}

const struct chunk_ring *ev_heap_life(const struct engine_view *v)
{
    return &v->heap_life;
}

const struct chunk_ring *ev_commit_life(const struct engine_view *v)
{
    return &v->commit_life;
}

const struct chunk_ring *ev_re_ring(const struct engine_view *v)
{
    return &v->re_ring;
}

uint64_t ev_re_unresolved(const struct engine_view *v)
{
    return v->re_unresolved;
}

const struct commit_range *ev_commits(const struct engine_view *v, uint32_t *n)
{
    *n = v->ncommits;
    return v->commits;
}

uint64_t ev_heap_handle(const struct engine_view *v, unsigned heap)
{
    return heap < v->nheaps ? v->heaps[heap] : 0;
}
