/* The event ring (evring.h) under the threaded replay source (replay-source.h):
 * same answers as replaying in place, ids remapped, bounded, abortable. */
#include "engine.h"
#include "evring.h"
#include "frame-match.h"
#include "htevb.h"
#include "ht-test.h"
#include "query.h"
#include "replay-source.h"
#include "replay.h"

#include <unistd.h>
#include <uv.h>

/* Tiny rings, so the test wraps them many times and the decoder blocks on a
 * full output ring again and again. */
#define SMALL_INPUT (1u << 16)
#define SMALL_RING 1024u

/* The ring's configured size for the next open, and whether the loop drains
 * slowly (64 records, then a pause), so that a fast decoder fills the ring
 * every time and makes it grow up to that size. */
static uint32_t ring_events = SMALL_RING;
static int slow_loop;

struct run {
    struct engine e;
    struct source *f;
    uint64_t applied;
    int finished;
    char process[64];
    unsigned batches_over_budget;
    int ready;
};

static int apply_fn(void *arg, struct ht_event *evs, size_t n)
{
    struct run *r = arg;
    if (n > 64)
        r->batches_over_budget++;
    engine_apply_batch(&r->e, evs, n);
    r->applied += n;
    return 0;
}

static void process_fn(void *arg, const struct source_process *p)
{
    struct run *r = arg;
    snprintf(r->process, sizeof(r->process), "%s", p->name);
}

/* The session's part, by hand: drain on the loop when told, 64 at a time. */
static void ready_fn(void *arg)
{
    struct run *r = arg;
    while (r->f->ops->drain(r->f, 64) > 0)
        if (slow_loop) /* 1 ms: mingw's usleep(200) is Sleep(0), a mere yield (failed under wine) */
            uv_sleep(1);
}

static void ended_fn(void *arg, const char *reason)
{
    struct run *r = arg;
    (void)reason;
    r->finished = 1;
}

static int open_small(struct run *r, uv_loop_t *loop, uint32_t max_stacks, uint32_t max_strings)
{
    struct source_params p;
    memset(&p, 0, sizeof(p));
    p.mode = SOURCE_STREAM;
    p.max_stacks = max_stacks;
    p.max_strings = max_strings;
    struct source_sink sink = {r, &r->e.si, apply_fn, process_fn, ready_fn, ended_fn, NULL, NULL, NULL};
    char err[256];
    int rc = replay_source_open_sized(&r->f, loop, &p, &sink, SMALL_INPUT, ring_events, err,
                                      sizeof(err));
    if (rc == 0 && (rc = r->f->ops->start(r->f, err, sizeof(err))) != 0)
        r->f->ops->close(r->f);
    return rc;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n);
    *len = fread(buf, 1, (size_t)n, f);
    fclose(f);
    return buf;
}

/* Whole stream through a feed, written in odd pieces as room allows. With
 * prefill, the engine's interner already holds stacks of its own, so the
 * feed's ids cannot be the engine's and every event is remapped. */
static void run_feed(struct run *r, const char *data, size_t len, int prefill)
{
    memset(r, 0, sizeof(*r));
    struct engine_limits lim;
    engine_limits_default(&lim);
    engine_init(&r->e, &lim);
    if (prefill) {
        uint64_t fr[2] = {0x1234, 0x5678};
        stack_intern_get(&r->e.si, fr, 2);
        stack_intern_get(&r->e.si, fr, 1);
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    if (open_small(r, &loop, 1u << 20, 1u << 20) != 0)
        abort();
    size_t off = 0;
    while (off < len) {
        size_t piece = len - off < 4099 ? len - off : 4099;
        off += r->f->ops->write(r->f, data + off, piece);
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    r->f->ops->close_input(r->f);
    while (!r->finished)
        uv_run(&loop, UV_RUN_ONCE);
    r->f->ops->close(r->f);
    uv_run(&loop, UV_RUN_DEFAULT); /* the async handle's close */
    if (uv_loop_close(&loop) != 0)
        abort();
}

/* A whole-session stacks query as text: frames by name, then the figures. */
static void query_text(struct engine *e, char *out, size_t cap)
{
    struct query q;
    query_init(&q);
    struct query_result res;
    if (engine_query(e, &q, &res) != 0) {
        snprintf(out, cap, "query failed");
        return;
    }
    size_t n = 0;
    for (uint32_t i = 0; i < res.nrows && n + 512 < cap; i++) {
        unsigned d;
        const uint64_t *f = stack_intern_frames(&e->si, res.rows[i].stack, &d);
        for (unsigned k = 0; k < d; k++) {
            char buf[32];
            n += (size_t)snprintf(out + n, cap - n, "%s;",
                                  frame_text(&e->si, f[k], buf, sizeof(buf)));
        }
        n += (size_t)snprintf(out + n, cap - n, " %llu/%llu %llu/%llu\n",
                              (unsigned long long)res.rows[i].count[HT_AIFO],
                              (unsigned long long)res.rows[i].bytes[HT_AIFO],
                              (unsigned long long)res.rows[i].count[HT_AIFI],
                              (unsigned long long)res.rows[i].bytes[HT_AIFI]);
    }
    query_result_free(&res);
}

static char bin[1 << 20];
static size_t bin_len;

static void bin_out(void *arg, const void *buf, size_t n)
{
    (void)arg;
    if (bin_len + n <= sizeof(bin)) {
        memcpy(bin + bin_len, buf, n);
        bin_len += n;
    }
}

static struct ht_event evs[4096];
static size_t nevs;

static void collect(void *arg, const struct ht_event *ev)
{
    engine_apply(arg, ev);
    if (nevs < 4096)
        evs[nevs++] = *ev;
}

static void test_same_as_replay(void)
{
    size_t len;
    char *text = slurp(HT_TEST_DATA "/memorytestapp.htev", &len);
    CHECK(text != NULL);
    /* In place, as before the feed existed. */
    struct engine ref;
    struct engine_limits lim;
    engine_limits_default(&lim);
    engine_init(&ref, &lim);
    struct replay rp;
    nevs = 0;
    replay_init(&rp, &ref.si, collect, &ref);
    replay_feed(&rp, text, len);
    replay_finish(&rp);
    CHECK(nevs < 4096);
    static char want[1 << 16], got[1 << 16];
    query_text(&ref, want, sizeof(want));
    /* The binary twin of the same events. */
    struct htevb_writer w;
    bin_len = 0;
    htevb_writer_init(&w, &ref.si, bin_out, NULL);
    for (size_t i = 0; i < nevs; i++) {
        if (evs[i].kind == HT_EV_PROCESS)
            htevb_write_process(&w, evs[i].t, evs[i].size, rp.parser.name);
        else
            htevb_write_event(&w, &evs[i]);
    }
    htevb_writer_close(&w);
    CHECK(bin_len < sizeof(bin));
    struct run r;
    for (int form = 0; form < 4; form++) {
        int binary = form & 1, prefill = form >> 1;
        run_feed(&r, binary ? bin : text, binary ? bin_len : len, prefill);
        query_text(&r.e, got, sizeof(got));
        CHECK_STR(got, want);
        CHECK_EQ(r.applied, rp.events);
        CHECK_EQ(r.e.heap_bytes, ref.heap_bytes);
        CHECK_EQ(r.e.commits.bytes, ref.commits.bytes);
        CHECK_EQ(r.e.private_bytes, ref.private_bytes);
        CHECK_EQ(r.e.now, ref.now);
        CHECK_EQ(r.e.pid, ref.pid);
        CHECK_STR(r.process, rp.parser.name);
        CHECK_EQ(r.batches_over_budget, 0);
        CHECK_EQ(r.e.si.nstacks, ref.si.nstacks + (prefill ? 2 : 0));
        engine_close(&r.e);
    }
    replay_close(&rp);
    engine_close(&ref);
    free(text);
}

/* A stream where nearly every record is a definition: each event has a new
 * stack, a third of them with a new symbol, so definitions outnumber the
 * 1024-record ring and whole ring-fulls hold nothing else. The loop finds
 * them by their noted positions, not by reading every record: the result
 * must still be what replaying in place gives, ids equal or remapped. */
static void test_many_definitions(void)
{
    struct engine_limits lim;
    engine_limits_default(&lim);
    struct engine src;
    engine_init(&src, &lim);
    struct htevb_writer w;
    bin_len = 0;
    htevb_writer_init(&w, &src.si, bin_out, NULL);
    for (uint64_t i = 0; i < 3000; i++) {
        char name[32];
        int n = snprintf(name, sizeof(name), "app!fn_%llu", (unsigned long long)(i / 3));
        uint64_t fr[3] = {0x1000 + i, HT_FRAME_SYM | stack_intern_str(&src.si, name, (unsigned)n),
                          0x30};
        struct ht_event ev = {.t = i + 1,
                              .kind = HT_EV_ALLOC,
                              .addr = 0x100000 + 16 * i,
                              .size = 8 + i,
                              .stack = stack_intern_get(&src.si, fr, 3)};
        htevb_write_event(&w, &ev);
        if (i % 2) {
            struct ht_event fe = {.t = i + 1, .kind = HT_EV_FREE, .addr = 0x100000 + 16 * (i - 1)};
            htevb_write_event(&w, &fe);
        }
    }
    htevb_writer_close(&w);
    CHECK(bin_len < sizeof(bin));
    struct engine ref;
    engine_init(&ref, &lim);
    struct replay rp;
    nevs = 0;
    replay_init(&rp, &ref.si, collect, &ref);
    replay_feed(&rp, bin, bin_len);
    replay_finish(&rp);
    CHECK_EQ(rp.events, 4500);
    CHECK_EQ(ref.si.nstacks, 3001); /* with id 0 */
    static char want[1 << 16], got[1 << 16];
    query_text(&ref, want, sizeof(want));
    struct run r;
    /* Also with a ring that grows while definitions are in flight (1 Ki to 8 Ki). */
    for (int form = 0; form < 4; form++) {
        int prefill = form & 1;
        ring_events = form >> 1 ? 8 * SMALL_RING : SMALL_RING;
        slow_loop = form >> 1;
        run_feed(&r, bin, bin_len, prefill);
        query_text(&r.e, got, sizeof(got));
        CHECK_STR(got, want);
        CHECK_EQ(r.applied, 4500);
        CHECK_EQ(r.e.heap_bytes, ref.heap_bytes);
        CHECK_EQ(r.e.table.count, ref.table.count);
        CHECK_EQ(r.e.si.nstacks, ref.si.nstacks + (prefill ? 2 : 0));
        CHECK_EQ(r.e.si.nstrs, ref.si.nstrs);
        CHECK_EQ(r.batches_over_budget, 0);
        engine_close(&r.e);
    }
    ring_events = SMALL_RING;
    slow_loop = 0;
    replay_close(&rp);
    engine_close(&ref);
    engine_close(&src);
}

/* The producer's buffers: the source's input ring and the event ring with its notes. */
static uint64_t buffer_bytes(struct source *f)
{
    struct source_stats st;
    memset(&st, 0, sizeof(st));
    f->ops->stats(f, &st);
    return st.mem[MEM_decoder_buffers];
}

static uint64_t ring_bytes(uint64_t records)
{
    return records * (sizeof(struct ht_event) + 2 * sizeof(size_t));
}

/* The ring starts at 1 Ki records whatever its configured size, stays there
 * for a short stream, and doubles when the decoder finds it full, up to the
 * configured size and no further; the events all arrive, in order. */
static void test_ring_grows_on_demand(void)
{
    struct engine_limits lim;
    engine_limits_default(&lim);
    struct engine src;
    engine_init(&src, &lim);
    uint64_t fr[2] = {0x10, 0x20};
    uint32_t stack = stack_intern_get(&src.si, fr, 2);
    /* Both in binary: the text parser's stack cache is a decoder buffer too. */
    struct htevb_writer w;
    bin_len = 0;
    htevb_writer_init(&w, &src.si, bin_out, NULL);
    struct ht_event one = {.t = 1, .kind = HT_EV_ALLOC, .addr = 0x10, .size = 8, .stack = stack};
    htevb_write_event(&w, &one);
    htevb_writer_close(&w);
    char tiny[256];
    size_t tiny_len = bin_len;
    CHECK(tiny_len < sizeof(tiny));
    memcpy(tiny, bin, tiny_len);
    bin_len = 0;
    htevb_writer_init(&w, &src.si, bin_out, NULL);
    for (uint64_t i = 0; i < 7000; i++) {
        struct ht_event ev = {
            .t = i, .kind = HT_EV_ALLOC, .addr = 0x1000 + 16 * i, .size = 8, .stack = stack};
        htevb_write_event(&w, &ev);
    }
    htevb_writer_close(&w);
    engine_close(&src);
    CHECK(bin_len < SMALL_INPUT);
    uint64_t after[2];
    for (int big = 0; big < 2; big++) {
        ring_events = 4 * SMALL_RING;
        slow_loop = 1;
        struct run r;
        memset(&r, 0, sizeof(r));
        engine_init(&r.e, &lim);
        uv_loop_t loop;
        uv_loop_init(&loop);
        CHECK(open_small(&r, &loop, 1u << 20, 1u << 20) == 0);
        const char *data = big ? bin : tiny;
        size_t len = big ? bin_len : tiny_len;
        CHECK_EQ(r.f->ops->write(r.f, data, len), len);
        r.f->ops->close_input(r.f);
        while (!r.finished)
            uv_run(&loop, UV_RUN_ONCE);
        after[big] = buffer_bytes(r.f);
        r.f->ops->close(r.f);
        uv_run(&loop, UV_RUN_DEFAULT);
        CHECK(uv_loop_close(&loop) == 0);
        CHECK_EQ(r.applied, big ? 7000 : 1);
        CHECK_EQ(r.e.table.count, big ? 7000 : 1);
        CHECK_EQ(r.e.heap_bytes, big ? 7000 * 8 : 8);
        engine_close(&r.e);
    }
    /* The decoder's other buffers (its parser's cache, id maps) are the same
     * for both streams: the difference is the ring's. 7000 events fill 1 Ki,
     * 2 Ki, then 4 Ki records (the configured size, no more); one event none. */
    CHECK_EQ(after[1] - after[0], ring_bytes(4 * SMALL_RING) - ring_bytes(SMALL_RING));
    ring_events = SMALL_RING;
    slow_loop = 0;
}

/* Counts and the first malformed lines come back through the source's stats. */
static void test_stats_and_errors(void)
{
    static const char text[] =
        "{\"t\":1,\"ev\":\"alloc\",\"addr\":\"0x10\",\"size\":8}\n"
        "not json\n"
        "{\"t\":2,\"ev\":\"free\",\"addr\":\"0x10\"}\n"
        "{\"t\":3,\"ev\":\"alloc\",\"addr\":\"0x20\",\"size\":4}"; /* no newline */
    struct engine_limits lim;
    engine_limits_default(&lim);
    struct run r;
    memset(&r, 0, sizeof(r));
    engine_init(&r.e, &lim);
    uv_loop_t loop;
    uv_loop_init(&loop);
    CHECK(open_small(&r, &loop, 1u << 20, 1u << 20) == 0);
    CHECK_EQ(r.f->ops->write(r.f, text, sizeof(text) - 1), sizeof(text) - 1);
    r.f->ops->close_input(r.f);
    while (!r.finished)
        uv_run(&loop, UV_RUN_ONCE);
    struct source_stats st;
    r.f->ops->stats(r.f, &st);
    r.f->ops->close(r.f);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(&loop) == 0);
    CHECK_EQ(st.events, 3); /* the last line counts without its newline */
    CHECK_EQ(st.malformed, 1);
    CHECK_EQ(st.nerrors, 1);
    CHECK_EQ(st.errors[0].line, 2);
    CHECK_EQ(st.bytes, sizeof(text) - 1);
    CHECK_EQ(r.applied, 3);
    CHECK_EQ(r.e.heap_bytes, 4);
    engine_close(&r.e);
}

/* Freed while its decoder is blocked on a full ring that nobody drains, and
 * with input still queued: it stops, joins and frees everything (ASan checks). */
static void test_free_mid_stream(void)
{
    /* 5000 allocations in binary: more records than the ring holds. */
    struct engine_limits lim;
    engine_limits_default(&lim);
    struct engine src;
    engine_init(&src, &lim);
    uint64_t fr[3] = {0x10, 0x20, 0x30};
    uint32_t stack = stack_intern_get(&src.si, fr, 3);
    struct htevb_writer w;
    bin_len = 0;
    htevb_writer_init(&w, &src.si, bin_out, NULL);
    for (uint64_t i = 0; i < 5000; i++) {
        struct ht_event ev = {
            .t = i, .kind = HT_EV_ALLOC, .addr = 0x1000 + 16 * i, .size = 8, .stack = stack};
        htevb_write_event(&w, &ev);
    }
    htevb_writer_close(&w);
    engine_close(&src);
    CHECK(bin_len < SMALL_INPUT);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct run r;
    memset(&r, 0, sizeof(r));
    CHECK(open_small(&r, &loop, 1u << 20, 1u << 20) == 0);
    CHECK_EQ(r.f->ops->write(r.f, bin, bin_len), bin_len);
    /* The decoder fills its 1024 records and waits for room. */
    for (int i = 0; i < 200 && r.f->ops->space(r.f) < SMALL_INPUT; i++)
        usleep(1000);
    usleep(20000);
    CHECK(r.f->ops->space(r.f) < SMALL_INPUT); /* input left: it is blocked, not done */
    CHECK(!r.finished);
    r.f->ops->close(r.f);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(&loop) == 0);
    CHECK_EQ(r.applied, 0);
}


/* The nowait mode (ETW consumers): a put never waits; with no room it drops
 * the event (counted) and the next event that fits comes after a lost
 * event with the count; the ring still grows once drained; a backlog of
 * definitions larger than the ring drains piece by piece. */
static struct ht_event nw_got[70000];
static size_t nw_n;
static int nw_events(void *arg, struct ht_event *evs, size_t n)
{
    (void)arg;
    for (size_t i = 0; i < n && nw_n < 70000; i++)
        nw_got[nw_n++] = evs[i];
    return 0;
}
static void nw_ready(void *arg)
{
    (void)arg;
}

static void test_nowait(void)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct engine e;
    struct engine_limits lim;
    engine_limits_default(&lim);
    engine_init(&e, &lim);
    struct evring *r;
    struct evring_limits rl = {4096, 1u << 20, 1u << 20, 0, NULL};
    CHECK_EQ(evring_new(&r, &loop, &rl, nw_ready, NULL), 0);
    evring_nowait(r);
    struct source_sink sink = {NULL, &e.si, nw_events, NULL, NULL, NULL, NULL, NULL, NULL};
    struct stack_intern *si = evring_si(r);
    uint64_t fr[2] = {0x10, 0x20};
    uint32_t st = stack_intern_get(si, fr, 2);
    int rc = 0, put = 0;
    /* 1024 records at first: the stack's definition and 1023 events fit. */
    for (int i = 0; i < 2000; i++) {
        struct ht_event ev = {.t = (uint64_t)i, .kind = HT_EV_ALLOC, .addr = 0x1000 + 16 * (uint64_t)i,
                              .size = 8, .stack = st};
        rc = evring_put(r, &ev);
        if (rc == 0)
            put++;
    }
    CHECK_EQ(put, 1023);
    CHECK_EQ(evring_full_drops(r), 2000 - 1023);
    while (evring_drain(r, &sink, 100000) > 0)
        ;
    CHECK_EQ(nw_n, 1023);
    /* Drained: the next put grows the ring and comes after the gap. */
    struct ht_event next = {.t = 5000, .kind = HT_EV_ALLOC, .addr = 0x900000, .size = 8, .stack = st};
    CHECK_EQ(evring_put(r, &next), 0);
    evring_publish(r);
    while (evring_drain(r, &sink, 100000) > 0)
        ;
    CHECK_EQ(nw_n, 1025);
    CHECK(nw_got[1023].kind == HT_EV_LOST && nw_got[1023].size == 2000 - 1023);
    CHECK(nw_got[1024].kind == HT_EV_ALLOC && nw_got[1024].addr == 0x900000);
    /* 2048 now: 2047 more fit before the next drop. */
    put = 0;
    for (int i = 0; i < 3000; i++) {
        struct ht_event ev = {.t = 6000 + (uint64_t)i, .kind = HT_EV_FREE, .addr = 0x1000};
        put += evring_put(r, &ev) == 0;
    }
    CHECK_EQ(put, 2048);
    while (evring_drain(r, &sink, 100000) > 0)
        ;
    /* 6000 distinct stacks interned while the events are dropped: their
     * definitions (more than the ring) go out piece by piece as it drains,
     * and an event gets through in the end. */
    for (int i = 0; i < 6000; i++) {
        uint64_t f2[1] = {0x100000 + (uint64_t)i};
        struct ht_event ev = {.t = 10000, .kind = HT_EV_ALLOC, .addr = 0x2000000 + 16 * (uint64_t)i,
                              .size = 8, .stack = stack_intern_get(si, f2, 1)};
        evring_put(r, &ev);
    }
    int ok = 0;
    for (int round = 0; round < 20 && !ok; round++) {
        while (evring_drain(r, &sink, 100000) > 0)
            ;
        uint64_t f3[1] = {0x777};
        struct ht_event ev = {.t = 20000, .kind = HT_EV_ALLOC, .addr = 0x3000000, .size = 8,
                              .stack = stack_intern_get(si, f3, 1)};
        ok = evring_put(r, &ev) == 0;
    }
    CHECK(ok);
    evring_publish(r);
    while (evring_drain(r, &sink, 100000) > 0)
        ;
    CHECK(nw_got[nw_n - 1].addr == 0x3000000);
    unsigned depth = 0;
    const uint64_t *f = stack_intern_frames(&e.si, nw_got[nw_n - 1].stack, &depth);
    CHECK(f && depth == 1 && f[0] == 0x777);
    evring_quit(r);
    evring_free(r);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ(uv_loop_close(&loop), 0);
    engine_close(&e);
}

HT_TEST_MAIN(T(nowait), T(same_as_replay), T(many_definitions), T(stats_and_errors), T(free_mid_stream),
             T(ring_grows_on_demand))
