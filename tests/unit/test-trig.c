/* Issue 8 items 1, 18-20: trigger steps, declared argument ranges, strict framing, escaping. */
#include "ht-chunk.h"
#include "ht-commands.h"
#include "ht-error.h"
#include "ht-proto.h"
#include "ht-test.h"
#include "ht-text.h"
#include "log.h"
#include "commands.h"

#include <cjson/cJSON.h>
#include <unistd.h>

static void test_next_threshold(void)
{
    /* Plain steps: the first point of the grid past the value. */
    CHECK_EQ(trigger_next_after(11, 10, 11), 21);
    CHECK_EQ(trigger_next_after(11, 10, 20), 21);
    CHECK_EQ(trigger_next_after(11, 10, 21), 31);
    CHECK_EQ(trigger_next_after(11, 10, 35), 41);
    CHECK_EQ(trigger_next_after(11, 10, 5), 11); /* not reached: unchanged */
    CHECK_EQ(trigger_next_after(11, 0, 11), UINT64_MAX);
    /* The reproduction of the issue: private bytes at 2^64-1 from a first
     * threshold of 1 with a step of 1 (2^64 loop turns before) and of 1 MiB
     * (2^44 turns): done at once, saturated. */
    CHECK_EQ(trigger_next_after(1, 1, UINT64_MAX), UINT64_MAX);
    CHECK_EQ(trigger_next_after(1, 1048576, UINT64_MAX), UINT64_MAX);
    /* The last step that fits in 64 bits is still taken. */
    CHECK_EQ(trigger_next_after(1, 1048576, UINT64_MAX - 1048576), UINT64_MAX - 1048574);
    /* Near the top: the last step that fits is still taken exactly. */
    CHECK_EQ(trigger_next_after(UINT64_MAX - 5, 2, UINT64_MAX - 5), UINT64_MAX - 3);
    CHECK_EQ(trigger_next_after(UINT64_MAX - 5, 2, UINT64_MAX - 4), UINT64_MAX - 3);
    CHECK_EQ(trigger_next_after(UINT64_MAX - 5, 2, UINT64_MAX - 3), UINT64_MAX - 1);
    CHECK_EQ(trigger_next_after(UINT64_MAX - 5, 2, UINT64_MAX - 1), UINT64_MAX);
    CHECK_EQ(trigger_next_after(UINT64_MAX - 5, 10, UINT64_MAX - 5), UINT64_MAX);
    CHECK_EQ(trigger_next_after(0, UINT64_MAX, 0), UINT64_MAX);
    CHECK_EQ(trigger_next_after(0, UINT64_MAX - 1, 0), UINT64_MAX - 1);
    /* 1 ns steps over a 30 s session: one division, not 3e10 additions. */
    CHECK_EQ(trigger_next_after(1000000001, 1, 30000000000ULL), 30000000001ULL);
    /* Against a loop model on small numbers. */
    for (uint64_t next = 0; next < 40; next++)
        for (uint64_t every = 1; every < 12; every++)
            for (uint64_t v = next; v < next + 60; v++) {
                uint64_t m = next, k = 0;
                while (m <= v) {
                    m += every;
                    k++;
                }
                CHECK_EQ(trigger_next_after(next, every, v), m);
                CHECK_EQ(trigger_steps(next, every, v), k); /* every step crossed */
            }
    /* Steps crossed by a jump: the snapshot names them all (issue 21 item 7). */
    CHECK_EQ(trigger_steps(11, 10, 5), 0);
    CHECK_EQ(trigger_steps(11, 0, 500), 1);
    CHECK_EQ(trigger_steps(1, 1048576, UINT64_MAX), (UINT64_MAX - 1) / 1048576 + 1);
}

/* name = v, and whatever else the command requires. */
static cJSON *one_arg(int cmd, const char *name, double v)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, name, v);
    for (size_t i = 0; i < ht_nargs; i++) {
        const struct ht_arg_spec *a = &ht_args[i];
        if (a->cmd != cmd || !(a->flags & HT_ARGF_REQUIRED) || (a->flags & HT_ARGF_CTL))
            continue;
        if (a->type == HT_ARG_LIST)
            cJSON_AddItemToArray(cJSON_AddArrayToObject(o, a->name), cJSON_CreateString("x"));
        else
            cJSON_AddStringToObject(o, a->name, "json");
    }
    return o;
}

/* Every numeric argument of the table has a declared range, and the generic
 * check refuses 2^32, 2^53, -1 and 1e300 for each. */
static void test_arg_ranges(void)
{
    static const double bad[] = {4294967296.0, 9007199254740992.0, -1, 1e300};
    unsigned nuint = 0;
    char err[256];
    for (size_t i = 0; i < ht_nargs; i++) {
        const struct ht_arg_spec *a = &ht_args[i];
        if (a->type != HT_ARG_UINT)
            continue;
        nuint++;
        const struct ht_arg_range *r = ht_arg_range_find(a->cmd, a->name);
        if (!r)
            fprintf(stderr, "%s --%s has no HT_RANGE\n", ht_cmds[a->cmd].name, a->name);
        CHECK(r != NULL);
        CHECK(r->max <= 4294967295u); /* handlers read them as uint32 */
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            cJSON *o = one_arg(a->cmd, a->name, bad[k]);
            err[0] = '\0';
            int rc = ht_args_validate(&ht_cmds[a->cmd], o, err, sizeof(err));
            cJSON_Delete(o);
            if (rc != HT_EBADARG)
                fprintf(stderr, "%s --%s %g: %d\n", ht_cmds[a->cmd].name, a->name, bad[k], rc);
            CHECK_EQ(rc, HT_EBADARG);
            CHECK(strstr(err, a->name) != NULL);
        }
        /* Both ends of the range pass; one past either end does not. */
        cJSON *o = one_arg(a->cmd, a->name, (double)r->min);
        int rc_min = ht_args_validate(&ht_cmds[a->cmd], o, err, sizeof(err));
        cJSON_Delete(o);
        o = one_arg(a->cmd, a->name, (double)r->max);
        int rc_max = ht_args_validate(&ht_cmds[a->cmd], o, err, sizeof(err));
        cJSON_Delete(o);
        o = one_arg(a->cmd, a->name, (double)r->max + 1);
        int rc_over = ht_args_validate(&ht_cmds[a->cmd], o, err, sizeof(err));
        cJSON_Delete(o);
        CHECK_EQ(rc_min, 0);
        CHECK_EQ(rc_max, 0);
        CHECK_EQ(rc_over, HT_EBADARG);
        if (r->min > 0) {
            o = one_arg(a->cmd, a->name, (double)r->min - 1);
            int rc_under = ht_args_validate(&ht_cmds[a->cmd], o, err, sizeof(err));
            cJSON_Delete(o);
            CHECK_EQ(rc_under, HT_EBADARG);
        }
    }
    CHECK(nuint >= 9); /* pid, stack_depth x2, top x4, count, snapshot */
    /* The case: top --top 4294967301 ran as 5 rows. */
    cJSON *o = one_arg(HT_CMD_TOP, "top", 4294967301.0);
    CHECK_EQ(ht_args_validate(ht_cmd_find("top"), o, err, sizeof(err)), HT_EBADARG);
    CHECK_STR(err, "argument \"top\" must be an integer from 1 to 1000");
    cJSON_Delete(o);
    o = one_arg(HT_CMD_STACKS, "session", 4294967296.0);
    CHECK_EQ(ht_args_validate(ht_cmd_find("stacks"), o, err, sizeof(err)), HT_EBADARG);
    cJSON_Delete(o);
}

static int chunk(const char *h, size_t n, uint64_t *len)
{
    *len = 12345;
    return ht_chunk_length(h, n, len);
}

static void test_chunk_headers(void)
{
    uint64_t len;
    CHECK_EQ(chunk("59", 2, &len), 0);
    CHECK_EQ(len, 59);
    CHECK_EQ(chunk("0", 1, &len), 0);
    CHECK_EQ(len, 0);
    CHECK_EQ(chunk("59\r", 3, &len), 0);
    CHECK_EQ(len, 59);
    CHECK_EQ(chunk("4194304", 7, &len), 0);
    CHECK_EQ(len, 4194304);
    static const struct {
        const char *h;
        size_t n;
    } bad[] = {{"+59", 3}, {" 59", 3},      {"59 ", 3},      {"59\0zz", 5}, {"-0", 2},
               {"", 0},    {"00", 2},       {"059", 3},      {"0x10", 4},   {"4194305", 7},
               {"\r", 1},  {"99999999", 8}, {"59\r\r", 4},   {"5 9", 3},    {"\0", 1},
               {"1e3", 3}, {"59\n", 3},     {"00000001", 8}, {"\t59", 3}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = chunk(bad[i].h, bad[i].n, &len);
        if (rc != HT_EBADARG)
            fprintf(stderr, "chunk header %zu accepted\n", i);
        CHECK_EQ(rc, HT_EBADARG);
        CHECK_EQ(len, 12345);
    }
}

static void test_text_escape(void)
{
    char out[256];
    ht_text_escape("plain name", out, sizeof(out));
    CHECK_STR(out, "plain name");
    ht_text_escape("a\nb\rc\td", out, sizeof(out));
    CHECK_STR(out, "a\\nb\\rc\\td");
    ht_text_escape("\x1b[31mred\x1b]0;title\x07\x7f", out, sizeof(out));
    CHECK_STR(out, "\\x1b[31mred\\x1b]0;title\\x07\\x7f");
    /* C1 CSI as UTF-8 (U+009B) and as a raw byte. */
    ht_text_escape("x\xc2\x9b"
                   "2Jy\x9b",
                   out, sizeof(out));
    CHECK_STR(out, "x\\u009b2Jy\\x9b");
    /* Printable UTF-8 and backslashes stay as they are. */
    ht_text_escape("C:\\lib \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \xc2\xa0", out, sizeof(out));
    CHECK_STR(out, "C:\\lib \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \xc2\xa0");
    /* Not UTF-8: overlong, surrogate, past U+10FFFF, cut sequences. */
    ht_text_escape("\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80|\xe2\x82", out, sizeof(out));
    CHECK_STR(out, "\\xc0\\xaf|\\xed\\xa0\\x80|\\xf4\\x90\\x80\\x80|\\xe2\\x82");
    CHECK(ht_utf8_valid(out, strlen(out)));
    /* Cut: never in the middle of an escape or a character, "..." at the end. */
    char small[12];
    CHECK_EQ(ht_text_escape("abcdef\n\n\n\n", small, sizeof(small)), 11);
    CHECK_STR(small, "abcdef\\n...");
    CHECK_EQ(ht_text_escape("abcdefg\xe2\x82\xac!!", small, sizeof(small)), 10);
    CHECK_STR(small, "abcdefg...");
    CHECK_EQ(ht_text_escape("abcdefgh\xe2\x82\xac", small, sizeof(small)), 11);
    CHECK_STR(small, "abcdefgh\xe2\x82\xac");
    CHECK_EQ(ht_text_escape("0123456789A", small, sizeof(small)), 11);
    CHECK_STR(small, "0123456789A");
    CHECK(ht_utf8_valid("\xe2\x82\xac", 3));
    CHECK(!ht_utf8_valid("a\0b", 3));
    CHECK(!ht_utf8_valid("\xff", 1));
}

static void test_request_lines(void)
{
    struct ht_request req;
    char err[256];
    static const char ok[] = "{\"v\":1,\"id\":7,\"cmd\":\"ping\"}  \r";
    CHECK_EQ(ht_request_parse(ok, sizeof(ok) - 1, &req, err, sizeof(err)), 0);
    ht_request_free(&req);
    static const char nul_lead[] = "\0{\"v\":1,\"id\":7,\"cmd\":\"ping\"}";
    CHECK_EQ(ht_request_parse(nul_lead, sizeof(nul_lead) - 1, &req, err, sizeof(err)), HT_EBADJSON);
    CHECK_STR(err, "request contains a NUL byte");
    ht_request_free(&req);
    static const char nul_in[] = "{\"v\":1,\"id\":7,\"cmd\":\"ping\"}\0zz";
    CHECK_EQ(ht_request_parse(nul_in, sizeof(nul_in) - 1, &req, err, sizeof(err)), HT_EBADJSON);
    ht_request_free(&req);
    static const char trailing[] = "{\"v\":1,\"id\":7,\"cmd\":\"ping\"}garbage";
    CHECK_EQ(ht_request_parse(trailing, sizeof(trailing) - 1, &req, err, sizeof(err)), HT_EBADJSON);
    CHECK_STR(err, "request has bytes after its JSON object");
    CHECK_EQ(req.id, 7); /* the error can still name the request */
    ht_request_free(&req);
    static const char two[] = "{\"v\":1,\"id\":7,\"cmd\":\"ping\"}{}";
    CHECK_EQ(ht_request_parse(two, sizeof(two) - 1, &req, err, sizeof(err)), HT_EBADJSON);
    ht_request_free(&req);
}

static void test_error_utf8(void)
{
    char *line = ht_reply_err(3, HT_EUNKNOWNCMD, "unknown command \"\xff\xfe\x1b[2J\"");
    CHECK(line != NULL);
    CHECK(ht_utf8_valid(line, strlen(line)));
    cJSON *o = cJSON_Parse(line);
    CHECK(o != NULL);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "msg")),
              "unknown command \"\\xff\\xfe\\x1b[2J\"");
    cJSON_Delete(o);
    free(line);
}

static void test_log_escape(void)
{
    char path[] = "/tmp/ht-test-log-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_EQ(log_open(LOG_INFO, path), 0);
    log_info("session %u \"%s\" created", 1u,
             "x\n2026-01-01T00:00:00Z heaptraced info: forged\x1b[31m");
    log_info("second");
    log_close();
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char buf[1024];
    int lines = 0;
    char first[1024] = "";
    while (fgets(buf, sizeof(buf), f))
        if (lines++ == 0)
            snprintf(first, sizeof(first), "%s", buf);
    fclose(f);
    unlink(path);
    CHECK_EQ(lines, 2);
    CHECK(
        strstr(first, "\"x\\n2026-01-01T00:00:00Z heaptraced info: forged\\x1b[31m\" created\n") !=
        NULL);
}

HT_TEST_MAIN(T(next_threshold), T(arg_ranges), T(chunk_headers), T(text_escape), T(request_lines),
             T(error_utf8), T(log_escape))
