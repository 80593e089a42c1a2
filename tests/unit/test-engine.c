/* Engine semantics one by one: realloc, heap destroy, caps, bad input, timeline, marks, horizon. */
#include "engine.h"
#include "ht-error.h"
#include "ht-test-engine.h"
#include "ht-test.h"
#include "query.h"

static struct engine E;
static uint32_t S1, S2;

static void setup(uint32_t table_cap, uint64_t ring)
{
    struct engine_limits lim;
    engine_limits_default(&lim);
    lim.table_cap = table_cap;
    lim.life_ring = ring;
    lim.timeline_ns = 100;
    lim.timeline_ring = 4;
    engine_init(&E, &lim);
    hte_two_stacks(&E, &S1, &S2);
}

static void ev(int kind, uint64_t t, uint64_t heap, uint64_t addr, uint64_t size, uint32_t stack)
{
    hte_event(&E, kind, t, heap, addr, size, stack);
}

static void realloc_ev(uint64_t t, uint64_t old, uint64_t addr, uint64_t size, uint32_t stack)
{
    hte_realloc(&E, t, old, addr, size, stack);
}

static const struct agg *agg_of(uint32_t s)
{
    return agg_peek(&E.heap_agg, s);
}

static void test_realloc_in_place(void)
{
    setup(100, 100);
    ev(HT_EV_ALLOC, 10, 1, 0x1000, 40, S1);
    realloc_ev(20, 0x1000, 0x1000, 100, S2);
    struct alloc_entry *en = alloc_table_find(&E.table, engine_heap_index(&E, 1), 0x1000);
    CHECK(en != NULL);
    CHECK_EQ(alloc_entry_time(en), 10); /* keeps its alloc time */
    CHECK_EQ(alloc_entry_size(en), 100);
    CHECK_EQ(en->stack, S1); /* and its stack */
    CHECK_EQ(agg_of(S1)->reallocs, 1);
    CHECK_EQ(agg_of(S1)->out_bytes, 100);
    CHECK(agg_of(S2) == NULL || agg_of(S2)->total_count == 0);
    CHECK_EQ(E.heap_bytes, 100);
    engine_close(&E);
}

static void test_realloc_moving(void)
{
    setup(100, 100);
    ev(HT_EV_ALLOC, 10, 1, 0x1000, 40, S1);
    realloc_ev(20, 0x1000, 0x2000, 100, S2);
    CHECK(alloc_table_find(&E.table, 0, 0x1000) == NULL);
    struct alloc_entry *en = alloc_table_find(&E.table, 0, 0x2000);
    CHECK(en != NULL);
    CHECK_EQ(alloc_entry_time(en), 20);
    CHECK_EQ(en->stack, S2);
    CHECK_EQ(agg_of(S2)->reallocs, 1);
    CHECK_EQ(agg_freed_count(agg_of(S1)), 1);
    CHECK_EQ(agg_of(S1)->out_count, 0);
    CHECK_EQ(E.heap_life.pushed, 1);
    CHECK_EQ(E.heap_bytes, 100);
    engine_close(&E);
}

static void test_heap_destroy(void)
{
    setup(100, 100);
    for (uint64_t i = 0; i < 10; i++)
        ev(HT_EV_ALLOC, i, 1 + i % 2, 0x1000 + i * 16, 8, S1);
    ev(HT_EV_HEAP_DESTROY, 20, 2, 0, 0, 0);
    CHECK_EQ(E.table.count, 5);
    CHECK_EQ(E.heap_life.pushed, 5);
    CHECK_EQ(life_ring_at(&E.heap_life, 0)->f, 20);
    CHECK_EQ(E.heap_bytes, 40);
    /* Destroying an unknown heap or an empty one changes nothing. */
    ev(HT_EV_HEAP_DESTROY, 21, 77, 0, 0, 0);
    ev(HT_EV_HEAP_DESTROY, 22, 2, 0, 0, 0);
    CHECK_EQ(E.table.count, 5);
    engine_close(&E);
}

static void test_cap_accounting(void)
{
    setup(3, 100);
    for (uint64_t i = 0; i < 5; i++)
        ev(HT_EV_ALLOC, i, 0, 0x1000 + i * 16, 100, i < 3 ? S1 : S2);
    CHECK_EQ(E.table.count, 3);
    CHECK_EQ(E.q.cap_drops, 2);
    CHECK_EQ(agg_of(S2)->untracked_count, 2);
    CHECK_EQ(agg_of(S2)->untracked_bytes, 200);
    /* The whole-session answer shows the untracked allocations per stack. */
    struct query q;
    query_init(&q);
    struct query_result r;
    CHECK(engine_query(&E, &q, &r) == 0);
    CHECK_EQ(r.total.untracked_count, 2);
    CHECK_EQ(r.nrows, 2);
    CHECK_EQ(r.rows[1].untracked_bytes, 200);
    query_result_free(&r);
    /* Their frees are unknown frees. */
    ev(HT_EV_FREE, 9, 0, 0x1000 + 4 * 16, 0, 0);
    CHECK_EQ(E.q.unknown_frees, 1);
    engine_close(&E);
}

static void test_bad_input(void)
{
    setup(100, 100);
    ev(HT_EV_ALLOC, 10, 0, 0x1000, 1ULL << 63, S1); /* absurd size */
    ev(HT_EV_ALLOC, 11, 0, 0x2000, 0, S1);          /* malloc(0) is legal */
    ev(HT_EV_FREE, 12, 0, 0xdead, 0, 0);            /* unknown */
    ev(HT_EV_FREE, 13, 0, 0x2000, 0, 0);
    ev(HT_EV_FREE, 14, 0, 0x2000, 0, 0);                /* double free */
    ev(HT_EV_DECOMMIT, 15, 0, 0x50000, 4096, 0);        /* not committed */
    ev(HT_EV_COMMIT, 16, 0, UINT64_MAX - 10, 4096, S1); /* wraps around */
    ev(HT_EV_ALLOC, 5, 0, 0x3000, 8, S1);               /* time goes backwards */
    ev(HT_EV_ALLOC, 1ULL << 60, 0, 0x4000, 8, 0);       /* time past the limit */
    ev(99, 20, 0, 0, 0, 0);                             /* unknown kind */
    CHECK_EQ(E.q.bad_size, 2);
    CHECK_EQ(E.q.unknown_frees, 2);
    CHECK_EQ(E.q.decommit_unknown, 1);
    CHECK_EQ(E.q.time_backwards, 1);
    CHECK_EQ(E.q.malformed, 2);
    CHECK_EQ(E.table.count, 1);
    struct alloc_entry *en = alloc_table_find(&E.table, 0, 0x3000);
    CHECK(en && alloc_entry_time(en) == 16); /* clamped to the latest time */
    ev(HT_EV_ALLOC, 30, 0, 0x3000, 8, S1);   /* live address again: missed free */
    CHECK_EQ(E.q.dup_allocs, 1);
    CHECK_EQ(E.table.count, 1);
    engine_close(&E);
}

static void test_timeline(void)
{
    setup(100, 100);
    ev(HT_EV_ALLOC, 50, 0, 0x1000, 10, S1);
    ev(HT_EV_PRIVATE_BYTES, 150, 0, 0, 4096, 0);
    ev(HT_EV_ALLOC, 250, 0, 0x2000, 20, S1);
    /* Samples at 0, 100, 200 hold the state before each boundary's event. */
    CHECK_EQ(timeline_len(&E.tl), 3);
    CHECK_EQ(timeline_at(&E.tl, 1)->heap_bytes, 10);
    CHECK_EQ(timeline_at(&E.tl, 2)->private_bytes, 4096);
    engine_advance(&E, 1000); /* an idle gap longer than the ring keeps the last 4 */
    CHECK_EQ(timeline_len(&E.tl), 4);
    CHECK_EQ(timeline_at(&E.tl, 3)->t, 1000);
    CHECK_EQ(timeline_at(&E.tl, 3)->heap_bytes, 30);
    engine_close(&E);
}

static void test_marks(void)
{
    setup(100, 100);
    CHECK(engine_mark(&E, "before", 10) == 0);
    CHECK(engine_mark(&E, "before", 20) == HT_EEXIST);
    CHECK(engine_mark(&E, "", 20) == HT_EBADARG);
    CHECK_EQ(engine_mark_find(&E, "before")->t, 10);
    CHECK(engine_mark_find(&E, "nope") == NULL);
    engine_close(&E);
}

static void test_horizon(void)
{
    setup(100, 4);
    for (uint64_t i = 0; i < 10; i++) {
        ev(HT_EV_ALLOC, i * 10, 0, 0x1000 + i * 16, 1, S1);
        ev(HT_EV_FREE, i * 10 + 5, 0, 0x1000 + i * 16, 0, 0);
    }
    struct query q;
    query_init(&q);
    q.by = HT_BY_TYPE;
    q.t1 = 30;
    q.t2 = 100;
    struct query_result r;
    CHECK(engine_query(&E, &q, &r) == 0);
    CHECK(!r.complete);
    CHECK_EQ(r.horizon, 55);
    query_result_free(&r);
    q.t1 = 56;
    CHECK(engine_query(&E, &q, &r) == 0);
    CHECK(r.complete);
    CHECK_EQ(r.total.count[HT_AIFI], 4);
    query_result_free(&r);
    /* The whole session is exact from the totals whatever the ring lost. */
    query_init(&q);
    CHECK(engine_query(&E, &q, &r) == 0);
    CHECK(r.complete && r.exact_totals);
    CHECK_EQ(r.total.count[HT_AIFI], 10);
    query_result_free(&r);
    engine_close(&E);
}

/*
 * Everything that grows with live allocations (table entries, links,
 * buckets, chunk slots, per-stack aggregates and their live-realloc words)
 * stays within 64 bytes per live allocation: 200k live over 20k stacks
 * under churn that leaves holes everywhere (short-lived blocks freed in
 * order, long-lived ones at random, as the engine bench does at 1M).
 */
static void test_memory_per_live(void)
{
    struct engine_limits lim;
    engine_limits_default(&lim);
    struct engine e;
    CHECK(engine_init(&e, &lim) == 0);
    const uint32_t nlive = 200000, nstacks = 20000, pending = 4096;
    uint32_t *stacks = malloc(nstacks * sizeof(uint32_t));
    for (uint32_t i = 0; i < nstacks; i++) {
        uint64_t f[2] = {0x1000 + i, 0x999};
        stacks[i] = stack_intern_get(&e.si, f, 2);
    }
    uint64_t t = 1, x = 0x2545f4914f6cdd1dULL;
    for (uint32_t i = 0; i < nlive; i++)
        hte_event(&e, HT_EV_ALLOC, t++, 1, 0x100000000ULL + i * 48ULL, 64, stacks[i % nstacks]);
    uint64_t head = 0, tail = 0, peak = 0;
    for (uint32_t i = 0; i < 3000000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint32_t st = stacks[(x >> 20) % nstacks];
        if (x % 16 == 0) { /* a long-lived block replaced */
            uint64_t victim = 0x100000000ULL + ((x >> 8) % nlive) * 48;
            hte_event(&e, HT_EV_FREE, t++, 1, victim, 0, 0);
            hte_event(&e, HT_EV_ALLOC, t++, 1, victim, 64, st);
        } else if (head - tail < pending && (x & 2)) {
            hte_event(&e, HT_EV_ALLOC, t++, 1, 0x800000000ULL + (head++ % (2 * pending)) * 32, 32,
                      st);
        } else if (head > tail) {
            hte_event(&e, HT_EV_FREE, t++, 1, 0x800000000ULL + (tail++ % (2 * pending)) * 32, 0, 0);
        }
        if (i % 4096 == 0) {
            uint64_t m = alloc_table_memory(&e.table) + agg_table_memory(&e.heap_agg);
            double per = (double)m / e.table.count;
            if (per * 1000 > (double)peak)
                peak = (uint64_t)(per * 1000);
        }
    }
    CHECK(e.table.count >= nlive);
    CHECK(e.table.compactions > 0);
    printf("bytes per live allocation: %.1f peak, %.1f at the end (%u live)\n", peak / 1000.0,
           (double)(alloc_table_memory(&e.table) + agg_table_memory(&e.heap_agg)) / e.table.count,
           e.table.count);
    CHECK(peak <= 64 * 1000);
    free(stacks);
    engine_close(&e);
}

HT_TEST_MAIN(T(realloc_in_place), T(realloc_moving), T(heap_destroy), T(cap_accounting),
             T(bad_input), T(timeline), T(marks), T(horizon), T(memory_per_live))
