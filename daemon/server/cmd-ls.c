/* ls: one line per session the client may see (its own; root: all). */
#include "commands.h"

#include <cjson/cJSON.h>

int cmd_ls(struct cmd_ctx *ctx)
{
    cJSON *d = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(d, "sessions");
    for (struct session *s = ctx->srv->sessions.head; s; s = session_next(s)) {
        if (!session_visible(s, ctx->c->uid))
            continue; /* another user's */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", session_id(s));
        cJSON_AddStringToObject(o, "name", session_name(s));
        cJSON_AddStringToObject(o, "state", session_state_name(session_state(s)));
        cJSON_AddStringToObject(o, "source", session_source_name(s));
        cJSON_AddNumberToObject(o, "pid", (double)session_engine(s)->pid);
        cJSON_AddStringToObject(o, "process", session_process_name(s));
        cJSON_AddNumberToObject(o, "events", (double)session_engine(s)->q.events);
        cJSON_AddNumberToObject(o, "now", (double)session_engine(s)->now);
        cJSON_AddNumberToObject(o, "outstanding", (double)session_engine(s)->heap_bytes);
        cJSON_AddNumberToObject(o, "committed", (double)session_engine(s)->commits.bytes);
        cJSON_AddNumberToObject(o, "private_bytes", (double)session_engine(s)->private_bytes);
        cJSON_AddItemToArray(arr, o);
    }
    return cmd_reply(ctx, d);
}
