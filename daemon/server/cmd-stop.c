/* stop: stop tracing a session; its data stays queryable until dropped. */
#include "commands.h"

#include <cjson/cJSON.h>

int cmd_stop(struct cmd_ctx *ctx)
{
    int was = session_state(ctx->s);
    session_stop(ctx->s, "stopped by request");
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "session", session_id(ctx->s));
    cJSON_AddStringToObject(d, "state", session_state_name(session_state(ctx->s)));
    cJSON_AddBoolToObject(d, "was_active", was == SESSION_LOADING || was == SESSION_RUNNING);
    return cmd_reply(ctx, d);
}
