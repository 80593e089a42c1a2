/* Counts (issue 8, items 12-14): realloc counts per window, commit pieces, the complete flag. */
#include "engine.h"
#include "ht-test-engine.h"
#include "ht-test.h"
#include "query.h"

#define MS 1000000ULL

static struct engine E;
static uint32_t S1, S2;

static void setup(uint64_t ring)
{
    struct engine_limits lim;
    engine_limits_default(&lim);
    lim.life_ring = ring;
    lim.commit_ring = ring;
    engine_init(&E, &lim);
    hte_two_stacks(&E, &S1, &S2);
}

static void ev(int kind, uint64_t t, uint64_t addr, uint64_t size, uint32_t stack)
{
    hte_event(&E, kind, t, 1, addr, size, stack);
}

static void re(uint64_t t, uint64_t old, uint64_t addr, uint64_t size, uint32_t stack)
{
    hte_realloc(&E, t, old, addr, size, stack);
}

/* A query's result with the window [t1, t2] and the given types/by; 0 on success. */
static int run(struct query_result *res, int domain, uint64_t t1, uint64_t t2, unsigned types,
               int by)
{
    struct query q;
    hte_query(&q, domain, t1, t2, types, by);
    return engine_query(&E, &q, res);
}

/* Total realloc count of a heap window; UINT64_MAX if the query failed. */
static uint64_t reallocs_in(uint64_t t1, uint64_t t2, int *complete)
{
    struct query_result res;
    if (run(&res, HT_DOM_HEAP, t1, t2, HT_TYPES_ALL, HT_BY_STACK) != 0)
        return UINT64_MAX;
    uint64_t n = res.total.reallocs;
    if (complete)
        *complete = res.complete;
    query_result_free(&res);
    return n;
}

/* Item 12: alloc at 1 ms, in-place realloc at 5 ms: 0..2 ms has no realloc. */
static void test_realloc_in_place_window(void)
{
    setup(1000);
    ev(HT_EV_ALLOC, 1 * MS, 0x1000, 40, S1);
    re(5 * MS, 0x1000, 0x1000, 80, S1);
    ev(HT_EV_ALLOC, 10 * MS, 0x9000, 8, S2); /* moves now past the realloc */
    int complete = 0;
    CHECK_EQ(reallocs_in(0, 2 * MS, &complete), 0);
    CHECK(complete);
    CHECK_EQ(reallocs_in(4 * MS, 6 * MS, &complete), 1); /* AOFO block, realloc inside */
    CHECK(complete);
    CHECK_EQ(reallocs_in(6 * MS, 10 * MS, NULL), 0);
    CHECK_EQ(reallocs_in(0, 10 * MS, NULL), 1); /* whole session */
    CHECK_EQ(reallocs_in(5 * MS, 5 * MS, NULL), 1);
    engine_close(&E);
}

/* Item 12: a block made by a moving realloc at 2 ms, queried 3..4 ms: 0. */
static void test_realloc_moving_window(void)
{
    setup(1000);
    ev(HT_EV_ALLOC, 1 * MS, 0x1000, 40, S1);
    re(2 * MS, 0x1000, 0x2000, 80, S1);
    ev(HT_EV_ALLOC, 10 * MS, 0x9000, 8, S2);
    CHECK_EQ(reallocs_in(3 * MS, 4 * MS, NULL), 0);
    CHECK_EQ(reallocs_in(0, 3 * MS, NULL), 1);
    CHECK_EQ(reallocs_in(2 * MS, 2 * MS, NULL), 1);
    CHECK_EQ(reallocs_in(0, 10 * MS, NULL), 1);
    engine_close(&E);
}

/* Many reallocs on one block, windows cutting through them; past the
 * block's saturating count (127) and with the whole session typed. */
static void test_realloc_many(void)
{
    setup(1000);
    ev(HT_EV_ALLOC, 1, 0x1000, 8, S1);
    for (uint64_t i = 0; i < 300; i++)
        re(10 + i, 0x1000, 0x1000, 9 + i, S1);
    ev(HT_EV_ALLOC, 1000, 0x9000, 8, S2);
    CHECK_EQ(reallocs_in(0, 1000, NULL), 300);
    CHECK_EQ(reallocs_in(0, 59, NULL), 50);
    CHECK_EQ(reallocs_in(60, 1000, NULL), 250);
    CHECK_EQ(reallocs_in(100, 109, NULL), 10);
    /* Whole session, AIFO only: the live block's 300 (beyond its own count). */
    struct query_result res;
    CHECK_EQ(run(&res, HT_DOM_HEAP, 0, 1000, 1u << HT_AIFO, HT_BY_STACK), 0);
    CHECK_EQ(res.total.reallocs, 300);
    CHECK(res.complete);
    query_result_free(&res);
    /* Freed: the same count moves to AIFI. */
    ev(HT_EV_FREE, 1001, 0x1000, 0, 0);
    CHECK_EQ(run(&res, HT_DOM_HEAP, 0, 1001, 1u << HT_AIFI, HT_BY_STACK), 0);
    CHECK_EQ(res.total.reallocs, 300);
    CHECK_EQ(res.total.count[HT_AIFI], 1);
    query_result_free(&res);
    CHECK_EQ(reallocs_in(0, 109, NULL), 100);
    CHECK_EQ(reallocs_in(300, 2000, NULL), 10);
    engine_close(&E);
}

/* The realloc ring holds as many events as the lifetime ring: a window that
 * needs evicted event times says so; one that does not stays exact. */
static void test_realloc_ring_horizon(void)
{
    setup(2);
    ev(HT_EV_ALLOC, 1, 0x1000, 8, S1);
    re(2, 0x1000, 0x1000, 9, S1);
    re(3, 0x1000, 0x1000, 10, S1);
    re(4, 0x1000, 0x1000, 11, S1); /* the event at 2 is evicted */
    ev(HT_EV_ALLOC, 10, 0x9000, 8, S2);
    int complete = 1;
    reallocs_in(0, 3, &complete); /* needs the times from 1 on */
    CHECK(!complete);
    CHECK_EQ(reallocs_in(3, 10, &complete), 2);
    CHECK(complete);
    CHECK_EQ(reallocs_in(0, 10, &complete), 3); /* whole session: exact totals */
    CHECK(complete);
    engine_close(&E);
}

/* A block freed at its alloc time and a new one at the same address and
 * time: the reallocs of each stay its own. */
static void test_realloc_same_time_blocks(void)
{
    setup(1000);
    ev(HT_EV_ALLOC, 5, 0x1000, 8, S1);
    re(5, 0x1000, 0x1000, 9, S1);
    ev(HT_EV_FREE, 5, 0x1000, 0, 0);
    ev(HT_EV_ALLOC, 5, 0x1000, 16, S2);
    re(7, 0x1000, 0x1000, 17, S2);
    ev(HT_EV_ALLOC, 10, 0x9000, 8, S2);
    struct query_result res;
    CHECK_EQ(run(&res, HT_DOM_HEAP, 0, 6, HT_TYPES_ALL, HT_BY_TYPE), 0);
    CHECK_EQ(res.total.reallocs, 1);
    for (uint32_t i = 0; i < res.nrows; i++)
        CHECK_EQ(res.rows[i].reallocs, res.rows[i].key == HT_AIFI ? 1 : 0);
    query_result_free(&res);
    CHECK_EQ(reallocs_in(6, 10, NULL), 1);
    engine_close(&E);
}

/* The same, with more events at that time than the engine looks back over:
 * it cannot tell the blocks' events apart and says so. */
static void test_realloc_same_time_unresolved(void)
{
    setup(100000);
    ev(HT_EV_ALLOC, 5, 0x1000, 8, S1);
    re(5, 0x1000, 0x1000, 9, S1);
    ev(HT_EV_ALLOC, 5, 0x2000, 8, S1);
    for (unsigned i = 0; i < 5000; i++)
        re(5, 0x2000, 0x2000, 10 + i, S1);
    ev(HT_EV_FREE, 5, 0x1000, 0, 0);
    CHECK_EQ(E.re_unresolved, 1);
    ev(HT_EV_ALLOC, 5, 0x1000, 16, S2);
    re(7, 0x1000, 0x1000, 17, S2);
    ev(HT_EV_ALLOC, 10, 0x9000, 8, S2);
    int complete = 1;
    reallocs_in(0, 6, &complete); /* the second block at 0x1000 needs a lookup */
    CHECK(!complete);
    CHECK_EQ(reallocs_in(0, 10, &complete), 5002); /* whole session: exact */
    CHECK(complete);
    engine_close(&E);
}

/* Item 13: commit 40 KiB, decommit 8 KiB inside it, then its first page. */
static void test_commit_partial_decommits(void)
{
    setup(1000);
    ev(HT_EV_COMMIT, 1000, 0x100000, 40960, S1);
    ev(HT_EV_DECOMMIT, 2000, 0x104000, 8192, 0);
    ev(HT_EV_DECOMMIT, 3000, 0x100000, 4096, 0);
    CHECK_EQ(E.commits.n, 2);
    CHECK_EQ(E.commits.bytes, 28672);
    struct query_result res;
    CHECK_EQ(run(&res, HT_DOM_COMMIT, 0, 3000, HT_TYPES_ALL, HT_BY_STACK), 0);
    CHECK_EQ(res.total.count[HT_AIFO], 2); /* one per range left, as status counts */
    CHECK_EQ(res.total.bytes[HT_AIFO], 28672);
    CHECK_EQ(res.total.count[HT_AIFI], 2);
    CHECK_EQ(res.total.bytes[HT_AIFI], 12288);
    CHECK(res.exact_totals);
    query_result_free(&res);
    /* The same through the blocks (a window that is not the whole session). */
    CHECK_EQ(run(&res, HT_DOM_COMMIT, 1, 3000, HT_TYPES_ALL, HT_BY_STACK), 0);
    CHECK_EQ(res.total.count[HT_AIFO], 2);
    CHECK_EQ(res.total.count[HT_AIFI], 2);
    CHECK(!res.exact_totals);
    query_result_free(&res);
    /* By type, and one row per block in list mode: 4 blocks, 4 rows. */
    CHECK_EQ(run(&res, HT_DOM_COMMIT, 0, 3000, HT_TYPES_ALL, HT_BY_TYPE), 0);
    CHECK_EQ(res.nrows, 2);
    for (uint32_t i = 0; i < res.nrows; i++)
        CHECK_EQ(query_row_count(&res.rows[i]), 2);
    query_result_free(&res);
    struct query q;
    query_init(&q);
    q.domain = HT_DOM_COMMIT;
    q.t2 = 3000;
    q.list = 1;
    CHECK_EQ(engine_query(&E, &q, &res), 0);
    CHECK_EQ(res.nrows, 4);
    CHECK_EQ(res.ngroups, 4);
    query_result_free(&res);
    const struct agg *a = agg_peek(&E.commit_agg, S1);
    CHECK(a != NULL);
    CHECK_EQ(a->out_count, 2);
    CHECK_EQ(a->total_count, 4);
    /* A commit over gaps adds one block per gap; pages already committed add none. */
    ev(HT_EV_COMMIT, 4000, 0x100000, 40960, S2);
    CHECK_EQ(E.commits.n, 4);
    CHECK_EQ(agg_peek(&E.commit_agg, S2)->out_count, 2);
    CHECK_EQ(run(&res, HT_DOM_COMMIT, 0, 4000, 1u << HT_AIFO, HT_BY_STACK), 0);
    CHECK_EQ(res.total.count[HT_AIFO], 4);
    CHECK_EQ(res.total.bytes[HT_AIFO], 40960);
    query_result_free(&res);
    engine_close(&E);
}

/* Item 14: whole-session answers by type, and per type, are exact after the
 * lifetime ring evicted blocks; windows that need evicted blocks are not. */
static void test_whole_session_complete(void)
{
    setup(4);
    for (uint64_t i = 0; i < 20; i++)
        ev(HT_EV_ALLOC, 10 + i, 0x1000 + 16 * i, 100, i % 2 ? S1 : S2);
    for (uint64_t i = 0; i < 12; i++)
        ev(HT_EV_FREE, 100 + i, 0x1000 + 16 * i, 0, 0);
    CHECK(E.heap_life.evicted);
    static const unsigned types[] = {1u << HT_AIFI, 1u << HT_AOFI, 1u << HT_AIFO,
                                     (1u << HT_AIFI) | (1u << HT_AOFO), HT_TYPES_ALL};
    for (unsigned k = 0; k < 5; k++) {
        for (int by = HT_BY_STACK; by <= HT_BY_TYPE; by++) {
            if (by == HT_BY_HEAP)
                continue; /* the per-stack totals know no heaps */
            struct query_result res;
            CHECK_EQ(run(&res, HT_DOM_HEAP, 0, E.now, types[k], by), 0);
            CHECK(res.complete);
            CHECK(res.exact_totals);
            uint64_t aifi = types[k] & (1u << HT_AIFI) ? 12 : 0;
            uint64_t aifo = types[k] & (1u << HT_AIFO) ? 8 : 0;
            CHECK_EQ(res.total.count[HT_AIFI], aifi);
            CHECK_EQ(res.total.bytes[HT_AIFI], aifi * 100);
            CHECK_EQ(res.total.count[HT_AIFO], aifo);
            CHECK_EQ(res.total.count[HT_AOFI] + res.total.count[HT_AOFO], 0);
            uint64_t rows = 0;
            for (uint32_t i = 0; i < res.nrows; i++)
                rows += query_row_count(&res.rows[i]);
            CHECK_EQ(rows, aifi + aifo);
            query_result_free(&res);
        }
    }
    /* A window that reaches before the horizon still says it is not complete. */
    struct query_result res;
    CHECK_EQ(run(&res, HT_DOM_HEAP, 50, E.now, 1u << HT_AOFI, HT_BY_STACK), 0);
    CHECK(!res.complete);
    query_result_free(&res);
    engine_close(&E);
}

HT_TEST_MAIN(T(realloc_in_place_window), T(realloc_moving_window), T(realloc_many),
             T(realloc_ring_horizon), T(realloc_same_time_blocks), T(realloc_same_time_unresolved),
             T(commit_partial_decommits), T(whole_session_complete))
