/* Reply framing (common/ht-proto.c): frames within the target, linear in the
 * reply's size, and merged back to the very same data. */
#include "ht-alloc.h"
#include "ht-proto.h"
#include "ht-test.h"

#include <cjson/cJSON.h>
#include <uv.h>

struct frames {
    cJSON *merged;
    int n, bad, more_last;
    size_t biggest;
};

/* The ctl's side: parse each frame, merge its data into the first. */
static int collect_cb(void *arg, char *line)
{
    struct frames *f = arg;
    size_t len = strlen(line);
    if (len > f->biggest)
        f->biggest = len;
    cJSON *env = cJSON_Parse(line);
    ht_free(line);
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(env, "ok")))
        f->bad++;
    cJSON *d = cJSON_DetachItemFromObjectCaseSensitive(env, "data");
    f->more_last = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(env, "more"));
    cJSON_Delete(env);
    if (!f->merged) {
        f->merged = d;
    } else {
        ht_reply_merge(f->merged, d);
        cJSON_Delete(d);
    }
    f->n++;
    return 0;
}

static cJSON *rows_data(int n, int nested)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "format", "json");
    cJSON *in = nested ? cJSON_AddObjectToObject(d, "result") : d;
    cJSON_AddNumberToObject(in, "session", 1);
    cJSON *rows = cJSON_AddArrayToObject(in, "rows");
    for (int i = 0; i < n; i++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "rank", i);
        cJSON_AddStringToObject(r, "frame", "app.dll!some_function_name_of_a_usual_length");
        cJSON_AddItemToArray(rows, r);
    }
    cJSON_AddNumberToObject(in, "groups", n); /* a member after the cut array */
    return d;
}

/* libuv's monotonic clock: CLOCK_MONOTONIC on Linux, QueryPerformanceCounter on Windows. */
static double now_s(void)
{
    return (double)uv_hrtime() / 1e9;
}

/* Frame then merge n rows; the result equals the input, member order too. */
static void frame_and_merge(int n, int nested, double *secs)
{
    cJSON *d = rows_data(n, nested);
    char *want = cJSON_PrintUnformatted(d);
    struct frames f = {0};
    double t0 = now_s();
    CHECK_EQ(ht_reply_frames(42, d, collect_cb, &f), 0);
    *secs = now_s() - t0;
    char *got = cJSON_PrintUnformatted(f.merged);
    CHECK(got != NULL);
    CHECK_STR(got, want);
    CHECK_EQ(f.bad, 0);
    CHECK_EQ(f.more_last, 0);
    /* Each frame is the target plus at most one item and the envelope. */
    CHECK(f.biggest < HT_FRAME_TARGET + 1024);
    CHECK(f.n >= (int)(strlen(want) / HT_FRAME_TARGET));
    cJSON_free(want);
    cJSON_free(got);
    cJSON_Delete(f.merged);
}

/* 200,000 rows (about 15 MB): linear framing takes well under a second; the
 * quadratic one (cJSON_GetArraySize in its loops) takes minutes. */
static void test_frames_linear(void)
{
    double small, big;
    frame_and_merge(20000, 0, &small);
    frame_and_merge(200000, 0, &big);
    printf("20k rows %.3f s, 200k rows %.3f s\n", small, big);
    /* Ten times the rows may cost ten times the time, not a hundred. */
    CHECK(big < 30 * small + 0.5);
    CHECK(big < 20.0);
}

/* Export's JSON nests its rows in "result": they are cut too. */
static void test_frames_nested(void)
{
    double secs;
    frame_and_merge(100000, 1, &secs);
    cJSON *d = rows_data(100000, 1);
    cJSON *outer;
    cJSON *arr = ht_reply_split_member(d, &outer);
    CHECK(arr != NULL);
    CHECK_STR(arr->string, "rows");
    CHECK(outer != NULL);
    CHECK_STR(outer->string, "result");
    cJSON_Delete(d);
}

/* The frames' text: every member around the first items, then only the array. */
static void test_framer_text(void)
{
    cJSON *d = cJSON_Parse("{\"a\":1,\"rows\":[1,2,3],\"z\":\"x\\u0001y\"}");
    cJSON *outer, *items;
    struct ht_framer f;
    cJSON *arr = ht_reply_split_member(d, &outer);
    CHECK_EQ(ht_framer_init(&f, 7, d, arr, outer, &items), 0);
    char *l1 = ht_framer_frame(&f, "1,2", 3, 1);
    char *l2 = ht_framer_frame(&f, "3", 1, 0);
    CHECK_STR(l1, "{\"v\":1,\"id\":7,\"ok\":true,\"more\":true,\"data\":{\"a\":1,\"rows\":[1,2],"
                  "\"z\":\"x\\u0001y\"}}\n");
    CHECK_STR(l2, "{\"v\":1,\"id\":7,\"ok\":true,\"data\":{\"rows\":[3]}}\n");
    ht_free(l1);
    ht_free(l2);
    cJSON_Delete(items);
    ht_framer_close(&f);
    cJSON_Delete(d);
}

/* A small reply is one frame, byte for byte what ht_reply_ok makes. */
static void test_small_reply(void)
{
    cJSON *d = rows_data(3, 0);
    char *want = ht_reply_ok(5, cJSON_Duplicate(d, 1), 0);
    struct frames f = {0};
    CHECK_EQ(ht_reply_frames(5, d, collect_cb, &f), 0);
    CHECK_EQ(f.n, 1);
    char *got = ht_reply_ok(5, f.merged, 0);
    CHECK_STR(got, want);
    ht_free(got);
    ht_free(want);
}

HT_TEST_MAIN(T(frames_linear), T(frames_nested), T(framer_text), T(small_reply))
