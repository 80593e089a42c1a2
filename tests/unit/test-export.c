/* Export formats (daemon/export/): the table, and one writer for live and snapshot rows. */
#include "export.h"
#include "ht-error.h"
#include "ht-test.h"

#include <cjson/cJSON.h>
#include <string.h>

static void test_table(void)
{
    char names[128];
    CHECK(export_format_find("json") == &export_json);
    CHECK(export_format_find("csv") == &export_csv);
    CHECK(export_format_find("collapsed") == &export_collapsed);
#ifdef HEAPTRACE_WITH_PPROF
    CHECK(export_format_find("pprof") == &export_pprof);
    CHECK(export_pprof.binary && !export_pprof.json && !export_pprof.samples.row);
    CHECK(strcmp(export_format_names(names, sizeof(names)), "json, csv, collapsed or pprof") == 0);
#else
    CHECK(export_format_find("pprof") == NULL);
    CHECK(strcmp(export_format_names(names, sizeof(names)), "json, csv or collapsed") == 0);
#endif
    CHECK(strcmp(export_sample_format_names(names, sizeof(names)), "json or csv") == 0);
    CHECK(export_collapsed.samples.row == NULL);
}

static const char rows_text[] =
    "[{\"frames\":[\"a;b!inner\",\"q\\\"uote\",\"outer\"],\"count\":2,\"size\":64,"
    "\"outstanding\":32,\"types\":{\"AIFO\":{\"count\":1,\"size\":32}}},"
    "{\"frames\":[\"x\"],\"count\":1,\"size\":8,\"outstanding\":0},"
    "{\"image\":\"lib.so\",\"count\":3,\"size\":24,\"outstanding\":24}]";

/* A snapshot's lines (export_lines_add) are the lines a live export streams
 * (export_bound_item, one JSON string item per row), begin line first. */
static void same_lines(const struct export_format *f, const char *const *want, int nwant)
{
    cJSON *rows = cJSON_Parse(rows_text);
    const struct export_value *v;
    char err[128];
    CHECK_EQ(export_value_of(NULL, &v, err, sizeof(err)), 0);
    const struct export_bound *b = export_bind(f, 0, v);
    cJSON *lines = cJSON_CreateArray();
    CHECK_EQ(export_lines_add(b, rows, lines), 0);
    cJSON *streamed = cJSON_CreateArray();
    if (b->w->begin_item)
        cJSON_AddItemToArray(streamed, cJSON_Parse(b->w->begin_item));
    const cJSON *r;
    uint32_t rank = 0;
    cJSON_ArrayForEach(r, rows)
    {
        struct ht_sbuf item = {0};
        int rc = export_bound_item(b, r, ++rank, &item);
        CHECK(rc >= 0);
        if (rc == 1)
            cJSON_AddItemToArray(streamed, cJSON_ParseWithLength(item.p, item.len));
        ht_sbuf_free(&item);
    }
    CHECK(cJSON_Compare(lines, streamed, 1));
    CHECK_EQ(cJSON_GetArraySize(lines), nwant);
    for (int i = 0; i < nwant && i < cJSON_GetArraySize(lines); i++) {
        const char *got = cJSON_GetArrayItem(lines, i)->valuestring;
        if (strcmp(got, want[i]))
            fprintf(stderr, "line %d: %s, expected %s\n", i, got, want[i]);
        CHECK(strcmp(got, want[i]) == 0);
    }
    cJSON_Delete(streamed);
    cJSON_Delete(lines);
    cJSON_Delete(rows);
}

static void test_rows_once(void)
{
    /* Outermost first, ';' inside a frame as ':', a row of value 0 left out. */
    static const char *const collapsed[] = {"outer;q\"uote;a:b!inner 32", "lib.so 24"};
    same_lines(&export_collapsed, collapsed, 2);
    static const char *const csv[] = {
        "rank,stack,count,size,impacting,outstanding,outstanding_count,reallocs,aifi_count,"
        "aifi_size,aifo_count,aifo_size,aofi_count,aofi_size,aofo_count,aofo_size",
        "1,\"a;b!inner <- q\"\"uote <- outer\",2,64,0,32,0,0,0,0,1,32,0,0,0,0",
        "2,\"x\",1,8,0,0,0,0,0,0,0,0,0,0,0,0", "3,\"lib.so\",3,24,0,24,0,0,0,0,0,0,0,0,0,0"};
    same_lines(&export_csv, csv, 4);
}

HT_TEST_MAIN(T(table), T(rows_once))
