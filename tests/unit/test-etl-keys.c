/* Stack keys of .etl files read in one pass (etl-keys.h, etl-events.h): references whose
 * definitions come later wait for them, in order, in bounded memory; a flood of references
 * never defined is counted, their events delivered without stacks. */
#include "ht-test.h"

#include "etl-events.h"
#include "etl-read.h"
#include "stack-intern.h"

#include "etl-build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PID 8
#define TID 7

/* Records of one processor into buffers of 8 KiB, each appended when full. */
struct writer {
    struct file f;
    struct buf b;
    uint64_t seq;
};

static void w_room(struct writer *w, size_t n)
{
    if (w->b.pos + n <= sizeof(w->b.data))
        return;
    w->seq++;
    put_buffer(&w->f, &w->b, 0, w->seq, 0, w->seq == 1 ? 4 : 0, 0, 0);
    buf_init(&w->b);
}

static void w_start(struct writer *w)
{
    memset(w, 0, sizeof(*w));
    buf_init(&w->b);
    rec_logfile(&w->b, 1, 0, 0);
}

static void w_end(struct writer *w)
{
    w_room(w, sizeof(w->b.data));
}

static void alloc(struct writer *w, uint64_t ts, uint64_t addr, uint64_t size)
{
    uint8_t p[28];
    w64(p, 0x10000), w64(p + 8, size), w64(p + 16, addr), w32(p + 24, 3);
    w_room(w, 64);
    rec_system(&w->b, 1, 0x1021, TID, PID, ts, p, sizeof(p));
}

static void heap_free(struct writer *w, uint64_t ts, uint64_t addr)
{
    uint8_t p[20];
    w64(p, 0x10000), w64(p + 8, addr), w32(p + 16, 3);
    w_room(w, 56);
    rec_system(&w->b, 1, 0x1024, TID, PID, ts, p, sizeof(p));
}

/* A key reference (0x1825 kernel, 0x1826 user) of the event at ts. */
static void key_ref(struct writer *w, uint16_t hook, uint64_t ts, uint64_t key)
{
    uint8_t p[24];
    w64(p, ts), w32(p + 8, PID), w32(p + 12, TID), w64(p + 16, key);
    w_room(w, 40);
    rec_perfinfo(&w->b, hook, ts, p, sizeof(p));
}

/* A key definition (0x1823 delete, 0x1824 rundown): the key, then its frames. */
static void key_def(struct writer *w, uint16_t hook, uint64_t ts, uint64_t key, const uint64_t *f,
                    unsigned n)
{
    uint8_t p[8 + 8 * 8];
    w64(p, key);
    for (unsigned i = 0; i < n; i++)
        w64(p + 8 + 8 * i, f[i]);
    w_room(w, 16 + 8 + 8 * n + 8);
    rec_perfinfo(&w->b, hook, ts, p, (uint16_t)(8 + 8 * n));
}

struct evs {
    struct ht_event *ev;
    unsigned n, cap;
};

static void keep_ev(void *arg, const struct ht_event *ev)
{
    struct evs *e = arg;
    if (e->n == e->cap) {
        e->cap = e->cap ? 2 * e->cap : 64;
        e->ev = realloc(e->ev, e->cap * sizeof(*e->ev));
        CHECK(e->ev != NULL);
    }
    e->ev[e->n++] = *ev;
}

/* The records fed one by one (no pass before them), or through etl_events_run. */
static void run(struct file *f, int whole, const struct etl_keys_limits *lim,
                struct stack_intern *si, struct evs *out, struct etl_events_stats *st)
{
    struct etl_reader *r;
    CHECK(etl_reader_new(&r, mem_read, f, f->n, NULL) == 0);
    CHECK_EQ(etl_reader_open(r), 0);
    struct etl_events *x;
    CHECK(etl_events_new(&x, si, etl_reader_header(r), PID, keep_ev, out) == 0);
    if (lim)
        CHECK_EQ(etl_events_limits(x, lim), 0);
    if (whole) {
        CHECK_EQ(etl_events_run(x, r), 0);
    } else {
        CHECK_EQ(etl_reader_run(r, etl_events_record, x), 0);
        etl_events_finish(x);
    }
    etl_events_stats(x, st);
    etl_events_free(x);
    etl_reader_free(r);
}

static int same_frames(struct stack_intern *si, uint32_t id, const uint64_t *f, unsigned n)
{
    unsigned depth;
    const uint64_t *got = stack_intern_frames(si, id, &depth);
    return got && depth == n && !memcmp(got, f, n * sizeof(*f));
}

/* Definitions after their references, a key reused after its delete (its second life takes
 * the later definition), a kernel key joined to a user one, a free between: every stack
 * found in one pass, the events in their order. */
static void test_late_defs(void)
{
    const uint64_t f1[] = {0x7ff000001000ull, 0x7ff000002000ull};
    const uint64_t f2[] = {0x7ff000003000ull};
    const uint64_t f3[] = {0x7ff000004000ull, 0x7ff000005000ull, 0x7ff000006000ull};
    const uint64_t fk[] = {0xFFFFF80000001000ull, 0xFFFFF80000002000ull};
    struct writer w;
    w_start(&w);
    alloc(&w, 2000, 0x20000, 64);
    key_ref(&w, 0x1826, 2000, 0xA1);
    alloc(&w, 2100, 0x20100, 32);
    key_ref(&w, 0x1825, 2100, 0xE9);
    key_ref(&w, 0x1826, 2100, 0xB2);
    heap_free(&w, 2200, 0x20000);
    key_def(&w, 0x1823, 2300, 0xA1, f1, 2); /* A1 leaves the cache */
    alloc(&w, 2400, 0x20200, 16);
    key_ref(&w, 0x1826, 2400, 0xA1); /* A1 again: another stack */
    key_def(&w, 0x1824, 3000, 0xB2, f2, 1);
    key_def(&w, 0x1824, 3000, 0xA1, f3, 3);
    key_def(&w, 0x1824, 3000, 0xE9, fk, 2);
    w_end(&w);
    for (int whole = 0; whole < 2; whole++) {
        struct stack_intern si;
        CHECK(stack_intern_init(&si, 1024, 1024) == 0);
        struct evs e = {0};
        struct etl_events_stats st;
        run(&w.f, whole, NULL, &si, &e, &st);
        CHECK_EQ(e.n, 5); /* the process, three allocs, a free */
        CHECK_EQ(e.ev[0].kind, HT_EV_PROCESS);
        CHECK_EQ(e.ev[1].addr, 0x20000);
        CHECK(same_frames(&si, e.ev[1].stack, f1, 2));
        CHECK_EQ(e.ev[2].addr, 0x20100);
        CHECK(same_frames(&si, e.ev[2].stack, f2, 1));
        CHECK_EQ(e.ev[3].kind, HT_EV_FREE);
        CHECK_EQ(e.ev[4].addr, 0x20200);
        CHECK(same_frames(&si, e.ev[4].stack, f3, 3));
        CHECK_EQ(st.key_refs, 4);
        CHECK_EQ(st.key_waited, 4);
        CHECK_EQ(st.key_unresolved, 0);
        CHECK_EQ(st.key_dropped, 0);
        CHECK_EQ(st.corr.stacks_merged, 1);
        CHECK_EQ(st.corr.events_no_stack, 0);
        free(e.ev);
        stack_intern_close(&si);
    }
    free(w.f.p);
}

/* 20,000 allocations, each with a reference to a key never defined, and their frees; one key
 * defined at the end: at most 64 references and 64 events wait at once, the ones pushed out
 * counted as dropped and the rest as unresolved, every event delivered in order, none with
 * a stack. */
static void test_flood(void)
{
    enum { N = 20000, CAP = 64 };
    const uint64_t f1[] = {0x7ff000001000ull};
    struct writer w;
    w_start(&w);
    for (unsigned i = 0; i < N; i++) {
        alloc(&w, 2000 + 10 * i, 0x100000 + 64 * i, 16);
        key_ref(&w, 0x1826, 2000 + 10 * i, 0x5000 + i);
        heap_free(&w, 2005 + 10 * i, 0x100000 + 64 * i);
    }
    key_def(&w, 0x1824, 2000 + 10 * N, 0x5000, f1, 1);
    w_end(&w);
    struct stack_intern si;
    CHECK(stack_intern_init(&si, 1024, 1024) == 0);
    struct evs e = {0};
    struct etl_events_stats st;
    struct etl_keys_limits lim = {.max_waiting = CAP};
    run(&w.f, 1, &lim, &si, &e, &st);
    CHECK_EQ(e.n, 1 + 2 * N);
    for (unsigned i = 0; i < N; i++) {
        const struct ht_event *a = &e.ev[1 + 2 * i], *fr = &e.ev[2 + 2 * i];
        CHECK_EQ(a->kind, HT_EV_ALLOC);
        CHECK_EQ(a->addr, 0x100000 + 64 * i);
        CHECK_EQ(a->stack, 0);
        CHECK_EQ(fr->kind, HT_EV_FREE);
        CHECK_EQ(fr->addr, a->addr);
    }
    CHECK_EQ(st.key_refs, N);
    CHECK(st.key_waiting_max <= CAP);
    CHECK(st.waiting_max <= CAP);
    CHECK(st.key_dropped >= N - 2 * CAP);
    CHECK_EQ(st.key_dropped + st.key_unresolved, N);
    CHECK(st.key_unresolved > 0);
    free(e.ev);
    stack_intern_close(&si);
    free(w.f.p);
}

HT_TEST_MAIN(T(late_defs), T(flood))
