/* .htev parsing and replay: fields, escapes, malformed lines, chunking, bounded lines. */
#include "engine.h"
#include "ht-test.h"
#include "replay.h"
#include "htevb.h"
#include "query.h"
#include "frame-match.h"
#include "htev-write.h"

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
    CHECK(bin_len > 8 && memcmp(bin_buf, HTEVB_MAGIC, 8) == 0);
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

HT_TEST_MAIN(T(binary_roundtrip), T(binary_malformed), T(parse_kinds), T(malformed_lines),
             T(chunked_equals_whole), T(long_line_bounded), T(deep_stack_truncated),
             T(module_events), T(frame_resolver))
