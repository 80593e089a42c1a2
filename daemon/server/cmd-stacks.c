/* stacks: heap allocations over a window, aggregated and sorted (xperf -a heap, WPA's table). */
#include "commands.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "query-args.h"
#include "query-job.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

/* A result's rows, turned into JSON a frame at a time: 10k rows of deep
 * stacks hold the loop for one frame's worth each time, not for all. */
struct rows_src {
    struct reply_src base;
    struct server *srv;
    uint32_t session;
    struct query q; /* only list and by are read (the patterns are gone) */
    struct query_result res;
    uint32_t next;
    reply_fmt_fn fmt;
    const void *fmt_arg;
};

static int rows_item(struct reply_src *r, struct ht_sbuf *out, char *err, size_t errsz)
{
    struct rows_src *x = (struct rows_src *)r;
    struct session *s = reply_session(x->srv, x->session, err, errsz);
    if (!s)
        return HT_ENOSESSION;
    int rc = 0;
    while (rc == 0 && x->next < x->res.nrows) {
        uint32_t i = x->next++;
        cJSON *o = query_row_json(&session_engine(s)->si, &x->q, &x->res, &x->res.rows[i]);
        rc = reply_item_add(o, x->fmt, x->fmt_arg, i + 1, out);
        cJSON_Delete(o);
    }
    return rc;
}

static void rows_src_free(struct reply_src *r)
{
    struct rows_src *x = (struct rows_src *)r;
    query_result_free(&x->res);
    ht_free(x);
}

struct reply_src *rows_src_new(struct server *srv, uint32_t session, const struct query *q,
                               struct query_result *res, reply_fmt_fn fmt, const void *fmt_arg,
                               const char *lead)
{
    struct rows_src *x = ht_calloc(1, sizeof(*x));
    if (!x) {
        query_result_free(res);
        return NULL;
    }
    x->srv = srv;
    x->session = session;
    query_init(&x->q);
    x->q.domain = q->domain;
    x->q.list = q->list;
    x->q.by = q->by;
    x->res = *res;
    memset(res, 0, sizeof(*res)); /* the stream's now */
    x->base.held = sizeof(*x) + (uint64_t)x->res.nrows * sizeof(x->res.rows[0]);
    x->fmt = fmt;
    x->fmt_arg = fmt_arg;
    x->base.item = rows_item;
    x->base.free = rows_src_free;
    x->base.lead = lead;
    return &x->base;
}

int rows_reply(struct cmd_ctx *ctx, const struct query *q, struct query_result *res, cJSON *data,
               cJSON *arr, cJSON *outer, reply_fmt_fn fmt, const void *fmt_arg, const char *lead)
{
    struct reply_src *r = rows_src_new(ctx->srv, session_id(ctx->s), q, res, fmt, fmt_arg, lead);
    if (!r) {
        cJSON_Delete(data);
        return cmd_error(ctx, HT_ENOMEM, "out of memory");
    }
    return reply_start(ctx, r, data, arr, outer);
}

cJSON *rows_head(struct session *s, const struct query *q, const struct query_result *res)
{
    struct query_result head = *res;
    head.nrows = 0;
    return query_result_json(s, q, &head);
}

void rows_job_answer(struct qjob *j, unsigned i, cJSON *data, cJSON *arr, cJSON *outer,
                     reply_fmt_fn fmt, const void *fmt_arg, const char *lead)
{
    struct session *s = j->s;
    struct client *c = j->c; /* there: its callers answered a job without client as failed */
    struct reply_src *r =
        rows_src_new(c->srv, session_id(s), &j->qa[i]->q, &j->res[i], fmt, fmt_arg, lead);
    if (!r) {
        cJSON_Delete(data);
        qjob_answer_error(j, HT_ENOMEM, "out of memory building the reply");
        return;
    }
    if (reply_src_ready(r, j->req_id, data, arr, outer) != 0) {
        qjob_answer_error(j, HT_ENOMEM, "out of memory building the reply");
        return;
    }
    qjob_answer_src(j, r);
}

/* On the loop, the query done: its rows, streamed. */
static void rows_job_done(struct qjob *j)
{
    if (j->rc || !j->c) {
        qjob_answer_failed(j);
        return;
    }
    cJSON *d = rows_head(j->s, &j->qa[0]->q, &j->res[0]);
    rows_job_answer(j, 0, d, cJSON_GetObjectItemCaseSensitive(d, "rows"), NULL, NULL, NULL, NULL);
}

/* Shared by stacks and commits: they differ only in the domain. The
 * arguments are checked now; the query runs on a worker (query-job.h). */
int cmd_query_domain(struct cmd_ctx *ctx, int domain)
{
    struct qjob *j = qjob_new(ctx->s, domain == HT_DOM_HEAP ? "stacks" : "commits");
    if (!j)
        return cmd_error(ctx, HT_ENOMEM, "out of memory");
    char err[256];
    int rc = qjob_add_query(j, cJSON_Duplicate(ctx->req->args, 1), domain, err, sizeof(err));
    if (rc != 0) {
        qjob_free(j);
        return cmd_error(ctx, rc, "%s", err);
    }
    j->done = rows_job_done;
    return qjob_submit_request(ctx, j);
}

int cmd_stacks(struct cmd_ctx *ctx)
{
    return cmd_query_domain(ctx, HT_DOM_HEAP);
}
