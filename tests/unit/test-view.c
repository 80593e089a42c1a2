/* Engine views: what a view shows while the owner applies events, against a fresh replay. */
#include "engine-view.h"
#include "engine.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-test.h"
#include "query.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

/* The log: events and stack internings, replayed the same way into any engine. */
struct op {
    struct ht_event ev;
    int intern; /* 1: intern stack number ev.stack instead of applying ev */
};

static struct op *ops;
static size_t nops, ops_alloc;
static uint64_t rng = 0x9e3779b97f4a7c15ULL, now_t = 1;
static uint32_t nstk; /* stacks interned by the log so far */

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void op_push(const struct op *o)
{
    if (nops == ops_alloc) {
        ops_alloc = ops_alloc ? ops_alloc * 2 : 65536;
        ops = realloc(ops, ops_alloc * sizeof(*ops));
    }
    ops[nops++] = *o;
}

/* Stack number k: frames named by interned strings (so strget is read too) and addresses. */
static uint32_t intern_stack(struct engine *e, uint32_t k)
{
    char name[64];
    int len = snprintf(name, sizeof(name), "mod%u.so!fn_%u", k % 7, k);
    uint64_t f[4] = {HT_FRAME_SYM | stack_intern_str(&e->si, name, (unsigned)len),
                     0x400000 + k * 16, 0x500000 + (k % 13), 0x999};
    return stack_intern_get(&e->si, f, 1 + k % 4);
}

static void op_apply(struct engine *e, const struct op *o)
{
    if (o->intern)
        intern_stack(e, o->ev.stack);
    else
        engine_apply(e, &o->ev);
}

#define ADDRS 12000u
static const uint64_t heaps[] = {0x10, 0x20, 0x30, 0x40};

/* n random operations: every kind of event the engine takes, on few enough
 * addresses that blocks die, get reallocated in place until saturation, are
 * allocated twice, freed unknown; small rings wrap; heaps get destroyed. */
static void gen(struct engine *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct op o;
        memset(&o, 0, sizeof(o));
        uint64_t r = rnd();
        if (r % 512 == 0 || nstk < 8) {
            o.intern = 1;
            o.ev.stack = nstk++;
            op_push(&o);
            op_apply(e, &o);
            continue;
        }
        now_t += (r >> 8) % 3; /* equal times too: blocks freed at their alloc time */
        struct ht_event *ev = &o.ev;
        ev->t = now_t;
        ev->heap = heaps[(r >> 12) % 4];
        /* A few hot addresses take many in-place reallocs (saturating their count). */
        uint64_t slot = (r >> 16) % 64 == 0 ? (r >> 24) % 8 : (r >> 24) % ADDRS;
        ev->addr = 0x10000 + slot * 32;
        ev->size = 1 + (r >> 40) % 500;
        ev->stack = 1 + (uint32_t)((r >> 48) % nstk);
        switch ((r >> 4) % 16) {
        case 0:
        case 1:
        case 2:
        case 3:
        case 4:
            ev->kind = HT_EV_ALLOC;
            break;
        case 5:
        case 6:
        case 7:
        case 8:
            ev->kind = HT_EV_FREE;
            break;
        case 9:
        case 10:
            ev->kind = HT_EV_REALLOC; /* in place */
            ev->old_addr = ev->addr;
            if (slot < 8)
                ev->heap = 0x10;
            break;
        case 11:
            ev->kind = HT_EV_REALLOC; /* moving, from NULL or to free */
            ev->old_addr = (r & 1) ? 0 : 0x10000 + ((r >> 2) % ADDRS) * 32;
            if ((r & 3) == 2)
                ev->addr = 0;
            break;
        case 12:
            ev->kind = HT_EV_COMMIT;
            ev->addr = 0x70000000 + ((r >> 20) % 512) * 4096;
            ev->size = 4096 * (1 + (r >> 30) % 8);
            break;
        case 13:
            ev->kind = HT_EV_DECOMMIT;
            ev->addr = 0x70000000 + ((r >> 20) % 512) * 4096;
            ev->size = 4096 * (1 + (r >> 30) % 4);
            break;
        case 14:
            ev->kind = (r >> 20) % 256 == 0 ? HT_EV_HEAP_DESTROY : HT_EV_ALLOC;
            break;
        default:
            ev->kind = HT_EV_FREE;
            ev->addr = 0x10000 + slot * 32 + 8; /* never allocated: unknown */
            break;
        }
        op_push(&o);
        op_apply(e, &o);
    }
}

/* Everything a view answers, read into plain arrays. */
struct live_rec {
    uint64_t heap, addr, t_re, size;
    uint32_t stack;
};

struct snap {
    uint64_t now, live_count, re_unresolved;
    uint32_t nstacks, nstrs;
    struct live_rec *live;
    size_t nlive;
    struct agg *aggs[2]; /* by stack, zero when absent */
    uint64_t *live_re;   /* exact realloc events of each stack's live blocks (model) */
    uint8_t *live_re_sat;
    unsigned char *rings[3];
    uint64_t ring_len[3], ring_horizon[3];
    int ring_evicted[3];
    struct commit_range *commits;
    uint32_t ncommits;
    uint64_t *frames; /* 4 per stack, depth in frames[4*id + 3] high bits */
    uint32_t *depth;
    char **strs;
    uint64_t heaps[8];
};

static void snap_free(struct snap *s)
{
    free(s->live);
    free(s->aggs[0]);
    free(s->aggs[1]);
    free(s->live_re);
    free(s->live_re_sat);
    for (int i = 0; i < 3; i++)
        free(s->rings[i]);
    free(s->commits);
    free(s->frames);
    free(s->depth);
    for (uint32_t i = 0; s->strs && i < s->nstrs; i++)
        free(s->strs[i]);
    free(s->strs);
    memset(s, 0, sizeof(*s));
}

static int live_cmp(const void *pa, const void *pb)
{
    const struct live_rec *a = pa, *b = pb;
    if (a->heap != b->heap)
        return a->heap < b->heap ? -1 : 1;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static void live_add(struct snap *s, const struct alloc_entry *en)
{
    struct live_rec *l = &s->live[s->nlive++];
    l->heap = alloc_entry_heap(en);
    l->addr = en->addr;
    l->t_re = en->t_re;
    l->size = alloc_entry_size(en);
    l->stack = en->stack;
}

static void live_model(struct snap *s)
{
    qsort(s->live, s->nlive, sizeof(*s->live), live_cmp);
    s->live_re = calloc(s->nstacks + 1, sizeof(uint64_t));
    s->live_re_sat = calloc(s->nstacks + 1, 1);
    for (size_t i = 0; i < s->nlive; i++) {
        unsigned re = (unsigned)(s->live[i].t_re >> ALLOC_TIME_BITS);
        uint32_t st = s->live[i].stack;
        if ((re & HT_RE_INPLACE_MAX) == HT_RE_INPLACE_MAX)
            s->live_re_sat[st] = 1;
        else
            s->live_re[st] += (re & HT_RE_INPLACE_MAX) + ((re & HT_RE_CREATED) != 0);
    }
}

static void ring_copy(struct snap *s, int k, const struct chunk_ring *r)
{
    s->ring_len[k] = chunk_ring_len(r);
    s->ring_horizon[k] = r->horizon;
    s->ring_evicted[k] = r->evicted;
    s->rings[k] = malloc(s->ring_len[k] * r->elem + 1);
    for (uint64_t i = 0; i < s->ring_len[k]; i++)
        memcpy(s->rings[k] + i * r->elem, chunk_ring_at(r, i), r->elem);
}

static void stacks_copy(struct snap *s, const struct stack_intern *si)
{
    s->nstacks = si->nstacks;
    s->nstrs = si->nstrs;
    s->frames = calloc((size_t)s->nstacks * 4, sizeof(uint64_t));
    s->depth = calloc(s->nstacks, sizeof(uint32_t));
    for (uint32_t id = 0; id < s->nstacks; id++) {
        unsigned d;
        const uint64_t *f = stack_intern_frames(si, id, &d);
        s->depth[id] = d;
        if (f)
            memcpy(&s->frames[id * 4], f, d * sizeof(uint64_t));
    }
    s->strs = calloc(s->nstrs, sizeof(char *));
    for (uint32_t id = 1; id < s->nstrs; id++)
        s->strs[id] = strdup(stack_intern_strget(si, id));
}

struct expect_ctx {
    struct snap *s;
};

static void expect_live_cb(const struct alloc_entry *en, void *arg)
{
    live_add(arg, en);
}

/* The expected answers, read from an engine's structures directly. */
static void snap_engine(struct snap *s, const struct engine *e)
{
    memset(s, 0, sizeof(*s));
    s->now = e->now;
    s->live_count = e->table.count;
    s->re_unresolved = e->re_unresolved;
    stacks_copy(s, &e->si);
    s->live = calloc(e->table.count + 1, sizeof(*s->live));
    alloc_table_foreach(&e->table, expect_live_cb, s);
    live_model(s);
    for (int d = 0; d < 2; d++) {
        s->aggs[d] = calloc(s->nstacks, sizeof(struct agg));
        for (uint32_t id = 0; id < s->nstacks; id++) {
            const struct agg *g = agg_peek(d == 0 ? &e->heap_agg : &e->commit_agg, id);
            if (g)
                s->aggs[d][id] = *g;
        }
    }
    ring_copy(s, 0, &e->heap_life);
    ring_copy(s, 1, &e->commit_life);
    ring_copy(s, 2, &e->re_ring);
    s->ncommits = e->commits.n;
    s->commits = malloc((s->ncommits + 1) * sizeof(*s->commits));
    if (s->ncommits)
        memcpy(s->commits, e->commits.r, s->ncommits * sizeof(*s->commits));
    for (unsigned h = 0; h < 8; h++)
        s->heaps[h] = h < e->nheaps ? e->heaps[h].handle : 0;
}

/* The same answers through the view's readers; 0 when a chunk's time bounds lie. */
static int snap_view(struct snap *s, const struct engine_view *v)
{
    int ok = 1;
    memset(s, 0, sizeof(*s));
    s->now = ev_now(v);
    s->live_count = ev_live_count(v);
    s->re_unresolved = ev_re_unresolved(v);
    stacks_copy(s, ev_stacks(v));
    ok &= ev_nstacks(v) == s->nstacks;
    s->live = calloc(s->live_count + 1, sizeof(*s->live));
    for (uint32_t c = 0; c < ev_live_nchunks(v); c++) {
        uint32_t n;
        uint64_t lo, hi;
        const struct alloc_entry *en = ev_live_chunk(v, c, &n, &lo, &hi);
        for (uint32_t i = 0; i < n; i++) {
            if (alloc_entry_heap(&en[i]) == ALLOC_HEAP_FREE)
                continue;
            if (s->nlive == s->live_count)
                return 0; /* more live entries than the count */
            ok &= alloc_entry_time(&en[i]) >= lo && alloc_entry_time(&en[i]) <= hi;
            live_add(s, &en[i]);
        }
    }
    live_model(s);
    for (int d = 0; d < 2; d++) {
        s->aggs[d] = calloc(s->nstacks, sizeof(struct agg));
        for (uint32_t id = 0; id < s->nstacks; id++) {
            const struct agg *g = ev_agg(v, d == 0 ? HT_DOM_HEAP : HT_DOM_COMMIT, id);
            if (g)
                s->aggs[d][id] = *g;
        }
    }
    /* The incremental figure against the one counted from the live blocks. */
    for (uint32_t id = 0; id < s->nstacks; id++) {
        uint64_t re;
        int exact = ev_live_reallocs(v, id, &re);
        if (exact)
            ok &= !s->live_re_sat[id] && re == s->live_re[id];
        else
            ok &= s->live_re_sat[id] || ev_agg(v, HT_DOM_HEAP, id) == NULL;
    }
    ring_copy(s, 0, ev_heap_life(v));
    ring_copy(s, 1, ev_commit_life(v));
    ring_copy(s, 2, ev_re_ring(v));
    const struct commit_range *cr = ev_commits(v, &s->ncommits);
    s->commits = malloc((s->ncommits + 1) * sizeof(*s->commits));
    memcpy(s->commits, cr, s->ncommits * sizeof(*s->commits));
    for (unsigned h = 0; h < 8; h++)
        s->heaps[h] = ev_heap_handle(v, h);
    return ok;
}

static const uint32_t ring_elem[3] = {sizeof(struct life_rec), sizeof(struct life_rec),
                                      sizeof(struct realloc_rec)};

/* 1 when two snapshots agree on everything. */
static int snap_equal(const struct snap *a, const struct snap *b)
{
    if (a->now != b->now || a->live_count != b->live_count || a->nlive != b->nlive ||
        a->re_unresolved != b->re_unresolved || a->nstacks != b->nstacks || a->nstrs != b->nstrs ||
        a->ncommits != b->ncommits)
        return 0;
    for (size_t i = 0; i < a->nlive; i++)
        if (memcmp(&a->live[i], &b->live[i], sizeof(a->live[i])) != 0)
            return 0;
    for (int d = 0; d < 2; d++)
        if (memcmp(a->aggs[d], b->aggs[d], a->nstacks * sizeof(struct agg)) != 0)
            return 0;
    for (int k = 0; k < 3; k++) {
        if (a->ring_len[k] != b->ring_len[k] || a->ring_horizon[k] != b->ring_horizon[k] ||
            a->ring_evicted[k] != b->ring_evicted[k])
            return 0;
        /* Records compared field by field: padding bytes are not part of them. */
        for (uint64_t i = 0; i < a->ring_len[k]; i++) {
            const unsigned char *x = a->rings[k] + i * ring_elem[k],
                                *y = b->rings[k] + i * ring_elem[k];
            if (k < 2) {
                const struct life_rec *p = (const void *)x, *q = (const void *)y;
                if (p->a != q->a || p->f != q->f || p->size != q->size || p->addr != q->addr ||
                    p->stack != q->stack || p->heap != q->heap || p->reallocs != q->reallocs)
                    return 0;
            } else {
                const struct realloc_rec *p = (const void *)x, *q = (const void *)y;
                if (p->t != q->t || p->a != q->a || p->addr != q->addr || p->heap != q->heap ||
                    p->closed != q->closed)
                    return 0;
            }
        }
    }
    for (uint32_t i = 0; i < a->ncommits; i++)
        if (a->commits[i].start != b->commits[i].start || a->commits[i].end != b->commits[i].end ||
            a->commits[i].t != b->commits[i].t || a->commits[i].stack != b->commits[i].stack)
            return 0;
    if (memcmp(a->depth, b->depth, a->nstacks * sizeof(uint32_t)) != 0 ||
        memcmp(a->frames, b->frames, (size_t)a->nstacks * 4 * sizeof(uint64_t)) != 0)
        return 0;
    for (uint32_t i = 1; i < a->nstrs; i++)
        if (strcmp(a->strs[i], b->strs[i]) != 0)
            return 0;
    return memcmp(a->heaps, b->heaps, sizeof(a->heaps)) == 0;
}

/* The reader thread: reads the whole view again and again until told to stop. */
struct reader {
    const struct engine_view *v;
    const struct snap *want;
    atomic_int stop;
    int reads, bad;
};

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    do {
        struct snap got;
        int ok = snap_view(&got, r->v);
        if (!ok || !snap_equal(&got, r->want))
            r->bad++;
        snap_free(&got);
        r->reads++;
    } while (!atomic_load(&r->stop) || r->reads < 2);
    return NULL;
}

static void limits(struct engine_limits *lim)
{
    engine_limits_default(lim);
    lim->life_ring = 6000; /* wraps many times */
    lim->commit_ring = 3000;
    lim->table_cap = 1u << 20;
}

/*
 * (a) A view opened at T answers what a fresh replay of the log up to T
 * answers (all live entries by key, aggregates, the live-realloc figures,
 * ring records, commits, stacks and names, heaps) while the owner applies
 * events meanwhile: frees, in-place reallocs, heap destroys, commits, ring
 * wraps, new stacks, and compaction between views. The reader runs on its
 * own thread (TSan checks that no byte it reads is written meanwhile).
 */
static void test_view_consistent(void)
{
    struct engine_limits lim;
    limits(&lim);
    struct engine e;
    CHECK(engine_init(&e, &lim) == 0);
    nops = 0;
    nstk = 0;
    uint64_t cow_before = 0;
    for (int round = 0; round < 12; round++) {
        gen(&e, 20000 + (size_t)round * 3000);
        /* Expected: a fresh engine replaying the log so far. */
        struct engine fresh;
        CHECK(engine_init(&fresh, &lim) == 0);
        for (size_t i = 0; i < nops; i++)
            op_apply(&fresh, &ops[i]);
        struct snap want, mine;
        snap_engine(&want, &fresh);
        snap_engine(&mine, &e);
        CHECK(snap_equal(&want, &mine)); /* compaction changed no answer */
        snap_free(&mine);
        engine_close(&fresh);

        struct engine_view *v;
        CHECK(engine_view_open(&e, &v) == 0);
        struct engine_view *v2;
        CHECK(engine_view_open(&e, &v2) == UV_EBUSY);
        struct reader rd = {.v = v, .want = &want};
        atomic_init(&rd.stop, 0);
        pthread_t th;
        CHECK(pthread_create(&th, NULL, reader_main, &rd) == 0);
        gen(&e, 15000);
        atomic_store(&rd.stop, 1);
        pthread_join(th, NULL);
        engine_view_close(&e, v);
        CHECK_EQ(rd.bad, 0);
        CHECK(rd.reads >= 2);
        snap_free(&want);
    }
    cow_before = e.table.deferred;
    CHECK(cow_before > 0);          /* the owner really wrote into shared chunks */
    CHECK(e.table.compactions > 0); /* and compacted between views */
    CHECK(e.heap_life.pushed > 4 * lim.life_ring);
    /* Everything retired was given back at close. */
    CHECK_EQ(e.table.nretired, 0);
    CHECK(e.view == NULL);
    engine_close(&e);
    free(ops);
    ops = NULL;
    ops_alloc = 0;
}

/* The chunks copied for a view are charged while it is open and given back at close. */
static void test_view_memory(void)
{
    struct engine_limits lim;
    limits(&lim);
    struct engine e;
    CHECK(engine_init(&e, &lim) == 0);
    nops = 0;
    nstk = 0;
    gen(&e, 40000);
    uint64_t before = engine_memory(&e);
    struct engine_view *v;
    CHECK(engine_view_open(&e, &v) == 0);
    gen(&e, 20000);
    uint64_t during = engine_memory(&e);
    uint64_t retired = (uint64_t)e.heap_agg.nretired * AGG_CHUNK_BYTES;
    CHECK(retired > 0);
    CHECK(during >= retired);
    engine_view_close(&e, v);
    uint64_t after = engine_memory(&e);
    CHECK(after + retired <= during);
    (void)before;
    uint64_t by[MEM_KINDS];
    CHECK_EQ(engine_memory_by(&e, by), after);
    engine_close(&e);
    free(ops);
    ops = NULL;
    ops_alloc = 0;
}

HT_TEST_MAIN(T(view_consistent), T(view_memory))
