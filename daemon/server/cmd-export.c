/* export: stacks, commits, the timeline or a snapshot as json, csv or collapsed stacks. */
#include "server.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "query-args.h"

#include <cjson/cJSON.h>
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

/* The row's label: its frames (outermost first, joined by sep) or its key. */
static void row_label(const cJSON *row, const char *sep, int outermost_first, int csv, char *out,
                      size_t outsz)
{
    const cJSON *frames = cJSON_GetObjectItemCaseSensitive(row, "frames");
    size_t n = 0;
    out[0] = '\0';
    if (!frames) {
        static const char *const keys[] = {"frame", "image", "heap", "type"};
        for (int k = 0; k < 4; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, keys[k]);
            if (cJSON_IsString(v))
                snprintf(out, outsz, "%s", v->valuestring);
        }
        return;
    }
    int count = cJSON_GetArraySize(frames);
    for (int i = 0; i < count && n + 8 < outsz; i++) {
        const cJSON *f = cJSON_GetArrayItem(frames, outermost_first ? count - 1 - i : i);
        if (i)
            n += (size_t)snprintf(out + n, outsz - n, "%s", sep);
        for (const char *p = f->valuestring; *p && n + 4 < outsz; p++) {
            char ch = *p;
            if (!csv && ch == ';')
                ch = ':'; /* ';' separates frames in collapsed stacks */
            if (csv && ch == '"')
                out[n++] = '"';
            out[n++] = ch;
        }
        out[n] = '\0';
    }
}

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
    const cJSON *samples = cJSON_GetObjectItemCaseSensitive(result, "samples");
    char label[8192], line[8448];
    if (samples) {
        if (!strcmp(format, "collapsed"))
            return cJSON_Delete(d), NULL;
        add_line(lines, "t_ns,heap_bytes,heap_count,committed_bytes,private_bytes");
        const cJSON *x;
        cJSON_ArrayForEach(x, samples)
        {
            snprintf(line, sizeof(line), "%lld,%lld,%lld,%lld,%lld", (long long)value_of(x, "t"),
                     (long long)value_of(x, "heap"), (long long)value_of(x, "heap_count"),
                     (long long)value_of(x, "committed"), (long long)value_of(x, "private_bytes"));
            add_line(lines, line);
        }
        return d;
    }
    const char *field = sort_field(sort);
    if (!strcmp(format, "csv"))
        add_line(lines, "rank,stack,count,size,impacting,outstanding,outstanding_count,reallocs,"
                        "aifi_count,aifi_size,aifo_count,aifo_size,aofi_count,aofi_size,"
                        "aofo_count,aofo_size");
    int rank = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, rows)
    {
        rank++;
        if (!strcmp(format, "collapsed")) {
            /* flamegraph.pl / speedscope: "outer;...;inner value". */
            int64_t v = value_of(r, field);
            if (v <= 0)
                continue;
            row_label(r, ";", 1, 0, label, sizeof(label));
            snprintf(line, sizeof(line), "%s %lld", label[0] ? label : "[no stack]", (long long)v);
            add_line(lines, line);
            continue;
        }
        row_label(r, " <- ", 0, 1, label, sizeof(label));
        const cJSON *types = cJSON_GetObjectItemCaseSensitive(r, "types");
        int64_t tc[4] = {0}, ts[4] = {0};
        static const char *const tn[] = {"AIFI", "AIFO", "AOFI", "AOFO"};
        for (int k = 0; k < 4; k++) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(types, tn[k]);
            tc[k] = value_of(t, "count");
            ts[k] = value_of(t, "size");
        }
        snprintf(line, sizeof(line),
                 "%d,\"%s\",%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld",
                 rank, label, (long long)value_of(r, "count"), (long long)value_of(r, "size"),
                 (long long)value_of(r, "impacting"), (long long)value_of(r, "outstanding"),
                 (long long)value_of(r, "outstanding_count"), (long long)value_of(r, "reallocs"),
                 (long long)tc[0], (long long)ts[0], (long long)tc[1], (long long)ts[1],
                 (long long)tc[2], (long long)ts[2], (long long)tc[3], (long long)ts[3]);
        add_line(lines, line);
    }
    return d;
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
    cJSON *result = NULL;
    const cJSON *snap = cJSON_GetObjectItemCaseSensitive(args, "snapshot");
    if (snap) {
        uint32_t cap = ctx->srv->cfg->max_snapshots;
        const struct snapshot *x = &s->snaps[((uint32_t)snap->valuedouble + cap - 1) % cap];
        if (!x->data || x->seq != (uint32_t)snap->valuedouble)
            return cmd_error(ctx, HT_EBADARG, "session %u has no snapshot %u", s->id,
                             (uint32_t)snap->valuedouble);
        if (!strcmp(what, "timeline"))
            return cmd_error(ctx, HT_EBADARG,
                             "snapshots hold stacks and commits, not the timeline");
        const cJSON *part = cJSON_GetObjectItemCaseSensitive(
            x->data, strcmp(what, "commits") ? "stacks" : "commits");
        if (!strcmp(format, "json")) {
            cJSON *d = cJSON_CreateObject();
            cJSON_AddStringToObject(d, "format", "json");
            cJSON_AddItemToObject(d, "result", cJSON_Duplicate(x->data, 1));
            return cmd_reply(ctx, d);
        }
        result = cJSON_Duplicate(part, 1);
    } else if (!strcmp(what, "timeline")) {
        char err[256];
        cJSON *targs = cJSON_CreateObject();
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(args, "range");
        if (r)
            cJSON_AddStringToObject(targs, "range", r->valuestring);
        int rc = timeline_build(s, targs, &result, err, sizeof(err));
        cJSON_Delete(targs);
        if (rc != 0)
            return cmd_error(ctx, rc, "%s", err);
    } else {
        struct qargs *qa = ht_malloc(sizeof(*qa));
        if (!qa)
            return cmd_error(ctx, HT_ENOMEM, "out of memory");
        /* Exports want everything: the top defaults to the maximum. */
        cJSON *qargs_obj = cJSON_Duplicate(args, 1);
        cJSON_DeleteItemFromObjectCaseSensitive(qargs_obj, "format");
        cJSON_DeleteItemFromObjectCaseSensitive(qargs_obj, "what");
        if (!cJSON_GetObjectItemCaseSensitive(qargs_obj, "top"))
            cJSON_AddNumberToObject(qargs_obj, "top", HT_QUERY_TOP_MAX);
        char err[256];
        int rc =
            qargs_parse(qa, s, ctx->srv->cfg, qargs_obj,
                        strcmp(what, "commits") ? HT_DOM_HEAP : HT_DOM_COMMIT, err, sizeof(err));
        struct query_result res;
        if (rc == 0 && engine_query(&s->eng, &qa->q, &res) == 0) {
            result = query_result_json(s, &qa->q, &res);
            query_result_free(&res);
        }
        cJSON_Delete(qargs_obj);
        ht_free(qa);
        if (rc != 0)
            return cmd_error(ctx, rc, "%s", err);
    }
    if (!result)
        return cmd_error(ctx, HT_ENOMEM, "out of memory");
    cJSON *d = render(result, format, sort);
    cJSON_Delete(result);
    if (!d)
        return cmd_error(ctx, HT_EBADARG,
                         "the timeline has no collapsed-stack form: use csv or json");
    return cmd_reply(ctx, d);
}
