/* stacks: heap allocations over a window, aggregated and sorted (xperf -a heap, WPA's table). */
#include "commands.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "query-args.h"

#include <cjson/cJSON.h>
#include <stdio.h>

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
        cJSON *o = query_row_json(s, &x->q, &x->res, &x->res.rows[i]);
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

int rows_reply(struct cmd_ctx *ctx, const struct query *q, struct query_result *res, cJSON *data,
               cJSON *arr, cJSON *outer, reply_fmt_fn fmt, const void *fmt_arg, const char *lead)
{
    struct rows_src *x = ht_calloc(1, sizeof(*x));
    if (!x) {
        query_result_free(res);
        cJSON_Delete(data);
        return cmd_error(ctx, HT_ENOMEM, "out of memory");
    }
    x->srv = ctx->srv;
    x->session = ctx->s->id;
    query_init(&x->q);
    x->q.domain = q->domain;
    x->q.list = q->list;
    x->q.by = q->by;
    x->res = *res;
    x->base.held = sizeof(*x) + (uint64_t)res->nrows * sizeof(res->rows[0]);
    x->fmt = fmt;
    x->fmt_arg = fmt_arg;
    x->base.item = rows_item;
    x->base.free = rows_src_free;
    x->base.lead = lead;
    return reply_start(ctx, &x->base, data, arr, outer);
}

cJSON *rows_head(struct session *s, const struct query *q, const struct query_result *res)
{
    struct query_result head = *res;
    head.nrows = 0;
    return query_result_json(s, q, &head);
}

/* Shared by stacks and commits: they differ only in the domain. */
int cmd_query_domain(struct cmd_ctx *ctx, int domain)
{
    struct qargs *qa = ht_malloc(sizeof(*qa));
    if (!qa)
        return cmd_error(ctx, HT_ENOMEM, "out of memory");
    char err[256];
    int rc = qargs_parse(qa, ctx->s, ctx->srv->cfg, ctx->req->args, domain, err, sizeof(err));
    if (rc != 0) {
        ht_free(qa);
        return cmd_error(ctx, rc, "%s", err);
    }
    struct query_result res;
    rc = engine_query(&ctx->s->eng, &qa->q, &res);
    if (rc != 0) {
        ht_free(qa);
        return cmd_error(ctx, HT_ENOMEM, "out of memory running the query");
    }
    cJSON *d = rows_head(ctx->s, &qa->q, &res);
    rc = rows_reply(ctx, &qa->q, &res, d, cJSON_GetObjectItemCaseSensitive(d, "rows"), NULL, NULL,
                    NULL, NULL);
    ht_free(qa);
    return rc;
}

int cmd_stacks(struct cmd_ctx *ctx)
{
    return cmd_query_domain(ctx, HT_DOM_HEAP);
}
