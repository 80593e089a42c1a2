/* Memory budgets, allocation-failure back-off and drop counters (issue 8 items 4, 5, 17). */
#include "engine.h"
#include "replay-source.h"
#include "ht-alloc.h"
#include "ht-test.h"
#include "htevb.h"
#include "mem-acct.h"
#include "replay.h"

#include <stdlib.h>
#include <uv.h>

#define TABLE_CHUNK_ENTRIES 65536u /* a whole number of alloc-table chunks (ALLOC_CHUNK) */
#define BIG_ALLOC (1u << 17)       /* an alloc-table chunk (128 KiB) is a large allocation */

static struct ht_event alloc_ev(uint64_t i)
{
    struct ht_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.kind = HT_EV_ALLOC;
    ev.t = i;
    ev.heap = 1;
    ev.addr = 0x100000 + i * 16;
    ev.size = 16;
    return ev;
}

static void apply_allocs(struct engine *e, uint64_t from, uint64_t n)
{
    for (uint64_t i = from; i < from + n; i++) {
        struct ht_event ev = alloc_ev(i);
        engine_apply(e, &ev);
    }
}

/* Past its budget the engine keeps what it holds, refuses the next table
 * chunk and counts every allocation it could not track. */
static void test_budget_table(void)
{
    struct mem_budget b;
    mem_budget_init(&b, NULL, 3u << 20);
    struct engine_limits lim;
    engine_limits_default(&lim);
    struct engine e;
    CHECK(engine_init_budget(&e, &lim, &b) == 0);
    apply_allocs(&e, 0, TABLE_CHUNK_ENTRIES + 5000);
    uint64_t held = e.heap_count, dropped = TABLE_CHUNK_ENTRIES + 5000 - held;
    CHECK(held % ALLOC_CHUNK == 0 && held >= TABLE_CHUNK_ENTRIES / 2 && dropped >= 5000);
    const struct agg *g = agg_peek(&e.heap_agg, 0);
    CHECK(g != NULL);
    CHECK_EQ(g->untracked_count, dropped);
    /* Each dropped allocation was a refused growth (and the bucket array's doubling too). */
    CHECK(e.acct.over_budget[MEM_table] >= dropped && e.acct.over_budget[MEM_table] <= dropped + 1);
    CHECK_EQ(e.q.cap_drops, 0); /* not the table cap */
    CHECK(mem_budget_used(&b) <= (3u << 20));
    uint64_t by[MEM_KINDS];
    CHECK_EQ(engine_memory_by(&e, by), mem_budget_used(&b));
    CHECK(by[MEM_table] >= held * 32u);
    CHECK(by[MEM_marks] > 0 && by[MEM_stacks] > 0 && by[MEM_strings] > 0);
    engine_close(&e);
    CHECK_EQ(mem_budget_used(&b), 0); /* everything given back */
}

/* Two sessions under a daemon budget smaller than the sum of theirs: the
 * second is refused by the daemon's budget although its own has room. */
static void test_budget_daemon_wide(void)
{
    struct mem_budget daemon, s1, s2;
    mem_budget_init(&daemon, NULL, 4u << 20);
    mem_budget_init(&s1, &daemon, 3u << 20);
    mem_budget_init(&s2, &daemon, 3u << 20);
    struct engine_limits lim;
    engine_limits_default(&lim);
    struct engine a, b;
    CHECK(engine_init_budget(&a, &lim, &s1) == 0);
    CHECK(engine_init_budget(&b, &lim, &s2) == 0);
    apply_allocs(&a, 0, TABLE_CHUNK_ENTRIES / 2);
    CHECK_EQ(a.heap_count, TABLE_CHUNK_ENTRIES / 2);
    /* Less room left in the daemon's budget than a table chunk. */
    daemon.limit = mem_budget_used(&daemon) + BIG_ALLOC / 2;
    apply_allocs(&b, 0, 1000);
    CHECK_EQ(b.heap_count, 0);
    CHECK_EQ(b.acct.over_budget[MEM_table], 1000);
    CHECK(mem_budget_used(&s2) < (1u << 20));
    CHECK(mem_budget_used(&daemon) <= daemon.limit);
    CHECK(atomic_load(&daemon.refusals) >= 1000);
    CHECK_EQ(atomic_load(&s2.refusals), 0); /* not its own budget */
    /* Session a goes: b may grow now. */
    engine_close(&a);
    apply_allocs(&b, 1000, 10);
    CHECK_EQ(b.heap_count, 10);
    engine_close(&b);
    CHECK_EQ(mem_budget_used(&daemon), 0);
}

/* One name's length is capped: cut at a UTF-8 boundary, counted once per distinct name. */
static void test_name_cap(void)
{
    struct stack_intern si;
    CHECK(stack_intern_init_acct(&si, 100, 100, 100, NULL, MEM_stacks, MEM_strings) == 0);
    char name[4000];
    memset(name, 'a', sizeof(name));
    uint32_t id = stack_intern_str(&si, name, sizeof(name));
    CHECK(id != 0);
    CHECK_EQ(strlen(stack_intern_strget(&si, id)), 100);
    CHECK_EQ(stack_intern_str(&si, name, sizeof(name)), id);
    CHECK_EQ(si.long_names, 1);
    /* "é" (2 bytes) straddling byte 100: cut before it. */
    name[99] = (char)0xc3;
    name[100] = (char)0xa9;
    uint32_t id2 = stack_intern_str(&si, name, sizeof(name));
    CHECK(id2 != 0 && id2 != id);
    CHECK_EQ(strlen(stack_intern_strget(&si, id2)), 99);
    CHECK_EQ(si.long_names, 2);
    CHECK_EQ(stack_intern_str(&si, "short", 5) != 0, 1);
    CHECK_EQ(si.long_names, 2);
    stack_intern_close(&si);
}

/*
 * A stream whose names and stacks pass small caps: 6 stacks of two new names
 * each, then 3 stacks of addresses, one alloc each. With max_strings 5 (4
 * names) and max_stacks 4 (3 stacks): names 5-12 are dropped (8), stacks 3-6
 * lose every frame (4 truncated, and dropped), the address stacks 7-9 find
 * one id left (2 dropped at the cap). Nothing shows as no_stack, and no
 * made-up frame appears.
 */
static char *drops_stream(void)
{
    static char buf[8192];
    size_t n = 0;
    for (int k = 0; k < 6; k++)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n,
                              "{\"t\":%d,\"ev\":\"alloc\",\"heap\":1,\"addr\":%d,\"size\":8,"
                              "\"stack\":[\"mod!name%d\",\"mod!name%d\"]}\n",
                              k + 1, 4096 + 16 * k, 2 * k, 2 * k + 1);
    for (int k = 0; k < 3; k++)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n,
                              "{\"t\":%d,\"ev\":\"alloc\",\"heap\":1,\"addr\":%d,\"size\":8,"
                              "\"stack\":[\"0x%x\",\"0x99\"]}\n",
                              k + 10, 8192 + 16 * k, 0x10 + k);
    return buf;
}

static void small_limits(struct engine_limits *lim)
{
    engine_limits_default(lim);
    lim->max_strings = 5;
    lim->max_stacks = 4;
}

static void sink(void *arg, const struct ht_event *ev)
{
    engine_apply(arg, ev);
}

/* No frame of any interned stack is the made-up 0x0 frame. */
static int has_zero_frame(const struct engine *e)
{
    for (uint32_t id = 1; id < e->si.nstacks; id++) {
        unsigned d;
        const uint64_t *f = stack_intern_frames(&e->si, id, &d);
        for (unsigned k = 0; k < d; k++)
            if (f[k] == HT_FRAME_SYM || f[k] == 0)
                return 1;
    }
    return 0;
}

static void check_drops(const struct engine *e, uint64_t str_drops, uint64_t table_drops)
{
    CHECK_EQ(e->q.events, 9);
    CHECK_EQ(e->q.no_stack, 0);
    CHECK_EQ(e->q.stack_drops, 6);
    CHECK_EQ(e->q.truncated_stacks, 4);
    CHECK_EQ(str_drops, 8);
    CHECK_EQ(table_drops, 2);
    CHECK(!has_zero_frame(e));
}

static void test_drops_text(void)
{
    struct engine_limits lim;
    small_limits(&lim);
    struct engine e;
    struct replay r;
    CHECK(engine_init(&e, &lim) == 0);
    replay_init(&r, &e.si, sink, &e);
    const char *s = drops_stream();
    replay_feed(&r, s, strlen(s));
    replay_finish(&r);
    replay_close(&r);
    check_drops(&e, e.si.str_drops, e.si.drops);
    engine_close(&e);
}

static unsigned char *bin;
static size_t bin_len;

static void bin_out(void *arg, const void *p, size_t n)
{
    (void)arg;
    bin = realloc(bin, bin_len + n);
    memcpy(bin + bin_len, p, n);
    bin_len += n;
}

static struct htevb_writer W;

static void to_binary(void *arg, const struct ht_event *ev)
{
    (void)arg;
    htevb_write_event(&W, ev);
}

/* The stream above in the binary twin (names and stacks as definitions). */
static void make_binary(void)
{
    struct engine_limits lim;
    engine_limits_default(&lim);
    struct engine src;
    struct replay r;
    engine_init(&src, &lim);
    replay_init(&r, &src.si, to_binary, NULL);
    bin_len = 0;
    htevb_writer_init(&W, &src.si, bin_out, NULL);
    const char *s = drops_stream();
    replay_feed(&r, s, strlen(s));
    replay_finish(&r);
    htevb_writer_close(&W);
    replay_close(&r);
    engine_close(&src);
}

static void test_drops_binary(void)
{
    make_binary();
    struct engine_limits lim;
    small_limits(&lim);
    struct engine e;
    struct replay r;
    CHECK(engine_init(&e, &lim) == 0);
    replay_init(&r, &e.si, sink, &e);
    replay_feed(&r, (const char *)bin, bin_len);
    replay_finish(&r);
    CHECK_EQ(r.malformed, 0);
    replay_close(&r);
    check_drops(&e, e.si.str_drops, e.si.drops);
    engine_close(&e);
}

/* Through the threaded replay source: the decoder's private interner drops
 * (source stats), or, with a roomy decoder, the engine's own interner does. */
struct frun {
    struct engine e;
    struct source *src;
    int finished;
};

static int fapply(void *arg, struct ht_event *evs, size_t n)
{
    engine_apply_batch(&((struct frun *)arg)->e, evs, n);
    return 0;
}

static void fready(void *data)
{
    struct frun *r = data;
    while (r->src->ops->drain(r->src, 64) > 0)
        ;
}

static void fended(void *data, const char *reason)
{
    (void)reason;
    ((struct frun *)data)->finished = 1;
}

static void run_feed(struct frun *r, const char *data, size_t len, const struct engine_limits *elim,
                     uint32_t feed_strings, uint32_t feed_stacks, struct source_stats *st)
{
    memset(r, 0, sizeof(*r));
    engine_init(&r->e, elim);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct source_params p;
    memset(&p, 0, sizeof(p));
    p.mode = SOURCE_STREAM;
    p.max_stacks = feed_stacks;
    p.max_strings = feed_strings;
    struct source_sink sink = {r, &r->e.si, fapply, NULL, fready, fended, NULL, NULL, NULL};
    char err[256];
    if (replay_source_open_sized(&r->src, &loop, &p, &sink, 1 << 16, 1024, err, sizeof(err)) != 0 ||
        r->src->ops->start(r->src, err, sizeof(err)) != 0)
        abort();
    struct source *f = r->src;
    size_t off = 0;
    while (off < len) {
        off += f->ops->write(f, data + off, len - off);
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    f->ops->close_input(f);
    while (!r->finished)
        uv_run(&loop, UV_RUN_ONCE);
    f->ops->stats(f, st);
    f->ops->close(f);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0)
        abort();
}

static void test_drops_feed(void)
{
    make_binary();
    struct engine_limits small, roomy;
    small_limits(&small);
    engine_limits_default(&roomy);
    const char *text = drops_stream();
    for (int binary = 0; binary < 2; binary++) {
        const char *data = binary ? (const char *)bin : text;
        size_t len = binary ? bin_len : strlen(text);
        struct frun r;
        struct source_stats st;
        /* The decoder's interner is the small one. */
        run_feed(&r, data, len, &roomy, small.max_strings, small.max_stacks, &st);
        check_drops(&r.e, st.string_drops, st.stack_table_drops);
        CHECK_EQ(r.e.si.str_drops + r.e.si.drops, 0);
        engine_close(&r.e);
        /* The engine's interner is the small one: it drops the definitions. */
        run_feed(&r, data, len, &small, roomy.max_strings, roomy.max_stacks, &st);
        check_drops(&r.e, r.e.si.str_drops, r.e.si.drops);
        CHECK_EQ(st.string_drops + st.stack_table_drops, 0);
        engine_close(&r.e);
    }
}

/* An allocator that fails every large allocation while told to, and counts the attempts. */
static int failing;
static uint64_t big_attempts;

static void *f_malloc(size_t n)
{
    if (n >= BIG_ALLOC) {
        big_attempts++;
        if (failing)
            return NULL;
    }
    return malloc(n);
}

static void *f_realloc(void *p, size_t n)
{
    if (n >= BIG_ALLOC) {
        big_attempts++;
        if (failing)
            return NULL;
    }
    return realloc(p, n);
}

static void *f_calloc(size_t n, size_t sz)
{
    if (n * sz >= BIG_ALLOC) {
        big_attempts++;
        if (failing)
            return NULL;
    }
    return calloc(n, sz);
}

/* After a failed chunk allocation the engine does not retry per event, and
 * takes allocations again once memory is there. */
static void test_alloc_failure_backoff(void)
{
    ht_replace_allocator(f_malloc, f_realloc, f_calloc, free);
    struct engine_limits lim;
    engine_limits_default(&lim);
    struct engine e;
    CHECK(engine_init(&e, &lim) == 0);
    apply_allocs(&e, 0, TABLE_CHUNK_ENTRIES); /* the first chunk is full */
    CHECK_EQ(e.heap_count, TABLE_CHUNK_ENTRIES);
    failing = 1;
    big_attempts = 0;
    const uint64_t n = 200000;
    apply_allocs(&e, TABLE_CHUNK_ENTRIES, n);
    CHECK_EQ(e.heap_count, TABLE_CHUNK_ENTRIES);
    /* Retries back off geometrically: a handful of attempts, not one per event. */
    CHECK(big_attempts >= 1 && big_attempts <= 16);
    CHECK_EQ(e.acct.no_memory[MEM_table] >= n, 1);
    /* Memory is there again: taken once the back-off (at most 2^17 refusals
     * after 8 failures, see MEM_BACKOFF_FIRST) runs out. */
    failing = 0;
    apply_allocs(&e, TABLE_CHUNK_ENTRIES + n, 300000);
    CHECK(e.heap_count > TABLE_CHUNK_ENTRIES + 30000);
    engine_close(&e);
    ht_replace_allocator(malloc, realloc, calloc, free);
}

/* A failed allocation of any structure, and memory freed, resets the back-off. */
static void test_backoff_acct(void)
{
    ht_replace_allocator(f_malloc, f_realloc, f_calloc, free);
    struct mem_acct m;
    mem_acct_init(&m, NULL);
    failing = 1;
    big_attempts = 0;
    CHECK(mem_alloc(&m, MEM_table, 2u << 20) == NULL);
    for (unsigned i = 0; i < MEM_BACKOFF_FIRST; i++)
        CHECK(mem_alloc(&m, MEM_lifetimes, 2u << 20) == NULL);
    CHECK_EQ(big_attempts, 1);
    CHECK_EQ(m.no_memory[MEM_table], 1);
    CHECK_EQ(m.no_memory[MEM_lifetimes], MEM_BACKOFF_FIRST);
    failing = 0;
    void *p = mem_alloc(&m, MEM_table, 2u << 20); /* the back-off is over: tried, and taken */
    CHECK(p != NULL);
    CHECK_EQ(big_attempts, 2);
    failing = 1;
    CHECK(mem_alloc(&m, MEM_table, 2u << 20) == NULL); /* backs off again, for longer */
    CHECK(mem_alloc(&m, MEM_table, 2u << 20) == NULL);
    CHECK_EQ(big_attempts, 3);
    failing = 0;
    mem_free(&m, MEM_table, p, 2u << 20); /* memory came back: try at once */
    p = mem_alloc(&m, MEM_table, 2u << 20);
    CHECK(p != NULL);
    CHECK_EQ(big_attempts, 4);
    mem_free(&m, MEM_table, p, 2u << 20);
    CHECK_EQ(mem_acct_total(&m), 0);
    ht_replace_allocator(malloc, realloc, calloc, free);
}

int ht_test_failed;

int main(int argc, char **argv)
{
    ht_alloc_init();
    static const struct ht_test_case cases[] = {
        T(budget_table), T(budget_daemon_wide),    T(name_cap),     T(drops_text), T(drops_binary),
        T(drops_feed),   T(alloc_failure_backoff), T(backoff_acct),
    };
    int rc = ht_test_run(cases, sizeof(cases) / sizeof(cases[0]), argc, argv);
    free(bin);
    return rc;
}
