/* export: stacks, commits, the timeline or a snapshot as json, csv or collapsed stacks. */
#include "commands.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "query-args.h"
#include "query-job.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* A line of text into the "lines" array (the frame splitter cuts on it). */
static void add_line(cJSON *lines, const char *s)
{
    cJSON_AddItemToArray(lines, cJSON_CreateString(s));
}

static int64_t value_of(const cJSON *row, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, key);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
}

static const char *sort_field(const char *sort)
{
    if (!strcmp(sort, "soc"))
        return "outstanding_count";
    if (!strcmp(sort, "st"))
        return "size";
    if (!strcmp(sort, "stc"))
        return "count";
    if (!strcmp(sort, "src"))
        return "reallocs";
    if (!strcmp(sort, "impact"))
        return "impacting";
    return "outstanding";
}

/* One frame into a label: ';' separates frames in collapsed stacks, '"' is
 * doubled inside a CSV field. */
static int label_frame(struct ht_sbuf *out, const char *f, int csv)
{
    int rc = 0;
    for (const char *p = f, *q; rc == 0 && *p; p = q) {
        q = p + strcspn(p, csv ? "\"" : ";");
        rc = ht_sbuf_add(out, p, (size_t)(q - p));
        if (rc == 0 && *q)
            rc = ht_sbuf_add(out, csv ? "\"\"" : ":", csv ? 2 : 1);
        q += *q != '\0';
    }
    return rc;
}

/* The row's label: its frames (outermost first, joined by sep) or its key,
 * whole (a buffer grows up to HT_REPLY_MAX: nothing is cut silently). */
static int row_label(const cJSON *row, const char *sep, int outermost_first, int csv,
                     struct ht_sbuf *out)
{
    const cJSON *frames = cJSON_GetObjectItemCaseSensitive(row, "frames");
    if (!frames) {
        static const char *const keys[] = {"frame", "image", "heap", "type"};
        for (int k = 0; k < 4; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, keys[k]);
            if (cJSON_IsString(v))
                return label_frame(out, v->valuestring, csv);
        }
        return 0;
    }
    /* cJSON keeps the last item in child->prev: walk either way in one pass. */
    const cJSON *first = frames->child;
    const cJSON *f = outermost_first && first ? first->prev : first;
    int rc = 0;
    for (int i = 0; f && rc == 0; i++) {
        if (i)
            rc = ht_sbuf_add(out, sep, strlen(sep));
        if (rc == 0 && cJSON_IsString(f))
            rc = label_frame(out, f->valuestring, csv);
        f = outermost_first ? (f == first ? NULL : f->prev) : f->next;
    }
    return rc;
}

static int sbuf_printf(struct ht_sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int sbuf_printf(struct ht_sbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    return n < 0 ? HT_ENOMEM
                 : ht_sbuf_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

#define CSV_SAMPLES_HEADER "t_ns,heap_bytes,heap_count,committed_bytes,private_bytes"
#define CSV_ROWS_HEADER                                                                            \
    "rank,stack,count,size,impacting,outstanding,outstanding_count,reallocs,"                      \
    "aifi_count,aifi_size,aifo_count,aifo_size,aofi_count,aofi_size,"                              \
    "aofo_count,aofo_size"

static int sample_csv_line(const cJSON *x, struct ht_sbuf *line)
{
    return sbuf_printf(line, "%lld,%lld,%lld,%lld,%lld", (long long)value_of(x, "t"),
                       (long long)value_of(x, "heap"), (long long)value_of(x, "heap_count"),
                       (long long)value_of(x, "committed"),
                       (long long)value_of(x, "private_bytes"));
}

/* flamegraph.pl / speedscope: "outer;...;inner value"; 1 made, 0 when the
 * row has no value, or an error. */
static int collapsed_line(const cJSON *r, const char *field, struct ht_sbuf *line)
{
    int64_t v = value_of(r, field);
    if (v <= 0)
        return 0;
    int rc = row_label(r, ";", 1, 0, line);
    if (rc == 0 && line->len == 0)
        rc = ht_sbuf_add(line, "[no stack]", 10);
    if (rc == 0)
        rc = sbuf_printf(line, " %lld", (long long)v);
    return rc == 0 ? 1 : rc;
}

static int csv_line(const cJSON *r, int rank, struct ht_sbuf *line)
{
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(r, "types");
    int64_t tc[4] = {0}, ts[4] = {0};
    static const char *const tn[] = {"AIFI", "AIFO", "AOFI", "AOFO"};
    for (int k = 0; k < 4; k++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(types, tn[k]);
        tc[k] = value_of(t, "count");
        ts[k] = value_of(t, "size");
    }
    int rc = sbuf_printf(line, "%d,\"", rank);
    if (rc == 0)
        rc = row_label(r, " <- ", 0, 1, line);
    if (rc == 0)
        rc = sbuf_printf(
            line, "\",%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld",
            (long long)value_of(r, "count"), (long long)value_of(r, "size"),
            (long long)value_of(r, "impacting"), (long long)value_of(r, "outstanding"),
            (long long)value_of(r, "outstanding_count"), (long long)value_of(r, "reallocs"),
            (long long)tc[0], (long long)ts[0], (long long)tc[1], (long long)ts[1],
            (long long)tc[2], (long long)ts[2], (long long)tc[3], (long long)ts[3]);
    return rc;
}

/* A snapshot's rows (or samples) as lines (snapshots are small: built whole). */
static cJSON *render(const cJSON *result, const char *format, const char *sort)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "format", format);
    if (!strcmp(format, "json")) {
        cJSON_AddItemToObject(d, "result", cJSON_Duplicate(result, 1));
        return d;
    }
    cJSON *lines = cJSON_AddArrayToObject(d, "lines");
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(result, "rows");
    const char *field = sort_field(sort);
    int csv = !strcmp(format, "csv");
    if (csv)
        add_line(lines, CSV_ROWS_HEADER);
    struct ht_sbuf line = {0};
    int rank = 0, rc = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, rows)
    {
        line.len = 0;
        rc = csv ? csv_line(r, ++rank, &line) : collapsed_line(r, field, &line);
        if (rc < 0)
            break;
        if (csv || rc == 1)
            add_line(lines, line.p);
    }
    ht_sbuf_free(&line);
    if (rc < 0) {
        cJSON_Delete(d);
        return NULL;
    }
    return d;
}

/* A line as a JSON string item of "lines". */
static int line_item(const char *line, struct ht_sbuf *out)
{
    cJSON *s = cJSON_CreateString(line);
    char *text = s ? cJSON_PrintUnformatted(s) : NULL;
    cJSON_Delete(s);
    int rc = text ? ht_sbuf_add(out, text, strlen(text)) : HT_ENOMEM;
    cJSON_free(text);
    return rc == 0 ? 1 : rc;
}

static int csv_fmt(const void *arg, const cJSON *row, uint32_t rank, struct ht_sbuf *out)
{
    struct ht_sbuf line = {0};
    (void)arg;
    int rc = csv_line(row, (int)rank, &line);
    if (rc == 0)
        rc = line_item(line.p, out);
    ht_sbuf_free(&line);
    return rc;
}

static int collapsed_fmt(const void *arg, const cJSON *row, uint32_t rank, struct ht_sbuf *out)
{
    struct ht_sbuf line = {0};
    (void)rank;
    int rc = collapsed_line(row, arg, &line);
    if (rc == 1)
        rc = line_item(line.p, out);
    ht_sbuf_free(&line);
    return rc;
}

static int sample_csv_fmt(const void *arg, const cJSON *x, uint32_t rank, struct ht_sbuf *out)
{
    struct ht_sbuf line = {0};
    (void)arg;
    (void)rank;
    int rc = sample_csv_line(x, &line);
    if (rc == 0)
        rc = line_item(line.p, out);
    ht_sbuf_free(&line);
    return rc;
}

/* {"format":F,"result":head} for json (the items go in result's array
 * named key), {"format":F,"lines":[]} otherwise. */
static cJSON *export_data(const char *format, cJSON *head, const char *key, cJSON **arr,
                          cJSON **outer)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "format", format);
    if (!strcmp(format, "json")) {
        cJSON_AddItemToObject(d, "result", head);
        *outer = head;
        *arr = cJSON_GetObjectItemCaseSensitive(head, key);
    } else {
        cJSON_Delete(head);
        *outer = NULL;
        *arr = cJSON_AddArrayToObject(d, "lines");
    }
    return d;
}

static int export_timeline(struct cmd_ctx *ctx, const char *format)
{
    if (!strcmp(format, "collapsed"))
        return cmd_error(ctx, HT_EBADARG,
                         "the timeline has no collapsed-stack form: use csv or json");
    char err[256];
    cJSON *targs = cJSON_CreateObject();
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "range");
    if (r)
        cJSON_AddStringToObject(targs, "range", r->valuestring);
    cJSON *head;
    struct tl_span sp;
    int rc = timeline_head(ctx->s, targs, &head, &sp, err, sizeof(err));
    cJSON_Delete(targs);
    if (rc != 0)
        return cmd_error(ctx, rc, "%s", err);
    cJSON *arr, *outer;
    cJSON *d = export_data(format, head, "samples", &arr, &outer);
    int csv = !strcmp(format, "csv");
    return samples_reply(ctx, &sp, d, arr, outer, csv ? sample_csv_fmt : NULL, NULL,
                         csv ? "\"" CSV_SAMPLES_HEADER "\"" : NULL);
}

/* What an export's answer needs besides its query. */
struct export_job {
    char format[16], sort[16];
};

static void export_job_done(struct qjob *j)
{
    if (j->rc || !j->c) {
        qjob_answer_failed(j);
        return;
    }
    const struct export_job *x = j->arg;
    cJSON *arr, *outer;
    cJSON *d =
        export_data(x->format, rows_head(j->s, &j->qa[0]->q, &j->res[0]), "rows", &arr, &outer);
    if (!strcmp(x->format, "csv"))
        rows_job_answer(j, 0, d, arr, outer, csv_fmt, NULL, "\"" CSV_ROWS_HEADER "\"");
    else if (!strcmp(x->format, "collapsed"))
        rows_job_answer(j, 0, d, arr, outer, collapsed_fmt, sort_field(x->sort), NULL);
    else
        rows_job_answer(j, 0, d, arr, outer, NULL, NULL, NULL);
}

/* The query runs on a worker (query-job.h); the rows are formatted as they are sent. */
static int export_rows(struct cmd_ctx *ctx, const char *format, const char *what, const char *sort)
{
    struct qjob *j = qjob_new(ctx->s, "export");
    struct export_job *x = j ? ht_calloc(1, sizeof(*x)) : NULL;
    if (!x) {
        qjob_free(j);
        return cmd_error(ctx, HT_ENOMEM, "out of memory");
    }
    snprintf(x->format, sizeof(x->format), "%s", format);
    snprintf(x->sort, sizeof(x->sort), "%s", sort);
    j->arg = x;
    j->release = ht_free;
    /* Exports want everything: the top defaults to the maximum. */
    cJSON *qargs_obj = cJSON_Duplicate(ctx->req->args, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(qargs_obj, "format");
    cJSON_DeleteItemFromObjectCaseSensitive(qargs_obj, "what");
    if (qargs_obj && !cJSON_GetObjectItemCaseSensitive(qargs_obj, "top"))
        cJSON_AddNumberToObject(qargs_obj, "top", HT_QUERY_TOP_MAX);
    char err[256];
    int rc = qjob_add_query(j, qargs_obj, strcmp(what, "commits") ? HT_DOM_HEAP : HT_DOM_COMMIT,
                            err, sizeof(err));
    if (rc != 0) {
        qjob_free(j);
        return cmd_error(ctx, rc, "%s", err);
    }
    j->done = export_job_done;
    return qjob_submit_request(ctx, j);
}

/* A snapshot's export (snapshots are small: built whole): 0 with the data,
 * or an error with its message in err. */
static int snapshot_export(struct session *s, const cJSON *args, cJSON **out, char *err,
                           size_t errsz)
{
    const char *format = cJSON_GetObjectItemCaseSensitive(args, "format")->valuestring;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(args, "what");
    const char *what = w ? w->valuestring : "stacks";
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(args, "sort");
    const char *sort = so ? so->valuestring : "so";
    const cJSON *snap = cJSON_GetObjectItemCaseSensitive(args, "snapshot");
    uint32_t cap = s->srv->cfg->max_snapshots;
    const struct snapshot *x = &s->snaps[((uint32_t)snap->valuedouble + cap - 1) % cap];
    *out = NULL;
    if (!x->data || x->seq != (uint32_t)snap->valuedouble) {
        snprintf(err, errsz, "session %u has no snapshot %u", s->id, (uint32_t)snap->valuedouble);
        return HT_EBADARG;
    }
    if (!strcmp(what, "timeline")) {
        snprintf(err, errsz, "snapshots hold stacks and commits, not the timeline");
        return HT_EBADARG;
    }
    const cJSON *part =
        cJSON_GetObjectItemCaseSensitive(x->data, strcmp(what, "commits") ? "stacks" : "commits");
    if (!strcmp(format, "json")) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "format", "json");
        cJSON_AddItemToObject(d, "result", cJSON_Duplicate(x->data, 1));
        *out = d;
        return 0;
    }
    cJSON *result = cJSON_Duplicate(part, 1);
    cJSON *d = result ? render(result, format, sort) : NULL;
    cJSON_Delete(result);
    if (!d) {
        snprintf(err, errsz, "out of memory rendering the snapshot");
        return HT_ENOMEM;
    }
    *out = d;
    return 0;
}

/* A snapshot still being taken: the export waits its turn behind it. */
static void snapshot_job_done(struct qjob *j)
{
    if (j->rc || !j->c) {
        qjob_answer_failed(j);
        return;
    }
    char err[256];
    cJSON *d;
    int rc = snapshot_export(j->s, j->args, &d, err, sizeof(err));
    struct reply_src *r = rc == 0 ? reply_json_src(j->req_id, d) : NULL;
    if (rc != 0)
        qjob_answer_error(j, rc, err);
    else if (!r)
        qjob_answer_error(j, HT_ENOMEM, "out of memory building the reply");
    else
        qjob_answer_src(j, r);
}

int cmd_export(struct cmd_ctx *ctx)
{
    const cJSON *args = ctx->req->args;
    const char *format = cJSON_GetObjectItemCaseSensitive(args, "format")->valuestring;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(args, "what");
    const char *what = w ? w->valuestring : "stacks";
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(args, "sort");
    const char *sort = so ? so->valuestring : "so";
    if (strcmp(format, "json") && strcmp(format, "csv") && strcmp(format, "collapsed"))
        return cmd_error(ctx, HT_EBADARG, "--format must be json, csv or collapsed%s",
                         !strcmp(format, "pprof") ? " (pprof is not built yet)" : "");
    if (strcmp(what, "stacks") && strcmp(what, "commits") && strcmp(what, "timeline"))
        return cmd_error(ctx, HT_EBADARG, "--what must be stacks, commits or timeline");
    struct session *s = ctx->s;
    if (!cJSON_GetObjectItemCaseSensitive(args, "snapshot")) {
        if (!strcmp(what, "timeline"))
            return export_timeline(ctx, format);
        return export_rows(ctx, format, what, sort);
    }
    if (s->snap_pending) {
        struct qjob *j = qjob_new(s, "export snapshot");
        if (!j || !(j->args = cJSON_Duplicate(args, 1))) {
            qjob_free(j);
            return cmd_error(ctx, HT_ENOMEM, "out of memory");
        }
        j->done = snapshot_job_done;
        return qjob_submit_request(ctx, j);
    }
    char err[256];
    cJSON *d;
    int rc = snapshot_export(s, args, &d, err, sizeof(err));
    if (rc != 0)
        return cmd_error(ctx, rc, "%s", err);
    return cmd_reply(ctx, d);
}
