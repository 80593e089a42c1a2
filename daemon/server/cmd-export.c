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

/* What a collapsed line's value is: a sort key's figure (field), or with
 * --type the size each named type measures, summed (types: a mask of
 * 1 << ht_itype): AIFI and AIFO the size allocated in the window, AOFI the
 * size freed in it, AOFO the size still outstanding from before it. */
struct export_value {
    const char *field;
    unsigned types;
};

/* The value of --type's mask with no --sort, one per mask (a reply's
 * formatter keeps a pointer to it while the rows stream). */
static const struct export_value type_values[16] = {
    {NULL, 0}, {NULL, 1}, {NULL, 2},  {NULL, 3},  {NULL, 4},  {NULL, 5},  {NULL, 6},  {NULL, 7},
    {NULL, 8}, {NULL, 9}, {NULL, 10}, {NULL, 11}, {NULL, 12}, {NULL, 13}, {NULL, 14}, {NULL, 15}};

/* The figure each sort key sorts by. */
static const struct export_value sort_values[] = {{"outstanding", 0}, {"outstanding_count", 0},
                                                  {"size", 0},        {"count", 0},
                                                  {"reallocs", 0},    {"impacting", 0}};

static const struct export_value *sort_value(const char *sort)
{
    static const char *const keys[] = {"so", "soc", "st", "stc", "src", "impact"};
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
        if (!strcmp(sort, keys[k]))
            return &sort_values[k];
    return &sort_values[0];
}

/* The value of a collapsed export: --sort's figure when given, else with
 * --type the size those types measure, else the default sort's
 * (outstanding). 0 or HT_EBADARG (a bad --type) with err. */
static int export_value_of(const cJSON *args, const struct export_value **out, char *err,
                           size_t errsz)
{
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(args, "sort");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(args, "type");
    unsigned mask;
    *out = sort_value(so ? so->valuestring : "so");
    if (so || !ty)
        return 0;
    int rc = qargs_types(ty, &mask, err, errsz);
    if (rc == 0)
        *out = &type_values[mask & 15];
    return rc;
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

static int64_t row_value(const cJSON *r, const struct export_value *ev)
{
    if (ev->field)
        return value_of(r, ev->field);
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(r, "types");
    int64_t v = 0;
    for (int k = 0; k < 4; k++)
        if (ev->types & (1u << k))
            v += value_of(cJSON_GetObjectItemCaseSensitive(types, ht_type_names[k]), "size");
    return v;
}

/* The value's name for the reply ("outstanding", "AIFI+AIFO size"). */
static void value_name(const struct export_value *ev, char *buf, size_t n)
{
    if (ev->field) {
        snprintf(buf, n, "%s", ev->field);
        return;
    }
    size_t len = 0;
    for (int k = 0; k < 4 && len < n; k++)
        if (ev->types & (1u << k))
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? "+" : "", ht_type_names[k]);
    if (len < n)
        snprintf(buf + len, n - len, " size");
}

/* flamegraph.pl / speedscope: "outer;...;inner value"; 1 made, 0 when the
 * row has no value, or an error. */
static int collapsed_line(const cJSON *r, const struct export_value *ev, struct ht_sbuf *line)
{
    int64_t v = row_value(r, ev);
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
static cJSON *render(const cJSON *result, const char *format, const struct export_value *ev)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "format", format);
    if (!strcmp(format, "json")) {
        cJSON_AddItemToObject(d, "result", cJSON_Duplicate(result, 1));
        return d;
    }
    cJSON *lines = cJSON_AddArrayToObject(d, "lines");
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(result, "rows");
    int csv = !strcmp(format, "csv");
    if (csv)
        add_line(lines, CSV_ROWS_HEADER);
    struct ht_sbuf line = {0};
    int rank = 0, rc = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, rows)
    {
        line.len = 0;
        rc = csv ? csv_line(r, ++rank, &line) : collapsed_line(r, ev, &line);
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
    char format[16];
    const struct export_value *value;
};

/* Lines (csv, collapsed) lose the result's head: what the ctl needs to say
 * why an export has nothing in it goes along (the groups the query found,
 * and the value a collapsed line needs nonzero). */
static void lines_head(cJSON *d, const cJSON *head, const struct export_value *ev)
{
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(head, "groups");
    cJSON_AddNumberToObject(d, "groups", cJSON_IsNumber(g) ? g->valuedouble : 0);
    if (ev) {
        char name[64];
        value_name(ev, name, sizeof(name));
        cJSON_AddStringToObject(d, "value", name);
    }
}

static void export_job_done(struct qjob *j)
{
    if (j->rc || !j->c) {
        qjob_answer_failed(j);
        return;
    }
    const struct export_job *x = j->arg;
    cJSON *arr, *outer;
    cJSON *head = rows_head(j->s, &j->qa[0]->q, &j->res[0]);
    int collapsed = !strcmp(x->format, "collapsed");
    cJSON *lead = strcmp(x->format, "json") ? cJSON_CreateObject() : NULL;
    if (lead)
        lines_head(lead, head, collapsed ? x->value : NULL);
    cJSON *d = export_data(x->format, head, "rows", &arr, &outer);
    for (cJSON *m; lead && (m = lead->child);)
        cJSON_AddItemToObject(d, m->string, cJSON_DetachItemViaPointer(lead, m));
    cJSON_Delete(lead);
    if (!strcmp(x->format, "csv"))
        rows_job_answer(j, 0, d, arr, outer, csv_fmt, NULL, "\"" CSV_ROWS_HEADER "\"");
    else if (collapsed)
        rows_job_answer(j, 0, d, arr, outer, collapsed_fmt, x->value, NULL);
    else
        rows_job_answer(j, 0, d, arr, outer, NULL, NULL, NULL);
}

/* The query runs on a worker (query-job.h); the rows are formatted as they are sent. */
static int export_rows(struct cmd_ctx *ctx, const char *format, const char *what,
                       const struct export_value *value)
{
    struct qjob *j = qjob_new(ctx->s, "export");
    struct export_job *x = j ? ht_calloc(1, sizeof(*x)) : NULL;
    if (!x) {
        qjob_free(j);
        return cmd_error(ctx, HT_ENOMEM, "out of memory");
    }
    snprintf(x->format, sizeof(x->format), "%s", format);
    x->value = value;
    j->arg = x;
    j->release = ht_free;
    /* Exports want everything: the top defaults to the maximum. */
    cJSON *qargs_obj = cJSON_Duplicate(ctx->req->args, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(qargs_obj, "format");
    cJSON_DeleteItemFromObjectCaseSensitive(qargs_obj, "what");
    if (qargs_obj && !cJSON_GetObjectItemCaseSensitive(qargs_obj, "top"))
        cJSON_AddNumberToObject(qargs_obj, "top", HT_QUERY_TOP_MAX);
    /* --type without --sort: sorted by the types' size where a sort key is
     * exactly that (so the --top kept are the largest): st is the size
     * allocated in the window (AIFI + AIFO), so the size alive at its end
     * (AIFO + AOFO). */
    const unsigned in_window = 1u << HT_AIFI | 1u << HT_AIFO;
    const unsigned alive = 1u << HT_AIFO | 1u << HT_AOFO;
    const char *by_types = value->field                   ? NULL
                           : !(value->types & ~in_window) ? "st"
                           : !(value->types & ~alive)     ? "so"
                                                          : NULL;
    if (qargs_obj && by_types)
        cJSON_AddStringToObject(qargs_obj, "sort", by_types);
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
    const struct export_value *value;
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
    int rc = export_value_of(args, &value, err, errsz);
    if (rc)
        return rc;
    cJSON *result = cJSON_Duplicate(part, 1);
    cJSON *d = result ? render(result, format, value) : NULL;
    if (d && strcmp(format, "json"))
        lines_head(d, result, !strcmp(format, "collapsed") ? value : NULL);
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
    if (strcmp(format, "json") && strcmp(format, "csv") && strcmp(format, "collapsed"))
        return cmd_error(ctx, HT_EBADARG, "--format must be json, csv or collapsed%s",
                         !strcmp(format, "pprof") ? " (pprof is not built yet)" : "");
    if (strcmp(what, "stacks") && strcmp(what, "commits") && strcmp(what, "timeline"))
        return cmd_error(ctx, HT_EBADARG, "--what must be stacks, commits or timeline");
    struct session *s = ctx->s;
    if (!cJSON_GetObjectItemCaseSensitive(args, "snapshot")) {
        if (!strcmp(what, "timeline"))
            return export_timeline(ctx, format);
        const struct export_value *value;
        char err[256];
        int rc = export_value_of(args, &value, err, sizeof(err));
        if (rc)
            return cmd_error(ctx, rc, "%s", err);
        return export_rows(ctx, format, what, value);
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
