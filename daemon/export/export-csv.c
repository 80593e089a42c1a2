/* csv: one line per row (rank, the stack callee first, every figure) or
 * per timeline sample, each after a header line. */
#include "export.h"

#include <cjson/cJSON.h>

#define CSV_SAMPLES_HEADER "t_ns,heap_bytes,heap_count,committed_bytes,private_bytes"
#define CSV_ROWS_HEADER                                                                            \
    "rank,stack,count,size,impacting,outstanding,outstanding_count,reallocs,"                      \
    "aifi_count,aifi_size,aifo_count,aifo_size,aofi_count,aofi_size,"                              \
    "aofo_count,aofo_size"

static int sample_csv_line(const cJSON *x, struct ht_sbuf *line)
{
    return export_sbuf_printf(
        line, "%lld,%lld,%lld,%lld,%lld", (long long)export_field(x, "t"),
        (long long)export_field(x, "heap"), (long long)export_field(x, "heap_count"),
        (long long)export_field(x, "committed"), (long long)export_field(x, "private_bytes"));
}

static int csv_line(const cJSON *r, int rank, struct ht_sbuf *line)
{
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(r, "types");
    int64_t tc[4] = {0}, ts[4] = {0};
    static const char *const tn[] = {"AIFI", "AIFO", "AOFI", "AOFO"};
    for (int k = 0; k < 4; k++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(types, tn[k]);
        tc[k] = export_field(t, "count");
        ts[k] = export_field(t, "size");
    }
    int rc = export_sbuf_printf(line, "%d,\"", rank);
    if (rc == 0)
        rc = export_row_label(r, " <- ", 0, 1, line);
    if (rc == 0)
        rc = export_sbuf_printf(
            line, "\",%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld",
            (long long)export_field(r, "count"), (long long)export_field(r, "size"),
            (long long)export_field(r, "impacting"), (long long)export_field(r, "outstanding"),
            (long long)export_field(r, "outstanding_count"), (long long)export_field(r, "reallocs"),
            (long long)tc[0], (long long)ts[0], (long long)tc[1], (long long)ts[1],
            (long long)tc[2], (long long)ts[2], (long long)tc[3], (long long)ts[3]);
    return rc;
}

/* The export_row_fn forms of the lines: 1 made, or an error. */
static int csv_row(const struct export_value *v, const cJSON *row, uint32_t rank,
                   struct ht_sbuf *out)
{
    (void)v;
    int rc = csv_line(row, (int)rank, out);
    return rc == 0 ? 1 : rc;
}

static int csv_sample(const struct export_value *v, const cJSON *x, uint32_t rank,
                      struct ht_sbuf *out)
{
    (void)v;
    (void)rank;
    int rc = sample_csv_line(x, out);
    return rc == 0 ? 1 : rc;
}

const struct export_format export_csv = {
    .name = "csv",
    .extension = ".csv",
    .mime = "text/csv",
    .rows = {EXPORT_BEGIN(CSV_ROWS_HEADER), csv_row},
    .samples = {EXPORT_BEGIN(CSV_SAMPLES_HEADER), csv_sample},
    .title = "CSV",
};
