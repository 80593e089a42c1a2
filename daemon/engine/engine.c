/* Engine: applies events to the table, aggregates, commit map and rings. */
#include "engine.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-hash.h"

#include <string.h>
#include <uv.h>

void engine_limits_default(struct engine_limits *lim)
{
    lim->table_cap = 8u << 20;
    lim->commit_cap = 1u << 20;
    lim->life_ring = 4u << 20;
    lim->commit_ring = 1u << 20;
    lim->timeline_ring = 86400;
    lim->timeline_ns = 1000000000ULL;
    lim->max_stacks = 1u << 20;
    lim->max_strings = 1u << 20;
    lim->max_marks = 1024;
    lim->max_name_len = 1024;
    lim->max_modules = MODULES_MAX_DEFAULT;
}

int engine_init(struct engine *e, const struct engine_limits *lim)
{
    return engine_init_budget(e, lim, NULL);
}

int engine_init_budget(struct engine *e, const struct engine_limits *lim, struct mem_budget *budget)
{
    memset(e, 0, sizeof(*e));
    e->lim = *lim;
    if (e->lim.timeline_ns == 0)
        e->lim.timeline_ns = 1000000000ULL;
    mem_acct_init(&e->acct, budget);
    struct mem_acct *m = &e->acct;
    if (stack_intern_init_acct(&e->si, lim->max_stacks, lim->max_strings, lim->max_name_len, m,
                               MEM_stacks, MEM_strings) != 0)
        goto fail_si;
    if (alloc_table_init_acct(&e->table, lim->table_cap, m) != 0)
        goto fail_table;
    e->heap_mask = 63;
    e->heap_slots = mem_calloc(m, MEM_heaps, e->heap_mask + 1, sizeof(uint32_t));
    e->marks = mem_calloc(m, MEM_marks, lim->max_marks ? lim->max_marks : 1, sizeof(struct mark));
    if (!e->heap_slots || !e->marks)
        goto fail_heaps;
    agg_table_init(&e->heap_agg);
    agg_table_init(&e->commit_agg);
    commit_map_init(&e->commits, lim->commit_cap);
    life_ring_init(&e->heap_life, lim->life_ring);
    life_ring_init(&e->commit_life, lim->commit_ring);
    realloc_ring_init(&e->re_ring, lim->life_ring);
    timeline_init(&e->tl, lim->timeline_ring);
    e->heap_agg.acct = e->commit_agg.acct = m;
    e->commits.acct = m;
    e->heap_life.acct = e->commit_life.acct = e->re_ring.acct = m;
    e->tl.acct = m;
    module_table_init(&e->modules, lim->max_modules, m);
    return 0;
fail_heaps:
    ht_free(e->heap_slots);
    ht_free(e->marks);
    alloc_table_close(&e->table);
fail_table:
    stack_intern_close(&e->si);
fail_si:
    mem_acct_close(&e->acct);
    return UV_ENOMEM;
}

void engine_close(struct engine *e)
{
    stack_intern_close(&e->si);
    alloc_table_close(&e->table);
    agg_table_close(&e->heap_agg);
    agg_table_close(&e->commit_agg);
    commit_map_close(&e->commits);
    chunk_ring_close(&e->heap_life);
    chunk_ring_close(&e->commit_life);
    chunk_ring_close(&e->re_ring);
    timeline_close(&e->tl);
    module_table_close(&e->modules);
    ht_free(e->heaps);
    ht_free(e->heap_slots);
    ht_free(e->marks);
    qscratch_close(&e->qscratch, &e->acct);
    mem_acct_close(&e->acct); /* the structures above were freed whole: give back their charge */
    memset(e, 0, sizeof(*e));
}

static uint32_t heap_lookup_slow(const struct engine *e, uint64_t handle, uint32_t *slot)
{
    uint32_t i = (uint32_t)ht_mix64(handle) & e->heap_mask;
    while (e->heap_slots[i]) {
        if (e->heaps[e->heap_slots[i] - 1].handle == handle)
            break;
        i = (i + 1) & e->heap_mask;
    }
    *slot = i;
    return e->heap_slots[i];
}

static inline uint32_t heap_lookup(const struct engine *e, uint64_t handle, uint32_t *slot)
{
    /* Most events name the same heap as the one before. */
    if (e->nheaps && e->heaps[e->last_heap].handle == handle) {
        *slot = e->last_heap_slot;
        return e->last_heap + 1;
    }
    return heap_lookup_slow(e, handle, slot);
}

static int heap_slots_grow(struct engine *e)
{
    uint32_t size = (e->heap_mask + 1) * 2;
    uint32_t *ns = mem_calloc(&e->acct, MEM_heaps, size, sizeof(uint32_t));
    if (!ns)
        return -1;
    for (uint32_t h = 0; h < e->nheaps; h++) {
        uint32_t i = (uint32_t)ht_mix64(e->heaps[h].handle) & (size - 1);
        while (ns[i])
            i = (i + 1) & (size - 1);
        ns[i] = h + 1;
    }
    mem_free(&e->acct, MEM_heaps, e->heap_slots, ((size_t)e->heap_mask + 1) * sizeof(uint32_t));
    e->heap_slots = ns;
    e->heap_mask = size - 1;
    /* Re-point the cache at heap 0's new slot. */
    uint32_t i = (uint32_t)ht_mix64(e->heaps[0].handle) & e->heap_mask;
    while (ns[i] != 1)
        i = (i + 1) & e->heap_mask;
    e->last_heap = 0;
    e->last_heap_slot = i;
    return 0;
}

unsigned engine_heap_index(struct engine *e, uint64_t handle)
{
    uint32_t slot;
    uint32_t v = heap_lookup(e, handle, &slot);
    if (v) {
        e->last_heap = v - 1;
        e->last_heap_slot = slot;
        return v - 1;
    }
    if (e->nheaps >= ALLOC_MAX_HEAPS || e->nheaps + 1 > e->heap_mask / 2)
        return ALLOC_HEAP_FREE;
    if (e->nheaps == e->heaps_alloc) {
        uint32_t na = e->heaps_alloc ? e->heaps_alloc * 2 : 8;
        struct heap_info *nh = mem_realloc(&e->acct, MEM_heaps, e->heaps,
                                           (size_t)e->heaps_alloc * sizeof(*nh), na * sizeof(*nh));
        if (!nh)
            return ALLOC_HEAP_FREE;
        e->heaps = nh;
        e->heaps_alloc = na;
    }
    memset(&e->heaps[e->nheaps], 0, sizeof(e->heaps[0]));
    e->heaps[e->nheaps].handle = handle;
    e->heap_slots[slot] = ++e->nheaps;
    if (e->nheaps * 4 > e->heap_mask)
        heap_slots_grow(e); /* on failure the next new heap is refused, not lost silently */
    return e->nheaps - 1;
}

static void take_sample(struct engine *e, uint64_t t)
{
    struct tl_sample s;
    memset(&s, 0, sizeof(s));
    s.t = t;
    s.heap_bytes = e->heap_bytes;
    s.heap_count = e->heap_count;
    s.commit_bytes = e->commits.bytes;
    s.private_bytes = e->private_bytes;
    for (uint32_t h = 0; h < e->nheaps; h++) {
        unsigned k = h < HT_TIMELINE_HEAPS - 1 ? h : HT_TIMELINE_HEAPS - 1;
        s.per_heap[k] += e->heaps[h].out_bytes;
    }
    timeline_push(&e->tl, &s);
}

static void take_due_samples(struct engine *e, uint64_t t)
{
    /* One sample per interval boundary passed; after a gap longer than the
     * ring, only the last ring's worth matters. */
    uint64_t iv = e->lim.timeline_ns;
    uint64_t due = (t - e->next_sample) / iv + 1;
    if (due > e->tl.cap)
        e->next_sample += (due - e->tl.cap) * iv;
    while (e->next_sample <= t) {
        take_sample(e, e->next_sample);
        e->next_sample += iv;
    }
}

void engine_private_bytes(struct engine *e, uint64_t v)
{
    e->private_bytes = v;
    if (v > e->peak_private_bytes)
        e->peak_private_bytes = v;
}

void engine_advance(struct engine *e, uint64_t t)
{
    if (t < e->now)
        return;
    e->now = t;
    if (t >= e->next_sample)
        take_due_samples(e, t);
}

int engine_mark(struct engine *e, const char *name, uint64_t t)
{
    size_t len = strlen(name);
    if (len == 0 || len >= sizeof(e->marks[0].name))
        return HT_EBADARG;
    if (engine_mark_find(e, name))
        return HT_EEXIST;
    if (e->nmarks >= e->lim.max_marks)
        return HT_EFULL;
    memcpy(e->marks[e->nmarks].name, name, len + 1);
    e->marks[e->nmarks].t = t;
    e->nmarks++;
    return 0;
}

const struct mark *engine_mark_find(const struct engine *e, const char *name)
{
    for (uint32_t i = 0; i < e->nmarks; i++)
        if (strcmp(e->marks[i].name, name) == 0)
            return &e->marks[i];
    return NULL;
}

static void heap_out_add(struct engine *e, unsigned hi, uint64_t bytes, uint64_t count)
{
    e->heaps[hi].out_bytes += bytes;
    e->heaps[hi].out_count += count;
    e->heap_bytes += bytes;
    e->heap_count += count;
    if (e->heap_bytes > e->peak_heap_bytes)
        e->peak_heap_bytes = e->heap_bytes;
}

static void heap_out_sub(struct engine *e, unsigned hi, uint64_t bytes, uint64_t count)
{
    e->heaps[hi].out_bytes -= bytes;
    e->heaps[hi].out_count -= count;
    e->heap_bytes -= bytes;
    e->heap_count -= count;
}

struct complete_ctx {
    struct engine *e;
    uint64_t t;
};

/* Events looked at, from the latest back, to mark a closed block's reallocs. */
#define RE_CLOSE_SCAN 4096

/*
 * A block freed at its own alloc time t: a later block at the same address
 * may be allocated at t too, and its in-place reallocs would then carry the
 * same (heap, address, alloc time). Mark this block's events as closed so
 * queries tell them apart. They all happened at t, the latest time, so they
 * are among the last events of the ring; past RE_CLOSE_SCAN events at t the
 * ring counts the block as unresolved (queries that need it say incomplete).
 */
static void realloc_close(struct engine *e, unsigned hi, uint64_t addr, uint64_t t, unsigned n)
{
    struct chunk_ring *r = &e->re_ring;
    uint64_t len = chunk_ring_len(r), found = 0, k = 0;
    for (; k < len && k < RE_CLOSE_SCAN && (n >= HT_RE_INPLACE_MAX || found < n); k++) {
        const struct realloc_rec *x = realloc_ring_at(r, len - 1 - k);
        if (x->t != t)
            return; /* the rest were evicted (the horizon covers them) */
        if (!x->closed && x->heap == hi && x->addr == addr && x->a == t) {
            struct realloc_rec *w = chunk_ring_at_mut(r, len - 1 - k);
            if (!w) {
                e->re_unresolved++; /* shared with a view and no copy could be made */
                return;
            }
            w->closed = 1;
            found++;
        }
    }
    if (k == RE_CLOSE_SCAN && k < len && (n >= HT_RE_INPLACE_MAX || found < n))
        e->re_unresolved++;
}

/* What a live block adds to its stack's live-realloc word (agg.h): its
 * realloc events as a whole-session query counts them, or a saturated block. */
static uint64_t live_re_part(unsigned re)
{
    if ((re & HT_RE_INPLACE_MAX) == HT_RE_INPLACE_MAX)
        return 1ULL << AGG_RE_SUM_BITS;
    return (re & HT_RE_INPLACE_MAX) + ((re & HT_RE_CREATED) != 0);
}

static void live_re_add(struct engine *e, uint32_t stack, uint64_t part)
{
    uint64_t *w = agg_live_re(&e->heap_agg, stack);
    if ((*w >> AGG_RE_SUM_BITS) == AGG_RE_SAT_STICKY)
        return;
    uint64_t sum = *w & AGG_RE_SUM_MAX;
    if (sum + (part & AGG_RE_SUM_MAX) > AGG_RE_SUM_MAX)
        *w = AGG_RE_SAT_STICKY << AGG_RE_SUM_BITS; /* not reached: the sum cannot overflow */
    else
        *w += part;
}

/* Counts on both sides may disagree when an aggregate was missing (no
 * memory) at the alloc: the word then says unknown for good, never a wrong
 * figure. */
static void live_re_sub(struct engine *e, uint32_t stack, uint64_t part)
{
    uint64_t *w = agg_live_re(&e->heap_agg, stack);
    if ((*w >> AGG_RE_SUM_BITS) == AGG_RE_SAT_STICKY)
        return;
    if ((*w & AGG_RE_SUM_MAX) < (part & AGG_RE_SUM_MAX) ||
        (*w >> AGG_RE_SUM_BITS) < (part >> AGG_RE_SUM_BITS))
        *w = AGG_RE_SAT_STICKY << AGG_RE_SUM_BITS;
    else
        *w -= part;
}

/* A live block stops being live at t: into the lifetime ring and the aggregates. */
static void complete_block(const struct alloc_entry *en, void *arg)
{
    struct complete_ctx *c = arg;
    struct engine *e = c->e;
    uint64_t size = alloc_entry_size(en), m = alloc_entry_mult(en);
    unsigned hi = alloc_entry_heap(en);
    unsigned re = alloc_entry_reallocs(en);
    struct life_rec r = {.a = alloc_entry_time(en),
                         .f = c->t,
                         .size = size,
                         .addr = en->addr,
                         .stack = en->stack,
                         .heap = (uint16_t)hi,
                         .reallocs = (uint8_t)re};
    life_rec_set_mult(&r, en->mult);
    if (c->t == r.a && (re & HT_RE_INPLACE_MAX))
        realloc_close(e, hi, en->addr, c->t, re & HT_RE_INPLACE_MAX);
    life_ring_push(&e->heap_life, &r);
    struct agg *g = agg_get(&e->heap_agg, en->stack);
    if (g) {
        g->out_count -= m;
        g->out_bytes -= size * m;
        if (re)
            live_re_sub(e, en->stack, live_re_part(re));
    }
    heap_out_sub(e, hi, size * m, m);
}

static void peak_update(struct agg *g)
{
    if (g->out_bytes > g->peak_bytes)
        g->peak_bytes = g->out_bytes;
}

/* created: 1 when a realloc made the block (that realloc is counted);
 * mult: the blocks it stands for (0: 1, exact). */
static void apply_alloc(struct engine *e, uint64_t t, unsigned hi, uint64_t addr, uint64_t size,
                        uint32_t stack, unsigned created, uint32_t mult)
{
    uint64_t m = mult ? mult : 1;
    struct agg *g = agg_get(&e->heap_agg, stack);
    struct alloc_entry *en;
    int rc = alloc_table_insert(&e->table, hi, addr, t, size, stack, &en);
    if (rc == HT_EEXIST) {
        /* The address is live again, so its free was missed: close the old block. */
        e->q.dup_allocs++;
        struct alloc_entry old;
        rc = alloc_table_remove(&e->table, hi, addr, &old);
        if (rc == 0) {
            struct complete_ctx c = {e, t};
            complete_block(&old, &c);
            rc = alloc_table_insert(&e->table, hi, addr, t, size, stack, &en);
        }
    }
    if (rc != 0) {
        /* At the cap it counts here; refused memory is counted by e->acct. */
        if (rc == HT_EFULL)
            e->q.cap_drops++;
        if (g) {
            g->untracked_count += m;
            g->untracked_bytes += size * m;
        }
        return;
    }
    en->mult = mult;
    if (created)
        en->t_re |= (uint64_t)HT_RE_CREATED << ALLOC_TIME_BITS;
    if (g) {
        g->out_count += m;
        g->out_bytes += size * m;
        g->total_count += m;
        g->total_bytes += size * m;
        g->reallocs += created;
        peak_update(g);
        if (created)
            live_re_add(e, stack, 1);
    }
    heap_out_add(e, hi, size * m, m);
}

static void apply_free(struct engine *e, uint64_t t, unsigned hi, uint64_t addr)
{
    struct alloc_entry old;
    int rc = alloc_table_remove(&e->table, hi, addr, &old);
    if (rc != 0) {
        if (rc == UV_ENOENT)
            e->q.unknown_frees++; /* else no memory, counted by e->acct */
        return;
    }
    struct complete_ctx c = {e, t};
    complete_block(&old, &c);
}

static void apply_realloc(struct engine *e, const struct ht_event *ev, uint64_t t, unsigned hi)
{
    if (ev->old_addr == 0) { /* realloc(NULL, n) allocates */
        apply_alloc(e, t, hi, ev->addr, ev->size, ev->stack, 1, ev->mult);
        return;
    }
    if (ev->addr == 0) { /* realloc(p, 0) that freed p */
        apply_free(e, t, hi, ev->old_addr);
        return;
    }
    if (ev->addr != ev->old_addr) {
        apply_free(e, t, hi, ev->old_addr);
        apply_alloc(e, t, hi, ev->addr, ev->size, ev->stack, 1, ev->mult);
        return;
    }
    struct alloc_entry *en;
    int rc = alloc_table_find_mut(&e->table, hi, ev->addr, &en);
    if (rc == UV_ENOMEM)
        return; /* a view shares the entry and no chunk could take its move (acct counts it) */
    if (rc != 0) {
        e->q.unknown_frees++;
        apply_alloc(e, t, hi, ev->addr, ev->size, ev->stack, 1, ev->mult);
        return;
    }
    /* In place: the block keeps its alloc time and stack and takes the new size. */
    uint64_t old = alloc_entry_size(en), m = alloc_entry_mult(en);
    en->size_heap = (en->size_heap & ~ALLOC_SIZE_MAX) | ev->size;
    /* The block counts its in-place reallocs up to HT_RE_INPLACE_MAX; the
     * ring keeps each one's time for windows, the stack's total every one. */
    unsigned re_before = alloc_entry_reallocs(en);
    if ((re_before & HT_RE_INPLACE_MAX) < HT_RE_INPLACE_MAX)
        en->t_re += (uint64_t)1 << ALLOC_TIME_BITS;
    unsigned re_after = alloc_entry_reallocs(en);
    struct realloc_rec rr = {
        .t = t, .a = alloc_entry_time(en), .addr = ev->addr, .heap = (uint16_t)hi};
    realloc_ring_push(&e->re_ring, &rr);
    uint32_t stack = en->stack;
    struct agg *g = agg_get(&e->heap_agg, stack);
    if (g) {
        g->out_bytes += (ev->size - old) * m;
        g->total_bytes += (ev->size - old) * m;
        g->reallocs++;
        peak_update(g);
        if (re_after != re_before) {
            if (re_before)
                live_re_sub(e, stack, live_re_part(re_before));
            live_re_add(e, stack, live_re_part(re_after));
        }
    }
    if (ev->size >= old)
        heap_out_add(e, hi, (ev->size - old) * m, 0);
    else
        heap_out_sub(e, hi, (old - ev->size) * m, 0);
}

/* A decommitted piece is a completed block; the pieces left of its range
 * are live blocks now (commit-map.h), new ones beside the one it was. */
static void commit_done_cb(void *arg, const struct commit_range *p, uint64_t f, unsigned left)
{
    struct engine *e = arg;
    uint64_t size = p->end - p->start;
    struct life_rec r = {.a = p->t, .f = f, .size = size, .addr = p->start, .stack = p->stack};
    life_ring_push(&e->commit_life, &r);
    struct agg *g = agg_get(&e->commit_agg, p->stack);
    if (g) {
        g->out_count = g->out_count + left - 1;
        g->total_count += left;
        g->out_bytes -= size;
    }
}

static int range_ok(struct engine *e, const struct ht_event *ev)
{
    if (ev->size == 0 || ev->size > ALLOC_SIZE_MAX || ev->addr + ev->size < ev->addr) {
        e->q.bad_size++;
        return 0;
    }
    return 1;
}

static void apply_commit(struct engine *e, const struct ht_event *ev, uint64_t t)
{
    if (!range_ok(e, ev))
        return;
    uint64_t added, dropped;
    unsigned dropped_ranges;
    unsigned ranges = commit_map_commit(&e->commits, ev->addr, ev->addr + ev->size, t, ev->stack,
                                        &added, &dropped, &dropped_ranges);
    struct agg *g = agg_get(&e->commit_agg, ev->stack);
    if (dropped)
        e->q.commit_cap_drops++;
    if (g) {
        g->out_count += ranges;
        g->out_bytes += added;
        g->total_count += ranges;
        g->total_bytes += added;
        g->untracked_count += dropped_ranges;
        g->untracked_bytes += dropped;
        peak_update(g);
    }
    if (e->commits.bytes > e->peak_commit_bytes)
        e->peak_commit_bytes = e->commits.bytes;
}

static void apply_decommit(struct engine *e, const struct ht_event *ev, uint64_t t)
{
    if (!range_ok(e, ev))
        return;
    if (commit_map_decommit(&e->commits, ev->addr, ev->addr + ev->size, t, commit_done_cb, e) &&
        !(ev->flags & HT_EVF_WHOLE_SPACE))
        e->q.decommit_unknown++;
}

static void apply_heap_destroy(struct engine *e, uint64_t t, uint64_t handle)
{
    uint32_t slot;
    uint32_t v = heap_lookup(e, handle, &slot);
    if (!v)
        return;
    unsigned hi = v - 1;
    e->heaps[hi].destroys++;
    if (e->heaps[hi].out_count == 0)
        return;
    struct complete_ctx c = {e, t};
    alloc_table_remove_heap(&e->table, hi, complete_block, &c);
}

/* Heap index for an event, or -1 when the event is dropped. */
static int event_heap(struct engine *e, const struct ht_event *ev)
{
    if (ev->size > ALLOC_SIZE_MAX) {
        e->q.bad_size++;
        return -1;
    }
    unsigned hi = engine_heap_index(e, ev->heap);
    if (hi == ALLOC_HEAP_FREE) {
        e->q.heap_overflow++;
        return -1;
    }
    return (int)hi;
}

static void count_stack(struct engine *e, const struct ht_event *ev)
{
    if (ev->stack == 0) {
        if (ev->flags & HT_EVF_STACK_DROPPED)
            e->q.stack_drops++;
        else
            e->q.no_stack++;
    }
    if (ev->flags & HT_EVF_TRUNCATED)
        e->q.truncated_stacks++;
}

void engine_apply(struct engine *e, const struct ht_event *ev)
{
    uint64_t t = ev->t;
    if (t > ALLOC_TIME_MAX) {
        e->q.malformed++;
        return;
    }
    if (t < e->now) {
        e->q.time_backwards++;
        t = e->now;
    }
    e->now = t;
    if (t >= e->next_sample)
        take_due_samples(e, t);
    e->q.events++;
    int hi;
    switch (ev->kind) {
    case HT_EV_ALLOC:
        count_stack(e, ev);
        if ((hi = event_heap(e, ev)) >= 0)
            apply_alloc(e, t, (unsigned)hi, ev->addr, ev->size, ev->stack, 0, ev->mult);
        break;
    case HT_EV_REALLOC:
        count_stack(e, ev);
        if ((hi = event_heap(e, ev)) >= 0)
            apply_realloc(e, ev, t, (unsigned)hi);
        break;
    case HT_EV_FREE:
        if ((hi = event_heap(e, ev)) >= 0)
            apply_free(e, t, (unsigned)hi, ev->addr);
        break;
    case HT_EV_HEAP_DESTROY:
        apply_heap_destroy(e, t, ev->heap);
        break;
    case HT_EV_COMMIT:
        count_stack(e, ev);
        apply_commit(e, ev, t);
        break;
    case HT_EV_DECOMMIT:
    case HT_EV_RELEASE:
        apply_decommit(e, ev, t);
        break;
    case HT_EV_PRIVATE_BYTES:
        engine_private_bytes(e, ev->size);
        break;
    case HT_EV_LOST:
        e->q.lost += ev->size;
        break;
    case HT_EV_PROCESS:
        e->pid = ev->size;
        break;
    case HT_EV_EXIT:
        e->exited = 1;
        e->exit_code = (int64_t)ev->size;
        break;
    case HT_EV_MODULE_LOAD:
        module_table_load(&e->modules, ev);
        break;
    case HT_EV_MODULE_UNLOAD:
        module_table_unload(&e->modules, ev->addr);
        break;
    default:
        e->q.malformed++;
        e->q.events--;
        break;
    }
}

uint64_t engine_memory_by(const struct engine *e, uint64_t out[MEM_KINDS])
{
    for (int k = 0; k < MEM_KINDS; k++)
        out[k] = e->acct.bytes[k];
    return mem_acct_total(&e->acct);
}

uint64_t engine_memory(const struct engine *e)
{
    return mem_acct_total(&e->acct);
}

/* Table key of an event for prefetch hints; never creates a heap. */
struct hint {
    int hi; /* -1: nothing to prefetch */
    uint64_t addr, hash;
};

static void hint_make(const struct engine *e, const struct ht_event *ev, struct hint *h)
{
    h->hi = -1;
    if (ev->kind != HT_EV_ALLOC && ev->kind != HT_EV_FREE && ev->kind != HT_EV_REALLOC)
        return;
    uint32_t slot;
    uint32_t v = heap_lookup(e, ev->heap, &slot);
    if (!v)
        return;
    h->hi = (int)v - 1;
    h->addr = ev->kind == HT_EV_REALLOC ? ev->old_addr : ev->addr;
    h->hash = alloc_table_hash((unsigned)h->hi, h->addr);
}

/* Stages, in events ahead of the one applied: the bucket, then the chain's
 * first entry, then (for a free) the aggregate of that entry's stack. */
#define AHEAD_BUCKET 12
#define AHEAD_ENTRY 6
#define AHEAD_AGG 2
#define HINTS 16 /* > AHEAD_BUCKET, power of two */

/* Below this many live allocations the table stays in cache and the hints
 * cost more than they save (measured: 13.4 vs 9.5 M events/s with ~600 live;
 * with 1 M live the hints win). */
#define PREFETCH_MIN_LIVE (128u * 1024)

void engine_apply_batch(struct engine *e, const struct ht_event *evs, size_t n)
{
    /* A bounded step of the query scratch's reserve while some is left and
     * no view (query) holds the scratch (query-scratch.h). */
    if (!e->view && e->qscratch.untouched)
        (void)qscratch_touch(&e->qscratch);
    if (e->table.count < PREFETCH_MIN_LIVE) {
        for (size_t i = 0; i < n; i++)
            engine_apply(e, &evs[i]);
        return;
    }
    struct hint hints[HINTS];
    for (size_t i = 0; i < n && i < AHEAD_BUCKET; i++)
        hint_make(e, &evs[i], &hints[i]);
    for (size_t i = 0; i < n; i++) {
        if (i + AHEAD_BUCKET < n) {
            struct hint *h = &hints[(i + AHEAD_BUCKET) & (HINTS - 1)];
            hint_make(e, &evs[i + AHEAD_BUCKET], h);
            if (h->hi >= 0)
                alloc_table_prefetch_bucket(&e->table, h->hash);
        }
        if (i + AHEAD_ENTRY < n) {
            const struct hint *h = &hints[(i + AHEAD_ENTRY) & (HINTS - 1)];
            const struct ht_event *ev = &evs[i + AHEAD_ENTRY];
            if (h->hi >= 0)
                alloc_table_prefetch_entry(&e->table, h->hash);
            if (ev->kind == HT_EV_ALLOC) {
                const struct agg *g = agg_peek(&e->heap_agg, ev->stack);
                if (g)
                    __builtin_prefetch(g);
            }
        }
        if (i + AHEAD_AGG < n &&
            (evs[i + AHEAD_AGG].kind == HT_EV_FREE || evs[i + AHEAD_AGG].kind == HT_EV_REALLOC)) {
            const struct hint *h = &hints[(i + AHEAD_AGG) & (HINTS - 1)];
            const struct alloc_entry *en =
                h->hi >= 0 ? alloc_table_peek_head(&e->table, (unsigned)h->hi, h->addr, h->hash)
                           : NULL;
            const struct agg *g = en ? agg_peek(&e->heap_agg, en->stack) : NULL;
            if (g) {
                __builtin_prefetch(g);
                /* A block with reallocs updates its stack's live-realloc word too. */
                if (alloc_entry_reallocs(en) || evs[i + AHEAD_AGG].kind == HT_EV_REALLOC)
                    __builtin_prefetch(agg_peek_live_re(&e->heap_agg, en->stack));
            }
        }
        engine_apply(e, &evs[i]);
    }
}
