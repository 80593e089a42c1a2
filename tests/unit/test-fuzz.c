/* Regressions found by the fuzz targets (tests/fuzz), each with its input spelled out. */
#include "ht-test.h"

#include "htevb.h"
#include "stack-intern.h"

#define KEPT 8

struct seen {
    struct ht_event ev[KEPT];
    unsigned n;
};

static void keep(void *arg, const struct ht_event *ev)
{
    struct seen *s = arg;
    if (s->n < KEPT)
        s->ev[s->n++] = *ev;
}

/* Found by fuzz-htevb's round trip (corpus/htevb/time-wrap): a binary
 * stream's time is the sum of its steps, and a sum past 2^64-1 ns wrapped
 * to the start, so a stream could go back in time (which the writer, and
 * the format, never do). It now stays at the end of time. */
static void test_htevb_time_saturates(void)
{
    struct stack_intern si;
    CHECK(stack_intern_init(&si, 16, 16) == 0);
    struct htevb_reader r;
    htevb_reader_init(&r, &si);
    /* alloc at dt 2^64-6, free at dt 10, alloc at dt 1: LEB128 varints. */
    const unsigned char stream[] = {'e',         HT_EV_ALLOC, 4,          0xfa, 0xff, 0xff, 0xff,
                                    0xff,        0xff,        0xff,       0xff, 0xff, 0x01, 0x10,
                                    8,           'e',         HT_EV_FREE, 0,    10,   0x10, 'e',
                                    HT_EV_ALLOC, 4,           1,          0x20, 8};
    struct seen s = {.n = 0};
    htevb_feed(&r, (const unsigned char *)HTEVB_MAGIC, HTEVB_MAGIC_LEN, keep, NULL, &s);
    htevb_feed(&r, stream, sizeof(stream), keep, NULL, &s);
    int broken = r.broken;
    htevb_reader_close(&r);
    stack_intern_close(&si);
    CHECK_EQ(broken, 0);
    CHECK_EQ(s.n, 3);
    CHECK_EQ(s.ev[0].t, UINT64_MAX - 5);
    CHECK_EQ(s.ev[1].kind, HT_EV_FREE);
    CHECK_EQ(s.ev[1].t, UINT64_MAX);
    CHECK_EQ(s.ev[2].t, UINT64_MAX);
}

HT_TEST_MAIN(T(htevb_time_saturates))
