/* Unit tests of the engine's structures: growth, wrap-around, caps and cap accounting. */
#include "alloc-table.h"
#include "commit-map.h"
#include "frame-match.h"
#include "mem-acct.h"
#include "query-scratch.h"
#include "ht-error.h"
#include "ht-test.h"
#include "rings.h"
#include "stack-intern.h"

static void test_alloc_table_basic(void)
{
    struct alloc_table t;
    struct alloc_entry *e, out;
    CHECK(alloc_table_init(&t, 100) == 0);
    CHECK(alloc_table_insert(&t, 1, 0x1000, 5, 40, 7, &e) == 0);
    CHECK_EQ(alloc_entry_size(e), 40);
    CHECK_EQ(alloc_entry_time(e), 5);
    CHECK_EQ(alloc_entry_heap(e), 1);
    /* Same address on another heap is another key. */
    CHECK(alloc_table_insert(&t, 2, 0x1000, 6, 80, 8, NULL) == 0);
    CHECK(alloc_table_insert(&t, 1, 0x1000, 7, 1, 1, &e) == HT_EEXIST);
    CHECK_EQ(alloc_entry_size(e), 40);
    CHECK_EQ(t.count, 2);
    CHECK(alloc_table_remove(&t, 1, 0x1000, &out) == 0);
    CHECK_EQ(out.stack, 7);
    CHECK(alloc_table_remove(&t, 1, 0x1000, &out) != 0);
    CHECK(alloc_table_find(&t, 2, 0x1000) != NULL);
    /* Largest size and time fit. */
    CHECK(alloc_table_insert(&t, 3, 0x2000, ALLOC_TIME_MAX, ALLOC_SIZE_MAX, 9, &e) == 0);
    CHECK_EQ(alloc_entry_size(e), ALLOC_SIZE_MAX);
    CHECK_EQ(alloc_entry_time(e), ALLOC_TIME_MAX);
    CHECK_EQ(alloc_entry_heap(e), 3);
    alloc_table_close(&t);
}

static void count_cb(const struct alloc_entry *e, void *arg)
{
    (void)e;
    (*(uint64_t *)arg)++;
}

/* Growth happens a few buckets per operation: every key must stay findable
 * while two bucket arrays are in use, through removals and reuse. */
static void test_alloc_table_growth(void)
{
    struct alloc_table t;
    CHECK(alloc_table_init(&t, 1u << 30) == 0);
    const uint32_t n = 300000;
    int saw_rehash = 0;
    for (uint32_t i = 0; i < n; i++) {
        CHECK(alloc_table_insert(&t, i % 3, 0x10000 + (uint64_t)i * 16, i, i % 1000, i, NULL) == 0);
        saw_rehash |= t.rehash_idx >= 0;
        if (i % 7 == 3) {
            uint32_t k = i / 2;
            if (k % 7 != 3 && k % 5 != 0) {
                CHECK(alloc_table_find(&t, k % 3, 0x10000 + (uint64_t)k * 16) != NULL);
            }
        }
        if (i % 5 == 0)
            CHECK(alloc_table_remove(&t, i % 3, 0x10000 + (uint64_t)i * 16, NULL) == 0);
    }
    CHECK(saw_rehash);
    CHECK_EQ(t.count, n - n / 5);
    for (uint32_t i = 0; i < n; i++) {
        struct alloc_entry *e = alloc_table_find(&t, i % 3, 0x10000 + (uint64_t)i * 16);
        if (i % 5 == 0) {
            CHECK(e == NULL);
        } else {
            CHECK(e != NULL);
            CHECK_EQ(e->stack, i);
        }
    }
    uint64_t seen = 0;
    alloc_table_foreach(&t, count_cb, &seen);
    CHECK_EQ(seen, t.count);
    /* Holes are not reused: new entries are appended to the open chunk. */
    for (uint32_t i = 1; i < 5000; i += 5)
        CHECK(alloc_table_remove(&t, i % 3, 0x10000 + (uint64_t)i * 16, NULL) == 0);
    uint64_t filled = t.filled;
    uint32_t open = t.open;
    for (uint32_t i = 0; i < 100; i++)
        CHECK(alloc_table_insert(&t, 5, (uint64_t)i, 1, 1, 1, NULL) == 0);
    CHECK(t.open == open || t.chunks[open].fill == ALLOC_CHUNK);
    CHECK(t.filled >= filled + 100 - ALLOC_CHUNK); /* or a chunk was recycled meanwhile */
    alloc_table_close(&t);
}

/* The table's own invariants: chunk counts, time bounds, chains, holes. */
static void check_table(struct alloc_table *t)
{
    uint64_t live = 0, filled = 0;
    uint32_t nchunks = 0;
    for (uint32_t s = 0; s < t->nslots; s++) {
        const struct alloc_chunk *c = &t->chunks[s];
        if (!c->e)
            continue;
        nchunks++;
        filled += c->fill;
        uint32_t n = 0;
        for (uint32_t i = 0; i < c->fill; i++) {
            const struct alloc_entry *e = &c->e[i];
            if (alloc_entry_heap(e) == ALLOC_HEAP_FREE)
                continue;
            n++;
            CHECK(alloc_entry_time(e) >= c->min_a && alloc_entry_time(e) <= c->max_a);
            /* Findable by its key, at this very entry. */
            CHECK(alloc_table_find(t, alloc_entry_heap(e), e->addr) == e);
        }
        CHECK_EQ(n, c->live);
        CHECK(n > 0 || s == t->open || s == t->dest); /* empty chunks are recycled */
        live += n;
    }
    CHECK_EQ(live, t->count);
    CHECK_EQ(filled, t->filled);
    CHECK_EQ(nchunks, t->nchunks);
}

/* A naive model: key k = (k % 3, 0x1000 + k * 16) is live with time/stack when set. */
#define CM_KEYS 60000u
struct cm_model {
    uint8_t live[CM_KEYS];
    uint64_t time[CM_KEYS];
    uint32_t stack[CM_KEYS];
    uint32_t count;
};

static uint64_t cm_rng = 88172645463325252ULL;
static uint64_t cm_rand(void)
{
    cm_rng ^= cm_rng << 13;
    cm_rng ^= cm_rng >> 7;
    cm_rng ^= cm_rng << 17;
    return cm_rng;
}

static void cm_check(struct alloc_table *t, const struct cm_model *m)
{
    CHECK_EQ(t->count, m->count);
    for (uint32_t k = 0; k < CM_KEYS; k++) {
        struct alloc_entry *e = alloc_table_find(t, k % 3, 0x1000 + (uint64_t)k * 16);
        CHECK((e != NULL) == m->live[k]);
        if (e) {
            CHECK_EQ(alloc_entry_time(e), m->time[k]);
            CHECK_EQ(e->stack, m->stack[k]);
        }
    }
    check_table(t);
}

/*
 * Compaction against a naive model: a long-lived set freed at random (holes
 * spread over every chunk) and short-lived blocks freed FIFO (chunks left
 * sparse), through growth and rehash. Every key stays findable with its
 * fields, counts and chunk time bounds stay true, chunks are really
 * compacted, and the holes stay within the slack (plus the young chunks
 * compaction leaves alone and the one being emptied).
 */
static void test_alloc_table_compaction(void)
{
    static struct cm_model m;
    memset(&m, 0, sizeof(m));
    struct alloc_table t;
    CHECK(alloc_table_init(&t, CM_KEYS) == 0);
    const uint32_t longs = 30000; /* keys [0, longs) long-lived, the rest short-lived FIFO */
    uint32_t head = longs, tail = longs;
    uint64_t now = 1;
    uint64_t max_holes = 0;
    for (uint32_t step = 0; step < 600000; step++) {
        uint64_t r = cm_rand();
        uint32_t k;
        if (step < longs) {
            k = step;
        } else if (r % 4 == 0) {
            k = (uint32_t)(cm_rand() % longs); /* a long-lived one, freed or (re)allocated */
        } else if (head - tail < 4000 && (r & 16)) {
            k = longs + head++ % (CM_KEYS - longs);
        } else if (head > tail) {
            k = longs + tail++ % (CM_KEYS - longs);
        } else {
            continue;
        }
        now += r % 3;
        if (m.live[k]) {
            struct alloc_entry out;
            CHECK(alloc_table_remove(&t, k % 3, 0x1000 + (uint64_t)k * 16, &out) == 0);
            CHECK_EQ(out.stack, m.stack[k]);
            m.live[k] = 0;
            m.count--;
        } else {
            uint32_t stack = (uint32_t)(r >> 40);
            CHECK(alloc_table_insert(&t, k % 3, 0x1000 + (uint64_t)k * 16, now, 16, stack, NULL) ==
                  0);
            m.live[k] = 1;
            m.time[k] = now;
            m.stack[k] = stack;
            m.count++;
        }
        if (step > 100000 && t.filled - t.count > max_holes)
            max_holes = t.filled - t.count;
        if (step % 50000 == 0)
            cm_check(&t, &m);
    }
    cm_check(&t, &m);
    CHECK(t.compactions > 10 && t.moved > 1000);
    CHECK(max_holes <= t.count / ALLOC_COMPACT_SLACK + (2 + 4 + 2) * ALLOC_CHUNK);
    /* Everything freed: every chunk but the open and move-target ones recycled. */
    for (uint32_t k = 0; k < CM_KEYS; k++)
        if (m.live[k]) {
            CHECK(alloc_table_remove(&t, k % 3, 0x1000 + (uint64_t)k * 16, NULL) == 0);
            m.live[k] = 0;
            m.count--;
        }
    cm_check(&t, &m);
    CHECK(t.nchunks <= 2);
    alloc_table_close(&t);
}

static void test_alloc_table_cap(void)
{
    struct alloc_table t;
    CHECK(alloc_table_init(&t, 3) == 0);
    for (int i = 0; i < 3; i++)
        CHECK(alloc_table_insert(&t, 0, (uint64_t)i, 0, 1, 1, NULL) == 0);
    CHECK(alloc_table_insert(&t, 0, 99, 0, 1, 1, NULL) == HT_EFULL);
    CHECK(alloc_table_remove(&t, 0, 1, NULL) == 0);
    CHECK(alloc_table_insert(&t, 0, 99, 0, 1, 1, NULL) == 0);
    alloc_table_close(&t);
}

static void test_alloc_table_remove_heap(void)
{
    struct alloc_table t;
    CHECK(alloc_table_init(&t, 100000) == 0);
    for (uint32_t i = 0; i < 5000; i++)
        CHECK(alloc_table_insert(&t, i % 2, i, 0, 1, 1, NULL) == 0);
    uint64_t removed = 0;
    alloc_table_remove_heap(&t, 1, count_cb, &removed);
    CHECK_EQ(removed, 2500);
    CHECK_EQ(t.count, 2500);
    CHECK(alloc_table_find(&t, 1, 1) == NULL);
    CHECK(alloc_table_find(&t, 0, 2) != NULL);
    alloc_table_close(&t);
}

static void test_stack_intern_basic(void)
{
    struct stack_intern si;
    CHECK(stack_intern_init(&si, 100, 100) == 0);
    uint64_t a[] = {1, 2, 3}, b[] = {1, 2, 4};
    uint32_t ia = stack_intern_get(&si, a, 3), ib = stack_intern_get(&si, b, 3);
    CHECK(ia != 0 && ib != 0 && ia != ib);
    CHECK_EQ(stack_intern_get(&si, a, 3), ia);
    CHECK_EQ(stack_intern_get(&si, a, 2), stack_intern_get(&si, b, 2));
    CHECK_EQ(stack_intern_get(&si, a, 0), 0);
    unsigned d;
    const uint64_t *f = stack_intern_frames(&si, ib, &d);
    CHECK_EQ(d, 3);
    CHECK_EQ(f[2], 4);
    CHECK(stack_intern_frames(&si, 999, &d) == NULL && d == 0);
    uint32_t s1 = stack_intern_str(&si, "app.exe!main", 12);
    CHECK(s1 != 0);
    CHECK_EQ(stack_intern_str(&si, "app.exe!main", 12), s1);
    CHECK_STR(stack_intern_strget(&si, s1), "app.exe!main");
    /* Not UTF-8 (a hostile stream): kept with U+FFFD for each bad byte (and
     * for a NUL), counted once per distinct name; a valid name is not touched. */
    uint32_t b1 = stack_intern_str(&si, "a\xff\xfe" "b\xc3", 5);
    CHECK(b1 != 0);
    CHECK_STR(stack_intern_strget(&si, b1), "a\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD");
    CHECK_EQ(stack_intern_str(&si, "a\xff\xfe" "b\xc3", 5), b1);
    CHECK_EQ(si.bad_utf8, 1);
    uint32_t b2 = stack_intern_str(&si, "x\0y", 3);
    CHECK_STR(stack_intern_strget(&si, b2), "x\xEF\xBF\xBDy");
    CHECK_EQ(si.bad_utf8, 2);
    CHECK_EQ(stack_intern_str(&si, "caf\xC3\xA9", 5), stack_intern_str(&si, "caf\xC3\xA9", 5));
    CHECK_EQ(si.bad_utf8, 2);
    stack_intern_close(&si);
}

static void test_stack_intern_caps(void)
{
    struct stack_intern si;
    CHECK(stack_intern_init(&si, 10, 5) == 0);
    uint32_t ids[20];
    for (uint64_t i = 0; i < 20; i++)
        ids[i] = stack_intern_get(&si, &i, 1);
    CHECK(ids[8] != 0);  /* 9 stacks + reserved id 0 */
    CHECK_EQ(ids[9], 0); /* past the cap: no id, counted */
    CHECK_EQ(si.drops, 11);
    uint64_t zero = 0;
    CHECK_EQ(stack_intern_get(&si, &zero, 1), ids[0]); /* known stacks still resolve */
    for (int i = 0; i < 4; i++) {
        char s[8];
        snprintf(s, sizeof(s), "s%d", i);
        CHECK(stack_intern_str(&si, s, 2) != 0);
    }
    CHECK_EQ(stack_intern_str(&si, "new", 3), 0);
    stack_intern_close(&si);
}

static void test_stack_intern_growth(void)
{
    struct stack_intern si;
    CHECK(stack_intern_init(&si, 1u << 20, 16) == 0);
    /* Deep stacks cross frame-chunk boundaries; every stack must read back. */
    uint64_t fr[HT_STACK_MAX_DEPTH];
    for (uint32_t i = 0; i < 50000; i++) {
        unsigned d = 1 + i % 200;
        for (unsigned k = 0; k < d; k++)
            fr[k] = (uint64_t)i * 1000 + k;
        CHECK_EQ(stack_intern_get(&si, fr, d), i + 1);
    }
    for (uint32_t i = 0; i < 50000; i += 997) {
        unsigned d;
        const uint64_t *f = stack_intern_frames(&si, i + 1, &d);
        CHECK_EQ(d, 1 + i % 200);
        CHECK_EQ(f[d - 1], (uint64_t)i * 1000 + d - 1);
    }
    stack_intern_close(&si);
}

struct done_log {
    uint64_t bytes, left, n;
};

static void done_cb(void *arg, const struct commit_range *p, uint64_t f, unsigned left)
{
    struct done_log *l = arg;
    (void)f;
    l->bytes += p->end - p->start;
    l->left += left;
    l->n++;
}

static void test_commit_map_split(void)
{
    struct commit_map cm;
    commit_map_init(&cm, 100);
    uint64_t added, dropped;
    unsigned dropped_ranges;
    CHECK_EQ(commit_map_commit(&cm, 0x10000, 0x20000, 1, 5, &added, &dropped, &dropped_ranges), 1);
    CHECK_EQ(added, 0x10000);
    /* Decommit the middle: two pieces remain, each a block. */
    struct done_log l = {0};
    CHECK_EQ(commit_map_decommit(&cm, 0x14000, 0x18000, 2, done_cb, &l), 0);
    CHECK_EQ(l.bytes, 0x4000);
    CHECK_EQ(l.left, 2);
    CHECK_EQ(cm.n, 2);
    CHECK_EQ(cm.bytes, 0xc000);
    CHECK_EQ(cm.r[1].t, 1);
    /* Release everything and more: the uncommitted part is reported. */
    memset(&l, 0, sizeof(l));
    CHECK_EQ(commit_map_decommit(&cm, 0x0, 0x30000, 3, done_cb, &l), 0x30000 - 0xc000);
    CHECK_EQ(l.n, 2);
    CHECK_EQ(l.left, 0);
    CHECK_EQ(cm.n, 0);
    CHECK_EQ(cm.bytes, 0);
    commit_map_close(&cm);
}

static void test_commit_map_recommit(void)
{
    struct commit_map cm;
    commit_map_init(&cm, 100);
    uint64_t added, dropped;
    unsigned dropped_ranges;
    commit_map_commit(&cm, 0x1000, 0x3000, 1, 5, &added, &dropped, &dropped_ranges);
    commit_map_commit(&cm, 0x5000, 0x6000, 1, 5, &added, &dropped, &dropped_ranges);
    /* Recommit over both and the gaps: only the gaps are new, three ranges. */
    CHECK_EQ(commit_map_commit(&cm, 0x0, 0x8000, 2, 6, &added, &dropped, &dropped_ranges), 3);
    CHECK_EQ(added, 0x8000 - 0x3000);
    CHECK_EQ(cm.bytes, 0x8000);
    CHECK_EQ(cm.n, 5);
    /* Fully committed already: nothing new, not counted. */
    CHECK_EQ(commit_map_commit(&cm, 0x1000, 0x2000, 3, 7, &added, &dropped, &dropped_ranges), 0);
    CHECK_EQ(added, 0);
    for (uint32_t i = 1; i < cm.n; i++)
        CHECK(cm.r[i - 1].end <= cm.r[i].start);
    commit_map_close(&cm);
}

static void test_commit_map_cap(void)
{
    struct commit_map cm;
    commit_map_init(&cm, 2);
    uint64_t added, dropped;
    unsigned dropped_ranges;
    commit_map_commit(&cm, 0x1000, 0x2000, 1, 5, &added, &dropped, &dropped_ranges);
    commit_map_commit(&cm, 0x3000, 0x4000, 1, 5, &added, &dropped, &dropped_ranges);
    CHECK_EQ(commit_map_commit(&cm, 0x5000, 0x6000, 1, 5, &added, &dropped, &dropped_ranges), 0);
    CHECK_EQ(dropped, 0x1000);
    CHECK_EQ(dropped_ranges, 1);
    CHECK_EQ(added, 0);
    CHECK_EQ(cm.bytes, 0x2000);
    commit_map_close(&cm);
}

static void test_life_ring_wrap(void)
{
    struct chunk_ring r;
    life_ring_init(&r, 4);
    CHECK(chunk_ring_complete_from(&r, 0));
    for (uint64_t i = 1; i <= 10; i++) {
        struct life_rec rec = {.a = 0, .f = i * 10, .size = 1, .stack = 1};
        life_ring_push(&r, &rec);
    }
    CHECK_EQ(chunk_ring_len(&r), 4);
    CHECK_EQ(life_ring_at(&r, 0)->f, 70);
    CHECK_EQ(life_ring_at(&r, 3)->f, 100);
    CHECK_EQ(r.horizon, 60);
    CHECK_EQ(chunk_ring_lower_bound(&r, 0), 0);
    CHECK_EQ(chunk_ring_lower_bound(&r, 80), 1);
    CHECK_EQ(chunk_ring_lower_bound(&r, 81), 2);
    CHECK_EQ(chunk_ring_lower_bound(&r, 101), 4);
    CHECK(!chunk_ring_complete_from(&r, 60));
    CHECK(chunk_ring_complete_from(&r, 61));
    chunk_ring_close(&r);
}

static void test_timeline_wrap(void)
{
    struct timeline tl;
    timeline_init(&tl, 3);
    for (uint64_t i = 0; i < 7; i++) {
        struct tl_sample s = {.t = i};
        timeline_push(&tl, &s);
    }
    CHECK_EQ(timeline_len(&tl), 3);
    CHECK_EQ(timeline_at(&tl, 0)->t, 4);
    CHECK_EQ(timeline_at(&tl, 2)->t, 6);
    timeline_close(&tl);
}

/* The query scratch arena: zeroed memory, kept between queries, grown to
 * what a query needed, trimmed when oversized, its bytes charged at sync. */
static void test_query_scratch(void)
{
    struct mem_acct m;
    mem_acct_init(&m, NULL);
    struct query_scratch s = {0};
    const size_t big =
        9u << 20; /* over 4 times what the small queries below need, rounded to 2 MiB */
    qscratch_begin(&s);
    unsigned char *p = qscratch_calloc(&s, big, 1); /* the first region */
    CHECK(p != NULL);
    CHECK_EQ(p[0] | p[big - 1], 0);
    memset(p, 0xab, big);
    qscratch_end(&s);
    CHECK(s.cap >= big);
    CHECK_EQ(m.bytes[MEM_query_scratch], 0); /* charged at sync, on the owner thread */
    qscratch_sync(&s, &m);
    CHECK_EQ(m.bytes[MEM_query_scratch], s.held);
    CHECK(s.held >= big);
    /* The next query gets the kept region, zeroed, and does not grow it. */
    uint64_t grown = s.grown;
    qscratch_begin(&s);
    p = qscratch_calloc(&s, big, 1);
    CHECK(p == s.r[0].mem);
    for (size_t i = 0; i < big; i += 4096)
        CHECK_EQ(p[i], 0);
    memset(p, 0xcd, big);
    qscratch_end(&s);
    CHECK_EQ(s.grown, grown);
    /* Memory the last query wrote comes back zeroed, aligned. */
    qscratch_begin(&s);
    CHECK(qscratch_calloc(&s, 1, 1) == s.r[0].mem);
    unsigned char *q = qscratch_calloc(&s, 100, 8);
    CHECK(q != NULL && ((uintptr_t)q & 63) == 0);
    for (unsigned i = 0; i < 800; i++)
        CHECK_EQ(q[i], 0);
    qscratch_end(&s);
    /* A query that needs more keeps its new region for the next ones. */
    qscratch_begin(&s);
    CHECK(qscratch_calloc(&s, big, 1) == s.r[0].mem);
    p = qscratch_calloc(&s, big, 1);
    CHECK(p != NULL && s.nr == 2 && p == s.r[1].mem);
    memset(p, 0xef, big);
    qscratch_end(&s);
    grown = s.grown;
    qscratch_begin(&s);
    CHECK(qscratch_calloc(&s, big, 1) == s.r[0].mem);
    CHECK(qscratch_calloc(&s, big, 1) == s.r[1].mem);
    qscratch_end(&s);
    CHECK_EQ(s.grown, grown);
    /* Small queries from now on: the region is trimmed within QSCRATCH_DECAY of them. */
    for (unsigned k = 0; k < 2 * QSCRATCH_DECAY; k++) {
        qscratch_begin(&s);
        CHECK(qscratch_calloc(&s, 1000, 8) != NULL);
        qscratch_end(&s);
    }
    CHECK(s.trimmed >= 1);
    CHECK(s.cap < big);
    qscratch_sync(&s, &m);
    CHECK_EQ(m.bytes[MEM_query_scratch], s.held);
    /* Reserved (the owner thread warming a session): held, touched, and
     * not trimmed below the reserve however little the queries take. */
    CHECK(qscratch_reserve(&s, big, 1u << 20) == 0);
    CHECK(s.cap >= big);
    /* Touched a bounded step per call: more than one call for 9 MiB. */
    unsigned steps = 1;
    while (qscratch_touch(&s))
        steps++;
    CHECK(steps >= 2 && steps <= big / QSCRATCH_TOUCH_STEP + 2);
    for (unsigned i = 0; i < s.nr; i++)
        CHECK_EQ(s.r[i].touched, s.r[i].cap);
    grown = s.grown;
    for (unsigned k = 0; k < 2 * QSCRATCH_DECAY; k++) {
        qscratch_begin(&s);
        CHECK(qscratch_calloc(&s, 1000, 8) != NULL);
        qscratch_end(&s);
    }
    CHECK(s.cap >= big);
    CHECK_EQ(s.grown, grown);
    qscratch_begin(&s);
    CHECK(qscratch_calloc(&s, big / 2, 1) != NULL);
    CHECK(qscratch_calloc(&s, big / 4, 1) != NULL);
    qscratch_end(&s);
    CHECK_EQ(s.grown, grown); /* within the reserve: nothing new */
    qscratch_sync(&s, &m);
    CHECK_EQ(m.bytes[MEM_query_scratch], s.held);
    /* A budget that refuses it: not kept. */
    struct mem_budget b;
    mem_budget_init(&b, NULL, 4096);
    struct mem_acct mb;
    mem_acct_init(&mb, &b);
    struct query_scratch t = {0};
    qscratch_begin(&t);
    CHECK(qscratch_calloc(&t, big, 1) != NULL);
    qscratch_end(&t);
    qscratch_sync(&t, &mb);
    CHECK_EQ(t.held, 0);
    CHECK_EQ(mb.bytes[MEM_query_scratch], 0);
    CHECK(mb.over_budget[MEM_query_scratch] >= 1);
    qscratch_close(&t, &mb);
    mem_acct_close(&mb);
    qscratch_close(&s, &m);
    CHECK_EQ(m.bytes[MEM_query_scratch], 0);
    mem_acct_close(&m);
}

static void test_frame_patterns(void)
{
    struct frame_pat p;
    CHECK(frame_pat_parse("ntdll!", 6, &p) == 0);
    CHECK(frame_pat_match(&p, "ntdll.dll!RtlAllocateHeap"));
    CHECK(frame_pat_match(&p, "NTDLL.DLL!x"));
    CHECK(!frame_pat_match(&p, "ntdll2.dll!x"));
    CHECK(!frame_pat_match(&p, "RtlAllocateHeap"));
    CHECK(frame_pat_parse("ntdll.dll!rtlallocateheap", 25, &p) == 0);
    CHECK(frame_pat_match(&p, "ntdll.dll!RtlAllocateHeap"));
    CHECK(!frame_pat_match(&p, "ntdll.dll!RtlFreeHeap"));
    CHECK(frame_pat_parse("malloc", 6, &p) == 0);
    CHECK(frame_pat_match(&p, "msvcrt.dll!malloc"));
    CHECK(frame_pat_match(&p, "libc.so.6!MALLOC"));
    CHECK(!frame_pat_match(&p, "msvcrt.dll!malloc_base"));
    CHECK(frame_pat_parse("0x4010", 6, &p) == 0);
    CHECK(frame_pat_match(&p, "0x4010"));
    CHECK(frame_pat_parse("!", 1, &p) != 0);
    CHECK(frame_pat_parse("", 0, &p) != 0);
}

HT_TEST_MAIN(T(alloc_table_basic), T(alloc_table_growth), T(alloc_table_compaction),
             T(alloc_table_cap), T(alloc_table_remove_heap), T(stack_intern_basic),
             T(stack_intern_caps), T(stack_intern_growth), T(commit_map_split),
             T(commit_map_recommit), T(commit_map_cap), T(life_ring_wrap), T(timeline_wrap),
             T(frame_patterns), T(query_scratch))
