/* A command's answer: its reply, its error, or a reply stream started on
 * its client (commands.h). */
#include "commands.h"

#include "ht-error.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>

int cmd_reply(struct cmd_ctx *ctx, cJSON *data)
{
    struct reply_src *r = reply_json_src(ctx->req->id, data);
    if (!r)
        return cmd_error(ctx, HT_ENOMEM, "out of memory building the reply");
    client_send_src(ctx->c, r);
    return 0;
}

int cmd_error(struct cmd_ctx *ctx, int err, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ctx->srv->request_errors++;
    client_send(ctx->c, ht_reply_err(ctx->req->id, err, msg));
    return err;
}

int reply_start(struct cmd_ctx *ctx, struct reply_src *r, cJSON *data, cJSON *arr, cJSON *outer)
{
    if (reply_src_ready(r, ctx->req->id, data, arr, outer) != 0)
        return cmd_error(ctx, HT_ENOMEM, "out of memory building the reply");
    client_send_src(ctx->c, r);
    return 0;
}
