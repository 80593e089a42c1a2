/* .htev parsing and replay: fields, escapes, malformed lines, chunking, bounded lines. */
#include "engine.h"
#include "ht-test.h"
#include "replay.h"
#include "htevb.h"
#include "htevb2.h"
#include "query.h"
#include "frame-match.h"
#include "htev-write.h"
#include "htevz.h"

#include <stdlib.h>

static struct engine E;
static struct replay R;

static void sink(void *arg, const struct ht_event *ev)
{
    engine_apply(arg, ev);
}

static void setup(void)
{
    struct engine_limits lim;
    engine_limits_default(&lim);
    engine_init(&E, &lim);
    replay_init(&R, &E.si, sink, &E);
}

static void teardown(void)
{
    replay_close(&R);
    engine_close(&E);
}

static void feed(const char *s)
{
    replay_feed(&R, s, strlen(s));
}

static void test_parse_kinds(void)
{
    setup();
    feed("{\"ev\":\"process\",\"pid\":4242,\"name\":\"A\\u00e9.exe\",\"wall\":\"2026-11-22T10:00:"
         "00Z\"}\n"
         "{\"t\":1000,\"ev\":\"alloc\",\"tid\":7,\"heap\":\"0x1d0000\",\"addr\":\"0x5a10\","
         "\"size\":40,"
         "\"stack\":[\"app.exe!f\",\"app.exe!main\"],\"future\":{\"x\":[1,2,{\"y\":null}]}}\n"
         "{\"t\":1500,\"ev\":\"realloc\",\"heap\":\"0x1d0000\",\"addr\":\"0x5a10\",\"old_addr\":"
         "\"0x5a10\","
         "\"size\":80,\"old_size\":40,\"stack\":[\"0x7ff612340000\"]}\n"
         "\r\n   \n"
         "{\"t\":3000,\"ev\":\"commit\",\"addr\":\"0x7ff000000000\",\"size\":10485760,\"stack\":[]}"
         "\n"
         "{\"t\":3100,\"ev\":\"decommit\",\"addr\":\"0x7ff000000000\",\"size\":4096}\n"
         "{\"t\":4000,\"ev\":\"private_bytes\",\"bytes\":21000000}\n"
         "{\"t\":4500,\"ev\":\"lost\",\"count\":12}\n"
         "{\"t\":5000,\"ev\":\"exit\",\"code\":-1}");
    replay_finish(&R);
    CHECK_EQ(R.malformed, 0);
    CHECK_EQ(R.events, 8);
    CHECK_STR(R.parser.name, "A\xc3\xa9.exe");
    CHECK_EQ(E.pid, 4242);
    CHECK_EQ(E.heap_bytes, 80);
    CHECK_EQ(E.commits.bytes, 10485760 - 4096);
    CHECK_EQ(E.private_bytes, 21000000);
    CHECK_EQ(E.q.lost, 12);
    CHECK(E.exited && E.exit_code == -1);
    CHECK_EQ(E.q.no_stack, 1); /* the commit's empty stack */
    struct alloc_entry *en = alloc_table_find(&E.table, 0, 0x5a10);
    CHECK(en != NULL);
    unsigned d;
    const uint64_t *f = stack_intern_frames(&E.si, en->stack, &d);
    CHECK_EQ(d, 2);
    CHECK_STR(stack_intern_strget(&E.si, (uint32_t)f[1]), "app.exe!main");
    teardown();
}

static void test_malformed_lines(void)
{
    setup();
    feed("{\"t\":1,\"ev\":\"alloc\",\"addr\":\"0x10\",\"size\":8}\n"
         "not json\n"
         "{\"t\":2,\"ev\":\"alloc\",\"addr\":\"0x20\"}\n" /* no size */
         "{\"t\":3,\"ev\":\"explode\"}\n"                 /* unknown kind */
         "{\"t\":-4,\"ev\":\"free\",\"addr\":\"0x10\"}\n" /* negative time */
         "{\"t\":5,\"ev\":\"alloc\",\"addr\":\"0xZZ\",\"size\":1}\n"
         "{\"t\":6,\"ev\":\"alloc\",\"addr\":\"0x30\",\"size\":1.5}\n"
         "{\"t\":7,\"ev\":\"alloc\",\"addr\":\"0x30\",\"size\":99999999999999999999}\n"
         "{\"t\":8,\"ev\":\"free\",\"addr\":\"0x10\"} trailing\n"
         "{\"t\":9,\"ev\":\"free\",\"addr\":\"0x10\",\"stack\":[\"unterminated]}\n"
         "[1,2]\n"
         "{\"t\":10,\"ev\":\"free\",\"addr\":\"0x10\"}\n");
    replay_finish(&R);
    CHECK_EQ(R.events, 2);
    CHECK_EQ(R.malformed, 10);
    CHECK_EQ(R.errors[0].line, 2);
    CHECK_EQ(R.errors[1].line, 3);
    CHECK(strstr(R.errors[1].msg, "size") != NULL);
    CHECK(strstr(R.errors[2].msg, "explode") != NULL);
    CHECK_EQ(R.errors[9].line, 11);
    CHECK_EQ(E.table.count, 0); /* the good alloc and the good free both applied */
    teardown();
}

static void test_chunked_equals_whole(void)
{
    const char *text =
        "{\"t\":1,\"ev\":\"alloc\",\"addr\":\"0x10\",\"size\":8,\"stack\":[\"a!b\",\"c!d\"]}\n"
        "{\"t\":2,\"ev\":\"alloc\",\"addr\":\"0x20\",\"size\":9,\"stack\":[\"a!b\",\"c!d\"]}\n"
        "{\"t\":3,\"ev\":\"free\",\"addr\":\"0x10\"}\n"
        "{\"t\":4,\"ev\":\"commit\",\"addr\":\"0x1000\",\"size\":4096,\"stack\":[\"x!y\"]}\n";
    for (size_t chunk = 1; chunk <= 7; chunk++) {
        setup();
        for (size_t i = 0; i < strlen(text); i += chunk) {
            size_t n = strlen(text) - i < chunk ? strlen(text) - i : chunk;
            replay_feed(&R, text + i, n);
        }
        replay_finish(&R);
        CHECK_EQ(R.events, 4);
        CHECK_EQ(R.malformed, 0);
        CHECK_EQ(E.heap_bytes, 9);
        CHECK_EQ(E.commits.bytes, 4096);
        CHECK_EQ(E.si.nstacks, 3);
        teardown();
    }
}

static void test_long_line_bounded(void)
{
    setup();
    size_t n = 3u << 20;
    char *big = malloc(n);
    memset(big, ' ', n);
    memcpy(big, "{\"t\":1,\"ev\":\"alloc\",\"x\":\"", 25);
    /* 3 MiB without a newline, fed in pieces, then a good line. */
    for (size_t i = 0; i < n; i += 65536)
        replay_feed(&R, big + i, 65536);
    feed("\"}\n{\"t\":2,\"ev\":\"alloc\",\"addr\":\"0x10\",\"size\":8}\n");
    replay_finish(&R);
    free(big);
    CHECK_EQ(R.malformed, 1);
    CHECK_EQ(R.events, 1);
    CHECK(R.alloc <= REPLAY_LINE_MAX * 2);
    CHECK_EQ(R.errors[0].line, 1);
    teardown();
}

static void test_deep_stack_truncated(void)
{
    setup();
    char line[20000];
    size_t k = (size_t)snprintf(
        line, sizeof(line), "{\"t\":1,\"ev\":\"alloc\",\"addr\":\"0x10\",\"size\":8,\"stack\":[");
    for (int i = 0; i < 300; i++)
        k += (size_t)snprintf(line + k, sizeof(line) - k, "%s\"m!f%d\"", i ? "," : "", i);
    snprintf(line + k, sizeof(line) - k, "]}\n");
    feed(line);
    replay_finish(&R);
    CHECK_EQ(R.events, 1);
    CHECK_EQ(E.q.truncated_stacks, 1);
    unsigned d;
    stack_intern_frames(&E.si, 1, &d);
    CHECK_EQ(d, HT_STACK_MAX_DEPTH);
    teardown();
}

/* ---- the binary twin ---- */

static unsigned char *bin_buf;
static size_t bin_len, bin_cap;

static void bin_out(void *arg, const void *buf, size_t n)
{
    (void)arg;
    if (bin_len + n > bin_cap) {
        bin_cap = (bin_len + n) * 2;
        bin_buf = realloc(bin_buf, bin_cap);
    }
    memcpy(bin_buf + bin_len, buf, n);
    bin_len += n;
}

static struct htevb_writer W;

static void to_binary(void *arg, const struct ht_event *ev)
{
    engine_apply(arg, ev);
    if (ev->kind == HT_EV_PROCESS)
        htevb_write_process(&W, ev->t, ev->size, R.parser.name);
    else
        htevb_write_event(&W, ev);
}

static void load_demo_file(void)
{
    FILE *f = fopen(HT_TEST_DATA "/memorytestapp.htev", "rb");
    char buf[4096];
    size_t n;
    while (f && (n = fread(buf, 1, sizeof(buf), f)) > 0)
        replay_feed(&R, buf, n);
    if (f)
        fclose(f);
    replay_finish(&R);
}

static void summary(struct engine *e, int domain, uint64_t t1, uint64_t t2, char *out, size_t n)
{
    struct query q;
    query_init(&q);
    q.domain = domain;
    q.t1 = t1;
    q.t2 = t2;
    struct query_result res;
    engine_query(e, &q, &res);
    size_t k = (size_t)snprintf(out, n, "%u rows;", res.nrows);
    for (uint32_t i = 0; i < res.nrows && k + 80 < n; i++) {
        unsigned d;
        const uint64_t *f = stack_intern_frames(&e->si, res.rows[i].stack, &d);
        char fb[32];
        k += (size_t)snprintf(out + k, n - k, "%s/%llu/%llu;",
                              d ? frame_text(&e->si, f[0], fb, sizeof(fb)) : "-",
                              (unsigned long long)query_row_size(&res.rows[i]),
                              (unsigned long long)query_row_outstanding(&res.rows[i]));
    }
    query_result_free(&res);
}

static void test_binary_roundtrip(void)
{
    /* Engine A from the JSON stream, writing the binary twin as it goes. */
    struct engine_limits lim;
    engine_limits_default(&lim);
    struct engine a;
    engine_init(&a, &lim);
    bin_len = 0;
    replay_init(&R, &a.si, to_binary, &a);
    htevb_writer_init(&W, &a.si, bin_out, NULL);
    load_demo_file();
    CHECK_EQ(R.events, 1383);
    htevb_writer_close(&W);
    replay_close(&R);
    CHECK(bin_len > 8 && memcmp(bin_buf, HTEVB2_MAGIC, 8) == 0);
    /* Engine B from the binary, in uneven pieces: same answers. */
    for (size_t piece = 1; piece <= 4099; piece += 1366) {
        setup();
        for (size_t off = 0; off < bin_len; off += piece)
            replay_feed(&R, (const char *)bin_buf + off,
                        bin_len - off < piece ? bin_len - off : piece);
        replay_finish(&R);
        CHECK_EQ(R.malformed, 0);
        CHECK_EQ(R.events, 1383);
        CHECK_STR(R.parser.name, "MemoryTestApp.exe");
        static const uint64_t windows[][2] = {
            {0, UINT64_MAX}, {14000000000ULL, 16000000000ULL}, {19000000000ULL, 29000000000ULL}};
        for (int w = 0; w < 3; w++)
            for (int dom = 0; dom < 2; dom++) {
                char sa[4096], sb[4096];
                summary(&a, dom, windows[w][0], windows[w][1], sa, sizeof(sa));
                summary(&E, dom, windows[w][0], windows[w][1], sb, sizeof(sb));
                CHECK_STR(sb, sa);
            }
        CHECK_EQ(E.heap_bytes, a.heap_bytes);
        CHECK_EQ(E.commits.bytes, a.commits.bytes);
        CHECK_EQ(E.pid, 4242);
        teardown();
    }
    engine_close(&a);
}

static void test_binary_malformed(void)
{
    /* alloc of 8 bytes at 0x10, no stack: 'e', kind, fields=size, dt=0, addr, size. */
    const unsigned char ev[] = {'e', HT_EV_ALLOC, 4, 0, 0x10, 8};
    /* A bad record type stops the stream: counted, reported, the engine intact. */
    setup();
    replay_feed(&R, HTEVB_MAGIC, HTEVB_MAGIC_LEN);
    replay_feed(&R, (const char *)ev, sizeof(ev));
    replay_feed(&R, "Zjunk", 5);
    replay_feed(&R, (const char *)ev, sizeof(ev)); /* ignored: framing is lost */
    replay_finish(&R);
    CHECK_EQ(R.events, 1);
    CHECK_EQ(R.malformed, 1);
    CHECK(strstr(R.errors[0].msg, "unknown record type") != NULL);
    CHECK_EQ(E.heap_bytes, 8);
    teardown();
    /* A stack id never defined. */
    setup();
    const unsigned char undefined_stack[] = {'e', HT_EV_ALLOC, 4 | 16, 0, 0x20, 8, 7};
    replay_feed(&R, HTEVB_MAGIC, HTEVB_MAGIC_LEN);
    replay_feed(&R, (const char *)undefined_stack, sizeof(undefined_stack));
    replay_finish(&R);
    CHECK_EQ(R.events, 0);
    CHECK_EQ(R.malformed, 1);
    teardown();
    /* A varint that never ends, and a stream cut inside a record. */
    setup();
    const unsigned char endless[] = {'e',  HT_EV_ALLOC, 0,    0x80, 0x80, 0x80, 0x80, 0x80,
                                     0x80, 0x80,        0x80, 0x80, 0x80, 0x80, 0x80};
    replay_feed(&R, HTEVB_MAGIC, HTEVB_MAGIC_LEN);
    replay_feed(&R, (const char *)endless, sizeof(endless));
    replay_finish(&R);
    CHECK_EQ(R.malformed, 1);
    teardown();
    setup();
    replay_feed(&R, HTEVB_MAGIC, HTEVB_MAGIC_LEN);
    replay_feed(&R, (const char *)ev, 4);
    replay_finish(&R);
    CHECK_EQ(R.malformed, 1);
    CHECK(strstr(R.errors[0].msg, "inside a record") != NULL);
    teardown();
}

/* Module events: text parse (path and build id interned), the engine's
 * module table, the writer giving back the same line, and the binary twin
 * read into another interner (ids remapped). Bad module lines are malformed. */
static struct ht_event mods[8];
static unsigned nmods;

static void mod_sink(void *arg, const struct ht_event *ev)
{
    engine_apply(arg, ev);
    if (nmods < 8)
        mods[nmods++] = *ev;
}

static char mbin[4096];
static size_t mbin_len;

static void mbin_out(void *arg, const void *buf, size_t n)
{
    (void)arg;
    if (mbin_len + n <= sizeof(mbin)) {
        memcpy(mbin + mbin_len, buf, n);
        mbin_len += n;
    }
}

static void test_module_events(void)
{
    struct engine_limits lim;
    engine_limits_default(&lim);
    engine_init(&E, &lim);
    nmods = 0;
    replay_init(&R, &E.si, mod_sink, &E);
    /* An unrelated name first, so the path's id is not 1. */
    stack_intern_str(&E.si, "other", 5);
    static const char *const lines[] = {
        "{\"t\":5,\"ev\":\"module_load\",\"base\":\"0x7f0000000000\",\"size\":8192,"
        "\"bias\":\"0x7f0000000000\",\"path\":\"/usr/lib/libc.so.6\",\"build_id\":\"abcdef01\"}\n",
        "{\"t\":6,\"ev\":\"module_load\",\"base\":\"0x400000\",\"size\":4096,"
        "\"bias\":\"0x0\",\"path\":\"/app/a \\\"q\\\"\"}\n",
        "{\"t\":7,\"ev\":\"module_unload\",\"base\":\"0x400000\"}\n",
    };
    for (unsigned i = 0; i < 3; i++)
        feed(lines[i]);
    feed("{\"t\":8,\"ev\":\"module_load\",\"base\":\"0x1000\",\"size\":1}\n"); /* no path */
    feed("{\"t\":8,\"ev\":\"module_load\",\"base\":\"0x1000\",\"size\":1,\"path\":\"x\","
         "\"build_id\":\"xyz\"}\n");                                  /* not hex */
    feed("{\"t\":8,\"ev\":\"module_unload\"}\n");                     /* no base */
    feed("{\"t\":9,\"ev\":\"module_unload\",\"base\":\"0x5000\"}\n"); /* never loaded */
    CHECK_EQ(R.malformed, 3);
    CHECK_EQ(nmods, 4);
    CHECK_EQ(mods[0].kind, HT_EV_MODULE_LOAD);
    CHECK_EQ(mods[0].addr, 0x7f0000000000ULL);
    CHECK_EQ(mods[0].size, 8192);
    CHECK_EQ(mods[0].old_addr, 0x7f0000000000ULL);
    CHECK_STR(stack_intern_strget(&E.si, (uint32_t)mods[0].heap), "/usr/lib/libc.so.6");
    CHECK_STR(stack_intern_strget(&E.si, (uint32_t)mods[0].old_size), "abcdef01");
    CHECK_STR(stack_intern_strget(&E.si, (uint32_t)mods[1].heap), "/app/a \"q\"");
    CHECK_EQ(mods[1].old_size, 0);
    /* The engine's table: libc stays, the app was unloaded, one unknown unload. */
    CHECK_EQ(E.modules.n, 1);
    CHECK_EQ(E.modules.loads, 2);
    CHECK_EQ(E.modules.unloads, 2);
    CHECK_EQ(E.modules.unknown_unloads, 1);
    const struct module *m = module_table_find(&E.modules, 0x7f0000001fffULL);
    CHECK(m != NULL);
    CHECK(module_table_find(&E.modules, 0x7f0000002000ULL) == NULL);
    CHECK(module_table_find(&E.modules, 0x400000) == NULL);
    /* The writer gives the lines back. */
    char out[1024];
    for (unsigned i = 0; i < 3; i++) {
        size_t n = htev_format(&mods[i], &E.si, out, sizeof(out));
        CHECK(n > 0);
        CHECK_STR(out, lines[i]);
    }
    /* The binary twin, read into a fresh engine: the same module table. */
    struct htevb_writer w;
    mbin_len = 0;
    htevb_writer_init(&w, &E.si, mbin_out, NULL);
    for (unsigned i = 0; i < nmods; i++)
        CHECK(htevb_write_event(&w, &mods[i]) == 0);
    htevb_writer_close(&w);
    struct ht_event keep[8];
    memcpy(keep, mods, sizeof(keep));
    replay_close(&R);
    engine_close(&E);
    engine_init(&E, &lim);
    nmods = 0;
    replay_init(&R, &E.si, mod_sink, &E);
    replay_feed(&R, mbin, mbin_len);
    replay_finish(&R);
    CHECK_EQ(R.malformed, 0);
    CHECK_EQ(nmods, 4);
    CHECK_EQ(E.modules.n, 1);
    CHECK_EQ(E.modules.unknown_unloads, 1);
    CHECK_EQ(mods[0].addr, keep[0].addr);
    CHECK_EQ(mods[0].old_addr, keep[0].old_addr);
    CHECK_STR(stack_intern_strget(&E.si, (uint32_t)mods[0].heap), "/usr/lib/libc.so.6");
    CHECK_STR(stack_intern_strget(&E.si, (uint32_t)mods[0].old_size), "abcdef01");
    CHECK(mods[0].heap != keep[0].heap); /* ids remapped: "other" is not here */
    teardown();
}

/* The interner's resolver names address frames everywhere frame_text is used:
 * a --by frame query and a cull pattern see "module!symbol". */
static const char *fake_resolve(void *arg, uint64_t addr, char *buf, size_t bufsz)
{
    (*(int *)arg)++;
    if (addr == 0x1234)
        return NULL; /* in no known module */
    snprintf(buf, bufsz, "lib.so!fn_%llx", (unsigned long long)addr);
    return buf;
}

static void test_frame_resolver(void)
{
    setup();
    int calls = 0;
    E.si.resolve = fake_resolve;
    E.si.resolve_arg = &calls;
    char buf[FRAME_TEXT_MAX];
    CHECK_STR(frame_text(&E.si, 0xabc, buf, sizeof(buf)), "lib.so!fn_abc");
    CHECK_STR(frame_text(&E.si, 0x1234, buf, sizeof(buf)), "0x1234");
    uint32_t name = stack_intern_str(&E.si, "app!main", 8);
    CHECK_STR(frame_text(&E.si, HT_FRAME_SYM | name, buf, sizeof(buf)), "app!main");
    CHECK_EQ(calls, 2); /* named frames never ask */
    uint64_t fr[2] = {0xabc, HT_FRAME_SYM | name};
    struct ht_event ev = {.t = 1,
                          .kind = HT_EV_ALLOC,
                          .addr = 0x10,
                          .size = 8,
                          .stack = stack_intern_get(&E.si, fr, 2)};
    engine_apply(&E, &ev);
    struct query q;
    query_init(&q);
    q.by = HT_BY_FRAME;
    struct query_result res;
    CHECK(engine_query(&E, &q, &res) == 0);
    int found = 0;
    for (uint32_t i = 0; i < res.nrows; i++)
        if (strcmp(frame_text(&E.si, res.rows[i].key, buf, sizeof(buf)), "lib.so!fn_abc") == 0)
            found = 1;
    query_result_free(&res);
    CHECK(found);
    /* Culling by the resolved module drops that frame. */
    struct frame_pat pat;
    CHECK(frame_pat_parse("lib.so!", 7, &pat) == 0);
    query_init(&q);
    q.cull = &pat;
    q.ncull = 1;
    CHECK(engine_query(&E, &q, &res) == 0);
    CHECK_EQ(res.nrows, 1);
    CHECK_EQ(res.rows[0].skip, 1);
    query_result_free(&res);
    teardown();
}

/* Compressed .htevb (htevz.h): the same events as the plain stream whatever
 * the pieces the input comes in, errors counted like malformed records, the
 * decoder's memory fixed. */
struct zbuf {
    unsigned char *p;
    size_t n, cap;
};

static void zbuf_out(void *arg, const void *buf, size_t n)
{
    struct zbuf *b = arg;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, buf, n);
    b->n += n;
}

/* The writer's output, plain and compressed at once. */
struct tee {
    struct zbuf plain, packed;
    struct htevz_writer z;
};

static void tee_out(void *arg, const void *buf, size_t n)
{
    struct tee *t = arg;
    zbuf_out(&t->plain, buf, n);
    htevz_write(&t->z, buf, n);
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* n events of every kind (process and module ones included), with stacks,
 * names, tids and truncation flags, written plain and in frames of at most
 * frame_bytes. */
static void build_stream(struct tee *t, uint64_t n, uint64_t frame_bytes, int level)
{
    memset(t, 0, sizeof(*t));
    struct stack_intern si;
    stack_intern_init(&si, 1u << 16, 1u << 16);
    CHECK(htevz_writer_init(&t->z, level, zbuf_out, &t->packed) == 0);
    t->z.frame_bytes = frame_bytes;
    struct htevb_writer w;
    htevb_writer_init(&w, &si, tee_out, t);
    uint32_t stacks[64], names[8];
    for (unsigned i = 0; i < 8; i++) {
        char nm[32];
        int len = snprintf(nm, sizeof(nm), "lib%u.so!fn_%u", i, i * 7);
        names[i] = stack_intern_str(&si, nm, (size_t)len);
    }
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    for (unsigned i = 0; i < 64; i++) {
        uint64_t fr[12];
        unsigned d = 1 + i % 12;
        for (unsigned k = 0; k < d; k++)
            fr[k] =
                k % 3 == 1 ? HT_FRAME_SYM | names[(i + k) % 8] : 0x400000 + rng_next(&seed) % 65536;
        stacks[i] = stack_intern_get(&si, fr, d);
    }
    uint64_t tm = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = rng_next(&seed);
        struct ht_event ev;
        memset(&ev, 0, sizeof(ev));
        ev.kind = (uint8_t)(1 + i % (HT_EV_KIND_COUNT - 1));
        tm += r % 5000;
        ev.t = tm;
        if (ev.kind == HT_EV_PROCESS) {
            htevb_write_process(&w, ev.t, 1000 + i, "proc-name");
            continue;
        }
        ev.addr = 0x55d000000000ULL + (r >> 20) % (1u << 24) * 16;
        ev.size = r % 4096;
        ev.tid = (uint32_t)(r >> 50) % 7;
        ev.flags = (r >> 40) % 13 == 0 ? HT_EVF_TRUNCATED : 0;
        if (ev.kind == HT_EV_MODULE_LOAD || ev.kind == HT_EV_MODULE_UNLOAD) {
            ev.heap = names[r % 8];
            ev.old_size = (r >> 8) % 2 ? names[(r >> 9) % 8] : 0;
            ev.old_addr = ev.addr - 0x1000;
        } else {
            ev.heap = (r >> 30) % 3 == 0 ? 0x1d0000 : 0;
            ev.old_addr = ev.kind == HT_EV_REALLOC ? ev.addr + 32 : 0;
            ev.old_size = ev.kind == HT_EV_REALLOC ? r % 1000 : 0;
            if (ev.kind == HT_EV_ALLOC || ev.kind == HT_EV_REALLOC || ev.kind == HT_EV_COMMIT)
                ev.stack = stacks[(r >> 12) % 64];
        }
        CHECK(htevb_write_event(&w, &ev) == 0);
    }
    htevb_writer_close(&w);
    CHECK(htevz_writer_close(&t->z) == 0);
    stack_intern_close(&si);
}

struct decoded {
    uint64_t events, malformed, frames, h;
    unsigned kinds; /* a bit per kind seen */
    size_t mem_first, mem_max;
    int too_large, mem_changed;
    char err[160];
};

static void digest_ev(void *arg, const struct ht_event *ev)
{
    struct decoded *d = arg;
    const uint64_t v[] = {ev->kind, ev->t,        ev->addr,  ev->heap, ev->old_addr,
                          ev->size, ev->old_size, ev->stack, ev->tid,  ev->flags};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        d->h = (d->h ^ v[i]) * 0x100000001b3ULL;
    d->kinds |= 1u << ev->kind;
}

/* Decode buf through replay (a fresh interner: the ids come out the same):
 * split_at > 0 cuts it in two there; else seed > 0 feeds pieces of random
 * sizes (1 to 8 KiB, a third of them under 16 bytes); else one piece. */
static struct decoded decode(const unsigned char *buf, size_t n, size_t split_at, uint64_t seed)
{
    struct decoded d;
    memset(&d, 0, sizeof(d));
    d.h = 0xcbf29ce484222325ULL;
    struct stack_intern si;
    stack_intern_init(&si, 1u << 16, 1u << 16);
    struct replay r;
    replay_init(&r, &si, digest_ev, &d);
    size_t off = 0;
    while (off < n) {
        size_t k = n - off;
        if (split_at)
            k = off < split_at ? split_at - off : n - off;
        else if (seed)
            k = rng_next(&seed) % 3 == 0 ? 1 + seed % 16 : 1 + seed % 8192;
        if (k > n - off)
            k = n - off;
        replay_feed(&r, (const char *)buf + off, k);
        off += k;
        if (r.compressed) {
            size_t m = htevz_reader_mem(&r.z);
            if (r.z.frames > 0 && !d.mem_first)
                d.mem_first = m;
            if (d.mem_first && m != d.mem_first)
                d.mem_changed = 1;
            if (m > d.mem_max)
                d.mem_max = m;
        }
    }
    replay_finish(&r);
    d.events = r.events;
    d.malformed = r.malformed;
    d.frames = r.z.frames;
    d.too_large = r.z.too_large;
    if (r.nerrors)
        snprintf(d.err, sizeof(d.err), "%s", r.errors[0].msg);
    replay_close(&r);
    stack_intern_close(&si);
    return d;
}

static void check_same(const struct decoded *a, const struct decoded *b)
{
    CHECK_EQ(a->events, b->events);
    CHECK_EQ(a->h, b->h);
    CHECK_EQ(a->malformed, b->malformed);
}

static void test_compressed_roundtrip(void)
{
    /* Small frames: a few hundred bytes of stream each, so frames and records
     * cut each other everywhere. */
    struct tee t;
    build_stream(&t, 300, 500, 3);
    CHECK(t.z.frames == 0); /* closed: counters reset */
    CHECK(t.packed.n > 4 && memcmp(t.packed.p, HTEVZ_MAGIC, 4) == 0);
    struct decoded ref = decode(t.plain.p, t.plain.n, 0, 0);
    CHECK_EQ(ref.events, 300);
    CHECK_EQ(ref.malformed, 0);
    /* Every kind came through (bit 0, HT_EV_NONE, is never set). */
    CHECK_EQ(ref.kinds, (1u << HT_EV_KIND_COUNT) - 2);
    struct decoded whole = decode(t.packed.p, t.packed.n, 0, 0);
    check_same(&ref, &whole);
    CHECK(whole.frames >= t.plain.n / 500);
    /* Cut at every byte of the first frames (each one's header, blocks and
     * checksum split), then every 11th byte (each decode sets up a fresh
     * decompressor: they cost). */
    for (size_t at = 1; at < t.packed.n; at += at < 1500 ? 1 : 11) {
        struct decoded d = decode(t.packed.p, t.packed.n, at, 0);
        if (d.h != ref.h || d.malformed) {
            CHECK_EQ(at, 0); /* names the offset */
            break;
        }
    }
    for (uint64_t seed = 1; seed <= 20; seed++) {
        struct decoded d = decode(t.packed.p, t.packed.n, 0, seed * 7919);
        check_same(&ref, &d);
    }
    free(t.plain.p);
    free(t.packed.p);
}

/* A big stream in the default frames: many frames, random pieces, and the
 * decoder's memory the same after its first frame as at the end, under
 * 3 MiB (a 1 MiB window, its output buffer and zstd's tables: 1.6 MiB; the
 * hold of a frame until its checksum, HTEVZ_HOLD_MAX: 1 MiB). */
static void test_compressed_big(void)
{
    struct tee t;
    build_stream(&t, 400000, HTEVZ_FRAME_BYTES, 3);
    CHECK(t.plain.n > 3 * HTEVZ_FRAME_BYTES);
    struct decoded ref = decode(t.plain.p, t.plain.n, 0, 0);
    struct decoded d = decode(t.packed.p, t.packed.n, 0, 12345);
    check_same(&ref, &d);
    d = decode(t.packed.p, t.packed.n, 0, 0); /* one feed: many output buffers from it */
    check_same(&ref, &d);
    CHECK_EQ(d.frames, (t.plain.n + HTEVZ_FRAME_BYTES - 1) / HTEVZ_FRAME_BYTES);
    CHECK(d.mem_max > 0 && d.mem_max < (3u << 20));
    CHECK_EQ(d.mem_changed, 0);
    CHECK(t.packed.n < t.plain.n); /* random fields: the demo's shrink more */
    free(t.plain.p);
    free(t.packed.p);
}

/* Compressed and plain give the same engine: the demo session's answers. */
static struct tee demo_tee;

static void to_both(void *arg, const struct ht_event *ev)
{
    engine_apply(arg, ev);
    if (ev->kind == HT_EV_PROCESS)
        htevb_write_process(&W, ev->t, ev->size, R.parser.name);
    else
        htevb_write_event(&W, ev);
}

static void test_compressed_same_engine(void)
{
    struct engine_limits lim;
    engine_limits_default(&lim);
    struct engine a;
    engine_init(&a, &lim);
    memset(&demo_tee, 0, sizeof(demo_tee));
    CHECK(htevz_writer_init(&demo_tee.z, HTEVZ_LEVEL_DEFAULT, zbuf_out, &demo_tee.packed) == 0);
    demo_tee.z.frame_bytes = 4096;
    replay_init(&R, &a.si, to_both, &a);
    htevb_writer_init(&W, &a.si, tee_out, &demo_tee);
    load_demo_file();
    htevb_writer_close(&W);
    CHECK(htevz_writer_close(&demo_tee.z) == 0);
    replay_close(&R);
    uint64_t seed = 77;
    for (int round = 0; round < 2; round++) {
        /* Round 0: engine a against the compressed stream; 1: the plain one. */
        const struct zbuf *b = round ? &demo_tee.plain : &demo_tee.packed;
        setup();
        for (size_t off = 0, k; off < b->n; off += k) {
            k = 1 + rng_next(&seed) % 3000;
            if (k > b->n - off)
                k = b->n - off;
            replay_feed(&R, (const char *)b->p + off, k);
        }
        replay_finish(&R);
        CHECK_EQ(R.malformed, 0);
        CHECK_EQ(R.events, 1383);
        CHECK_EQ(R.compressed, !round);
        CHECK_STR(R.parser.name, "MemoryTestApp.exe");
        static const uint64_t windows[][2] = {
            {0, UINT64_MAX}, {14000000000ULL, 16000000000ULL}, {19000000000ULL, 29000000000ULL}};
        for (int w = 0; w < 3; w++)
            for (int dom = 0; dom < 2; dom++) {
                char sa[4096], sb[4096];
                summary(&a, dom, windows[w][0], windows[w][1], sa, sizeof(sa));
                summary(&E, dom, windows[w][0], windows[w][1], sb, sizeof(sb));
                CHECK_STR(sb, sa);
            }
        CHECK_EQ(E.heap_bytes, a.heap_bytes);
        CHECK_EQ(E.commits.bytes, a.commits.bytes);
        CHECK_EQ(E.pid, a.pid);
        teardown();
    }
    CHECK(demo_tee.packed.n * 3 < demo_tee.plain.n);
    engine_close(&a);
    free(demo_tee.plain.p);
    free(demo_tee.packed.p);
}

/* Bytes compressed as they are, frames of frame_bytes, by a writer of their own. */
static void compress_raw(struct zbuf *out, const unsigned char *p, size_t n, uint64_t frame_bytes)
{
    struct htevz_writer z;
    CHECK(htevz_writer_init(&z, 1, zbuf_out, out) == 0);
    z.frame_bytes = frame_bytes;
    htevz_write(&z, p, n);
    CHECK(htevz_writer_close(&z) == 0);
}

static void test_compressed_malformed(void)
{
    struct tee t;
    build_stream(&t, 3000, 2000, 3);
    struct decoded ref = decode(t.plain.p, t.plain.n, 0, 0);
    struct decoded d;
    /* Cut in the middle: what came before stays, one malformed count. */
    d = decode(t.packed.p, t.packed.n / 2, 0, 0);
    CHECK(d.events > 0 && d.events < ref.events);
    CHECK_EQ(d.malformed, 1);
    CHECK(strstr(d.err, "compressed stream: it ends inside a frame") != NULL);
    /* Cut right after a frame: a clean end, the frames before it whole. */
    {
        struct zbuf one = {0};
        compress_raw(&one, t.plain.p, t.plain.n, 2000);
        compress_raw(&one, t.plain.p, 0, 2000); /* nothing: no empty frame */
        struct decoded a = decode(one.p, one.n, 0, 0);
        check_same(&ref, &a);
        free(one.p);
    }
    /* One byte changed in the middle: the checksum (or the format) catches it. */
    for (size_t at = t.packed.n / 3; at < t.packed.n; at += t.packed.n / 7) {
        t.packed.p[at] ^= 0x5a;
        d = decode(t.packed.p, t.packed.n, 0, 3);
        t.packed.p[at] ^= 0x5a;
        CHECK_EQ(d.malformed, 1);
        CHECK(d.events < ref.events);
        CHECK(strstr(d.err, "compressed stream") != NULL);
    }
    /* Good frames, then garbage: all the events, then one malformed. */
    {
        struct zbuf g = {0};
        zbuf_out(&g, t.packed.p, t.packed.n);
        zbuf_out(&g, "garbage!", 8);
        d = decode(g.p, g.n, 0, 0);
        CHECK_EQ(d.events, ref.events);
        CHECK_EQ(d.malformed, 1);
        free(g.p);
    }
    /* Two compressors' frames end to end, the stream cut between them in the
     * middle of a record: one stream. */
    {
        struct zbuf cat = {0};
        size_t cut = t.plain.n / 3 + 1;
        compress_raw(&cat, t.plain.p, cut, 1u << 20);
        compress_raw(&cat, t.plain.p + cut, t.plain.n - cut, 777);
        d = decode(cat.p, cat.n, 0, 5);
        check_same(&ref, &d);
        free(cat.p);
    }
    /* A frame header asking for a 16 MiB window (Window_Descriptor 0x70:
     * exponent 14, 2^(10+14); RFC 8878 3.1.1.1.2): refused before any
     * allocation for it. */
    {
        const unsigned char huge[] = {0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x70, 0x01, 0x00, 0x00};
        d = decode(huge, sizeof(huge), 0, 0);
        CHECK_EQ(d.events, 0);
        CHECK_EQ(d.malformed, 1);
        CHECK_EQ(d.too_large, 1);
        CHECK(d.mem_max < (1u << 20));
        CHECK(strstr(d.err, "window") != NULL);
    }
    /* The magic, then garbage. */
    {
        unsigned char junk[4096];
        uint64_t s = 99;
        memcpy(junk, HTEVZ_MAGIC, 4);
        for (size_t i = 4; i < sizeof(junk); i++)
            junk[i] = (unsigned char)rng_next(&s);
        d = decode(junk, sizeof(junk), 0, 0);
        CHECK_EQ(d.events, 0);
        CHECK_EQ(d.malformed, 1);
    }
    /* Nothing at all: no events, nothing wrong. The magic alone: cut. */
    d = decode((const unsigned char *)"", 0, 0, 0);
    CHECK_EQ(d.events, 0);
    CHECK_EQ(d.malformed, 0);
    d = decode((const unsigned char *)HTEVZ_MAGIC, 4, 0, 0);
    CHECK_EQ(d.malformed, 1);
    /* A stream that shrinks 100-fold: a few bytes of input fill the output
     * buffer many times over, and all of it comes out. */
    {
        static const char line[] = "{\"t\":1,\"ev\":\"private_bytes\",\"bytes\":4096}\n";
        struct zbuf txt = {0}, z = {0};
        for (int i = 0; i < 50000; i++)
            zbuf_out(&txt, line, sizeof(line) - 1);
        compress_raw(&z, txt.p, txt.n, 1u << 20);
        CHECK(z.n * 100 < txt.n);
        for (uint64_t seed = 0; seed < 2; seed++) {
            d = decode(z.p, z.n, 0, seed);
            CHECK_EQ(d.events, 50000);
            CHECK_EQ(d.malformed, 0);
        }
        free(txt.p);
        free(z.p);
    }
    /* .htev text in frames reads too. */
    {
        const char *txt = "{\"t\":1,\"ev\":\"alloc\",\"addr\":\"0x10\",\"size\":8}\n"
                          "{\"t\":2,\"ev\":\"free\",\"addr\":\"0x10\"}\n";
        struct zbuf z = {0};
        compress_raw(&z, (const unsigned char *)txt, strlen(txt), 40);
        d = decode(z.p, z.n, 0, 0);
        CHECK_EQ(d.events, 2);
        CHECK_EQ(d.malformed, 0);
        free(z.p);
    }
    free(t.plain.p);
    free(t.packed.p);
}

/* A frame whose checksum fails applies none of its events: the reader holds
 * a frame's stream (up to HTEVZ_HOLD_MAX) until its checksum is read. Before,
 * a 512 KiB frame with a changed checksum byte had all its records applied
 * (zstd hands out each 128 KiB block as it decodes it) and only then was
 * counted malformed. A frame over the hold is passed on as it decodes (its
 * events before the failure stay, counted once), as a plain stream's are. */
static void test_compressed_frame_checked(void)
{
    const uint64_t F = 512u << 10;
    struct tee t;
    build_stream(&t, 400000, F, 3);
    CHECK(t.plain.n > 4 * F);
    /* Frames 1-2, frame 3, the rest: each compressed on its own, end to end. */
    struct zbuf a = {0}, b = {0}, rest = {0};
    compress_raw(&a, t.plain.p, 2 * F, F);
    compress_raw(&b, t.plain.p + 2 * F, F, F);
    compress_raw(&rest, t.plain.p + 3 * F, t.plain.n - 3 * F, F);
    struct zbuf all = {0};
    zbuf_out(&all, a.p, a.n);
    zbuf_out(&all, b.p, b.n);
    zbuf_out(&all, rest.p, rest.n);
    struct decoded ref = decode(t.plain.p, t.plain.n, 0, 0);
    struct decoded d = decode(all.p, all.n, 0, 7);
    check_same(&ref, &d);
    /* What frames 1-2 hold: their whole records (the one cut at their end is
     * the single malformed). */
    struct decoded first2 = decode(a.p, a.n, 0, 0);
    CHECK(first2.events > 0);
    /* Frame 3's checksum (its last byte) changed: exactly frames 1-2's events. */
    all.p[a.n + b.n - 1] ^= 0x01;
    for (uint64_t seed = 0; seed < 3; seed++) {
        d = decode(all.p, all.n, 0, seed);
        CHECK_EQ(d.events, first2.events);
        CHECK_EQ(d.h, first2.h);
        CHECK_EQ(d.malformed, 1);
        CHECK(strstr(d.err, "checksum") != NULL);
        CHECK(d.mem_max < (3u << 20));
    }
    all.p[a.n + b.n - 1] ^= 0x01;
    /* A byte changed in the middle of a one-frame .htev text file (300 KB,
     * over two of zstd's 128 KiB blocks): none of its events count. */
    {
        struct zbuf txt = {0}, zt = {0};
        uint64_t sd = 5;
        for (int i = 0; i < 5000; i++) {
            char line[96];
            int n = snprintf(line, sizeof(line),
                             "{\"t\":%d,\"ev\":\"alloc\",\"addr\":\"0x%llx\",\"size\":8}\n", i + 1,
                             (unsigned long long)(rng_next(&sd) >> 8));
            zbuf_out(&txt, line, (size_t)n);
        }
        CHECK(txt.n > (256u << 10) && txt.n < F);
        compress_raw(&zt, txt.p, txt.n, F);
        struct decoded tref = decode(zt.p, zt.n, 0, 0);
        CHECK_EQ(tref.malformed, 0);
        CHECK_EQ(tref.events, 5000);
        CHECK_EQ(tref.frames, 1);
        zt.p[zt.n * 3 / 4] ^= 0x20;
        d = decode(zt.p, zt.n, 0, 0);
        CHECK_EQ(d.malformed, 1);
        CHECK_EQ(d.events, 0);
        free(txt.p);
        free(zt.p);
    }
    /* A frame over the hold (another writer's: the zstd tool makes one
     * frame of a whole file): passed on as it decodes; its checksum changed
     * leaves its events before the failure and one malformed that says so. */
    {
        struct zbuf big = {0};
        compress_raw(&big, t.plain.p, t.plain.n, 2 * HTEVZ_HOLD_MAX);
        big.p[big.n - 1] ^= 0x01;
        d = decode(big.p, big.n, 0, 0);
        CHECK(d.events > first2.events);
        CHECK_EQ(d.malformed, 1);
        CHECK(strstr(d.err, "checksum") != NULL);
        CHECK(strstr(d.err, "applied") != NULL);
        CHECK(d.mem_max < (3u << 20));
        free(big.p);
    }
    free(a.p);
    free(b.p);
    free(rest.p);
    free(all.p);
    free(t.plain.p);
    free(t.packed.p);
}

/* Under a budget that leaves no room for the whole hold, frames stream (as
 * bigger frames do): every event comes in and the refusal is counted nowhere
 * (a session's budget_drops reads over_budget; without the hold nothing is
 * lost). Before, the refused hold counted a budget drop for a load that lost
 * nothing (seen: a 1 MB .htevb under a 16 MiB session budget). */
static void test_compressed_hold_over_budget(void)
{
    struct tee t;
    build_stream(&t, 100000, HTEVZ_FRAME_BYTES, 3);
    struct decoded ref = decode(t.plain.p, t.plain.n, 0, 0);
    size_t reader_mem = 0;
    {
        struct htevz_reader z;
        CHECK(htevz_reader_init(&z, NULL) == 0);
        reader_mem = htevz_reader_mem(&z);
        htevz_reader_close(&z);
    }
    size_t v2_mem = 0; /* the HTEVB2 reader's tables (the stream is HTEVB2) */
    {
        struct htevb2 v2;
        CHECK(htevb2_init(&v2, NULL, MEM_decoder_buffers, 0) == 0);
        v2_mem = v2.bytes;
        htevb2_close(&v2);
    }
    struct mem_budget b;
    /* The reader's context with a 1 MiB window (about 1.6 MiB once it saw a
     * frame), the HTEVB2 tables, the interner's first chunks, not 1 MiB more. */
    mem_budget_init(&b, NULL, reader_mem + v2_mem + (5u << 19));
    struct mem_acct a;
    mem_acct_init(&a, &b);
    struct stack_intern si;
    CHECK(stack_intern_init_acct(&si, 1u << 16, 1u << 16, 1024, &a, MEM_decoder_stacks,
                                 MEM_decoder_strings) == 0);
    struct decoded d;
    memset(&d, 0, sizeof(d));
    d.h = 0xcbf29ce484222325ULL;
    struct replay r;
    replay_init(&r, &si, digest_ev, &d);
    replay_feed(&r, (const char *)t.packed.p, t.packed.n);
    replay_finish(&r);
    CHECK_EQ(r.events, ref.events);
    CHECK_EQ(r.malformed, 0);
    CHECK(r.z.frames_streamed > 0); /* the hold did not fit: the case under test */
    CHECK_EQ(a.over_budget[MEM_decoder_buffers], 0);
    CHECK_EQ(r.z.charged, htevz_reader_mem(&r.z)); /* the hold it has is charged */
    replay_close(&r);
    stack_intern_close(&si);
    mem_acct_close(&a);
    free(t.plain.p);
    free(t.packed.p);
}

/* ---- HTEVB2 (htevb2.h): exact round trips and hostile records ---- */

struct evlist {
    struct ht_event *ev;
    size_t n, cap;
};

static void evlist_add(void *arg, const struct ht_event *ev)
{
    struct evlist *l = arg;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1024;
        l->ev = realloc(l->ev, l->cap * sizeof(*l->ev));
    }
    l->ev[l->n++] = *ev;
}

static int same_event(const struct ht_event *a, const struct ht_event *b)
{
    return a->t == b->t && a->kind == b->kind && a->heap == b->heap && a->addr == b->addr &&
           a->old_addr == b->old_addr && a->size == b->size && a->old_size == b->old_size &&
           a->stack == b->stack && a->tid == b->tid && a->flags == b->flags;
}

/* An address, size or heap value: the edges, small and random ones. */
static uint64_t edge_value(uint64_t *rng)
{
    uint64_t r = rng_next(rng);
    switch (r % 8) {
    case 0:
        return 0;
    case 1:
        return UINT64_MAX;
    case 2:
        return UINT64_MAX - (r >> 60);
    case 3:
        return rng_next(rng);
    case 4:
        return (r >> 8) % 100;
    default:
        return 0x7f0000000000ull + ((r >> 16) % 4096) * 16;
    }
}

/* n random events (file-order times, never backwards, jumps up to 2^64-1)
 * over the stacks and names of si: allocations with frees of live blocks
 * (many older than the rings hold), of unknown addresses, reallocs, and every
 * other kind. events[i] is what the reader must give back. */
static void random_events(struct stack_intern *si, uint64_t seed, size_t n, struct evlist *out)
{
    uint64_t rng = seed, t = 0, heaps[4] = {0, 1, 0x55550000, UINT64_MAX};
    uint32_t stacks[16], names[3];
    for (unsigned i = 0; i < 16; i++) {
        uint64_t frames[8];
        for (unsigned k = 0; k < 8; k++)
            frames[k] = k == 3 ? HT_FRAME_SYM | stack_intern_str(si, "sym", 3) : 0x400000 + i * 64 + k;
        stacks[i] = stack_intern_get(si, frames, 1 + i % 8);
    }
    names[0] = stack_intern_str(si, "/lib/a.so", 9);
    names[1] = stack_intern_str(si, "/lib/b.so", 9);
    names[2] = stack_intern_str(si, "0badc0de", 8);
    static uint64_t live[1 << 16];
    size_t nlive = 0;
    uint64_t bump = 0x560000000000ull;
    out->n = 0;
    for (size_t i = 0; i < n; i++) {
        struct ht_event ev;
        memset(&ev, 0, sizeof(ev));
        uint64_t r = rng_next(&rng);
        uint64_t step = r % 16 == 0 ? rng_next(&rng) : r % 4 == 0 ? 0 : (r >> 8) % 5000;
        t = step > UINT64_MAX - t ? UINT64_MAX : t + step;
        ev.t = t;
        unsigned pick = (unsigned)(rng_next(&rng) % 100);
        ev.kind = pick < 40 ? HT_EV_ALLOC : pick < 75 ? HT_EV_FREE : pick < 85 ? HT_EV_REALLOC
                                                                    : 1 + pick % (HT_EV_KIND_COUNT - 1);
        ev.heap = heaps[rng_next(&rng) % 16 < 12 ? 2 : rng_next(&rng) % 4];
        ev.tid = rng_next(&rng) % 4 == 0 ? (uint32_t)rng_next(&rng) : rng_next(&rng) % 3 == 0 ? UINT32_MAX : 7;
        uint64_t sr = rng_next(&rng);
        ev.stack = sr % 5 == 0 ? 0 : stacks[sr % 16];
        ev.flags = sr % 7 == 0 ? HT_EVF_TRUNCATED : 0;
        ev.size = rng_next(&rng) % 4 == 0 ? edge_value(&rng) : 16 + rng_next(&rng) % 256;
        int fresh = rng_next(&rng) % 3 == 0;
        switch (ev.kind) {
        case HT_EV_ALLOC:
            ev.addr = fresh ? edge_value(&rng) : (bump += 16 + ev.size % 4096);
            break;
        case HT_EV_FREE:
        case HT_EV_REALLOC: {
            uint64_t *a = ev.kind == HT_EV_FREE ? &ev.addr : &ev.old_addr;
            if (nlive && !fresh) {
                size_t j = rng_next(&rng) % 2 ? nlive - 1 - rng_next(&rng) % (nlive < 8 ? nlive : 8)
                                              : rng_next(&rng) % nlive;
                *a = live[j];
                live[j] = live[--nlive];
            } else {
                *a = edge_value(&rng); /* unknown to the rings, or 0, or the edges */
            }
            if (ev.kind == HT_EV_REALLOC) {
                ev.addr = rng_next(&rng) % 2 ? ev.old_addr : (bump += 4096);
                ev.old_size = rng_next(&rng) % 2 ? ev.size / 2 : edge_value(&rng);
            } else {
                ev.size = rng_next(&rng) % 8 ? 0 : ev.size;
            }
            break;
        }
        case HT_EV_MODULE_LOAD:
        case HT_EV_MODULE_UNLOAD:
            ev.heap = names[rng_next(&rng) % 2];
            ev.old_size = rng_next(&rng) % 2 ? names[2] : 0;
            ev.addr = edge_value(&rng);
            ev.old_addr = edge_value(&rng);
            break;
        default:
            ev.addr = edge_value(&rng);
            ev.old_addr = rng_next(&rng) % 4 == 0 ? edge_value(&rng) : 0;
            ev.old_size = rng_next(&rng) % 4 == 0 ? edge_value(&rng) : 0;
            break;
        }
        if ((ev.kind == HT_EV_ALLOC || ev.kind == HT_EV_REALLOC) && nlive < 1 << 16)
            live[nlive++] = ev.addr;
        evlist_add(out, &ev);
    }
}

/* Write events as version 1 or 2; offs[i] is where event i's record ends. */
static void write_events(struct stack_intern *si, int version, const struct evlist *in,
                         size_t *offs)
{
    bin_len = 0;
    struct htevb_writer w;
    CHECK_EQ(htevb_writer_init_version(&w, si, version, bin_out, NULL), 0);
    for (size_t i = 0; i < in->n; i++) {
        CHECK_EQ(htevb_write_event(&w, &in->ev[i]), 0);
        if (offs)
            offs[i] = bin_len;
    }
    htevb_writer_close(&w);
}

/* Read bin_buf[0, n) through a replay in pieces of 1..max_piece bytes. */
static void read_events(struct stack_intern *si, const unsigned char *p, size_t n,
                        size_t max_piece, uint64_t seed, struct evlist *out,
                        uint64_t *malformed, char *err, uint64_t *v2_errors)
{
    struct replay r;
    out->n = 0;
    replay_init(&r, si, evlist_add, out);
    uint64_t rng = seed | 1;
    for (size_t off = 0; off < n;) {
        size_t k = 1 + rng_next(&rng) % max_piece;
        if (k > n - off)
            k = n - off;
        replay_feed(&r, (const char *)p + off, k);
        off += k;
    }
    replay_finish(&r);
    *malformed = r.malformed;
    if (err)
        memcpy(err, r.bin.err, sizeof(r.bin.err));
    if (v2_errors)
        memcpy(v2_errors, r.bin.v2_errors, sizeof(r.bin.v2_errors));
    replay_close(&r);
}

static void test_v2_roundtrip(void)
{
    struct stack_intern si;
    stack_intern_init(&si, 1u << 16, 1u << 16);
    struct evlist in = {0}, back = {0};
    /* Three ring sizes of events: frees past what the rings keep. */
    for (uint64_t seed = 1; seed <= 4; seed++) {
        random_events(&si, 0x9e3779b97f4a7c15ull * seed, seed == 4 ? 3 * HTEVB2_RING : 5000, &in);
        for (int version = 1; version <= 2; version++) {
            write_events(&si, version, &in, NULL);
            CHECK(memcmp(bin_buf, version == 2 ? HTEVB2_MAGIC : HTEVB_MAGIC, 8) == 0);
            for (size_t piece = 1; piece <= 70001; piece += 70000) {
                uint64_t malformed;
                read_events(&si, bin_buf, bin_len, piece, seed, &back, &malformed, NULL, NULL);
                CHECK_EQ(malformed, 0);
                CHECK_EQ(back.n, in.n);
                size_t bad = 0;
                for (size_t i = 0; i < in.n && i < back.n; i++)
                    bad += !same_event(&in.ev[i], &back.ev[i]);
                CHECK_EQ(bad, 0);
            }
        }
    }
    free(in.ev);
    free(back.ev);
    stack_intern_close(&si);
}

/* A small stream cut at every byte: the events before the cut come back
 * exactly, a cut inside a record is one malformed, never more. */
static void test_v2_truncated(void)
{
    struct stack_intern si;
    stack_intern_init(&si, 1u << 16, 1u << 16);
    struct evlist in = {0}, back = {0};
    random_events(&si, 77, 120, &in);
    size_t offs[120];
    write_events(&si, 2, &in, offs);
    unsigned char *full = malloc(bin_len);
    size_t full_len = bin_len;
    memcpy(full, bin_buf, bin_len);
    for (size_t cut = 0; cut <= full_len; cut++) {
        uint64_t malformed;
        read_events(&si, full, cut, cut % 5 + 1, cut, &back, &malformed, NULL, NULL);
        size_t want = 0, boundary = cut == 0 || cut == HTEVB_MAGIC_LEN;
        while (want < in.n && offs[want] <= cut)
            want++;
        for (size_t i = 0; i < in.n; i++)
            boundary |= offs[i] == cut;
        CHECK_EQ(back.n, want);
        CHECK(malformed <= 1);
        if (boundary)
            CHECK_EQ(malformed, 0);
        for (size_t i = 0; i < want && i < back.n; i++)
            CHECK(same_event(&in.ev[i], &back.ev[i]));
    }
    free(full);
    free(in.ev);
    free(back.ev);
    stack_intern_close(&si);
}

/* A hostile record after a good prefix: events before it stay, one malformed
 * with its own message and counter, whole or fed a byte at a time. */
static void hostile(const unsigned char *rec, size_t n, uint64_t events, int err, const char *msg)
{
    struct stack_intern si;
    stack_intern_init(&si, 1u << 16, 1u << 16);
    unsigned char buf[256];
    memcpy(buf, HTEVB2_MAGIC, HTEVB_MAGIC_LEN);
    memcpy(buf + HTEVB_MAGIC_LEN, rec, n);
    for (size_t piece = 1; piece <= 256; piece += 255) {
        struct evlist back = {0};
        uint64_t malformed;
        char why[128];
        uint64_t v2_errors[6];
        read_events(&si, buf, HTEVB_MAGIC_LEN + n, piece, 0, &back, &malformed, why, v2_errors);
        CHECK_EQ(back.n, events);
        CHECK_EQ(malformed, 1);
        if (!strstr(why, msg))
            fprintf(stderr, "want \"%s\", got \"%s\" (piece %zu, %zu bytes)\n", msg, why, piece, n);
        CHECK(strstr(why, msg) != NULL);
        if (err)
            CHECK_EQ(v2_errors[-err], 1);
        free(back.ev);
    }
    stack_intern_close(&si);
}

static void test_v2_hostile(void)
{
    enum { A = 0x80 | HT_EV_ALLOC, F = 0x80 | HT_EV_FREE, RE = 0x80 | HT_EV_REALLOC };
    /* alloc of 8 bytes at 8 (zigzag 16), then frees naming it (ref 0) and a
     * slot the ring never held (ref 1). */
    const unsigned char empty_ring[] = {F | 0x60, 0, 0};
    hostile(empty_ring, sizeof(empty_ring), 0, HTEVB2_EREF, "empty allocation-ring slot");
    const unsigned char past_ring[] = {A | 0x20, 0x08, 16, 8, F | 0x60, 0, 0, F | 0x60, 0, 1};
    hostile(past_ring, sizeof(past_ring), 2, HTEVB2_EREF, "empty allocation-ring slot");
    /* A new address named in the free ring before any free. */
    const unsigned char empty_frees[] = {A | 0x60, 0, 0};
    hostile(empty_frees, sizeof(empty_frees), 0, HTEVB2_EREF, "empty allocation-ring slot");
    const unsigned char ref_alone[] = {F | 0x40, 0};
    hostile(ref_alone, sizeof(ref_alone), 0, HTEVB2_EREFBIT, "reference bit without");
    const unsigned char oref_alone[] = {RE, 0x02};
    hostile(oref_alone, sizeof(oref_alone), 0, HTEVB2_EREFBIT, "reference bit without");
    /* Varints: 10 bytes with a bit past 2^64, 11 bytes, and an endless one. */
    const unsigned char v65[] = {A | 0x20, 0, 0xff, 0xff, 0xff, 0xff, 0xff,
                                 0xff, 0xff, 0xff, 0xff, 0x02};
    hostile(v65, sizeof(v65), 0, HTEVB2_EVARINT, "oversized varint");
    const unsigned char v11[] = {A | 0x20, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                 0x80, 0x80, 0x80, 0x80, 0x00};
    hostile(v11, sizeof(v11), 0, HTEVB2_EVARINT, "oversized varint");
    unsigned char endless[200];
    endless[0] = A | 0x20;
    endless[1] = 0;
    memset(endless + 2, 0xff, sizeof(endless) - 2);
    hostile(endless, sizeof(endless), 0, HTEVB2_EVARINT, "oversized varint");
    const unsigned char kind0[] = {0x80, 0}, kind14[] = {0x80 | 14, 0}, kind15[] = {0x8f, 0};
    hostile(kind0, 2, 0, HTEVB2_EKIND, "bad event kind");
    hostile(kind14, 2, 0, HTEVB2_EKIND, "bad event kind");
    hostile(kind15, 2, 0, HTEVB2_EKIND, "bad event kind");
    /* Stack 2^33, tid 2^32, a stack never defined, a module name never defined. */
    const unsigned char big_stack[] = {A, 0x20, 0x80, 0x80, 0x80, 0x80, 0x20};
    hostile(big_stack, sizeof(big_stack), 0, HTEVB2_ERANGE, "over 32 bits");
    const unsigned char big_tid[] = {A, 0x40, 0x80, 0x80, 0x80, 0x80, 0x10};
    hostile(big_tid, sizeof(big_tid), 0, HTEVB2_ERANGE, "over 32 bits");
    const unsigned char no_stack[] = {A, 0x20, 5};
    hostile(no_stack, sizeof(no_stack), 0, 0, "stack id not defined");
    const unsigned char no_name[] = {0x80 | HT_EV_MODULE_LOAD, 0x04, 3};
    hostile(no_name, sizeof(no_name), 0, 0, "string id not defined");
    /* HTEVB1's event record has no place in an HTEVB2 stream. */
    const unsigned char v1_event[] = {A, 0, 'e', HT_EV_ALLOC, 4, 0, 0x10, 8};
    hostile(v1_event, sizeof(v1_event), 1, 0, "unknown record type");
}

HT_TEST_MAIN(T(binary_roundtrip), T(binary_malformed), T(parse_kinds), T(malformed_lines),
             T(chunked_equals_whole), T(long_line_bounded), T(deep_stack_truncated),
             T(module_events), T(frame_resolver), T(compressed_roundtrip), T(compressed_big),
             T(compressed_same_engine), T(compressed_malformed), T(compressed_frame_checked),
             T(compressed_hold_over_budget), T(v2_roundtrip), T(v2_truncated), T(v2_hostile))
