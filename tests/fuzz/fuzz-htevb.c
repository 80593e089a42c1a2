/* Fuzz target: the binary .htev reader (htevb.c), fed in pieces so records
 * span feeds, into a small engine; then the events read are written back with
 * the writer and read again, and both readings must agree (round trip).
 * The input is the stream after the magic (the target adds it); its first
 * byte picks the piece size. */
#include "engine.h"
#include "htevb.h"
#include "query.h"
#include "stack-intern.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The stream's magic: HTEVB1 here, HTEVB2 for the htevb2 / htevz2 targets
 * (tests/fuzz/CMakeLists.txt). */
#ifndef HT_FUZZ_MAGIC
#define HT_FUZZ_MAGIC HTEVB_MAGIC
#endif

/* The flags HTEVB2 (what the writer makes) carries: a stack its source dropped
 * (HTEVB1's F_SDROP) reads back as no stack. */
#define V2_FLAGS HT_EVF_TRUNCATED
#define KEPT_MAX 4096      /* events compared by the round trip */
#define OUT_MAX (1u << 22) /* bytes the writer may produce */

struct reading {
    struct engine *eng; /* the first reading goes into an engine too */
    struct ht_event ev[KEPT_MAX];
    size_t n;
    char name[64];
};

static void on_event(void *arg, const struct ht_event *ev)
{
    struct reading *rd = arg;
    if (rd->eng)
        engine_apply(rd->eng, ev);
    if (rd->n < KEPT_MAX)
        rd->ev[rd->n++] = *ev;
}

static void on_process(void *arg, const char *name, size_t len)
{
    struct reading *rd = arg;
    snprintf(rd->name, sizeof(rd->name), "%.*s", (int)len, name);
}

static void feed_pieces(struct htevb_reader *r, const unsigned char *p, size_t n, size_t piece,
                        struct reading *rd)
{
    while (n > 0) {
        size_t k = n < piece ? n : piece;
        htevb_feed(r, p, k, on_event, on_process, rd);
        p += k;
        n -= k;
    }
}

struct outbuf {
    unsigned char *p;
    size_t n, cap;
    int full;
};

static void out_fn(void *arg, const void *buf, size_t n)
{
    struct outbuf *o = arg;
    if (o->full || o->n + n > o->cap) {
        o->full = 1;
        return;
    }
    memcpy(o->p + o->n, buf, n);
    o->n += n;
}

/* The same event after a write and a read: stacks are compared by depth (the
 * ids belong to each reader's own interner). */
static void check_same(const struct ht_event *a, const struct stack_intern *sa,
                       const struct ht_event *b, const struct stack_intern *sb)
{
    unsigned da = 0, db = 0;
    if (a->stack)
        stack_intern_frames(sa, a->stack, &da);
    if (b->stack)
        stack_intern_frames(sb, b->stack, &db);
    if (a->kind != b->kind || a->t != b->t || a->addr != b->addr || a->size != b->size ||
        (a->kind != HT_EV_PROCESS &&
         (a->heap != b->heap || a->old_addr != b->old_addr || a->old_size != b->old_size ||
          a->tid != b->tid || ((a->flags ^ b->flags) & V2_FLAGS) || da != db))) {
        fprintf(stderr, "round trip differs: kind %u/%u t %llu/%llu addr %llx/%llx depth %u/%u\n",
                a->kind, b->kind, (unsigned long long)a->t, (unsigned long long)b->t,
                (unsigned long long)a->addr, (unsigned long long)b->addr, da, db);
        abort();
    }
}

static void round_trip(struct engine *e, const struct reading *first)
{
    struct outbuf o = {malloc(OUT_MAX), 0, OUT_MAX, 0};
    struct reading *second = calloc(1, sizeof(*second));
    struct stack_intern si;
    struct htevb_writer w;
    if (!o.p || !second || stack_intern_init(&si, 1u << 16, 1u << 16) != 0)
        goto out_mem;
    if (htevb_writer_init(&w, &e->si, out_fn, &o) != 0) /* writes the magic */
        goto out_si;
    for (size_t i = 0; i < first->n; i++) {
        const struct ht_event *ev = &first->ev[i];
        if (ev->kind == HT_EV_PROCESS)
            htevb_write_process(&w, ev->t, ev->size, "p");
        else if (htevb_write_event(&w, ev) != 0)
            abort(); /* every stack the reader made is the engine's */
    }
    htevb_writer_close(&w);
    if (!o.full) {
        struct htevb_reader r;
        htevb_reader_init(&r, &si);
        htevb_feed(&r, o.p, o.n, on_event, on_process, second);
        if (r.broken || second->n != first->n) {
            fprintf(stderr, "round trip: %zu events back of %zu (%s)\n", second->n, first->n,
                    r.err);
            abort();
        }
        for (size_t i = 0; i < first->n; i++)
            check_same(&first->ev[i], &e->si, &second->ev[i], &si);
        htevb_reader_close(&r);
    }
out_si:
    stack_intern_close(&si);
out_mem:
    free(second);
    free(o.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t piece = (size_t)data[0] % 64 + 1;
    struct engine_limits lim;
    engine_limits_default(&lim);
    lim.table_cap = 64;
    lim.commit_cap = 16;
    lim.life_ring = 32;
    lim.commit_ring = 8;
    lim.timeline_ring = 8;
    lim.timeline_ns = 1000;
    /* Large enough that the reader's ids never run out here: the round trip
     * compares every stack. */
    lim.max_stacks = 1u << 16;
    lim.max_strings = 1u << 16;
    struct engine e;
    if (engine_init(&e, &lim) != 0)
        return 0;
    struct reading *rd = calloc(1, sizeof(*rd));
    if (!rd) {
        engine_close(&e);
        return 0;
    }
    rd->eng = &e;
    struct htevb_reader r;
    htevb_reader_init(&r, &e.si);
    feed_pieces(&r, (const unsigned char *)HT_FUZZ_MAGIC, HTEVB_MAGIC_LEN, piece, rd);
    feed_pieces(&r, data + 1, size - 1, piece, rd);
    htevb_reader_close(&r);
    rd->eng = NULL;
    round_trip(&e, rd);
    struct query q;
    query_init(&q);
    struct query_result res;
    if (engine_query(&e, &q, &res) == 0)
        query_result_free(&res);
    free(rd);
    engine_close(&e);
    return 0;
}
