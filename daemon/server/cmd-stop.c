/* stop: stop tracing a session; its data stays queryable until dropped. */
#include "commands.h"

#include <cjson/cJSON.h>

int cmd_stop(struct cmd_ctx *ctx)
{
    int was = ctx->s->state;
    session_stop(ctx->s, "stopped by request");
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "session", ctx->s->id);
    cJSON_AddStringToObject(d, "state", session_state_name(ctx->s->state));
    cJSON_AddBoolToObject(d, "was_active", was == SESSION_LOADING || was == SESSION_RUNNING);
    return cmd_reply(ctx, d);
}
