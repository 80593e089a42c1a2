/* mark: name the session's current time for use in --range. */
#include "commands.h"

#include "ht-error.h"

#include <cjson/cJSON.h>

int cmd_mark(struct cmd_ctx *ctx)
{
    const char *name = cJSON_GetObjectItemCaseSensitive(ctx->req->args, "mark")->valuestring;
    int rc = engine_mark(session_engine(ctx->s), name, session_engine(ctx->s)->now);
    if (rc == HT_EEXIST)
        return cmd_error(ctx, rc, "mark \"%s\" exists already in session %u", name, session_id(ctx->s));
    if (rc == HT_EFULL)
        return cmd_error(ctx, rc, "session %u has %u marks, the limit", session_id(ctx->s),
                         session_engine(ctx->s)->nmarks);
    if (rc != 0)
        return cmd_error(ctx, rc, "mark names are 1 to 63 characters");
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "session", session_id(ctx->s));
    cJSON_AddStringToObject(d, "mark", name);
    cJSON_AddNumberToObject(d, "t", (double)session_engine(ctx->s)->now);
    return cmd_reply(ctx, d);
}
