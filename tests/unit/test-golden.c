/* Golden: the MemoryTestApp stream answers what WPA shows in seed 000. */
#include "engine.h"
#include "ht-test-engine.h"
#include "ht-test.h"
#include "query.h"
#include "replay.h"

#define S 1000000000ULL
#define MIB (1ULL << 20)

static struct engine E;

static void sink(void *arg, const struct ht_event *ev)
{
    engine_apply(arg, ev);
}

static int load(void)
{
    struct engine_limits lim;
    engine_limits_default(&lim);
    engine_init(&E, &lim);
    struct replay r;
    replay_init(&r, &E.si, sink, &E);
    FILE *f = fopen(HT_TEST_DATA "/memorytestapp.htev", "rb");
    if (!f) {
        replay_close(&r);
        return -1;
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        replay_feed(&r, buf, n);
    fclose(f);
    replay_finish(&r);
    int bad = (int)r.malformed;
    replay_close(&r);
    return bad;
}

static struct frame_pat cull[3];

/* Commits (or heap) by frame with the allocator frames culled, as WPA's stack
 * column reads once expanded past VirtualAlloc / operator new. */
static int run(int domain, uint64_t t1, uint64_t t2, unsigned types, int by, struct query_result *r)
{
    frame_pat_parse("KernelBase.dll!VirtualAlloc", 27, &cull[0]);
    frame_pat_parse("ntdll!", 6, &cull[1]);
    frame_pat_parse("ucrtbase!", 9, &cull[2]);
    struct query q;
    hte_query(&q, domain, t1, t2, types, by);
    q.sort = HT_SORT_IMPACT;
    q.cull = cull;
    q.ncull = 3;
    return engine_query(&E, &q, r);
}

static const char *row_frame(const struct query_row *row)
{
    static char buf[32];
    return frame_text(&E.si, row->key, buf, sizeof(buf));
}

static void test_halfway_jump(void)
{
    CHECK(load() == 0);
    struct query_result r;
    CHECK(run(HT_DOM_COMMIT, 14 * S, 16 * S, HT_TYPES_ALL, HT_BY_FRAME, &r) == 0);
    CHECK(r.complete);
    CHECK_EQ(query_row_impacting(&r.total), 10 * MIB);
    CHECK(r.nrows >= 1);
    CHECK_STR(row_frame(&r.rows[0]), "MemoryTestApp.exe!main");
    CHECK_EQ(query_row_impacting(&r.rows[0]), 10 * MIB);
    CHECK_EQ(r.rows[0].count[HT_AIFO], 1);
    query_result_free(&r);
    engine_close(&E);
}

static void test_last_four_spikes(void)
{
    CHECK(load() == 0);
    struct query_result r;
    CHECK(run(HT_DOM_COMMIT, 19 * S, 29 * S, 1u << HT_AIFI, HT_BY_STACK, &r) == 0);
    CHECK(r.complete);
    CHECK_EQ(r.total.count[HT_AIFI], 4);
    CHECK_EQ(query_row_size(&r.total), 40 * MIB);
    CHECK_EQ(query_row_impacting(&r.total), 0);
    CHECK_EQ(r.nrows, 1);
    unsigned d;
    const uint64_t *f = stack_intern_frames(&E.si, r.rows[0].stack, &d);
    char buf[32];
    CHECK_STR(frame_text(&E.si, f[r.rows[0].skip], buf, sizeof(buf)),
              "MemoryTestApp.exe!ManipulateTemporaryBuffer");
    CHECK_STR(frame_text(&E.si, f[r.rows[0].skip + 1], buf, sizeof(buf)),
              "MemoryTestApp.exe!Operation1");
    query_result_free(&r);
    engine_close(&E);
}

static void test_heap_leak_at_end(void)
{
    CHECK(load() == 0);
    struct query_result r;
    CHECK(run(HT_DOM_HEAP, 0, UINT64_MAX, 1u << HT_AIFO, HT_BY_FRAME, &r) == 0);
    CHECK(r.complete);
    CHECK_EQ(r.nrows, 1);
    CHECK_STR(row_frame(&r.rows[0]), "MemoryTestApp.exe!operator new");
    query_result_free(&r);
    /* Culling operator new too leaves InnerLoopOperation: 1200 x 40 B. */
    struct frame_pat more[4];
    memcpy(more, cull, sizeof(cull));
    frame_pat_parse("operator new", 12, &more[3]);
    struct query q;
    query_init(&q);
    q.types = 1u << HT_AIFO;
    q.by = HT_BY_FRAME;
    q.cull = more;
    q.ncull = 4;
    CHECK(engine_query(&E, &q, &r) == 0);
    CHECK_EQ(r.nrows, 1);
    CHECK_STR(row_frame(&r.rows[0]), "MemoryTestApp.exe!InnerLoopOperation");
    CHECK_EQ(r.rows[0].count[HT_AIFO], 1200);
    CHECK_EQ(r.rows[0].bytes[HT_AIFO], 1200 * 40);
    query_result_free(&r);
    /* The transient startup buffers are AIFI on their own heap. */
    query_init(&q);
    q.by = HT_BY_HEAP;
    CHECK(engine_query(&E, &q, &r) == 0);
    CHECK_EQ(r.nrows, 2);
    CHECK_EQ(r.rows[0].key, 0x1d0000);
    CHECK_EQ(r.rows[1].key, 0x2a0000);
    CHECK_EQ(r.rows[1].count[HT_AIFI], 50);
    CHECK_EQ(query_row_outstanding(&r.rows[1]), 0);
    query_result_free(&r);
    engine_close(&E);
}

static void test_whole_run_commit_size(void)
{
    CHECK(load() == 0);
    struct query_result r;
    CHECK(run(HT_DOM_COMMIT, 0, UINT64_MAX, HT_TYPES_ALL, HT_BY_STACK, &r) == 0);
    CHECK(r.complete);
    CHECK_EQ(query_row_size(&r.total), 120 * MIB); /* 10 + 10 + 10 x 10 */
    CHECK_EQ(query_row_count(&r.total), 12);
    CHECK_EQ(query_row_outstanding(&r.total), 20 * MIB);
    CHECK_EQ(E.exited, 1);
    CHECK_EQ(E.peak_commit_bytes, 30 * MIB);
    query_result_free(&r);
    engine_close(&E);
}

HT_TEST_MAIN(T(halfway_jump), T(last_four_spikes), T(heap_leak_at_end), T(whole_run_commit_size))
