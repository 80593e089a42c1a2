/* stacks: heap allocations over a window, aggregated and sorted (xperf -a heap, WPA's table). */
#include "server.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "query-args.h"

#include <cjson/cJSON.h>

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
    cJSON *d = query_result_json(ctx->s, &qa->q, &res);
    query_result_free(&res);
    ht_free(qa);
    return cmd_reply(ctx, d);
}

int cmd_stacks(struct cmd_ctx *ctx)
{
    return cmd_query_domain(ctx, HT_DOM_HEAP);
}
