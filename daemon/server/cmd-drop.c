/* drop: stop and forget a session. */
#include "commands.h"

#include "ht-error.h"

#include <cjson/cJSON.h>

int cmd_drop(struct cmd_ctx *ctx)
{
    /* Dropping is never implied: the session must be named. */
    if (!cJSON_GetObjectItemCaseSensitive(ctx->req->args, "session"))
        return cmd_error(ctx, HT_EBADARG,
                         "drop needs the session named: heaptracectl drop SESSION");
    uint32_t id = session_id(ctx->s);
    session_drop(ctx->s);
    ctx->s = NULL;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "dropped", id);
    return cmd_reply(ctx, d);
}
