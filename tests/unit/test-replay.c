/* .htev parsing and replay: fields, escapes, malformed lines, chunking, bounded lines. */
#include "engine.h"
#include "ht-test.h"
#include "replay.h"

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
    feed("{\"ev\":\"process\",\"pid\":4242,\"name\":\"A\\u00e9.exe\",\"wall\":\"2026-11-22T10:00:00Z\"}\n"
         "{\"t\":1000,\"ev\":\"alloc\",\"tid\":7,\"heap\":\"0x1d0000\",\"addr\":\"0x5a10\",\"size\":40,"
         "\"stack\":[\"app.exe!f\",\"app.exe!main\"],\"future\":{\"x\":[1,2,{\"y\":null}]}}\n"
         "{\"t\":1500,\"ev\":\"realloc\",\"heap\":\"0x1d0000\",\"addr\":\"0x5a10\",\"old_addr\":\"0x5a10\","
         "\"size\":80,\"old_size\":40,\"stack\":[\"0x7ff612340000\"]}\n"
         "\r\n   \n"
         "{\"t\":3000,\"ev\":\"commit\",\"addr\":\"0x7ff000000000\",\"size\":10485760,\"stack\":[]}\n"
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
         "{\"t\":2,\"ev\":\"alloc\",\"addr\":\"0x20\"}\n"       /* no size */
         "{\"t\":3,\"ev\":\"explode\"}\n"                      /* unknown kind */
         "{\"t\":-4,\"ev\":\"free\",\"addr\":\"0x10\"}\n"       /* negative time */
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
    const char *text = "{\"t\":1,\"ev\":\"alloc\",\"addr\":\"0x10\",\"size\":8,\"stack\":[\"a!b\",\"c!d\"]}\n"
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
    size_t k = (size_t)snprintf(line, sizeof(line), "{\"t\":1,\"ev\":\"alloc\",\"addr\":\"0x10\",\"size\":8,\"stack\":[");
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

HT_TEST_MAIN(T(parse_kinds), T(malformed_lines), T(chunked_equals_whole), T(long_line_bounded),
             T(deep_stack_truncated))
