/*
 * engine_query over an engine view against the query engine as it was before
 * views (query-ref.c): the same events, the same queries, the same answers.
 * Unlike test-diff's model this runs at a size where the live blocks fill
 * several alloc-table chunks (65536 entries each) and the lifetime ring
 * evicts, with windows, types, filters, culling (with and without a skip
 * cache), require lists, top-N, list mode and every grouping.
 */
#include "config.h"
#include "engine.h"
#include "ht-test.h"
#include "query.h"

/* The reference (query-ref.c). */
int ref_engine_query(struct engine *e, const struct query *q, struct query_result *res);
void ref_query_result_free(struct query_result *res);
void ref_skip_cache_free(struct skip_cache *sc);

static uint64_t rng = 7;
static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static uint64_t below(uint64_t n)
{
    return n ? rnd() % n : 0;
}

#define NSTACKS 600
#define NADDR 200000
static uint32_t stacks[NSTACKS];
static const char *const vocab[] = {"ntdll.dll!RtlAllocateHeap", "msvcrt.dll!malloc",
                                    "app.exe!main",              "app.exe!Worker",
                                    "lib.dll!Parse",             "LIB.dll!parse",
                                    "app.exe!Leak",              "other!Leak",
                                    "libc.so.6!malloc",          "libstdc++.so.6!operator new",
                                    "svc.exe!Handle",            "svc.exe!Cache"};
#define NVOCAB (sizeof(vocab) / sizeof(vocab[0]))

static struct engine E;

/* 80k long-lived blocks (two table chunks), then churn with in-place and
 * moving reallocs (some blocks past the 7-bit in-place count), heap
 * destroys and commits. */
static void build(void)
{
    struct engine_limits lim;
    engine_limits_default(&lim);
    lim.life_ring = 150000; /* evicts: old windows are incomplete */
    lim.commit_ring = 2000;
    CHECK(engine_init(&E, &lim) == 0);
    for (unsigned s = 0; s < NSTACKS; s++) {
        uint64_t f[6];
        unsigned d = (unsigned)(1 + below(6));
        for (unsigned k = 0; k < d; k++) {
            if (below(6) == 0) {
                f[k] = 0x400000 + below(64) * 16; /* an unresolved address */
                continue;
            }
            const char *v = vocab[below(NVOCAB)];
            f[k] = HT_FRAME_SYM | stack_intern_str(&E.si, v, (unsigned)strlen(v));
        }
        stacks[s] = stack_intern_get(&E.si, f, d);
    }
    static uint8_t live[NADDR];
    uint64_t t = 1000;
    struct ht_event ev;
    for (unsigned i = 0; i < 80000; i++) {
        memset(&ev, 0, sizeof(ev));
        ev.kind = HT_EV_ALLOC;
        ev.t = t += 1 + below(3);
        ev.heap = 0x1000;
        ev.addr = 0x100000 + 16ULL * i;
        ev.size = 1 + below(500);
        ev.stack = stacks[below(NSTACKS)];
        engine_apply(&E, &ev);
        live[i] = 1;
    }
    for (unsigned i = 0; i < 400000; i++) {
        memset(&ev, 0, sizeof(ev));
        ev.t = t += below(4);
        ev.heap = below(20) ? 0x1000 : 0x2000;
        uint64_t slot = 80000 + below(NADDR - 80000);
        if (below(50) == 0)
            slot = below(80000); /* a long-lived block */
        if (i % 2000 == 0)
            slot = 81234;
        ev.addr = 0x100000 + 16 * slot;
        ev.stack = stacks[below(NSTACKS)];
        uint64_t r = below(100);
        if (slot == 81234 && i % 2000 == 0 && i < 300000) { /* past the in-place count */
            ev.heap = 0x1000;
            ev.kind = live[slot] ? HT_EV_REALLOC : HT_EV_ALLOC;
            ev.old_addr = live[slot] ? ev.addr : 0;
            ev.size = 1 + below(200);
            live[slot] = 1;
        } else if (r < 45) {
            ev.kind = HT_EV_ALLOC;
            ev.size = 1 + below(300);
            live[slot] = 1;
        } else if (r < 85) {
            ev.kind = HT_EV_FREE;
            live[slot] = 0;
        } else if (r < 97) {
            ev.kind = HT_EV_REALLOC;
            ev.old_addr = ev.addr;
            if (below(4) == 0)
                ev.addr += 16;
            ev.size = 1 + below(300);
        } else if (r < 98 && below(500) == 0) {
            ev.kind = HT_EV_HEAP_DESTROY;
            ev.heap = 0x2000;
        } else if (r < 99) {
            ev.kind = HT_EV_COMMIT;
            ev.addr = 0x7f0000000000ULL + 0x1000 * below(4000);
            ev.size = 0x1000 * (1 + below(8));
        } else {
            ev.kind = HT_EV_DECOMMIT;
            ev.addr = 0x7f0000000000ULL + 0x1000 * below(4000);
            ev.size = 0x1000 * (1 + below(4));
        }
        engine_apply(&E, &ev);
    }
}

/* A row's group as text (the same for both answers). */
static void row_text(const struct query *q, const struct query_result *res,
                     const struct query_row *r, int ref, char *out, size_t n)
{
    char buf[FRAME_TEXT_MAX];
    size_t k = 0;
    if (q->list) {
        k += (size_t)snprintf(out, n, "a=%llu f=%llu ", (unsigned long long)r->a,
                              (unsigned long long)r->f);
    } else if (q->by == HT_BY_FRAME) {
        snprintf(out, n, "%s", frame_text(&E.si, r->key, buf, sizeof(buf)));
        return;
    } else if (q->by == HT_BY_IMAGE) {
        const char *m = ref ? (r->key ? stack_intern_strget(&E.si, (uint32_t)r->key) : NULL)
                            : query_result_image(res, r->key);
        snprintf(out, n, "image %s", m ? m : "?");
        return;
    } else if (q->by == HT_BY_HEAP || q->by == HT_BY_TYPE) {
        snprintf(out, n, "%llu", (unsigned long long)r->key);
        return;
    }
    unsigned d;
    const uint64_t *f = stack_intern_frames(&E.si, r->stack, &d);
    for (unsigned j = r->skip; j < d && k + 64 < n; j++)
        k += (size_t)snprintf(out + k, n - k, "%s;", frame_text(&E.si, f[j], buf, sizeof(buf)));
}

static int rows_equal(const struct query_row *a, const struct query_row *b)
{
    for (int k = 0; k < 4; k++)
        if (a->count[k] != b->count[k] || a->bytes[k] != b->bytes[k])
            return 0;
    return a->reallocs == b->reallocs && a->untracked_count == b->untracked_count &&
           a->untracked_bytes == b->untracked_bytes;
}

static int64_t key_of(int sort, const struct query_row *r)
{
    switch (sort) {
    case HT_SORT_SOC:
        return (int64_t)query_row_outstanding_count(r);
    case HT_SORT_ST:
        return (int64_t)query_row_size(r);
    case HT_SORT_STC:
        return (int64_t)query_row_count(r);
    case HT_SORT_SRC:
        return (int64_t)r->reallocs;
    case HT_SORT_IMPACT:
        return query_row_impacting(r);
    default:
        return (int64_t)query_row_outstanding(r);
    }
}

static unsigned nq, nrows_cmp, nincomplete, ntop_ties;

/* Both answers to one query; 0 when they agree. */
static int compare(const struct query *q, const char *what)
{
    struct query_result a, b;
    if (engine_query(&E, q, &a) != 0 || ref_engine_query(&E, q, &b) != 0) {
        fprintf(stderr, "%s: a query failed\n", what);
        return 1;
    }
    int bad = a.complete != b.complete || a.exact_totals != b.exact_totals ||
              a.ngroups != b.ngroups || a.nrows != b.nrows || !rows_equal(&a.total, &b.total) ||
              (!a.complete && a.horizon != b.horizon);
    nq++;
    nincomplete += !a.complete;
    for (uint32_t i = 0; i < a.nrows && i < b.nrows && !bad; i++) {
        /* Same sort key in order; a tie may rank the groups either way (their
         * group keys differ: stack ids seen first, image list indexes). */
        if (key_of(q->sort, &a.rows[i]) != key_of(q->sort, &b.rows[i])) {
            bad = 1;
            break;
        }
        char ta[512], tb[512];
        row_text(q, &a, &a.rows[i], 0, ta, sizeof(ta));
        row_text(q, &b, &b.rows[i], 1, tb, sizeof(tb));
        if (strcmp(ta, tb) == 0 && rows_equal(&a.rows[i], &b.rows[i])) {
            nrows_cmp++;
            continue;
        }
        /* A tie: the same group must be among b's rows of that key. */
        int found = 0;
        for (uint32_t j = 0; j < b.nrows && !found; j++) {
            if (key_of(q->sort, &b.rows[j]) != key_of(q->sort, &a.rows[i]))
                continue;
            row_text(q, &b, &b.rows[j], 1, tb, sizeof(tb));
            found = strcmp(ta, tb) == 0 && rows_equal(&a.rows[i], &b.rows[j]);
        }
        /* At the top-N cut, tied groups may be left out either way. */
        int at_cut = a.nrows < a.ngroups &&
                     key_of(q->sort, &a.rows[i]) == key_of(q->sort, &a.rows[a.nrows - 1]);
        if (!found && !at_cut)
            bad = 1;
        ntop_ties += !found;
        nrows_cmp++;
    }
    if (bad) {
        fprintf(stderr,
                "%s: by=%d list=%d t=[%llu,%llu] types=%x sort=%d top=%u size=[%llu,%llu) "
                "life=[%llu,%llu) ncull=%u cache=%d nreq=%u: complete %d/%d groups %llu/%llu "
                "rows %u/%u\n",
                what, q->by, q->list, (unsigned long long)q->t1, (unsigned long long)q->t2,
                q->types, q->sort, q->top, (unsigned long long)q->size_min,
                (unsigned long long)q->size_max, (unsigned long long)q->life_min,
                (unsigned long long)q->life_max, q->ncull, q->skip_cache != NULL, q->nrequire,
                a.complete, b.complete, (unsigned long long)a.ngroups,
                (unsigned long long)b.ngroups, a.nrows, b.nrows);
    }
    query_result_free(&a);
    ref_query_result_free(&b);
    return bad;
}

static void test_same_answers(void)
{
    build();
    struct ht_config cfg;
    config_defaults(&cfg);
    static const char *const req_pool[] = {"app.exe!main", "lib!", "svc.exe!", "other!Leak"};
    static const char *const cull_pool[] = {"ntdll.dll!", "msvcrt!malloc", "libc.so.6!",
                                            "libstdc++.so.6!", "svc.exe!Handle"};
    struct frame_pat req[2], cull[3];
    struct skip_cache sc_new, sc_ref;
    memset(&sc_new, 0, sizeof(sc_new));
    memset(&sc_ref, 0, sizeof(sc_ref));
    uint64_t now = E.now;
    unsigned bad = 0;
    static const unsigned type_sets[] = {HT_TYPES_ALL,
                                         1u << HT_AIFO,
                                         1u << HT_AOFO,
                                         (1u << HT_AIFO) | (1u << HT_AOFO),
                                         1u << HT_AIFI,
                                         (1u << HT_AOFI) | (1u << HT_AOFO),
                                         (1u << HT_AIFI) | (1u << HT_AIFO)};
    for (unsigned i = 0; i < 600 && bad < 5; i++) {
        struct query q;
        query_init(&q);
        q.domain = below(8) == 0 ? HT_DOM_COMMIT : HT_DOM_HEAP;
        q.by = (int)below(5);
        q.sort = (int)below(6);
        q.list = below(12) == 0;
        q.top = below(3) ? 50 : (uint32_t)below(400);
        q.types = type_sets[below(7)];
        switch (below(5)) {
        case 0: /* whole session */
            break;
        case 1: /* the last stretch: -5s: and -1s: alike */
        case 2:
            q.t1 = now - below(now / 2);
            break;
        case 3: /* a past window */
            q.t1 = below(now);
            q.t2 = q.t1 + below(now - q.t1);
            break;
        default: /* an old start (the ring has evicted blocks freed before it) */
            q.t1 = below(now / 4);
        }
        if (below(6) == 0) {
            q.size_min = below(100);
            q.size_max = below(2) ? UINT64_MAX : q.size_min + 1 + below(200);
        }
        if (below(8) == 0) {
            q.life_min = below(1000);
            q.life_max = below(2) ? UINT64_MAX : q.life_min + below(100000);
        }
        if (below(4) == 0) {
            q.nrequire = (unsigned)(1 + below(2));
            for (unsigned k = 0; k < q.nrequire; k++) {
                const char *p = req_pool[below(4)];
                frame_pat_parse(p, strlen(p), &req[k]);
            }
            q.require = req;
        }
        /* No culling, a list of one to three patterns, the default list
         * with a skip cache per side, a list of three others. */
        unsigned cull_kind = (unsigned)below(4);
        if (cull_kind == 1 || cull_kind == 3) {
            q.ncull = (unsigned)(1 + below(3));
            for (unsigned k = 0; k < q.ncull; k++) {
                const char *p = cull_pool[k + (cull_kind == 3 ? 2 : 0)];
                frame_pat_parse(p, strlen(p), &cull[k]);
            }
            q.cull = cull;
        } else if (cull_kind == 2) {
            q.cull = cfg.cull_pats;
            q.ncull = cfg.ncull < 16 ? cfg.ncull : 16;
        }
        char what[32];
        snprintf(what, sizeof(what), "query %u", i);
        if (cull_kind == 2) {
            /* Each side with its own cache for the default list. */
            struct query qa = q, qb = q;
            qa.skip_cache = &sc_new;
            qb.skip_cache = &sc_ref;
            struct query_result a, b;
            CHECK(engine_query(&E, &qa, &a) == 0);
            CHECK(ref_engine_query(&E, &qb, &b) == 0);
            int d = a.ngroups != b.ngroups || a.nrows != b.nrows ||
                    !rows_equal(&a.total, &b.total) || a.complete != b.complete;
            for (uint32_t k = 0; k < a.nrows && !d; k++)
                d = key_of(q.sort, &a.rows[k]) != key_of(q.sort, &b.rows[k]);
            if (d)
                fprintf(stderr, "%s (default cull, skip caches) differs\n", what);
            bad += d;
            query_result_free(&a);
            ref_query_result_free(&b);
            nq++;
        } else {
            bad += compare(&q, what);
        }
    }
    printf("%u queries compared (%u rows, %u incomplete, %u tied rows at the top-N cut), "
           "%u live blocks, %u stacks, %llu ring records\n",
           nq, nrows_cmp, nincomplete, ntop_ties, E.table.count, E.si.nstacks,
           (unsigned long long)chunk_ring_len(&E.heap_life));
    CHECK(E.table.count > 65536); /* several table chunks */
    CHECK(nincomplete > 0 && nincomplete < nq);
    CHECK_EQ(bad, 0);
    skip_cache_free(&sc_new);
    ref_skip_cache_free(&sc_ref);
    config_free(&cfg);
    engine_close(&E);
}

HT_TEST_MAIN(T(same_answers))
