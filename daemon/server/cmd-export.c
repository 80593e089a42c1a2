/* export: stacks, commits, the timeline or a snapshot, in a format of export/'s table. */
#include "commands.h"

#include "engine-view.h"
#include "export.h"
#include "ht-alloc.h"
#include "ht-chunk.h"
#include "ht-error.h"
#include "query-args.h"
#include "query-job.h"
#ifdef HEAPTRACE_WITH_PPROF
#include "pprof-make.h"
#include "pprof.h"
#endif

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* What an export's answer needs besides its query. */
struct export_job {
    const struct export_format *f;
    const struct export_value *value;
#ifdef HEAPTRACE_WITH_PPROF
    /* A binary export: the profile, its mappings added on the loop as the
     * view opened (the engine's modules), its samples on the worker; then
     * the reply data the loop sends. */
    struct pprof_make m;
    cJSON *data;
    /* The client asked for the bytes as raw chunks (transfer: chunks):
     * data is then the header, m.bytes kept for reply_bytes_src, crc their
     * CRC-32 (computed on the worker). */
    int chunks;
    uint32_t crc;
#endif
};

/* A snapshot's rows as lines (snapshots are small: built whole), with the
 * same writer a live export streams them with. */
static cJSON *render(const cJSON *result, const struct export_format *f,
                     const struct export_value *ev)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "format", f->name);
    cJSON *lines = cJSON_AddArrayToObject(d, "lines");
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(result, "rows");
    if (export_lines_add(export_bind(f, 0, ev), rows, lines) < 0) {
        cJSON_Delete(d);
        return NULL;
    }
    return d;
}

/* {"format":F,"result":head} for json (the items go in result's array
 * named key), {"format":F,"lines":[]} otherwise. */
static cJSON *export_data(const struct export_format *f, cJSON *head, const char *key, cJSON **arr,
                          cJSON **outer)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "format", f->name);
    if (f->json) {
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

#ifdef HEAPTRACE_WITH_PPROF
/* Bytes of a binary export per "data" item: a multiple of 3, so that each
 * item is base64 on its own (RFC 4648 section 4) and under a frame. */
#define BINARY_PIECE (3 * 16384)

static char *base64(const uint8_t *b, size_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = ht_malloc((n + 2) / 3 * 4 + 1), *q = o;
    for (size_t i = 0; o && i < n; i += 3) {
        uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) |
                     (i + 2 < n ? b[i + 2] : 0);
        *q++ = a[v >> 18];
        *q++ = a[(v >> 12) & 63];
        *q++ = i + 1 < n ? a[(v >> 6) & 63] : '=';
        *q++ = i + 2 < n ? a[v & 63] : '=';
    }
    if (q)
        *q = '\0';
    return o;
}

/* A binary export's reply: {"format","bytes","samples","groups","data":
 * [base64 pieces]}, the pieces sent a frame at a time; groups: what the
 * query found before --top kept samples of them. With chunks, no "data"
 * but "transfer":"chunks": the header of reply_bytes_src, the bytes coming
 * after it raw. NULL when out of memory. */
static cJSON *binary_data(const struct export_format *f, const uint8_t *b, size_t n, double samples,
                          double groups, int chunks)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "format", f->name);
    cJSON_AddNumberToObject(d, "bytes", (double)n);
    cJSON_AddNumberToObject(d, "samples", samples);
    cJSON_AddNumberToObject(d, "groups", groups);
    if (chunks) {
        if (!cJSON_AddStringToObject(d, "transfer", "chunks")) {
            cJSON_Delete(d);
            return NULL;
        }
        return d;
    }
    cJSON *arr = cJSON_AddArrayToObject(d, "data");
    for (size_t i = 0; arr && i < n; i += BINARY_PIECE) {
        char *piece = base64(b + i, n - i < BINARY_PIECE ? n - i : BINARY_PIECE);
        cJSON *item = piece ? cJSON_CreateString(piece) : NULL;
        ht_free(piece);
        if (!item || !cJSON_AddItemToArray(arr, item)) {
            cJSON_Delete(item);
            arr = NULL;
        }
    }
    if (!arr) {
        cJSON_Delete(d);
        return NULL;
    }
    return d;
}

/* The loop's part of a profile, as the view opens (pprof-make.h). */
static void pprof_opened(struct qjob *j)
{
    struct export_job *x = j->arg;
    pprof_make_opened(&x->m, j->s);
}

/* The encoded profile m as reply data; NULL when out of memory. */
static cJSON *pprof_data(const struct export_format *f, const struct pprof_make *m, double samples,
                         double groups, int chunks)
{
    cJSON *d = binary_data(f, m->bytes, m->n, samples, groups, chunks);
    if (d) /* the process gone, no module events: the ctl says so */
        cJSON_AddNumberToObject(d, "unmapped_locations", (double)m->unmapped);
    return d;
}
#endif

static int export_timeline(struct cmd_ctx *ctx, const struct export_format *f)
{
    char err[256];
    if (!f->json && !f->samples.row)
        return cmd_error(ctx, HT_EBADARG, "the timeline has no %s form: use %s", f->title,
                         export_sample_format_names(err, sizeof(err)));
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
    cJSON *d = export_data(f, head, "samples", &arr, &outer);
    if (f->json)
        return samples_reply(ctx, &sp, d, arr, outer, NULL, NULL, NULL);
    const struct export_bound *b = export_bind(f, 1, NULL);
    return samples_reply(ctx, &sp, d, arr, outer, export_bound_item, b, b->w->begin_item);
}

static void export_job_release(void *arg)
{
    struct export_job *x = arg;
#ifdef HEAPTRACE_WITH_PPROF
    pprof_make_free(&x->m);
    cJSON_Delete(x->data);
#endif
    ht_free(x);
}

/* Lines (csv, collapsed) lose the result's head: what the ctl needs to say
 * why an export has nothing in it goes along (the groups the query found,
 * and the value a collapsed line needs nonzero). */
static void lines_head(cJSON *d, const cJSON *head, const struct export_value *ev)
{
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(head, "groups");
    cJSON_AddNumberToObject(d, "groups", cJSON_IsNumber(g) ? g->valuedouble : 0);
    if (ev) {
        char name[64];
        export_value_name(ev, name, sizeof(name));
        cJSON_AddStringToObject(d, "value", name);
    }
}

#ifdef HEAPTRACE_WITH_PPROF
/* On the worker: the samples from the view's interner, the profile
 * encoded, gzip'd and put in the reply's data. */
static void pprof_work(struct qjob *j)
{
    struct export_job *x = j->arg;
    int rc = pprof_make_work(&x->m, j);
    if (rc == 0)
        x->data = pprof_data(x->f, &x->m, j->res[0].nrows, (double)j->res[0].ngroups, x->chunks);
    if (rc == 0 && x->chunks)
        x->crc = ht_crc32(0, x->m.bytes, x->m.n); /* the bytes stay for the reply */
    else
        pprof_make_free(&x->m);
    if (rc == 0 && !x->data)
        rc = UV_ENOMEM;
    j->rc = rc == HT_EFULL ? HT_EFULL : rc ? UV_ENOMEM : 0;
}
#endif

static void export_job_done(struct qjob *j)
{
    const struct export_job *x = j->arg;
#ifdef HEAPTRACE_WITH_PPROF
    if (j->rc == HT_EFULL && x->m.err[0] && j->c) {
        ((struct client *)j->c)->srv->pprof_refused++; /* version: memory.pprof_refused */
        qjob_answer_error(j, HT_EFULL, x->m.err); /* the profile's budget */
        return;
    }
#endif
    if (j->rc || !j->c) {
        qjob_answer_failed(j);
        return;
    }
#ifdef HEAPTRACE_WITH_PPROF
    if (x->f->binary) {
        struct export_job *bx = j->arg;
        struct reply_src *r =
            !bx->data    ? NULL
            : bx->chunks ? reply_bytes_src(j->req_id, bx->data, bx->m.bytes, bx->m.n, bx->crc)
                         : reply_json_src(j->req_id, bx->data);
        bx->data = NULL; /* taken over, and the bytes with chunks */
        if (bx->chunks)
            bx->m.bytes = NULL;
        if (!r)
            qjob_answer_error(j, HT_ENOMEM, "out of memory making the pprof profile");
        else
            qjob_answer_src(j, r);
        return;
    }
#endif
    cJSON *arr, *outer;
    cJSON *head = rows_head(j->s, &j->qa[0]->q, &j->res[0]);
    cJSON *lead = !x->f->json ? cJSON_CreateObject() : NULL;
    if (lead)
        lines_head(lead, head, x->f->has_value ? x->value : NULL);
    cJSON *d = export_data(x->f, head, "rows", &arr, &outer);
    for (cJSON *m; lead && (m = lead->child);)
        cJSON_AddItemToObject(d, m->string, cJSON_DetachItemViaPointer(lead, m));
    cJSON_Delete(lead);
    if (x->f->json) {
        rows_job_answer(j, 0, d, arr, outer, NULL, NULL, NULL);
        return;
    }
    const struct export_bound *b = export_bind(x->f, 0, x->value);
    rows_job_answer(j, 0, d, arr, outer, export_bound_item, b, b->w->begin_item);
}

#ifdef HEAPTRACE_WITH_PPROF
/* The client asked for a binary export's bytes as raw chunks. */
static int transfer_chunks(const cJSON *args)
{
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(args, "transfer"));
    return t && !strcmp(t, "chunks");
}
#endif

/* --top of an export: 1 to HT_QUERY_TOP_MAX rows, but a binary profile
 * (pprof) may hold any number of stacks, 0 for all of them (its memory is
 * capped by pprof_max_bytes instead). 0 with *top (0: not given, or every
 * stack: UINT32_MAX), or HT_EBADARG with err. */
static int export_top(const cJSON *args, const struct export_format *f, uint32_t *top, char *err,
                      size_t errsz)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, "top");
    *top = 0;
    if (!v)
        return 0;
    if (f->binary) {
        *top = v->valuedouble < 1 ? UINT32_MAX : (uint32_t)v->valuedouble;
        return 0;
    }
    if (v->valuedouble < 1 || v->valuedouble > HT_QUERY_TOP_MAX) {
        snprintf(err, errsz,
                 "--top must be between 1 and %d (any number, or 0 for every stack, "
                 "with --format pprof)",
                 HT_QUERY_TOP_MAX);
        return HT_EBADARG;
    }
    return 0;
}

/* The query runs on a worker (query-job.h); the rows are formatted as they are sent. */
static int export_rows(struct cmd_ctx *ctx, const struct export_format *f, const char *what,
                       const struct export_value *value)
{
    char err[256];
    uint32_t top;
    int rc = export_top(ctx->req->args, f, &top, err, sizeof(err));
    if (rc != 0)
        return cmd_error(ctx, rc, "%s", err);
    struct qjob *j = qjob_new(ctx->s, "export");
    struct export_job *x = j ? ht_calloc(1, sizeof(*x)) : NULL;
    if (!x) {
        qjob_free(j);
        return cmd_error(ctx, HT_ENOMEM, "out of memory");
    }
    x->f = f;
    x->value = value;
#ifdef HEAPTRACE_WITH_PPROF
    x->m.default_type = PPROF_INUSE_SPACE; /* as Go's heap profile */
    x->chunks = transfer_chunks(ctx->req->args);
#endif
    j->arg = x;
    j->release = export_job_release;
    cJSON *qargs_obj = export_query_args(ctx->req->args, value);
    if (top) /* a profile's --top: past what the query's parser takes */
        cJSON_DeleteItemFromObjectCaseSensitive(qargs_obj, "top");
    rc = qjob_add_query(j, qargs_obj, strcmp(what, "commits") ? HT_DOM_HEAP : HT_DOM_COMMIT, err,
                        sizeof(err));
    if (rc != 0) {
        qjob_free(j);
        return cmd_error(ctx, rc, "%s", err);
    }
    if (top)
        j->qa[0]->q.top = top;
    j->done = export_job_done;
#ifdef HEAPTRACE_WITH_PPROF
    if (f->binary) {
        j->opened = pprof_opened;
        j->work = pprof_work;
    }
#endif
    return qjob_submit_request(ctx, j);
}

cJSON *export_query_args(const cJSON *args, const struct export_value *value)
{
    /* Exports want everything: the top defaults to the maximum. */
    cJSON *qargs_obj = cJSON_Duplicate(args, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(qargs_obj, "format");
    cJSON_DeleteItemFromObjectCaseSensitive(qargs_obj, "what");
    cJSON_DeleteItemFromObjectCaseSensitive(qargs_obj, "transfer");
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
    return qargs_obj;
}

static int snapshot_oom(char *err, size_t errsz)
{
    snprintf(err, errsz, "out of memory rendering the snapshot");
    return HT_ENOMEM;
}

#ifdef HEAPTRACE_WITH_PPROF
/* A snapshot's rows as a pprof profile: the reply to request id (base64
 * in JSON, or raw chunks), NULL when out of memory. */
static struct reply_src *snapshot_pprof(struct session *s, const struct export_format *f,
                                        const cJSON *part, const cJSON *args, int64_t id)
{
    /* A snapshot keeps names, not addresses: name-only locations. */
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(part, "rows");
    const cJSON *win = cJSON_GetObjectItemCaseSensitive(part, "window");
    struct pprof_make m = {.wall_start = session_wall_start(s)};
    int rc = export_pprof_json(rows, &m.p), chunks = transfer_chunks(args);
    if (rc == 0)
        rc = pprof_make_encode(&m, (uint64_t)export_field(win, "t1"),
                               (uint64_t)export_field(win, "t2"), NULL);
    cJSON *d = rc == 0 ? pprof_data(f, &m, cJSON_GetArraySize(rows),
                                    (double)export_field(part, "groups"), chunks)
                       : NULL;
    struct reply_src *r = NULL;
    if (d && chunks) {
        r = reply_bytes_src(id, d, m.bytes, m.n, ht_crc32(0, m.bytes, m.n));
        m.bytes = NULL; /* taken over */
    } else if (d) {
        r = reply_json_src(id, d);
    }
    pprof_make_free(&m);
    return r;
}
#endif

/* A snapshot's export (snapshots are small: built whole): 0 with the reply
 * to request id, or an error with its message in err. */
static int snapshot_export(struct session *s, const cJSON *args, int64_t id, struct reply_src **out,
                           char *err, size_t errsz)
{
    const struct export_format *f =
        export_format_find(cJSON_GetObjectItemCaseSensitive(args, "format")->valuestring);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(args, "what");
    const char *what = w ? w->valuestring : "stacks";
    const struct export_value *value;
    const cJSON *snap = cJSON_GetObjectItemCaseSensitive(args, "snapshot");
    const struct snapshot *x = session_snapshot_slot(s, (uint32_t)snap->valuedouble);
    *out = NULL;
    if (!x->data || x->seq != (uint32_t)snap->valuedouble) {
        snprintf(err, errsz, "session %u has no snapshot %u", session_id(s), (uint32_t)snap->valuedouble);
        return HT_EBADARG;
    }
    if (!strcmp(what, "timeline")) {
        snprintf(err, errsz, "snapshots hold stacks and commits, not the timeline");
        return HT_EBADARG;
    }
    const cJSON *part =
        cJSON_GetObjectItemCaseSensitive(x->data, strcmp(what, "commits") ? "stacks" : "commits");
#ifdef HEAPTRACE_WITH_PPROF
    if (f->binary) {
        if (!(*out = snapshot_pprof(s, f, part, args, id))) {
            snprintf(err, errsz, "out of memory making the pprof profile");
            return HT_ENOMEM;
        }
        return 0;
    }
#endif
    if (f->json) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "format", "json");
        cJSON_AddItemToObject(d, "result", cJSON_Duplicate(x->data, 1));
        return (*out = reply_json_src(id, d)) ? 0 : snapshot_oom(err, errsz);
    }
    int rc = export_value_of(args, &value, err, errsz);
    if (rc)
        return rc;
    cJSON *result = cJSON_Duplicate(part, 1);
    cJSON *d = result ? render(result, f, value) : NULL;
    if (d)
        lines_head(d, result, f->has_value ? value : NULL);
    cJSON_Delete(result);
    if (!d)
        return snapshot_oom(err, errsz);
    return (*out = reply_json_src(id, d)) ? 0 : snapshot_oom(err, errsz);
}

/* A snapshot still being taken: the export waits its turn behind it. */
static void snapshot_job_done(struct qjob *j)
{
    if (j->rc || !j->c) {
        qjob_answer_failed(j);
        return;
    }
    char err[256];
    struct reply_src *r;
    int rc = snapshot_export(j->s, j->args, j->req_id, &r, err, sizeof(err));
    if (rc != 0)
        qjob_answer_error(j, rc, err);
    else
        qjob_answer_src(j, r);
}

int cmd_export(struct cmd_ctx *ctx)
{
    const cJSON *args = ctx->req->args;
    const char *format = cJSON_GetObjectItemCaseSensitive(args, "format")->valuestring;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(args, "what");
    const char *what = w ? w->valuestring : "stacks";
    const struct export_format *f = export_format_find(format);
    char names[128];
    if (!f)
        return cmd_error(ctx, HT_EBADARG, "--format must be %s%s",
                         export_format_names(names, sizeof(names)),
                         !strcmp(format, "pprof") ? " (pprof is in Linux builds only)" : "");
    if (strcmp(what, "stacks") && strcmp(what, "commits") && strcmp(what, "timeline"))
        return cmd_error(ctx, HT_EBADARG, "--what must be stacks, commits or timeline");
    const char *transfer = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(args, "transfer"));
    if (transfer && strcmp(transfer, "chunks") && strcmp(transfer, "base64"))
        return cmd_error(ctx, HT_EBADARG, "--transfer must be chunks or base64");
    if (f->binary && strcmp(what, "stacks"))
        return cmd_error(ctx, HT_EBADARG, "%s holds stacks: --what stacks (the default)", f->title);
    struct session *s = ctx->s;
    if (!cJSON_GetObjectItemCaseSensitive(args, "snapshot")) {
        if (!strcmp(what, "timeline"))
            return export_timeline(ctx, f);
        const struct export_value *value;
        char err[256];
        int rc = export_value_of(args, &value, err, sizeof(err));
        if (rc)
            return cmd_error(ctx, rc, "%s", err);
        return export_rows(ctx, f, what, value);
    }
    if (session_snapshots_pending(s)) {
        struct qjob *j = qjob_new(s, "export snapshot");
        if (!j || !(j->args = cJSON_Duplicate(args, 1))) {
            qjob_free(j);
            return cmd_error(ctx, HT_ENOMEM, "out of memory");
        }
        j->done = snapshot_job_done;
        return qjob_submit_request(ctx, j);
    }
    char err[256];
    struct reply_src *r;
    int rc = snapshot_export(s, args, ctx->req->id, &r, err, sizeof(err));
    if (rc != 0)
        return cmd_error(ctx, rc, "%s", err);
    client_send_src(ctx->c, r);
    return 0;
}
