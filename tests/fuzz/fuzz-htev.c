/* Fuzz target: .htev bytes through the replay parser into a small engine, then queries. */
#include "engine.h"
#include "query.h"
#include "replay.h"

#include <stddef.h>
#include <stdint.h>

static void sink(void *arg, const struct ht_event *ev)
{
    engine_apply(arg, ev);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct engine_limits lim;
    engine_limits_default(&lim);
    lim.table_cap = 64;
    lim.commit_cap = 16;
    lim.life_ring = 32;
    lim.commit_ring = 8;
    lim.timeline_ring = 8;
    lim.timeline_ns = 1000;
    lim.max_stacks = 64;
    lim.max_strings = 64;
    struct engine e;
    if (engine_init(&e, &lim) != 0)
        return 0;
    struct replay r;
    if (replay_init(&r, &e.si, sink, &e) == 0) {
        /* Two feeds so the carry-over path runs too. */
        size_t half = size / 2;
        replay_feed(&r, (const char *)data, half);
        replay_feed(&r, (const char *)data + half, size - half);
        replay_finish(&r);
        replay_close(&r);
    }
    struct frame_pat cull;
    frame_pat_parse("a!", 2, &cull);
    for (int by = HT_BY_STACK; by <= HT_BY_TYPE; by++) {
        struct query q;
        query_init(&q);
        q.by = by;
        q.domain = by & 1;
        q.t1 = e.now / 3;
        q.cull = &cull;
        q.ncull = 1;
        q.list = by == HT_BY_TYPE;
        struct query_result res;
        if (engine_query(&e, &q, &res) == 0)
            query_result_free(&res);
    }
    engine_close(&e);
    return 0;
}
