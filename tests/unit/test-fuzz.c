/* Regressions found by the fuzz targets (tests/fuzz), each with its input spelled out. */
#include "ht-test.h"

#include "htevb.h"
#include "htevz.h"
#include "replay.h"

#include <stdlib.h>
#include <string.h>
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

struct zbuf {
    unsigned char p[4096];
    size_t n;
};

static void zbuf_out(void *arg, const void *buf, size_t n)
{
    struct zbuf *b = arg;
    if (b->n + n <= sizeof(b->p)) {
        memcpy(b->p + b->n, buf, n);
        b->n += n;
    }
}

static void count(void *arg, const struct ht_event *ev)
{
    (void)ev;
    (*(unsigned *)arg)++;
}

/* Found by fuzz-htevz (corpus/htevz): a binary stream broken inside a
 * compressed frame stops the reading there, and the end of input then
 * counted the frame as cut too: two malformed for one error. One now, as
 * for the same stream uncompressed. */
static void test_htevz_broken_inside_frame(void)
{
    const unsigned char ev[] = {'e', HT_EV_ALLOC, 4, 0, 0x10, 8};
    unsigned char plain[HTEVB_MAGIC_LEN + 2 * sizeof(ev) + 5];
    memcpy(plain, HTEVB_MAGIC, HTEVB_MAGIC_LEN);
    memcpy(plain + HTEVB_MAGIC_LEN, ev, sizeof(ev));
    memcpy(plain + HTEVB_MAGIC_LEN + sizeof(ev), "Zjunk", 5);
    memcpy(plain + HTEVB_MAGIC_LEN + sizeof(ev) + 5, ev, sizeof(ev));
    static struct zbuf z;
    struct htevz_writer w;
    CHECK(htevz_writer_init(&w, 1, zbuf_out, &z) == 0);
    htevz_write(&w, plain, sizeof(plain));
    CHECK(htevz_writer_close(&w) == 0);
    for (int packed = 0; packed < 2; packed++) {
        struct stack_intern si;
        CHECK(stack_intern_init(&si, 16, 16) == 0);
        unsigned n = 0;
        struct replay r;
        replay_init(&r, &si, count, &n);
        /* Fed a byte at a time: the reading stops inside the frame. */
        const unsigned char *p = packed ? z.p : plain;
        size_t len = packed ? z.n : sizeof(plain);
        for (size_t i = 0; i < len; i++)
            replay_feed(&r, (const char *)p + i, 1);
        replay_finish(&r);
        CHECK_EQ(r.compressed, packed);
        CHECK_EQ(n, 1);
        CHECK_EQ(r.malformed, 1);
        replay_close(&r);
        stack_intern_close(&si);
    }
}

HT_TEST_MAIN(T(htevb_time_saturates), T(htevz_broken_inside_frame))
