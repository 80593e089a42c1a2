/*
 * The daemon's reader of an agent's shared memory (agent-decode.h) on
 * rings written here: records in order into events, stacks interned once,
 * and hostile contents (bad kinds, addresses, sizes, stack ids and entries,
 * records rewritten after publication, a runaway head, random bytes)
 * counted and skipped, never read outside the mapping or looped on.
 */
#include "agent-decode.h"
#include "ht-test.h"
#include "stack-intern.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#define T0 1000000000ull
#define NOW 9000000000ull

static void *ring_new(void)
{
    void *b = aligned_alloc(4096, HTA_TOTAL_BYTES);
    if (!b)
        abort();
    memset(b, 0, HTA_TOTAL_BYTES);
    struct hta_header *h = b;
    h->magic = HTA_MAGIC;
    h->version = HTA_VERSION;
    h->records = HTA_RECORDS;
    h->stacks = HTA_STACKS;
    h->depth = HTA_DEPTH;
    return b;
}

static struct hta_rec *rec(void *b, uint64_t pos)
{
    return (struct hta_rec *)((char *)b + HTA_RECS_OFFSET) + (pos & (HTA_RECORDS - 1));
}

static struct hta_stack *stk(void *b, uint32_t id)
{
    return (struct hta_stack *)((char *)b + HTA_STACKS_OFFSET) + (id - 1);
}

/* A complete record at pos, as the agent publishes it. */
static void put(void *b, uint64_t pos, int kind, uint64_t addr, uint64_t old, uint64_t size,
                uint32_t stack, uint64_t t)
{
    struct hta_rec *r = rec(b, pos);
    r->t = t;
    r->kind = (uint8_t)kind;
    r->addr = addr;
    r->old_addr = old;
    r->size = size;
    r->stack = stack;
    r->tid = 7;
    r->seq = pos + 1;
    ((struct hta_header *)b)->head = pos + 1;
}

static void stack_set(void *b, uint32_t id, const uint64_t *f, uint32_t n)
{
    struct hta_stack *e = stk(b, id);
    e->hash = 1;
    e->depth = n;
    memcpy(e->frames, f, n * sizeof(*f));
    e->state = 1;
}

struct fixture {
    void *ring;
    uint32_t *ids;
    struct stack_intern si;
    struct agent_dec d;
};

static void fx_open(struct fixture *f)
{
    f->ring = ring_new();
    f->ids = calloc(HTA_STACKS + 1, sizeof(*f->ids));
    if (!f->ids || stack_intern_init(&f->si, 1000, 100) != 0)
        abort();
    agent_dec_init(&f->d, f->ring, f->ids, &f->si, T0, 32);
}

static void fx_close(struct fixture *f)
{
    stack_intern_close(&f->si);
    free(f->ids);
    free(f->ring);
}

static void test_records_in_order(void)
{
    struct fixture f;
    fx_open(&f);
    CHECK(agent_dec_header_ok(f.ring));
    uint64_t frames[] = {0x401000, 0x402000, 0x403000};
    stack_set(f.ring, 5, frames, 3);
    put(f.ring, 0, HTA_ALLOC, 0x10000, 0, 100, 5, T0 + 10);
    put(f.ring, 1, HTA_REALLOC, 0x20000, 0x10000, 200, 5, T0 + 20);
    put(f.ring, 2, HTA_FREE, 0x20000, 0, 0, 0, T0 + 30);
    put(f.ring, 3, HTA_COMMIT, 0x7f0000000000, 0, 8192, 5, T0 + 40);
    put(f.ring, 4, HTA_RELEASE, 0x7f0000000000, 0, 4096, 0, T0 + 50);
    struct ht_event ev[8];
    CHECK_EQ(agent_dec_take(&f.d, ev, 8, NOW), 5);
    CHECK_EQ(ev[0].kind, HT_EV_ALLOC);
    CHECK_EQ(ev[0].t, 10);
    CHECK_EQ(ev[0].size, 100);
    CHECK_EQ(ev[1].kind, HT_EV_REALLOC);
    CHECK_EQ(ev[1].old_addr, 0x10000);
    CHECK_EQ(ev[2].kind, HT_EV_FREE);
    CHECK_EQ(ev[3].kind, HT_EV_COMMIT);
    CHECK_EQ(ev[4].kind, HT_EV_RELEASE);
    CHECK(ev[0].stack != 0);
    CHECK_EQ(ev[0].stack, ev[1].stack); /* interned once */
    CHECK_EQ(ev[0].stack, ev[3].stack);
    unsigned depth;
    const uint64_t *got = stack_intern_frames(&f.si, ev[0].stack, &depth);
    CHECK_EQ(depth, 3);
    CHECK(got && memcmp(got, frames, sizeof(frames)) == 0);
    CHECK_EQ(((struct hta_header *)f.ring)->tail, 5); /* the agent sees the room */
    CHECK_EQ(agent_dec_take(&f.d, ev, 8, NOW), 0);
    CHECK_EQ(f.d.st.malformed + f.d.st.bad_stacks, 0);
    fx_close(&f);
}

static void test_hostile_fields(void)
{
    struct fixture f;
    fx_open(&f);
    uint64_t fr[HTA_DEPTH];
    for (unsigned i = 0; i < HTA_DEPTH; i++)
        fr[i] = 0x400000 + i;
    stack_set(f.ring, 1, fr, HTA_DEPTH); /* deeper than kept: cut to 32 */
    stack_set(f.ring, 2, fr, 3);
    stk(f.ring, 2)->depth = HTA_DEPTH + 1; /* a depth past the entry */
    stack_set(f.ring, 3, fr, 3);
    stk(f.ring, 3)->state = 0; /* never completed */
    uint64_t p = 0;
    put(f.ring, p++, 0, 0x1000, 0, 1, 0, T0);                      /* kind 0 */
    put(f.ring, p++, 99, 0x1000, 0, 1, 0, T0);                     /* kind past the last */
    put(f.ring, p++, HTA_ALLOC, 0, 0, 1, 0, T0);                   /* address 0 */
    put(f.ring, p++, HTA_ALLOC, 1ull << 60, 0, 1, 0, T0);          /* past user space */
    put(f.ring, p++, HTA_ALLOC, 0x1000, 0, 1ull << 60, 0, T0);     /* size past it */
    put(f.ring, p++, HTA_REALLOC, 0x1000, 0, 8, 0, T0);            /* realloc from 0 */
    put(f.ring, p++, HTA_COMMIT, 0x1000, 0, 0, 0, T0);             /* empty commit */
    put(f.ring, p++, HTA_ALLOC, 0x1000, 0, 8, HTA_STACKS + 1, T0); /* id out of range */
    put(f.ring, p++, HTA_ALLOC, 0x2000, 0, 8, 2, T0);              /* bad depth */
    put(f.ring, p++, HTA_ALLOC, 0x3000, 0, 8, 3, T0);              /* incomplete entry */
    put(f.ring, p++, HTA_ALLOC, 0x3000, 0, 8, 3, T0);              /* remembered as bad */
    put(f.ring, p++, HTA_ALLOC, 0x4000, 0, 8, 1, T0 - 5);          /* before t0: time 0 */
    put(f.ring, p++, HTA_ALLOC, 0x5000, 0, 8, 0, NOW + 100);       /* in the future */
    struct ht_event ev[32];
    size_t n = agent_dec_take(&f.d, ev, 32, NOW);
    CHECK_EQ(f.d.st.malformed, 7);
    CHECK_EQ(f.d.st.bad_stacks, 4);
    CHECK_EQ(n, 6);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(ev[i].kind, HT_EV_ALLOC);
    CHECK_EQ(ev[0].stack, 0);
    unsigned depth;
    CHECK(stack_intern_frames(&f.si, ev[4].stack, &depth) && depth == 32);
    CHECK_EQ(ev[4].t, 0);
    CHECK_EQ(ev[5].t, NOW - T0);
    CHECK(f.d.st.clamped_time >= 1);
    fx_close(&f);
}

/* A reserved record never completed holds the ring until skipped; one
 * published with the wrong seq (rewritten) is not taken as the next. */
static void test_stuck_and_rewritten(void)
{
    struct fixture f;
    fx_open(&f);
    put(f.ring, 0, HTA_ALLOC, 0x1000, 0, 8, 0, T0 + 1);
    put(f.ring, 2, HTA_ALLOC, 0x2000, 0, 8, 0, T0 + 3); /* 1: reserved, not done */
    struct ht_event ev[8];
    CHECK_EQ(agent_dec_take(&f.d, ev, 8, NOW), 1);
    CHECK(!agent_dec_ready(&f.d));
    CHECK_EQ(agent_dec_pending(&f.d), 2);
    agent_dec_skip(&f.d);
    CHECK_EQ(f.d.st.stuck, 1);
    CHECK_EQ(agent_dec_take(&f.d, ev, 8, NOW), 1);
    CHECK_EQ(ev[0].addr, 0x2000);
    rec(f.ring, 3)->seq = 3 + 1 + HTA_RECORDS; /* a lap ahead */
    CHECK(!agent_dec_ready(&f.d));
    /* A runaway head is bounded by the ring. */
    ((struct hta_header *)f.ring)->head = ~0ull;
    CHECK_EQ(agent_dec_pending(&f.d), HTA_RECORDS);
    fx_close(&f);
}

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Random bytes over the records and stacks, with seqs that line up often
 * enough to be taken: every event handed out is sound. */
static void test_random_garbage(void)
{
    struct fixture f;
    fx_open(&f);
    uint64_t s = 1;
    uint64_t *w = (uint64_t *)((char *)f.ring + HTA_RECS_OFFSET);
    size_t words = (HTA_TOTAL_BYTES - HTA_RECS_OFFSET) / 8;
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < words; i += 1 + rnd(&s) % 7)
            w[i] = rnd(&s) % 3 ? rnd(&s) : rnd(&s) % 256;
        for (uint64_t p = f.d.tail; p < f.d.tail + 4096; p++)
            if (rnd(&s) % 2)
                rec(f.ring, p)->seq = p + 1;
        for (uint32_t id = 1; id < 200; id++)
            if (rnd(&s) % 2)
                stk(f.ring, id)->state = 1;
        struct ht_event ev[256];
        for (int k = 0; k < 64; k++) {
            size_t n = agent_dec_take(&f.d, ev, 256, NOW);
            for (size_t i = 0; i < n; i++) {
                CHECK(ev[i].kind >= HT_EV_ALLOC && ev[i].kind <= HT_EV_RELEASE);
                CHECK(ev[i].addr != 0 && ev[i].addr < (1ull << 57));
                CHECK(ev[i].t <= NOW - T0);
                unsigned d = 0;
                CHECK(ev[i].stack == 0 ||
                      (stack_intern_frames(&f.si, ev[i].stack, &d) && d >= 1 && d <= 32));
            }
            if (!n)
                agent_dec_skip(&f.d);
        }
    }
    CHECK(f.d.st.records > 0);
    CHECK(f.d.st.malformed > 0);
    fx_close(&f);
}

static uint64_t mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A ring whose records count TSC ticks (HTA_CLOCK_TSC): each event's time
 * is the CLOCK_MONOTONIC time its stamp was taken at, within a few
 * microseconds, over a span of a few milliseconds. */
static void test_tsc_clock(void)
{
#if defined(__x86_64__)
    struct fixture f;
    void *ring = ring_new();
    ((struct hta_header *)ring)->clock = HTA_CLOCK_TSC;
    f.ring = ring;
    f.ids = calloc(HTA_STACKS + 1, sizeof(*f.ids));
    if (!f.ids || stack_intern_init(&f.si, 1000, 100) != 0)
        abort();
    uint64_t t0 = mono();
    agent_dec_init(&f.d, f.ring, f.ids, &f.si, t0, 32);
    uint64_t truth[3];
    for (int i = 0; i < 3; i++) {
        struct timespec pause = {0, 2000000}; /* 2 ms */
        nanosleep(&pause, NULL);
        truth[i] = mono();
        put(ring, (uint64_t)i, HTA_ALLOC, 0x10000 + 0x100 * (uint64_t)i, 0, 16, 0, __rdtsc());
    }
    struct ht_event ev[4];
    CHECK_EQ(agent_dec_take(&f.d, ev, 4, mono()), 3);
    for (int i = 0; i < 3; i++) {
        int64_t err = (int64_t)ev[i].t - (int64_t)(truth[i] - t0);
        CHECK(err > -20000 && err < 20000); /* 20 us */
    }
    CHECK_EQ(f.d.st.clamped_time, 0);
    fx_close(&f);
#else
    exit(HT_TEST_SKIP); /* no TSC clock there */
#endif
}

/* As the agent source drains: now read once, then takes while the target
 * writes on (records stamped after now). No record of a TSC ring is read
 * as stamped in the future or out of order (clamped_time), and times never
 * go back across takes. */
static void test_tsc_takes(void)
{
#if defined(__x86_64__)
    struct fixture f;
    void *ring = ring_new();
    ((struct hta_header *)ring)->clock = HTA_CLOCK_TSC;
    f.ring = ring;
    f.ids = calloc(HTA_STACKS + 1, sizeof(*f.ids));
    if (!f.ids || stack_intern_init(&f.si, 1000, 100) != 0)
        abort();
    uint64_t t0 = mono();
    agent_dec_init(&f.d, f.ring, f.ids, &f.si, t0, 32);
    uint64_t last = 0, pos = 0;
    for (int drain = 0; drain < 40; drain++) {
        uint64_t now = mono(); /* the drain's, read before the records below */
        for (int k = 0; k < 5; k++, pos++) {
            struct timespec pause = {0, 20000}; /* 20 us */
            nanosleep(&pause, NULL);
            put(ring, pos, HTA_ALLOC, 0x10000 + 0x100 * pos, 0, 16, 0, __rdtsc());
            struct ht_event ev[2];
            CHECK_EQ(agent_dec_take(&f.d, ev, 2, now), 1);
            CHECK(ev[0].t >= last);
            last = ev[0].t;
        }
    }
    CHECK_EQ(f.d.st.clamped_time, 0);
    fx_close(&f);
#else
    exit(HT_TEST_SKIP); /* no TSC clock there */
#endif
}

HT_TEST_MAIN(T(records_in_order), T(hostile_fields), T(stuck_and_rewritten), T(random_garbage),
             T(tsc_clock), T(tsc_takes))
